// The shared object table: this file's own table, another file's through list/attach, and
// kdatctl's list/watch output (valid JSON, showing this process's objects).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "guest_util.hpp"

namespace {

using namespace guest;

std::optional<kdat::Record> find_in(const kdat::TableSnapshot &snap, std::uint32_t handle) {
  for (const auto &r : snap.records) {
    if (r.handle == handle) return r;
  }
  return std::nullopt;
}

TEST(Table, OwnTableHasEveryObjectWithItsType) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  kdat::Psp psp(s.ia, s.crevd, next_port());
  const auto snap = s.device.table().snapshot();
  EXPECT_EQ(snap.header.pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_FALSE(snap.header.closed());
  EXPECT_FALSE(snap.header.kernel());
  EXPECT_EQ(snap.header.live, 5u);  // IA, 2 EVDs, EP, PSP
  EXPECT_EQ(snap.records.size(), 5u);
  const std::array<std::pair<std::uint32_t, std::uint32_t>, 5> want = {{
      {s.ia.handle(), KDAT_REC_IA},
      {s.evd.handle(), KDAT_REC_EVD},
      {s.crevd.handle(), KDAT_REC_EVD},
      {ep.handle(), KDAT_REC_EP},
      {psp.handle(), KDAT_REC_PSP},
  }};
  for (const auto &[handle, type] : want) {
    const auto rec = find_in(snap, handle);
    ASSERT_TRUE(rec.has_value()) << std::hex << handle;
    EXPECT_EQ(rec->type, type);
    EXPECT_EQ(rec->generation, KDAT_HANDLE_GENERATION(handle));
  }
  EXPECT_EQ(find_in(snap, ep.handle())->owner, s.ia.handle());
  // A second mapping of the same table (ObjectTable::own) agrees.
  const auto own = kdat::ObjectTable::own(s.device);
  EXPECT_EQ(own.header().id, snap.header.id);
  EXPECT_TRUE(own.view().find(ep.handle()).has_value());
}

TEST(Table, ListAndAttachShowAnotherFilesObjects) {
  Side s;
  kdat::Endpoint ep(s.ia, s.evd);
  const auto id = s.device.table().header().id;
  const kdat::Device observer;
  const auto tables = kdat::list_tables(observer);
  const auto it = std::find_if(tables.begin(), tables.end(),
                               [&](const kdat::TableInfo &t) { return t.id == id; });
  ASSERT_NE(it, tables.end()) << "own table not listed";
  EXPECT_EQ(it->pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(it->live, 4u);
  EXPECT_FALSE(it->comm.empty());
  const auto view = kdat::ObjectTable::attach(observer, id);
  const auto rec = view.view().find(ep.handle());
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, static_cast<std::uint32_t>(KDAT_EP_UNCONNECTED));
  // The view follows changes as they happen.
  kdat::Rsp rsp(s.ia, ep, next_port(), s.crevd);
  EXPECT_EQ(view.view().find(ep.handle())->state, static_cast<std::uint32_t>(KDAT_EP_RESERVED));
}

TEST(Table, AttachOfAnUnknownIdIsInvalidParameter) {
  const kdat::Device observer;
  EXPECT_EQ(error_type([&] { (void)kdat::ObjectTable::attach(observer, 0xdeadbeefdeadull); }),
            KDAT_DAT_INVALID_PARAMETER);
}

// kdatctl sits next to this binary in the build directory.
std::string kdatctl() {
  std::array<char, 4096> self{};
  const auto n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  std::string dir(self.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/kdatctl";
}

std::pair<int, std::string> run(const std::string &cmd) {
  std::unique_ptr<FILE, int (*)(FILE *)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  std::string out;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe.release());
  return {status, out};
}

TEST(Kdatctl, ListShowsThisProcessAndItsJsonParses) {
  Side server, client;
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port);
  kdat::Endpoint cep(client.ia, client.evd);
  auto sep = connect_pair(client, cep, server, port);

  const auto [rc_text, text] = run(kdatctl() + " list");
  EXPECT_EQ(rc_text, 0) << text;
  EXPECT_NE(text.find("pid " + std::to_string(::getpid())), std::string::npos) << text;
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08x", cep.handle());
  EXPECT_NE(text.find(hex), std::string::npos) << text;
  EXPECT_NE(text.find("CONNECTED"), std::string::npos) << text;
  EXPECT_NE(text.find("LISTENING"), std::string::npos) << text;

  const auto [rc_json, json] = run(kdatctl() + " list --json --all");
  EXPECT_EQ(rc_json, 0);
  EXPECT_NE(json.find("\"handle\":" + std::to_string(cep.handle())), std::string::npos) << json;
  const auto [rc_parse, parsed] =
      run(kdatctl() + " list --json --all | python3 -m json.tool >/dev/null && echo ok");
  EXPECT_EQ(rc_parse, 0);
  EXPECT_EQ(parsed, "ok\n");

  EXPECT_EQ(run(kdatctl() + " version").first, 0);
  EXPECT_NE(run(kdatctl() + " list --bogus 2>/dev/null").first, 0);
}

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Kdatctl, WatchPrintsStateChangesAsJsonLines) {
  Side server, client;
  const auto port = next_port();
  kdat::Psp psp(server.ia, server.crevd, port);
  kdat::Endpoint cep(client.ia, client.evd);
  const std::string out_file = "/tmp/kdatctl-watch-" + std::to_string(::getpid()) + ".jsonl";
  const std::string tool = kdatctl();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0) ::_exit(127);
    ::execl(tool.c_str(), tool.c_str(), "watch", "--json", "--interval", "20", nullptr);
    ::_exit(127);
  }
  const std::string h = "\"handle\":" + std::to_string(cep.handle());
  // kdatctl reports every object it finds at start as "new": wait for ours, then connect.
  const bool started =
      eventually([&] { return read_file(out_file).find(h) != std::string::npos; }, 30s);
  EXPECT_TRUE(started) << read_file(out_file);
  if (started) {
    auto sep = connect_pair(client, cep, server, port);
    // Polling sees states, not every transition: hold the connection until it is seen.
    EXPECT_TRUE(eventually(
        [&] { return read_file(out_file).find("\"to\":\"CONNECTED\"") != std::string::npos; },
        30s));
    cep.disconnect();
    expect_event(client.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
    expect_event(server.evd, KDAT_DAT_CONNECTION_EVENT_DISCONNECTED);
    EXPECT_TRUE(eventually(
        [&] { return read_file(out_file).find("\"to\":\"DISCONNECTED\"") != std::string::npos; },
        30s));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "kdatctl watch exit " << status;
  // Every line is one JSON document (one python3 for all: a start per line is slow under TCG).
  const auto [rc, valid] =
      run("python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' " + out_file +
          " && echo ok");
  EXPECT_EQ(valid, "ok\n");
  const std::string lines = read_file(out_file);
  EXPECT_NE(lines.find("\"to\":\"CONNECTED\""), std::string::npos) << lines;
  EXPECT_NE(lines.find("\"to\":\"DISCONNECTED\""), std::string::npos) << lines;
  std::remove(out_file.c_str());
}

TEST(Table, EvdRecordStateIsItsStreamFlags) {
  // include/kdat/uapi/kdat.h: an EVD record's state is its KDAT_EVD_* flags; ring EVDs say so.
  Side s;
  kdat::Evd evd(s.ia, 4, KDAT_EVD_CONNECTION | KDAT_EVD_CR);
  const auto rec = s.device.table().find(evd.handle());
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, static_cast<std::uint32_t>(KDAT_EVD_CONNECTION | KDAT_EVD_CR));
  EXPECT_EQ(kdat::record_state_name(*rec), "CONNECTION|CR");
  EXPECT_NE(rec->flags & KDAT_RECF_RING, 0u);
  EXPECT_EQ(rec->owner, s.ia.handle());
}

}  // namespace

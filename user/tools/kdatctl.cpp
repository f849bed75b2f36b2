// kdatctl: the operator's view of kdat: the module's version, every object table this user may
// see (its own processes', and with CAP_SYS_ADMIN everybody's and the kernel consumers'), and a
// live trace of state changes.  Reads the shared tables; never changes anything.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <iostream>
#include <kdat/device.hpp>
#include <kdat/table.hpp>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "render.hpp"

namespace {

constexpr const char *help_text = R"(usage: kdatctl [--device PATH] COMMAND [OPTIONS]

commands:
  version                      the module's ABI version, DAT version and RDMA device count
  list [--json] [--all]        every object table this user may attach to, and its objects
  watch [--json] [--interval MS] [--count N]
                               one line per object that appears, changes state or goes away
  help, --help                 this text

list (text): per table a line
  table ID  pid PID  comm COMM  uid UID  live N  [kernel]  [closed]  age SECONDS
then one line per object, IAs first, then EPs, PSPs, RSPs, CRs, EVDs, with the columns
  HANDLE TYPE STATE LOCAL REMOTE CONN_QUAL IRD ORD TRANS EVENTS LAST_EVENT AGE
STATE is the DAT_EP_STATE name without its prefix for EPs (CONNECTED, ...), LISTENING/USED
for PSPs and RSPs, PENDING/REMOTE_GONE for CRs, UP/DEVICE_REMOVED for IAs, and for EVDs the
event streams that feed them (DTO|CONNECTION|CR); LAST_EVENT is the DAT event name without "DAT_"; "-" marks an empty field.
kdatctl's own table and closed tables are left out unless --all is given; --all also shows
freed slots (type FREE).

list --json: one JSON document:
  {"now_ns": N, "tables": [{"id", "pid", "uid", "comm", "flags": ["kernel"|"closed"], "live",
   "high_water", "updates", "created_ns", "objects": [{"handle", "handle_hex", "slot",
   "generation", "type", "state", "state_value", "owner", "link", "link2", "local", "remote",
   "conn_qual", "ird", "ord", "transitions", "events", "last_event", "flags", "created_ns",
   "changed_ns", "age_ns"}]}]}
Times are CLOCK_BOOTTIME nanoseconds; "local"/"remote" are "ADDR:PORT" or null.

watch: polls every MS milliseconds (default 200) until interrupted or N polls are done.
Objects present at the start are reported as "new".  Text lines:
  SECONDS table ID pid PID COMM TYPE HANDLE new STATE [transitions T] [last_event E]
  SECONDS table ID pid PID COMM TYPE HANDLE change OLD -> NEW [transitions T [(+K unseen)]] ...
  SECONDS table ID pid PID COMM TYPE HANDLE freed (was STATE) ...
  SECONDS table ID closed
"+K unseen" counts state changes that happened between two polls and were not seen.
watch --json prints one JSON object a line: {"time_ns", "table", "pid", "comm", "change":
"new"|"change"|"freed"|"table_closed", "handle", "type", "from", "to", "transitions",
"unseen", "events", "last_event"}.

exit status: 0 success, 1 an error (message on stderr), 2 a usage error.
)";

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested = true; }

int usage_error(const std::string &what) {
  std::fprintf(stderr, "kdatctl: %s\n(kdatctl --help for usage)\n", what.c_str());
  return 2;
}

std::uint64_t boottime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Options {
  std::string device = kdat::Device::default_path;
  std::string command;
  bool json = false;
  bool all = false;
  unsigned interval_ms = 200;
  std::optional<unsigned long> count;
};

// An attached table: its own Device (one view per file) and mapping.
struct Attached {
  kdat::Device device;
  kdat::ObjectTable table;
  kdat::TableSnapshot last;
  kdat::TableInfo info;
};

// A table's header numbers its opener as the opener's own namespaces do; the list numbers it as
// ours do, and that is what we show.
kdat::TableSnapshot snapshot(const Attached &a, bool all = false) {
  auto snap = a.table.snapshot(all);
  snap.header.pid = a.info.pid;
  snap.header.uid = a.info.uid;
  return snap;
}

std::optional<Attached> attach(const Options &opt, const kdat::TableInfo &info) {
  try {
    kdat::Device device(opt.device);
    auto table = kdat::ObjectTable::attach(device, info.id);
    return Attached{std::move(device), std::move(table), {}, info};
  } catch (const kdat::Error &e) {
    // Tables can vanish between list and attach, or belong to someone else: skip them.
    std::fprintf(stderr, "kdatctl: table %llu (pid %u %s): %s\n",
                 static_cast<unsigned long long>(info.id), info.pid, info.comm.c_str(), e.what());
    return std::nullopt;
  }
}

bool wanted(const Options &opt, const kdat::TableInfo &info) {
  if (opt.all) return true;
  if (info.pid == static_cast<std::uint32_t>(::getpid())) return false;  // our own files
  return (info.flags & KDAT_TABLE_CLOSED) == 0;
}

int cmd_version(const Options &opt) {
  const kdat::Device dev(opt.device);
  const auto v = dev.version();
  std::printf("kdat ABI %u, DAT %u.%u, %u RDMA device(s)\n", v.abi, v.dat_major, v.dat_minor,
              v.num_devices);
  return 0;
}

int cmd_list(const Options &opt) {
  const kdat::Device dev(opt.device);
  std::vector<kdat::TableSnapshot> snapshots;
  for (const auto &info : kdat::list_tables(dev)) {
    if (!wanted(opt, info)) continue;
    auto attached = attach(opt, info);
    if (!attached) continue;
    snapshots.push_back(snapshot(*attached, opt.all));
  }
  if (opt.json) {
    kdatctl::render_json(std::cout, snapshots, boottime_ns());
  } else {
    kdatctl::render_text(std::cout, snapshots, boottime_ns());
  }
  std::cout.flush();
  return 0;
}

int cmd_watch(const Options &opt) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const kdat::Device dev(opt.device);
  std::map<std::uint64_t, Attached> tables;
  for (unsigned long poll = 0; !stop_requested && (!opt.count || poll < *opt.count); ++poll) {
    if (poll != 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.interval_ms));
    const auto now = boottime_ns();
    std::map<std::uint64_t, bool> listed;
    for (const auto &info : kdat::list_tables(dev)) {
      if (!wanted(opt, info)) continue;
      listed[info.id] = true;
      if (tables.contains(info.id)) continue;
      auto attached = attach(opt, info);
      if (!attached) continue;
      attached->last = snapshot(*attached);
      for (const auto &c : kdatctl::initial(attached->last)) {
        if (opt.json) {
          kdatctl::render_change_json(std::cout, c, now);
        } else {
          kdatctl::render_change_text(std::cout, c, now);
        }
      }
      tables.emplace(info.id, std::move(*attached));
    }
    for (auto it = tables.begin(); it != tables.end();) {
      auto &t = it->second;
      auto snap = snapshot(t);
      for (const auto &c : kdatctl::diff(t.last, snap)) {
        if (opt.json) {
          kdatctl::render_change_json(std::cout, c, now);
        } else {
          kdatctl::render_change_text(std::cout, c, now);
        }
      }
      t.last = std::move(snap);
      if (!listed.contains(it->first) || t.last.header.closed()) {
        if (opt.json) {
          std::cout << "{\"time_ns\":" << now << ",\"table\":" << it->first
                    << ",\"change\":\"table_closed\"}\n";
        } else {
          std::printf("%.6f table %llu closed\n", static_cast<double>(now) / 1e9,
                      static_cast<unsigned long long>(it->first));
          std::fflush(stdout);
        }
        it = tables.erase(it);
      } else {
        ++it;
      }
    }
    std::cout.flush();
  }
  return 0;
}

std::optional<unsigned long> parse_number(const char *text) {
  char *end = nullptr;
  errno = 0;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return std::nullopt;
  return value;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    const auto value = [&]() -> const char * {
      return i + 1 < args.size() ? args[++i].c_str() : nullptr;
    };
    if (a == "--help" || a == "-h" || a == "help") {
      std::fputs(help_text, stdout);
      return 0;
    } else if (a == "--json") {
      opt.json = true;
    } else if (a == "--all") {
      opt.all = true;
    } else if (a == "--device") {
      const char *v = value();
      if (v == nullptr) return usage_error("--device wants a path");
      opt.device = v;
    } else if (a == "--interval") {
      const char *v = value();
      const auto n = v != nullptr ? parse_number(v) : std::nullopt;
      if (!n || *n == 0 || *n > 3600000) return usage_error("--interval wants milliseconds");
      opt.interval_ms = static_cast<unsigned>(*n);
    } else if (a == "--count") {
      const char *v = value();
      const auto n = v != nullptr ? parse_number(v) : std::nullopt;
      if (!n || *n == 0) return usage_error("--count wants a positive number");
      opt.count = *n;
    } else if (opt.command.empty() && a[0] != '-') {
      opt.command = a;
    } else {
      return usage_error("unexpected argument '" + a + "'");
    }
  }
  if (opt.command.empty()) return usage_error("no command");
  const bool list_opts = opt.all;
  const bool watch_opts = opt.count || opt.interval_ms != 200;
  try {
    if (opt.command == "version") {
      if (opt.json || list_opts || watch_opts) return usage_error("version takes no options");
      return cmd_version(opt);
    }
    if (opt.command == "list") {
      if (watch_opts) return usage_error("list takes --json and --all");
      return cmd_list(opt);
    }
    if (opt.command == "watch") return cmd_watch(opt);
    return usage_error("unknown command '" + opt.command + "'");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kdatctl: %s\n", e.what());
    return 1;
  }
}

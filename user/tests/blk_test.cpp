// kdatctl blk against a made-up /sys/class/kdat-blk and control file: the option string it
// writes, the controllers it lists (in number order), and its refusals.
#include "blk.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace {

namespace fs = std::filesystem;

struct FakeClass {
  fs::path dir = fs::temp_directory_path() / ("kdat-blk-test-" + std::to_string(::getpid()));
  FakeClass() { fs::create_directories(dir); }
  ~FakeClass() { fs::remove_all(dir); }
  void add(const std::string &name, const std::string &state, unsigned resets) {
    const auto d = dir / name;
    fs::create_directories(d);
    const std::pair<const char *, std::string> attrs[] = {
        {"state", state},
        {"address", "target=192.0.2.1,port=4420"},
        {"local", "kdat0"},
        {"queues", "2"},
        {"queue_depth", "32"},
        {"resets", std::to_string(resets)},
        {"reconnects", std::to_string(resets)},
        {"last_resume_ms", "150"},
        {"ctrl_loss_tmo", "-1"},
        {"reconnect_delay", "1"},
        {"delete_controller", ""},
    };
    for (const auto &[key, value] : attrs) std::ofstream(d / key) << value << '\n';
  }
};

TEST(Blk, OptionStringHasWhatWasGivenOnly) {
  kdatctl::BlkConnect c;
  c.target = "fe80::1%eth0";
  c.port = 4420;
  EXPECT_EQ(kdatctl::blk_options(c), "target=fe80::1%eth0,port=4420");
  c.queue_depth = 8;
  c.ctrl_loss_tmo = -1;
  c.ia_name = "eth0";
  EXPECT_EQ(kdatctl::blk_options(c),
            "target=fe80::1%eth0,port=4420,queue_depth=8,ctrl_loss_tmo=-1,ia_name=eth0");
}

TEST(Blk, ListsControllersInNumberOrderWithTheirAttributes) {
  FakeClass sys;
  sys.add("kdatb10", "live", 0);
  sys.add("kdatb2", "connecting", 3);
  const auto list = kdatctl::blk_list(sys.dir.string());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "kdatb2");
  EXPECT_EQ(list[0].state, "connecting");
  EXPECT_EQ(list[0].resets, 3u);
  EXPECT_EQ(list[0].ctrl_loss_tmo, -1);
  EXPECT_EQ(list[1].name, "kdatb10");
  EXPECT_EQ(list[1].queues, 2u);
  std::ostringstream json;
  kdatctl::render_blk_json(json, list);
  EXPECT_NE(json.str().find(R"("name":"kdatb2","state":"connecting")"), std::string::npos)
      << json.str();
}

TEST(Blk, NoClassDirectoryIsNoControllers) {
  EXPECT_TRUE(kdatctl::blk_list("/nonexistent/kdat-blk").empty());
}

TEST(Blk, DisconnectWritesDeleteControllerAndRefusesOtherNames) {
  FakeClass sys;
  sys.add("kdatb0", "live", 0);
  kdatctl::blk_disconnect("kdatb0", sys.dir.string());
  std::ifstream in(sys.dir / "kdatb0" / "delete_controller");
  std::string written;
  std::getline(in, written);
  EXPECT_EQ(written, "1");
  EXPECT_THROW(kdatctl::blk_disconnect("kdatb9", sys.dir.string()), std::system_error);
  EXPECT_THROW(kdatctl::blk_disconnect("../kdatb0", sys.dir.string()), std::system_error);
  EXPECT_THROW(kdatctl::blk_disconnect("", sys.dir.string()), std::system_error);
}

TEST(Blk, ConnectWithoutTheControlFileSaysToLoadTheModule) {
  kdatctl::BlkConnect c;
  c.target = "192.0.2.1";
  c.port = 4420;
  try {
    (void)kdatctl::blk_connect(c, "/nonexistent/kdat-blk");
    FAIL() << "connected without a control file";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("is kdat_blk loaded?"), std::string::npos) << e.what();
  }
}

}  // namespace

// kdatctl's rendering and watch diffs over fake tables.
#include "render.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <kdat/table.hpp>
#include <sstream>

#include "devices.hpp"
#include "fake_table.hpp"
#include "json.hpp"

namespace {

using kdat::testing::ep_record;
using kdat::testing::FakeTable;
using kdat::testing::ia_record;

kdat::TableSnapshot snapshot_of(FakeTable &t) {
  return kdat::TableView(t.data(), t.size()).snapshot();
}

TEST(Render, TextListsObjectsInTypeOrder) {
  FakeTable t(8);
  kdat_record evd{};
  evd.handle = 0x10001;
  evd.type = KDAT_REC_EVD;
  t.write(1, evd);
  t.write(2, ia_record(0x10002));
  auto ep = ep_record(0x10003, KDAT_EP_CONNECTED, 2);
  ep.local_addr.family = KDAT_AF_INET;
  ep.local_addr.addr[0] = 192;
  ep.local_addr.port = 5;
  ep.conn_qual = 20001;
  ep.last_event = KDAT_DAT_CONNECTION_EVENT_ESTABLISHED;
  t.write(3, ep);
  std::ostringstream out;
  kdatctl::render_text(out, {snapshot_of(t)}, 0);
  const std::string text = out.str();
  const auto ia_at = text.find(" IA "), ep_at = text.find(" EP "), evd_at = text.find(" EVD ");
  ASSERT_NE(ia_at, std::string::npos) << text;
  EXPECT_LT(ia_at, ep_at);
  EXPECT_LT(ep_at, evd_at);
  EXPECT_NE(text.find("CONNECTION_EVENT_ESTABLISHED"), std::string::npos);
  EXPECT_NE(text.find("192.0.0.0:5"), std::string::npos);
  EXPECT_NE(text.find("20001"), std::string::npos);
}

TEST(Render, CountersAreOneLinePerIaWithNameValuePairs) {
  FakeTable t(8);
  t.header()->id = 7;
  t.header()->pid = 42;
  std::copy_n("app", 4, t.header()->comm);
  auto ia = ia_record(0x10002);
  ia.local_addr.family = KDAT_AF_INET;
  ia.local_addr.addr[0] = 10;
  ia.device = 3;
  ia.port_num = 1;
  const kdatctl::DeviceNames names{{3, "rxe0"}};
  const kdatctl::IaCountersRow row{
      snapshot_of(t).header, ia, {{"connects", 3}, {"timed_out", 0}, {"broken", 12}}};
  std::ostringstream text;
  kdatctl::render_counters_text(text, {row}, names);
  EXPECT_EQ(text.str(),
            "table 7 pid 42 comm app ia 0x00010002 local 10.0.0.0:0 dev rxe0/1 connects 3 "
            "timed_out 0 broken 12\n");
  std::ostringstream json;
  kdatctl::render_counters_json(json, {row}, names);
  EXPECT_EQ(json.str(),
            "[{\"table\":7,\"pid\":42,\"comm\":\"app\",\"ia\":65538,\"ia_hex\":\"0x00010002\","
            "\"local\":\"10.0.0.0:0\",\"rdma_device\":\"rxe0\",\"rdma_device_number\":3,"
            "\"rdma_port\":1,\"connects\":3,\"timed_out\":0,\"broken\":12}]\n");
  std::ostringstream none;
  kdatctl::render_counters_json(none, {});
  EXPECT_EQ(none.str(), "[]\n");
}

TEST(Render, DiffReportsNewChangedAndFreedByHandleAndSeq) {
  FakeTable t(8);
  t.write(1, ep_record(0x10001, KDAT_EP_UNCONNECTED, 0));
  t.write(2, ep_record(0x10002, KDAT_EP_UNCONNECTED, 0));
  const auto before = snapshot_of(t);
  EXPECT_EQ(kdatctl::initial(before).size(), 2u);
  EXPECT_TRUE(kdatctl::diff(before, before).empty());

  t.write(1, ep_record(0x10001, KDAT_EP_CONNECTED, 2));    // two steps, one unseen
  t.write(2, kdat_record{});                               // freed...
  t.write(2, ep_record(0x20002, KDAT_EP_UNCONNECTED, 0));  // ...and the slot reused
  t.write(3, ep_record(0x10003, KDAT_EP_UNCONNECTED, 0));  // new
  const auto after = snapshot_of(t);
  const auto changes = kdatctl::diff(before, after);
  ASSERT_EQ(changes.size(), 4u);
  int created = 0, changed = 0, freed = 0;
  for (const auto &c : changes) {
    if (c.kind == kdatctl::Change::Kind::created) ++created;
    if (c.kind == kdatctl::Change::Kind::freed) ++freed;
    if (c.kind == kdatctl::Change::Kind::changed) {
      ++changed;
      std::ostringstream line;
      kdatctl::render_change_text(line, c, 1000000000);
      EXPECT_NE(line.str().find("UNCONNECTED -> CONNECTED"), std::string::npos) << line.str();
      EXPECT_NE(line.str().find("(+1 unseen)"), std::string::npos) << line.str();
    }
  }
  EXPECT_EQ(created, 2);
  EXPECT_EQ(changed, 1);
  EXPECT_EQ(freed, 1);

  // A new object's first record (handle and type only) is not there until the kernel fills it.
  auto bare = ep_record(0x10004, 0, 0);
  bare.owner = 0;
  t.write(4, bare);
  const auto half = snapshot_of(t);
  EXPECT_TRUE(kdatctl::diff(after, half).empty());
  bare.owner = 0x10009;
  t.write(4, bare);
  const auto whole = kdatctl::diff(half, snapshot_of(t));
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].kind, kdatctl::Change::Kind::created);
  kdat_record bare_ia{};
  bare_ia.handle = 0x10005;
  bare_ia.type = KDAT_REC_IA;
  EXPECT_FALSE(kdatctl::filled(bare_ia));
  EXPECT_TRUE(kdatctl::filled(ia_record(0x10005)));
  t.write(4, kdat_record{});

  // A rewrite with the same state and counters (seq moved, nothing a watcher shows) is quiet.
  t.write(3, ep_record(0x10003, KDAT_EP_UNCONNECTED, 0));
  EXPECT_TRUE(kdatctl::diff(after, snapshot_of(t)).empty());
}

}  // namespace

namespace {

// Two tables: pid 10 with an IA (0x10001), an EP it owns (CONNECTED) and a second IA's EP
// (UNCONNECTED); pid 20 with one EP.
std::vector<kdat::TableSnapshot> two_tables(FakeTable &a, FakeTable &b) {
  a.write(1, ia_record(0x10001));
  auto owned = ep_record(0x10002, KDAT_EP_CONNECTED, 2);
  owned.owner = 0x10001;
  a.write(2, owned);
  auto other = ep_record(0x10003, KDAT_EP_UNCONNECTED, 0);
  other.owner = 0x10009;
  a.write(3, other);
  b.write(1, ep_record(0x10001, KDAT_EP_CONNECTED, 2));
  auto sa = snapshot_of(a), sb = snapshot_of(b);
  sa.header.id = 1;
  sa.header.pid = 10;
  sa.header.comm = "server";
  sb.header.id = 2;
  sb.header.pid = 20;
  sb.header.comm = "client";
  return {sa, sb};
}

std::vector<std::uint32_t> handles(const std::vector<kdat::TableSnapshot> &tables) {
  std::vector<std::uint32_t> out;
  for (const auto &t : tables) {
    for (const auto &r : t.records)
      out.push_back(static_cast<std::uint32_t>(t.header.id) << 24 | r.handle);
  }
  return out;
}

}  // namespace

TEST(Render, FiltersSelectTablesAndObjects) {
  FakeTable a(8), b(8);
  const auto tables = two_tables(a, b);
  const auto pick = [&](const kdatctl::Filter &f) { return handles(kdatctl::filtered(tables, f)); };
  using V = std::vector<std::uint32_t>;
  EXPECT_EQ(pick({}), (V{0x01010001, 0x01010002, 0x01010003, 0x02010001}));
  EXPECT_EQ(pick({.pid = 20}), (V{0x02010001}));
  EXPECT_EQ(pick({.comm = "server"}), (V{0x01010001, 0x01010002, 0x01010003}));
  EXPECT_EQ(pick({.table = 2}), (V{0x02010001}));
  // case does not matter; tables with nothing left go
  EXPECT_EQ(pick({.state = "connected"}), (V{0x01010002, 0x02010001}));
  EXPECT_EQ(pick({.type = "ia"}), (V{0x01010001}));
  EXPECT_EQ(pick({.pid = 20, .type = "IA"}), V{});
  // --ia: the IA and what it owns
  EXPECT_EQ(pick({.table = 1, .ia = 0x10001}), (V{0x01010001, 0x01010002}));
  // a filter with no object part keeps a table even when it is empty
  FakeTable empty(4);
  auto e = snapshot_of(empty);
  e.header.pid = 30;
  EXPECT_EQ(kdatctl::filtered({e}, {.pid = 30}).size(), 1u);
  EXPECT_TRUE(kdatctl::filtered({e}, {.pid = 30, .state = "CONNECTED"}).empty());
  EXPECT_TRUE(kdatctl::known_type("rsp"));
  EXPECT_FALSE(kdatctl::known_type("QP"));
}

TEST(Render, TotalsAreTheModuleThenEachDevice) {
  const std::vector<kdat::CounterTotals> totals{{0, "", {{"connects", 5}, {"timed_out", 1}}},
                                                {3, "rxe0", {{"connects", 4}, {"timed_out", 1}}}};
  std::ostringstream text, json;
  kdatctl::render_totals_text(text, totals);
  EXPECT_EQ(text.str(),
            "module connects 5 timed_out 1\ndevice rxe0 number 3 connects 4 timed_out 1\n");
  kdatctl::render_totals_json(json, totals);
  EXPECT_EQ(json.str(),
            "{\"module\":{\"connects\":5,\"timed_out\":1},\"devices\":[{\"device\":\"rxe0\","
            "\"number\":3,\"connects\":4,\"timed_out\":1}]}\n");
}

TEST(Render, ShowPrintsEveryFieldOfOneObject) {
  FakeTable t(4);
  auto ep = ep_record(0x20003, KDAT_EP_CONNECTED, 4);
  ep.ird = 4;
  ep.ord = 2;
  ep.conn_qual = 7471;
  ep.last_event = KDAT_DAT_CONNECTION_EVENT_ESTABLISHED;
  ep.flags = KDAT_RECF_ACTIVE | KDAT_RECF_USER_QP;
  ep.device = 1;
  ep.port_num = 1;
  t.write(3, ep);
  auto snap = snapshot_of(t);
  snap.header.id = 42;
  snap.header.comm = "app";
  std::ostringstream text;
  kdatctl::render_object_text(text, snap.header, snap.records.at(0), 0, {{1, "mlx5_0"}});
  for (const char *want :
       {"table        42 (pid 4242 app)", "handle       0x00020003 (slot 3, generation",
        "type         EP", "state        CONNECTED (", "conn_qual    7471", "ird/ord      4/2",
        "transitions  4", "last_event   CONNECTION_EVENT_ESTABLISHED",
        "flags        active,user_qp", "rdma_port    mlx5_0/1"}) {
    EXPECT_NE(text.str().find(want), std::string::npos) << want << "\n" << text.str();
  }
  std::ostringstream json;
  kdatctl::render_object_json(json, snap.header, snap.records.at(0), 0, {{1, "mlx5_0"}});
  EXPECT_NE(json.str().find("\"table\":42"), std::string::npos) << json.str();
  EXPECT_NE(json.str().find("\"object\":{\"handle\":131075"), std::string::npos) << json.str();
  EXPECT_NE(json.str().find("\"rdma_device\":\"mlx5_0\",\"rdma_device_number\":1,\"rdma_port\":1"),
            std::string::npos)
      << json.str();
}

namespace {

std::vector<std::string> fake_addresses(const std::string &netdev) {
  if (netdev == "eth1") return {"192.0.2.1", "2001:db8::1"};
  return {};
}

void write_file(const std::filesystem::path &p, const std::string &text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

TEST(Json, EscapesQuotesBackslashesAndControls) {
  std::ostringstream out;
  kdatctl::print_json(out, kdatctl::Json{{"s", std::string("a\"b\\c\n\t\x01\0z", 10)}});
  EXPECT_EQ(out.str(), "{\"s\":\"a\\\"b\\\\c\\n\\t\\u0001\\u0000z\"}\n");
}

TEST(Json, KeepsValidUtf8AndReplacesInvalidBytes) {
  std::ostringstream out;
  // names kdat did not make (comm, device names) may hold any bytes
  kdatctl::print_json(out, kdatctl::Json{{"s", "caf\xc3\xa9 \xe2\x82\xac \xff \xc0\xaf"}});
  EXPECT_EQ(out.str(),
            "{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\"}\n");
}

}  // namespace

TEST(Devices, PortsComeFromSysfsWithTheirNetdevsAddresses) {
  const auto root =
      std::filesystem::temp_directory_path() / ("kdatctl-sysfs-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  write_file(root / "rxe0/ports/1/state", "4: ACTIVE");
  write_file(root / "rxe0/ports/1/link_layer", "Ethernet");
  write_file(root / "rxe0/ports/1/gid_attrs/ndevs/0", "eth1");
  write_file(root / "mlx5_0/ports/2/state", "1: DOWN");
  write_file(root / "mlx5_0/ports/2/link_layer", "InfiniBand");
  write_file(root / "mlx5_0/ports/10/state", "4: ACTIVE");
  const auto ports = kdatctl::list_ports(root.string(), fake_addresses);
  std::filesystem::remove_all(root);
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[0].port, 2u);  // numeric order: 2 before 10
  EXPECT_EQ(ports[0].state, "DOWN");
  EXPECT_EQ(ports[0].netdev, "");
  EXPECT_EQ(ports[1].port, 10u);
  EXPECT_EQ(ports[2].device, "rxe0");
  EXPECT_EQ(ports[2].state, "ACTIVE");
  EXPECT_EQ(ports[2].link_layer, "Ethernet");
  EXPECT_EQ(ports[2].netdev, "eth1");
  EXPECT_EQ(ports[2].addresses, (std::vector<std::string>{"192.0.2.1", "2001:db8::1"}));
  std::ostringstream text, json;
  kdatctl::render_ports_text(text, ports);
  EXPECT_NE(text.str().find("rxe0                1 ACTIVE   Ethernet   eth1             192.0.2.1 "
                            "2001:db8::1"),
            std::string::npos)
      << text.str();
  kdatctl::render_ports_json(json, ports);
  EXPECT_NE(json.str().find("{\"device\":\"rxe0\",\"port\":1,\"state\":\"ACTIVE\",\"link_layer\":"
                            "\"Ethernet\",\"netdev\":\"eth1\",\"addresses\":[\"192.0.2.1\","
                            "\"2001:db8::1\"]}"),
            std::string::npos)
      << json.str();
  std::ostringstream none;
  kdatctl::render_ports_text(none, {});
  EXPECT_NE(none.str().find("no RDMA devices"), std::string::npos);
}

TEST(Render, FiltersByAddressPortQualifierQpnAndRdmaPort) {
  FakeTable t(8);
  auto a = ep_record(0x10001, KDAT_EP_CONNECTED, 2);
  a.local_addr.family = KDAT_AF_INET;
  std::copy_n(std::begin({192, 0, 2, 1}), 4, a.local_addr.addr);
  a.local_addr.port = 40000;
  a.remote_addr.family = KDAT_AF_INET;
  std::copy_n(std::begin({192, 0, 2, 2}), 4, a.remote_addr.addr);
  a.remote_addr.port = 7471;
  a.conn_qual = 7471;
  a.qp_num = 17;
  a.device = 1;
  a.port_num = 1;
  t.write(1, a);
  auto b = ep_record(0x10002, KDAT_EP_UNCONNECTED, 0);
  b.local_addr.family = KDAT_AF_INET6;
  b.local_addr.addr[15] = 1;
  b.local_addr.port = 5;
  b.device = 2;
  b.port_num = 2;
  t.write(2, b);
  auto snap = snapshot_of(t);
  snap.header.id = 0;  // handles() then gives the bare handles
  const std::vector<kdat::TableSnapshot> tables{snap};
  const auto pick = [&](const kdatctl::Filter &f) { return handles(kdatctl::filtered(tables, f)); };
  using V = std::vector<std::uint32_t>;
  EXPECT_EQ(pick({.addr = kdatctl::parse_address("192.0.2.2")}), (V{0x10001}));  // the remote end
  EXPECT_EQ(pick({.addr = kdatctl::parse_address("[::1]")}), (V{0x10002}));
  EXPECT_EQ(pick({.addr = kdatctl::parse_address("192.0.2.9")}), V{});
  EXPECT_EQ(pick({.port = 40000}), (V{0x10001}));
  EXPECT_EQ(pick({.port = 5}), (V{0x10002}));
  EXPECT_EQ(pick({.conn_qual = 7471}), (V{0x10001}));
  EXPECT_EQ(pick({.qp_num = 17}), (V{0x10001}));
  EXPECT_EQ(pick({.qp_num = 18}), V{});
  EXPECT_EQ(pick({.device = 2}), (V{0x10002}));
  EXPECT_EQ(pick({.rdma_port = 1}), (V{0x10001}));
  EXPECT_FALSE(kdatctl::parse_address("kdat0"));
  EXPECT_FALSE(kdatctl::parse_address("192.0.2.1:5"));
  EXPECT_EQ(kdatctl::rdma_port_text(a, {{1, "rxe0"}}), "rxe0/1");
  EXPECT_EQ(kdatctl::rdma_port_text(b, {{1, "rxe0"}}), "#2/2");  // a device gone since
  EXPECT_EQ(kdatctl::rdma_port_text(kdat_record{}, {}), "-");
}

// kdatctl's rendering and watch diffs over fake tables.
#include "render.hpp"

#include <gtest/gtest.h>

#include <kdat/table.hpp>
#include <sstream>

#include "fake_table.hpp"

namespace {

using kdat::testing::ep_record;
using kdat::testing::FakeTable;

kdat::TableSnapshot snapshot_of(FakeTable &t) {
  return kdat::TableView(t.data(), t.size()).snapshot();
}

TEST(Render, TextListsObjectsInTypeOrder) {
  FakeTable t(8);
  kdat_record evd{};
  evd.handle = 0x10001;
  evd.type = KDAT_REC_EVD;
  t.write(1, evd);
  kdat_record ia{};
  ia.handle = 0x10002;
  ia.type = KDAT_REC_IA;
  ia.state = KDAT_IA_UP;
  t.write(2, ia);
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

  // A rewrite with the same state and counters (seq moved, nothing a watcher shows) is quiet.
  t.write(3, ep_record(0x10003, KDAT_EP_UNCONNECTED, 0));
  EXPECT_TRUE(kdatctl::diff(after, snapshot_of(t)).empty());
}

}  // namespace

// Prints kdatctl's JSON (list and watch lines) for a fake table full of awkward bytes; the
// kdatctl_json_is_valid test parses it with python3.
#include <iostream>
#include <kdat/table.hpp>

#include "fake_table.hpp"
#include "render.hpp"

int main(int argc, char **argv) {
  kdat::testing::FakeTable t(8);
  // A comm with quotes, a backslash, a control character and a stray high byte.
  const char comm[16] = {'a', '"', '\\', '\n', '\x01', '\xff', 'z'};
  std::copy(std::begin(comm), std::end(comm), t.header()->comm);
  t.header()->flags = KDAT_TABLE_KERNEL | KDAT_TABLE_CLOSED;
  auto ep = kdat::testing::ep_record(0x10001, KDAT_EP_CONNECTED, 2);
  ep.local_addr.family = KDAT_AF_INET6;
  ep.local_addr.addr[15] = 1;
  ep.remote_addr.family = KDAT_AF_INET;
  t.write(1, ep);
  kdat_record cr{};
  cr.handle = 0x10002;
  cr.type = KDAT_REC_CR;
  cr.state = 77;  // not a defined CR state
  t.write(2, cr);
  const auto snap = kdat::TableView(t.data(), t.size()).snapshot(true);
  const std::string mode = argc > 1 ? argv[1] : "list";
  if (mode == "list") {
    kdatctl::render_json(std::cout, {snap, snap}, 123);
  } else if (mode == "counters") {
    const kdatctl::IaCountersRow row{snap.header,
                                     kdat::testing::ia_record(0x10003),
                                     {{"connects", 3}, {"rejected_no_listener", 1}}};
    kdatctl::render_counters_json(std::cout, {row, row});
  } else if (mode == "empty") {
    kdatctl::render_json(std::cout, {}, 0);
  } else {
    for (const auto &c : kdatctl::initial(snap)) kdatctl::render_change_json(std::cout, c, 1);
  }
  return 0;
}

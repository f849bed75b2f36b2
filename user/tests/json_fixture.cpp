// Prints kdatctl's JSON (list, show, counters, totals and watch lines) for a fake table full of
// awkward bytes; the kdatctl_json_is_valid test parses it with python3 and checks what it says.
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
  ep.device = 1;
  ep.port_num = 1;
  ep.qp_num = 17;
  t.write(1, ep);
  kdat_record cr{};
  cr.handle = 0x10002;
  cr.type = KDAT_REC_CR;
  cr.state = 77;  // not a defined CR state
  cr.owner = 0x10003;
  t.write(2, cr);
  const auto snap = kdat::TableView(t.data(), t.size()).snapshot(true);
  // A device name that is not UTF-8 either.
  const kdatctl::DeviceNames names{{1, "rxe\xc3"}};
  const std::string mode = argc > 1 ? argv[1] : "list";
  if (mode == "list") {
    kdatctl::render_json(std::cout, {snap, snap}, 123, names);
  } else if (mode == "show") {
    kdatctl::render_object_json(std::cout, snap.header, snap.records.at(0), 123, names);
  } else if (mode == "counters") {
    const kdatctl::IaCountersRow row{snap.header,
                                     kdat::testing::ia_record(0x10003),
                                     {{"connects", 3}, {"rejected_no_listener", 1}}};
    kdatctl::render_counters_json(std::cout, {row, row}, names);
  } else if (mode == "totals") {
    kdatctl::render_totals_json(std::cout,
                                {{0, "", {{"connects", 5}}}, {1, "rxe\"0", {{"connects", 4}}}});
  } else if (mode == "empty") {
    kdatctl::render_json(std::cout, {}, 0);
  } else {
    for (const auto &c : kdatctl::initial(snap)) {
      kdatctl::render_change_json(std::cout, c, 1, names);
    }
  }
  return 0;
}

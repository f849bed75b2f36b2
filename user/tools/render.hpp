// kdatctl's output: tables as text or JSON (nlohmann::json), and the changes between two
// snapshots (watch).  Pure functions over snapshots, so host tests render fake tables.
#pragma once

#include <cstdint>
#include <kdat/table.hpp>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "json.hpp"

namespace kdatctl {

// RDMA device names by the number records carry (Record::device), from KDAT_IOC_DEV_COUNTERS.
using DeviceNames = std::map<std::uint32_t, std::string>;

// "rxe0/1": a record's RDMA device and port; "#N/P" for a number with no name (the device went),
// "-" for a record that names none (a module older than ABI 8).
[[nodiscard]] std::string rdma_port_text(const kdat::Record &record, const DeviceNames &devices);

// An address filter: the IP of a local or remote address (its port is --port's).
struct AddressFilter {
  std::uint16_t family = 0;  // KDAT_AF_INET or KDAT_AF_INET6
  std::uint8_t addr[16] = {};
};

// "192.0.2.1", "2001:db8::1" or "[2001:db8::1]"; nullopt if it is none of those.
[[nodiscard]] std::optional<AddressFilter> parse_address(const std::string &text);

// What list, watch and counters select: tables by --table, --pid and --comm; objects by --type,
// --state, --ia (the IA itself and everything it owns), --addr and --port (either end),
// --conn-qual, --qpn, and the RDMA device and port of their IA.  Unset fields match anything;
// type and state names are compared without regard to case.
struct Filter {
  std::optional<std::uint64_t> table = {};
  std::optional<std::uint32_t> pid = {};
  std::string comm = {};
  std::string type = {};   // IA, EVD, EP, PSP, RSP, CR
  std::string state = {};  // as list shows it: CONNECTED, LISTENING, PENDING, UP, ...
  std::optional<std::uint32_t> ia = {};
  std::optional<AddressFilter> addr = {};
  std::optional<std::uint16_t> port = {};
  std::optional<std::uint64_t> conn_qual = {};
  std::optional<std::uint32_t> qp_num = {};
  std::optional<std::uint32_t> device = {};  // a number, as Record::device
  std::optional<std::uint32_t> rdma_port = {};

  [[nodiscard]] bool selects_objects() const {
    return !type.empty() || !state.empty() || ia || addr || port || conn_qual || qp_num || device ||
           rdma_port;
  }
  [[nodiscard]] bool table_matches(const kdat::TableHeader &header) const;
  [[nodiscard]] bool record_matches(const kdat::Record &record) const;
};

// The record types' names list shows, for checking --type.
[[nodiscard]] bool known_type(const std::string &name);

// The tables and objects `filter` selects; with an object filter, tables left with no object
// are dropped too.
[[nodiscard]] std::vector<kdat::TableSnapshot> filtered(std::vector<kdat::TableSnapshot> tables,
                                                        const Filter &filter);

// One object, every field of its record: "show".
void render_object_text(std::ostream &out, const kdat::TableHeader &table,
                        const kdat::Record &record, std::uint64_t now_ns,
                        const DeviceNames &devices = {});
void render_object_json(std::ostream &out, const kdat::TableHeader &table,
                        const kdat::Record &record, std::uint64_t now_ns,
                        const DeviceNames &devices = {});

// The order list shows objects in: IAs, EPs, service points, CRs, EVDs (then anything else).
[[nodiscard]] int type_rank(std::uint32_t type);

// `now_ns` is CLOCK_BOOTTIME (the clock of the records' times), for ages.
void render_text(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns, const DeviceNames &devices = {});
void render_json(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns, const DeviceNames &devices = {});

struct Change {
  enum class Kind { created, changed, freed };
  Kind kind = Kind::changed;
  kdat::TableHeader table;
  kdat::Record before{};  // zero for created
  kdat::Record after{};   // zero for freed
};

// Whether the kernel has filled a record in yet: a new object's record is published with its
// handle and type first and filled under the same lock right after (an IA's state, every other
// object's owning IA).  Watch reads the tables as soon as they change, so it can see that first
// write; it treats a record not yet filled as not there, and reports the object once it is.
[[nodiscard]] bool filled(const kdat::Record &record);

// What changed between two snapshots of one table, by slot: objects that appeared, records of
// the same handle whose seq moved and whose state, transitions or events differ, objects gone.
[[nodiscard]] std::vector<Change> diff(const kdat::TableSnapshot &before,
                                       const kdat::TableSnapshot &after);
// Every live object of a snapshot as `created` (the first view of a table).
[[nodiscard]] std::vector<Change> initial(const kdat::TableSnapshot &snapshot);

void render_change_text(std::ostream &out, const Change &change, std::uint64_t now_ns,
                        const DeviceNames &devices = {});
void render_change_json(std::ostream &out, const Change &change, std::uint64_t now_ns,
                        const DeviceNames &devices = {});

[[nodiscard]] std::string handle_text(std::uint32_t handle);

// One IA's connection counters: "counters".
struct IaCountersRow {
  kdat::TableHeader table;  // id, pid, comm as list shows them
  kdat::Record ia{};
  std::vector<kdat::IaCounter> counters;
};

// Text: a line per IA, "table ID pid PID comm COMM ia HANDLE local ADDR dev DEVICE/PORT" and
// then "NAME VALUE" pairs, as 'rdma statistic show' prints a port's.  JSON: an array with an
// object per IA (table, pid, comm, ia, ia_hex, local, rdma_device, rdma_port and one key per
// counter), as 'rdma -j statistic show' does.
void render_counters_text(std::ostream &out, const std::vector<IaCountersRow> &rows,
                          const DeviceNames &devices = {});
void render_counters_json(std::ostream &out, const std::vector<IaCountersRow> &rows,
                          const DeviceNames &devices = {});

// The totals that outlive IAs ("totals"): the module's, then each RDMA device's.  Text: a line
// each, "module NAME VALUE ..." and "device NAME number N NAME VALUE ...".  JSON: {"module":
// {NAME: VALUE, ...}, "devices": [{"device", "number", NAME: VALUE, ...}]}.
void render_totals_text(std::ostream &out, const std::vector<kdat::CounterTotals> &totals);
void render_totals_json(std::ostream &out, const std::vector<kdat::CounterTotals> &totals);

}  // namespace kdatctl

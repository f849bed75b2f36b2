// kdatctl's output: tables as text or JSON, and the changes between two snapshots (watch).
// Pure functions over snapshots, so host tests render fake tables.
#pragma once

#include <cstdint>
#include <kdat/table.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kdatctl {

// What list, watch and show select: tables by --table, --pid and --comm; objects by --type,
// --state and --ia (the IA itself and everything it owns).  Unset fields match anything; type
// and state names are compared without regard to case.
struct Filter {
  std::optional<std::uint64_t> table = {};
  std::optional<std::uint32_t> pid = {};
  std::string comm = {};
  std::string type = {};   // IA, EVD, EP, PSP, RSP, CR
  std::string state = {};  // as list shows it: CONNECTED, LISTENING, PENDING, UP, ...
  std::optional<std::uint32_t> ia = {};

  [[nodiscard]] bool selects_objects() const { return !type.empty() || !state.empty() || ia; }
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
                        const kdat::Record &record, std::uint64_t now_ns);
void render_object_json(std::ostream &out, const kdat::TableHeader &table,
                        const kdat::Record &record, std::uint64_t now_ns);

// The order list shows objects in: IAs, EPs, service points, CRs, EVDs (then anything else).
[[nodiscard]] int type_rank(std::uint32_t type);

// `now_ns` is CLOCK_BOOTTIME (the clock of the records' times), for ages.
void render_text(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns);
void render_json(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns);

struct Change {
  enum class Kind { created, changed, freed };
  Kind kind = Kind::changed;
  kdat::TableHeader table;
  kdat::Record before{};  // zero for created
  kdat::Record after{};   // zero for freed
};

// What changed between two snapshots of one table, by slot: objects that appeared, records of
// the same handle whose seq moved and whose state, transitions or events differ, objects gone.
[[nodiscard]] std::vector<Change> diff(const kdat::TableSnapshot &before,
                                       const kdat::TableSnapshot &after);
// Every live object of a snapshot as `created` (the first view of a table).
[[nodiscard]] std::vector<Change> initial(const kdat::TableSnapshot &snapshot);

void render_change_text(std::ostream &out, const Change &change, std::uint64_t now_ns);
void render_change_json(std::ostream &out, const Change &change, std::uint64_t now_ns);

[[nodiscard]] std::string handle_text(std::uint32_t handle);

// One IA's connection counters: "counters".
struct IaCountersRow {
  kdat::TableHeader table;  // id, pid, comm as list shows them
  kdat::Record ia{};
  std::vector<kdat::IaCounter> counters;
};

// Text: a line per IA, "table ID pid PID comm COMM ia HANDLE local ADDR" and then "NAME VALUE"
// pairs, as 'rdma statistic show' prints a port's.  JSON: an array with an object per IA (table,
// pid, comm, ia, ia_hex, local and one key per counter), as 'rdma -j statistic show' does.
void render_counters_text(std::ostream &out, const std::vector<IaCountersRow> &rows);
void render_counters_json(std::ostream &out, const std::vector<IaCountersRow> &rows);

}  // namespace kdatctl

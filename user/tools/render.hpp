// kdatctl's output: tables as text or JSON, and the changes between two snapshots (watch).
// Pure functions over snapshots, so host tests render fake tables.
#pragma once

#include <cstdint>
#include <kdat/table.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kdatctl {

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

}  // namespace kdatctl

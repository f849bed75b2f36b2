// The shared object table: the kernel's read-only record of every object of an open /dev/kdat
// file (or of a kernel consumer's IA), mapped into this process.
//
// Reading follows the seqcount protocol of include/kdat/uapi/kdat.h: a record copy is used only if
// its seq was even and unchanged around the copy, so a copy is always one the kernel wrote as a
// whole.  No syscall is involved in reading.
#pragma once

#include <kdat/uapi/kdat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <kdat/error.hpp>
#include <kdat/types.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kdat {

class Device;
namespace detail {
struct DeviceState;
}

// One object's record as last written by the kernel (a consistent copy).
using Record = kdat_record;

namespace seqcount {

// 32-bit word view of a record: the copy reads words atomically (relaxed) so a concurrent
// writer is never a data race at the language level.
inline constexpr std::size_t record_words = sizeof(kdat_record) / sizeof(std::uint32_t);
static_assert(sizeof(kdat_record) % sizeof(std::uint32_t) == 0);

// One attempt at a consistent copy of *src.  `between` runs after the copy and before seq is
// checked again (a test seam to simulate a writer racing the copy; a no-op otherwise).
// Returns false when the record was being written or changed during the copy.
template <typename Between>
[[nodiscard]] bool try_read(const kdat_record *src, kdat_record &out, Between &&between) {
  const auto *words = reinterpret_cast<const std::uint32_t *>(src);
  const std::uint32_t seq = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
  if (seq & 1u) return false;
  std::uint32_t copy[record_words];
  for (std::size_t i = 0; i < record_words; ++i)
    copy[i] = __atomic_load_n(&words[i], __ATOMIC_RELAXED);
  between();
  std::atomic_thread_fence(std::memory_order_acquire);
  if (__atomic_load_n(&words[0], __ATOMIC_RELAXED) != seq) return false;
  static_assert(sizeof(copy) == sizeof(out));
  __builtin_memcpy(&out, copy, sizeof(out));
  return true;
}

[[nodiscard]] inline bool try_read(const kdat_record *src, kdat_record &out) {
  return try_read(src, out, [] {});
}

// The fast path for one field: seq, handle and state only, same protocol as try_read().  This is
// what Endpoint::state() costs: three loads and a fence, no copy of the record.
[[nodiscard]] inline bool try_read_state(const kdat_record *src, std::uint32_t &handle,
                                         std::uint32_t &state) {
  const std::uint32_t seq = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE);
  if (seq & 1u) return false;
  handle = __atomic_load_n(&src->handle, __ATOMIC_RELAXED);
  state = __atomic_load_n(&src->state, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_acquire);
  return __atomic_load_n(&src->seq, __ATOMIC_RELAXED) == seq;
}

// Retries until a consistent copy is made.  The kernel holds a record odd only for a few
// stores, so this spins briefly (yielding now and then); a record that stays odd for about a
// second means the writer died mid-write: Error(DAT_INTERNAL_ERROR).
[[nodiscard]] kdat_record read(const kdat_record *src);

}  // namespace seqcount

// The header of a table, copied field by field.
struct TableHeader {
  std::uint32_t high_water = 0;
  std::uint32_t live = 0;
  std::uint32_t flags = 0;  // KDAT_TABLE_*
  std::uint64_t id = 0;
  std::uint64_t created_ns = 0;
  std::uint32_t pid = 0;
  std::uint32_t uid = 0;
  std::string comm;
  std::uint64_t updates = 0;

  [[nodiscard]] bool kernel() const { return (flags & KDAT_TABLE_KERNEL) != 0; }
  [[nodiscard]] bool closed() const { return (flags & KDAT_TABLE_CLOSED) != 0; }
};

// Every record of a table at one moment (each record consistent on its own).
struct TableSnapshot {
  TableHeader header;
  std::vector<Record> records;  // by slot; only live objects unless asked for free slots
};

// A non-owning reader over a mapped table (or any memory laid out like one, e.g. in tests).
// Thread-safe: it only reads.
class TableView {
 public:
  TableView() = default;
  // `base` points at the header; `size` is how many bytes are readable there.  Throws
  // Error(DAT_INTERNAL_ERROR) if the header's magic, layout or sizes are not the ABI's.
  TableView(const void *base, std::size_t size);

  [[nodiscard]] TableHeader header() const;
  // Slots 1..high_water may be read (acquire load: their pages exist).
  [[nodiscard]] std::uint32_t high_water() const;
  // The record in `slot`; nullopt when the slot is 0 or beyond high_water / the mapping.
  [[nodiscard]] std::optional<Record> read(std::uint32_t slot) const;
  // The record of `handle`, or nullopt when its slot now holds another object (or none).
  [[nodiscard]] std::optional<Record> find(std::uint32_t handle) const;
  [[nodiscard]] TableSnapshot snapshot(bool include_free = false) const;
  // Where `slot`'s record lives in the mapping, or nullptr if it is not readable (as read()).
  [[nodiscard]] const kdat_record *slot_address(std::uint32_t slot) const;

 private:
  const std::byte *base_ = nullptr;
  std::size_t size_ = 0;
  [[nodiscard]] const kdat_table_header *raw_header() const {
    return reinterpret_cast<const kdat_table_header *>(base_);
  }
};

// An mmap'ed region, unmapped on destruction.  Move-only.
class MappedRegion {
 public:
  MappedRegion() = default;
  MappedRegion(void *addr, std::size_t length) : addr_(addr), length_(length) {}
  MappedRegion(MappedRegion &&other) noexcept;
  MappedRegion &operator=(MappedRegion &&other) noexcept;
  MappedRegion(const MappedRegion &) = delete;
  MappedRegion &operator=(const MappedRegion &) = delete;
  ~MappedRegion();

  // mmap(fd, offset, length) or Error carrying the errno's DAT code.
  [[nodiscard]] static MappedRegion map(int fd, std::uint64_t offset, std::size_t length, int prot,
                                        const char *what);
  [[nodiscard]] void *data() const { return addr_; }
  [[nodiscard]] std::size_t size() const { return length_; }

 private:
  void *addr_ = nullptr;
  std::size_t length_ = 0;
};

// An entry of KDAT_IOC_TABLE_LIST: a table the caller may attach to.
struct TableInfo {
  std::uint64_t id = 0;
  std::uint32_t pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t flags = 0;  // KDAT_TABLE_*
  std::uint32_t live = 0;
  std::string comm;
};

// The tables this process may look at (its own files', other processes' of the same uid, and
// with CAP_SYS_ADMIN everybody's and the kernel consumers').
[[nodiscard]] std::vector<TableInfo> list_tables(const Device &device);

// One of an IA's connection counters (KDAT_IOC_IA_COUNTERS): its name in
// <kdat/uapi/kdat_counters.h>'s list (connects, rejected_no_listener, ...) and its value.
struct IaCounter {
  std::string_view name;
  std::uint64_t value = 0;
};

// The names of KDAT_IA_COUNTERS, in order.
[[nodiscard]] const std::vector<std::string_view> &ia_counter_names();

// The connection counters of IA `ia`: of `device`'s own file with table 0, else of the table with
// that id (TABLE_ATTACH's rule: the owner's uid, or CAP_SYS_ADMIN).  The counters both this
// library and the running module know, in list order.  Errors: DAT_INVALID_HANDLE (no such IA),
// DAT_PRIVILEGES_VIOLATION, DAT_INVALID_PARAMETER (no such table).
[[nodiscard]] std::vector<IaCounter> ia_counters(const Device &device, std::uint64_t table,
                                                 std::uint32_t ia);

// The same counters summed over every IA an RDMA device has had (kept while kdat knows the
// device), or over every IA since the module was loaded (KDAT_IOC_DEV_COUNTERS, ABI 8).
struct CounterTotals {
  std::uint32_t number = 0;  // as records carry it (Record::device); 0 = the module's totals
  std::string name;          // the ib_device's name; empty for the module
  std::vector<IaCounter> counters;
};

// The module's totals first, then every device kdat knows, by number.  A device that goes while
// they are read is left out.  Errors: DAT_INVALID_PARAMETER from a module older than ABI 8.
[[nodiscard]] std::vector<CounterTotals> counter_totals(const Device &device);

// Sleeps until the module's shared tables change (a record written, a table made or closed:
// KDAT_IOC_TABLE_WAIT, ABI 8) or `timeout` passes, and returns the change count then; `seen` is
// the count last returned (0 returns it at once).  A count equal to `seen` means the time ran
// out.  The count is module-wide: a wake may be for a table the caller does not see.  Errors:
// DAT_INTERRUPTED_CALL on a signal.
[[nodiscard]] std::uint64_t wait_tables(const Device &device, std::uint64_t seen, Timeout timeout);

// An owned, read-only mapping of a table: the device's own (KDAT_MMAP_TABLE) or the one an
// attach selected (KDAT_MMAP_VIEW).  It stays readable after the owner closes (the header then
// says KDAT_TABLE_CLOSED).  Move-only; thread-safe for reading.
class ObjectTable {
 public:
  // The table of `device`'s own file.
  [[nodiscard]] static ObjectTable own(const Device &device);
  // KDAT_IOC_TABLE_ATTACH `id` on `device` and map it.  A device has one view at a time, so use
  // one Device per attached table.  Errors: DAT_PRIVILEGES_VIOLATION, DAT_INVALID_PARAMETER.
  [[nodiscard]] static ObjectTable attach(const Device &device, std::uint64_t id);

  [[nodiscard]] const TableView &view() const { return view_; }
  [[nodiscard]] TableHeader header() const { return view_.header(); }
  [[nodiscard]] TableSnapshot snapshot(bool include_free = false) const {
    return view_.snapshot(include_free);
  }

 private:
  // Made inside libkdat only, from its internals: not exported.
  [[gnu::visibility("hidden")]] ObjectTable(std::shared_ptr<detail::DeviceState> state,
                                            MappedRegion region);
  std::shared_ptr<detail::DeviceState> state_;
  MappedRegion region_;
  TableView view_;
};

}  // namespace kdat

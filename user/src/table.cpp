#include <kdat/uapi/kdat_layout_check.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <kdat/device.hpp>
#include <kdat/names.hpp>
#include <kdat/table.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

namespace {

[[noreturn]] void bad_table(const std::string &what) {
  throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERNAL_ERROR}, "object table: " + what);
}

template <typename T>
T load_relaxed(const T &field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

}  // namespace

namespace seqcount {

kdat_record read(const kdat_record *src) {
  kdat_record out{};
  // Spin first (the writer is mid-update for a handful of stores), then yield, and give up
  // only after a generous wall-clock bound so a stuck writer cannot hang the reader forever.
  for (unsigned spin = 0; spin < 64; ++spin) {
    if (try_read(src, out)) return out;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  do {
    for (unsigned spin = 0; spin < 64; ++spin) {
      if (try_read(src, out)) return out;
    }
    ::sched_yield();
  } while (std::chrono::steady_clock::now() < deadline);
  bad_table("a record stayed mid-write for a second");
}

}  // namespace seqcount

TableView::TableView(const void *base, std::size_t size)
    : base_(static_cast<const std::byte *>(base)), size_(size) {
  if (size_ < KDAT_TABLE_HEADER_SIZE) bad_table("mapping smaller than the header");
  const auto *h = raw_header();
  if (load_relaxed(h->magic) != KDAT_TABLE_MAGIC) bad_table("bad magic");
  if (load_relaxed(h->layout) != KDAT_TABLE_LAYOUT) bad_table("unknown layout");
  if (load_relaxed(h->header_size) != KDAT_TABLE_HEADER_SIZE ||
      load_relaxed(h->record_size) != KDAT_TABLE_RECORD_SIZE) {
    bad_table("header or record size is not the ABI's");
  }
}

TableHeader TableView::header() const {
  const auto *h = raw_header();
  TableHeader out;
  out.high_water = high_water();
  out.live = load_relaxed(h->live);
  out.flags = load_relaxed(h->flags);
  out.id = load_relaxed(h->id);
  out.created_ns = load_relaxed(h->created_ns);
  out.pid = load_relaxed(h->pid);
  out.uid = load_relaxed(h->uid);
  char comm[sizeof(h->comm)];
  for (std::size_t i = 0; i < sizeof(comm); ++i) comm[i] = load_relaxed(h->comm[i]);
  out.comm = fixed_string(comm);
  out.updates = load_relaxed(h->updates);
  return out;
}

std::uint32_t TableView::high_water() const {
  if (base_ == nullptr) return 0;
  return __atomic_load_n(&raw_header()->high_water, __ATOMIC_ACQUIRE);
}

const kdat_record *TableView::slot_address(std::uint32_t slot) const {
  if (slot == 0 || slot >= KDAT_TABLE_MAX_SLOTS || slot > high_water()) return nullptr;
  const std::size_t offset =
      KDAT_TABLE_HEADER_SIZE + static_cast<std::size_t>(slot) * KDAT_TABLE_RECORD_SIZE;
  if (offset + KDAT_TABLE_RECORD_SIZE > size_) return nullptr;
  return reinterpret_cast<const kdat_record *>(base_ + offset);
}

std::optional<Record> TableView::read(std::uint32_t slot) const {
  const kdat_record *record = slot_address(slot);
  if (!record) return std::nullopt;
  return seqcount::read(record);
}

std::optional<Record> TableView::find(std::uint32_t handle) const {
  auto record = read(KDAT_HANDLE_SLOT(handle));
  if (!record || record->handle != handle) return std::nullopt;
  return record;
}

TableSnapshot TableView::snapshot(bool include_free) const {
  TableSnapshot snap;
  snap.header = header();
  for (std::uint32_t slot = 1; slot <= snap.header.high_water; ++slot) {
    auto record = read(slot);
    if (!record) break;
    if (record->handle == 0 && !include_free) continue;
    snap.records.push_back(*record);
  }
  return snap;
}

MappedRegion::MappedRegion(MappedRegion &&other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)), length_(std::exchange(other.length_, 0)) {}

MappedRegion &MappedRegion::operator=(MappedRegion &&other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, length_);
    addr_ = std::exchange(other.addr_, nullptr);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

MappedRegion::~MappedRegion() {
  if (addr_ != nullptr) ::munmap(addr_, length_);
}

MappedRegion MappedRegion::map(int fd, std::uint64_t offset, std::size_t length, int prot,
                               const char *what) {
  void *addr = ::mmap(nullptr, length, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (addr == MAP_FAILED) detail::throw_errno(errno, what);
  return MappedRegion(addr, length);
}

std::vector<TableInfo> list_tables(const Device &device) {
  std::vector<kdat_table_info> raw(16);
  for (;;) {
    kdat_table_list arg{};
    arg.capacity = static_cast<std::uint32_t>(raw.size());
    arg.tables = reinterpret_cast<std::uintptr_t>(raw.data());
    detail::ioctl_checked(device.fd(), KDAT_IOC_TABLE_LIST, arg, "table_list");
    if (arg.count <= raw.size()) {
      raw.resize(arg.count);
      break;
    }
    raw.resize(arg.count + 16);  // more appeared than room: ask again with enough
  }
  std::vector<TableInfo> out;
  out.reserve(raw.size());
  for (const auto &t : raw) {
    out.push_back(TableInfo{t.id, t.pid, t.uid, t.flags, t.live, fixed_string(t.comm)});
  }
  return out;
}

const std::vector<std::string_view> &ia_counter_names() {
#define KDAT_COUNTER_NAME(NAME, name) #name,
  static const std::vector<std::string_view> names{KDAT_IA_COUNTERS(KDAT_COUNTER_NAME)};
#undef KDAT_COUNTER_NAME
  return names;
}

std::vector<IaCounter> detail::read_ia_counters(int fd, std::uint64_t table, std::uint32_t ia) {
  kdat_ia_counters arg{};
  arg.table = table;
  arg.ia = ia;
  detail::ioctl_checked(fd, KDAT_IOC_IA_COUNTERS, arg, "ia_counters");
  const auto &names = ia_counter_names();
  const std::size_t known = std::min<std::size_t>(names.size(), arg.count);
  std::vector<IaCounter> out;
  out.reserve(known);
  for (std::size_t i = 0; i < known; ++i) out.push_back(IaCounter{names[i], arg.value[i]});
  return out;
}

std::vector<IaCounter> ia_counters(const Device &device, std::uint64_t table, std::uint32_t ia) {
  return detail::read_ia_counters(device.fd(), table, ia);
}

std::vector<CounterTotals> counter_totals(const Device &device) {
  const auto &names = ia_counter_names();
  std::vector<CounterTotals> out;
  std::uint32_t number = 0;
  do {
    kdat_dev_counters arg{};
    arg.device = number;
    detail::ioctl_raw(device.fd(), KDAT_IOC_DEV_COUNTERS, arg, "dev_counters");
    const DatReturn status{arg.status};
    if (!status.ok()) {
      if (number == 0) throw Error(status, "dev_counters");
      break;  // the device went between two calls: the rest is unknown
    }
    CounterTotals d{number, fixed_string(arg.name), {}};
    const std::size_t known = std::min<std::size_t>(names.size(), arg.count);
    for (std::size_t i = 0; i < known; ++i) d.counters.push_back(IaCounter{names[i], arg.value[i]});
    out.push_back(std::move(d));
    if (arg.next <= number) break;  // numbers only grow: anything else ends the list
    number = arg.next;
  } while (number != 0);
  return out;
}

std::uint64_t wait_tables(const Device &device, std::uint64_t seen, Timeout timeout) {
  kdat_table_wait arg{};
  arg.changes = seen;
  arg.timeout_us = detail::timeout_us(timeout, "wait_tables");
  detail::ioctl_raw(device.fd(), KDAT_IOC_TABLE_WAIT, arg, "wait_tables");
  const DatReturn status{arg.status};
  if (!status.ok() && status.type() != KDAT_DAT_TIMEOUT_EXPIRED) throw Error(status, "wait_tables");
  return arg.changes;
}

ObjectTable::ObjectTable(std::shared_ptr<detail::DeviceState> state, MappedRegion region)
    : state_(std::move(state)), region_(std::move(region)), view_(region_.data(), region_.size()) {}

ObjectTable ObjectTable::own(const Device &device) {
  auto region =
      MappedRegion::map(device.fd(), KDAT_MMAP_TABLE, KDAT_TABLE_MAP_SIZE, PROT_READ, "mmap table");
  return ObjectTable(device.state(), std::move(region));
}

ObjectTable ObjectTable::attach(const Device &device, std::uint64_t id) {
  kdat_table_attach arg{};
  arg.id = id;
  detail::ioctl_checked(device.fd(), KDAT_IOC_TABLE_ATTACH, arg, "table_attach");
  auto region =
      MappedRegion::map(device.fd(), KDAT_MMAP_VIEW, KDAT_TABLE_MAP_SIZE, PROT_READ, "mmap view");
  return ObjectTable(device.state(), std::move(region));
}

}  // namespace kdat

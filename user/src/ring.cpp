#include <kdat/uapi/kdat_layout_check.h>

#include <cstring>
#include <kdat/error.hpp>
#include <kdat/ring.hpp>
#include <string>

namespace kdat {

namespace {

[[noreturn]] void bad_ring(const std::string &what) {
  throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERNAL_ERROR}, "event ring: " + what);
}

}  // namespace

RingConsumer::RingConsumer(void *base, std::size_t size, const kdat_ring_offsets &off) {
  if (base == nullptr || size < sizeof(std::uint32_t)) bad_ring("mapping too small");
  auto *bytes = static_cast<std::byte *>(base);
  // Every field the offsets name must lie inside the mapping, 4-byte aligned.
  const auto field = [&](std::uint32_t offset, const char *name) {
    if (offset % alignof(std::uint32_t) != 0 ||
        static_cast<std::size_t>(offset) + sizeof(std::uint32_t) > size) {
      bad_ring(std::string(name) + " offset outside the mapping");
    }
    return reinterpret_cast<std::uint32_t *>(bytes + offset);
  };
  head_ = field(off.head, "head");
  tail_ = field(off.tail, "tail");
  backlog_ = field(off.backlog, "backlog");
  overflow_ = field(off.overflow, "overflow");
  flags_ = field(off.flags, "flags");
  // The geometry is fixed at creation; read it once and trust nothing else the kernel writes.
  entries_ = __atomic_load_n(field(off.entries, "entries"), __ATOMIC_RELAXED);
  mask_ = __atomic_load_n(field(off.mask, "mask"), __ATOMIC_RELAXED);
  entry_size_ = __atomic_load_n(field(off.entry_size, "entry_size"), __ATOMIC_RELAXED);
  if (entries_ == 0 || (entries_ & (entries_ - 1)) != 0 || mask_ != entries_ - 1) {
    bad_ring("entries is not a power of two");
  }
  if (entry_size_ < sizeof(kdat_event)) bad_ring("entries smaller than struct kdat_event");
  if (off.array > size || static_cast<std::size_t>(entries_) * entry_size_ > size - off.array) {
    bad_ring("entries extend past the mapping");
  }
  entries_base_ = bytes + off.array;
}

std::uint32_t RingConsumer::available() const {
  if (head_ == nullptr) return 0;
  const std::uint32_t tail = __atomic_load_n(tail_, __ATOMIC_ACQUIRE);
  const std::uint32_t head = __atomic_load_n(head_, __ATOMIC_RELAXED);
  return tail - head;  // unsigned wrap-around is the protocol's arithmetic
}

std::uint32_t RingConsumer::backlog() const {
  return backlog_ == nullptr ? 0 : __atomic_load_n(backlog_, __ATOMIC_RELAXED);
}

std::uint32_t RingConsumer::overflow() const {
  return overflow_ == nullptr ? 0 : __atomic_load_n(overflow_, __ATOMIC_RELAXED);
}

bool RingConsumer::dead() const {
  return flags_ != nullptr && (__atomic_load_n(flags_, __ATOMIC_ACQUIRE) & KDAT_RING_DEAD) != 0;
}

std::optional<kdat_event> RingConsumer::pop() {
  auto entry = pop_entry();
  if (!entry) return std::nullopt;
  return entry->event;
}

std::optional<kdat_ring_entry> RingConsumer::pop_entry() {
  if (head_ == nullptr) return std::nullopt;
  const std::uint32_t tail = __atomic_load_n(tail_, __ATOMIC_ACQUIRE);
  const std::uint32_t head = __atomic_load_n(head_, __ATOMIC_RELAXED);
  if (head == tail) return std::nullopt;
  if (tail - head > entries_) bad_ring("tail is more than a ring ahead of head");
  kdat_ring_entry entry{};
  // An older kernel's entry is the event alone (entry_size says so): the tail stays zero.
  const std::size_t taken = entry_size_ >= sizeof(entry) ? sizeof(entry) : sizeof(entry.event);
  std::memcpy(&entry, entries_base_ + static_cast<std::size_t>(head & mask_) * entry_size_, taken);
  // Release: the copy above is complete before the kernel may reuse the slot.
  __atomic_store_n(head_, head + 1, __ATOMIC_RELEASE);
  return entry;
}

}  // namespace kdat

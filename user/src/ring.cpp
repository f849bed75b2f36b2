#include <uapi/kdat_layout_check.h>

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

RingConsumer::RingConsumer(void *base, std::size_t size)
    : header_(static_cast<kdat_ring_header *>(base)),
      entries_base_(static_cast<const std::byte *>(base) + KDAT_RING_ENTRIES_OFFSET) {
  if (base == nullptr || size < KDAT_RING_ENTRIES_OFFSET) bad_ring("mapping too small");
  // The geometry is fixed at creation; read it once and trust nothing else the kernel writes.
  entries_ = __atomic_load_n(&header_->entries, __ATOMIC_RELAXED);
  mask_ = __atomic_load_n(&header_->mask, __ATOMIC_RELAXED);
  entry_size_ = __atomic_load_n(&header_->entry_size, __ATOMIC_RELAXED);
  if (entries_ == 0 || (entries_ & (entries_ - 1)) != 0 || mask_ != entries_ - 1) {
    bad_ring("entries is not a power of two");
  }
  if (entry_size_ < sizeof(kdat_event)) bad_ring("entries smaller than struct kdat_event");
  if (KDAT_RING_ENTRIES_OFFSET + static_cast<std::size_t>(entries_) * entry_size_ > size) {
    bad_ring("entries extend past the mapping");
  }
}

std::uint32_t RingConsumer::available() const {
  if (header_ == nullptr) return 0;
  const std::uint32_t tail = __atomic_load_n(&header_->tail, __ATOMIC_ACQUIRE);
  const std::uint32_t head = __atomic_load_n(&header_->head, __ATOMIC_RELAXED);
  return tail - head;  // unsigned wrap-around is the protocol's arithmetic
}

std::uint32_t RingConsumer::backlog() const {
  return header_ == nullptr ? 0 : __atomic_load_n(&header_->backlog, __ATOMIC_RELAXED);
}

std::uint32_t RingConsumer::overflow() const {
  return header_ == nullptr ? 0 : __atomic_load_n(&header_->overflow, __ATOMIC_RELAXED);
}

bool RingConsumer::dead() const {
  return header_ != nullptr &&
         (__atomic_load_n(&header_->flags, __ATOMIC_ACQUIRE) & KDAT_RING_DEAD) != 0;
}

std::optional<kdat_event> RingConsumer::pop() {
  if (header_ == nullptr) return std::nullopt;
  const std::uint32_t tail = __atomic_load_n(&header_->tail, __ATOMIC_ACQUIRE);
  const std::uint32_t head = __atomic_load_n(&header_->head, __ATOMIC_RELAXED);
  if (head == tail) return std::nullopt;
  if (tail - head > entries_) bad_ring("tail is more than a ring ahead of head");
  kdat_event event;
  std::memcpy(&event, entries_base_ + static_cast<std::size_t>(head & mask_) * entry_size_,
              sizeof(event));
  // Release: the copy above is complete before the kernel may reuse the slot.
  __atomic_store_n(&header_->head, head + 1, __ATOMIC_RELEASE);
  return event;
}

}  // namespace kdat

// The consumer side of an EVD's event ring (include/kdat/uapi/kdat.h, "Event rings"): the kernel
// appends at tail, this consumer takes from head.  Pure memory logic, no syscalls, so it is
// tested against an in-memory ring.
#pragma once

#if __cplusplus < 202002L
#error "libkdat's headers need C++20 or later (-std=c++20)"
#endif

#include <kdat/uapi/kdat.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kdat {

// Not thread-safe: the ring has one consumer; callers serialise pop().  available(), backlog(),
// overflow() and dead() may be read from any thread.
class RingConsumer {
 public:
  RingConsumer() = default;
  // `base` is the mapping's start (the header), `size` its length.  Throws
  // Error(DAT_INTERNAL_ERROR) if the header is not a ring (entries not a power of two, entries past
  // the mapping, ...).
  // `off` says where each field is (KDAT_IOC_EVD_RING's answer).
  RingConsumer(void *base, std::size_t size, const kdat_ring_offsets &off);

  [[nodiscard]] std::uint32_t entries() const { return entries_; }
  // Events in the ring now (tail loaded with acquire).
  [[nodiscard]] std::uint32_t available() const;
  // Events the kernel holds behind a full ring; RING_WAIT moves them in.
  [[nodiscard]] std::uint32_t backlog() const;
  // Events the kernel could not queue at all (a running count).
  [[nodiscard]] std::uint32_t overflow() const;
  // The EVD was freed.
  [[nodiscard]] bool dead() const;
  // Take the oldest entry (the event and its UD tail), releasing its slot to the kernel; nullopt
  // when the ring is empty.  A ring whose entries are smaller than struct kdat_ring_entry (ABI 6
  // and older: a bare struct kdat_event) has no tail: it reads as zero.
  [[nodiscard]] std::optional<kdat_ring_entry> pop_entry();
  // The same without the UD tail (libkdat 0.1's call, kept for its callers).
  [[nodiscard]] std::optional<kdat_event> pop();

 private:
  std::uint32_t *head_ = nullptr;  // the consumer's: the only field written here
  const std::uint32_t *tail_ = nullptr;
  const std::uint32_t *backlog_ = nullptr;
  const std::uint32_t *overflow_ = nullptr;
  const std::uint32_t *flags_ = nullptr;
  const std::byte *entries_base_ = nullptr;
  std::uint32_t entries_ = 0;
  std::uint32_t mask_ = 0;
  std::uint32_t entry_size_ = 0;
};

}  // namespace kdat

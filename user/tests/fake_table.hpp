// An in-memory object table laid out as the kernel's, with a writer that follows the kernel's
// seqcount protocol (or deliberately breaks it), for host tests of the readers.
#pragma once

#include <kdat/ep_table.h>
#include <kdat/uapi/kdat.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kdat::testing {

class FakeTable {
 public:
  explicit FakeTable(std::uint32_t slots)
      : size_(KDAT_TABLE_HEADER_SIZE +
              (static_cast<std::size_t>(slots) + 1) * KDAT_TABLE_RECORD_SIZE),
        memory_(size_ / sizeof(std::uint64_t), 0) {
    auto *h = header();
    h->magic = KDAT_TABLE_MAGIC;
    h->layout = KDAT_TABLE_LAYOUT;
    h->header_size = KDAT_TABLE_HEADER_SIZE;
    h->record_size = KDAT_TABLE_RECORD_SIZE;
    h->max_slots = KDAT_TABLE_MAX_SLOTS;
    h->id = 7;
    h->pid = 4242;
    h->uid = 1000;
    std::memcpy(h->comm, "fake\"comm\\", 10);
  }

  [[nodiscard]] const void *data() const { return memory_.data(); }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] kdat_table_header *header() {
    return reinterpret_cast<kdat_table_header *>(memory_.data());
  }
  [[nodiscard]] kdat_record *record(std::uint32_t slot) {
    return reinterpret_cast<kdat_record *>(reinterpret_cast<std::byte *>(memory_.data()) +
                                           KDAT_TABLE_HEADER_SIZE +
                                           static_cast<std::size_t>(slot) * KDAT_TABLE_RECORD_SIZE);
  }

  // The kernel's writer: seq odd, fields, seq even (word stores, release ordering).
  void write(std::uint32_t slot, const kdat_record &value) {
    auto *words = reinterpret_cast<std::uint32_t *>(record(slot));
    const std::uint32_t seq = __atomic_load_n(&words[0], __ATOMIC_RELAXED);
    begin(slot);
    const auto *src = reinterpret_cast<const std::uint32_t *>(&value);
    for (std::size_t i = 1; i < sizeof(kdat_record) / 4; ++i) {
      __atomic_store_n(&words[i], src[i], __ATOMIC_RELAXED);
    }
    std::atomic_thread_fence(std::memory_order_release);
    __atomic_store_n(&words[0], seq + 2, __ATOMIC_RELEASE);
    if (slot > __atomic_load_n(&header()->high_water, __ATOMIC_RELAXED)) {
      __atomic_store_n(&header()->high_water, slot, __ATOMIC_RELEASE);
    }
  }
  // Half a write: seq made odd and left so (a writer preempted mid-update).
  void begin(std::uint32_t slot) {
    auto *words = reinterpret_cast<std::uint32_t *>(record(slot));
    __atomic_store_n(&words[0], __atomic_load_n(&words[0], __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    std::atomic_thread_fence(std::memory_order_release);
  }
  // Store one 32-bit word of a record without touching seq (a torn write in progress).
  void poke(std::uint32_t slot, std::size_t word, std::uint32_t value) {
    auto *words = reinterpret_cast<std::uint32_t *>(record(slot));
    __atomic_store_n(&words[word], value, __ATOMIC_RELAXED);
  }
  void finish(std::uint32_t slot) {
    auto *words = reinterpret_cast<std::uint32_t *>(record(slot));
    std::atomic_thread_fence(std::memory_order_release);
    __atomic_store_n(&words[0], __atomic_load_n(&words[0], __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
  }

 private:
  std::size_t size_;
  std::vector<std::uint64_t> memory_;  // 8-byte aligned, as the records need
};

// A record of an EP with the given handle and state.
inline kdat_record ep_record(std::uint32_t handle, std::uint32_t state, std::uint32_t transitions) {
  kdat_record r{};
  r.handle = handle;
  r.type = KDAT_REC_EP;
  r.generation = static_cast<std::uint16_t>(handle >> 16);
  r.state = state;
  r.transitions = transitions;
  r.owner = 0x1ffff;  // some IA: the kernel fills every record but an IA's with its owner
  return r;
}

inline kdat_record ia_record(std::uint32_t handle) {
  kdat_record r{};
  r.handle = handle;
  r.type = KDAT_REC_IA;
  r.generation = static_cast<std::uint16_t>(handle >> 16);
  r.state = KDAT_IA_UP;
  return r;
}

}  // namespace kdat::testing

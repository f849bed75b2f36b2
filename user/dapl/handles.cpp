// The handle table: DAT handles are addresses of Slots that live as long as the library.
//
// The registry reads the first word of every handle (DAT_HANDLE_TO_PROVIDER) before the provider
// sees it, so a handle's memory must stay valid after the object is freed: slots are allocated in
// chunks that are never released, and a freed slot keeps its provider pointer.  A stale handle
// therefore reaches this provider, which finds the slot retired and answers DAT_INVALID_HANDLE.
// Retired slots are reused only after kQuarantine others have been retired since (FIFO), so a
// stale handle is very unlikely to alias a new object soon after (DAT handles are pointers: some
// reuse is inherent, as in every DAT provider).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <vector>

#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {

namespace handle_slots {
std::uintptr_t last_start = 0;
}  // namespace handle_slots

namespace {

using handle_slots::kChunk;
using handle_slots::kLive;
using handle_slots::Slot;
constexpr std::size_t kQuarantine = 4096;

struct Table {
  std::deque<std::unique_ptr<Slot[]>> chunks;
  std::vector<std::uintptr_t> starts;  // the chunks' addresses, sorted (slot_of)
  std::deque<Slot *> retired;          // FIFO of reusable slots
  std::size_t next_in_chunk = kChunk;
};

Table &table() {
  static Table t;
  return t;
}

// Bound when the library is loaded: the chunk search (slot_of_search) reads it
// directly instead of passing the function-local static's guard on each call.
Table &the_table = table();

Slot *new_slot() {
  auto &t = table();
  if (t.retired.size() > kQuarantine) {
    Slot *s = t.retired.front();
    t.retired.pop_front();
    return s;
  }
  if (t.next_in_chunk == kChunk) {
    t.chunks.push_back(std::make_unique<Slot[]>(kChunk));
    const auto start = reinterpret_cast<std::uintptr_t>(t.chunks.back().get());
    t.starts.insert(std::upper_bound(t.starts.begin(), t.starts.end(), start), start);
    t.next_in_chunk = 0;
  }
  return &t.chunks.back()[t.next_in_chunk++];
}

}  // namespace

// The chunks are searched when `handle` is not in the one found last.
handle_slots::Slot *handle_slots::slot_of_search(DAT_HANDLE handle) {
  auto &t = the_table;
  const auto address = reinterpret_cast<std::uintptr_t>(handle);
  const auto after = std::upper_bound(t.starts.begin(), t.starts.end(), address);
  if (after == t.starts.begin()) return nullptr;
  const std::uintptr_t offset = address - *std::prev(after);
  if (offset >= kChunkBytes || offset % sizeof(Slot) != 0) return nullptr;
  last_start = *std::prev(after);
  return static_cast<Slot *>(handle);
}

// (constexpr-constructed: usable before any other static of the library is)
ProviderLock provider_lock;

// Marks the lock as having sleepers and sleeps until it is free; whoever takes it this way
// leaves it marked, so its unlock wakes the next sleeper (a spurious wake at worst).
void ProviderLock::lock_contended(std::uint32_t seen) {
  static_assert(sizeof(state_) == sizeof(int) && std::atomic<std::uint32_t>::is_always_lock_free);
  if (seen != kSleepers) seen = state_.exchange(kSleepers, std::memory_order_acquire);
  while (seen != kFree) {
    (void)::syscall(SYS_futex, reinterpret_cast<int *>(&state_), FUTEX_WAIT_PRIVATE, kSleepers,
                    nullptr, nullptr, 0);
    seen = state_.exchange(kSleepers, std::memory_order_acquire);
  }
}

void ProviderLock::wake_one() {
  (void)::syscall(SYS_futex, reinterpret_cast<int *>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr,
                  nullptr, 0);
}

DAT_HANDLE publish(const Instance &instance, DAT_HANDLE_TYPE type, std::shared_ptr<Object> object) {
  Slot *s = new_slot();
  s->provider = &instance.provider;
  s->type = type;
  object->type = type;
  object->handle = s;
  s->object = std::move(object);
  s->magic = kLive;
  return s;
}

Object &lookup_any(DAT_HANDLE handle) {
  Slot *s = handle_slots::slot_of(handle);
  if (s == nullptr || s->magic != kLive || !s->object) fail(DAT_INVALID_HANDLE);
  return *s->object;
}

std::shared_ptr<Object> share(DAT_HANDLE handle) {
  Slot *s = handle_slots::slot_of(handle);
  return s != nullptr && s->magic == kLive ? s->object : nullptr;
}

void retire(DAT_HANDLE handle) {
  Slot *s = handle_slots::slot_of(handle);
  if (s == nullptr || s->magic != kLive) return;
  s->magic = 0;
  auto object = std::move(s->object);  // destroyed after the slot is consistent
  table().retired.push_back(s);
  object.reset();
}

void drop_child(Object &object) {
  if (object.ia != nullptr && object.ia != &object) object.ia->children.erase(&object);
  retire(object.handle);
}

}  // namespace kdat::dapl

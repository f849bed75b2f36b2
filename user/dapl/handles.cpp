// The handle table: DAT handles are addresses of Slots that live as long as the library.
//
// The registry reads the first word of every handle (DAT_HANDLE_TO_PROVIDER) before the provider
// sees it, so a handle's memory must stay valid after the object is freed: slots are allocated in
// chunks that are never released, and a freed slot keeps its provider pointer.  A stale handle
// therefore reaches this provider, which finds the slot retired and answers DAT_INVALID_HANDLE.
// Retired slots are reused only after kQuarantine others have been retired since (FIFO), so a
// stale handle is very unlikely to alias a new object soon after (DAT handles are pointers: some
// reuse is inherent, as in every DAT provider).
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
namespace {

constexpr std::uint32_t kLive = 0x6b646174;  // "kdat"
constexpr std::size_t kQuarantine = 4096;
constexpr std::size_t kChunk = 256;

struct Slot {
  const DAT_PROVIDER *provider = nullptr;  // must stay the first member
  std::uint32_t magic = 0;
  DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_IA;
  std::shared_ptr<Object> object;
};
static_assert(offsetof(Slot, provider) == 0);

struct Table {
  std::deque<std::unique_ptr<Slot[]>> chunks;
  std::vector<std::uintptr_t> starts;  // the chunks' addresses, sorted (slot_of)
  std::uintptr_t last_start = 0;       // the chunk slot_of found last (0: none yet)
  std::deque<Slot *> retired;          // FIFO of reusable slots
  std::size_t next_in_chunk = kChunk;
};

Table &table() {
  static Table t;
  return t;
}

// Bound when the library is loaded: the hot calls (every lookup) read it
// directly instead of passing the function-local static's guard on each call.
Table &the_table = table();

// The slot `handle` names if it is the address of one of ours: in the chunk found last (a data
// path's calls name the same few objects over and over), else by a binary search of the chunks.
// Slots of the last chunk not handed out yet are never live, so lookups of them fail like those
// of retired slots.  Caller holds the provider lock (last_start).
Slot *slot_of(DAT_HANDLE handle) {
  auto &t = the_table;
  constexpr std::uintptr_t chunk_bytes = kChunk * sizeof(Slot);
  const auto address = reinterpret_cast<std::uintptr_t>(handle);
  std::uintptr_t offset = address - t.last_start;
  // (an address below last_start wraps to an offset past the chunk)
  if (t.last_start == 0 || offset >= chunk_bytes) {
    const auto after = std::upper_bound(t.starts.begin(), t.starts.end(), address);
    if (after == t.starts.begin()) return nullptr;
    offset = address - *std::prev(after);
    if (offset >= chunk_bytes) return nullptr;
    t.last_start = *std::prev(after);
  }
  if (offset % sizeof(Slot) != 0) return nullptr;
  return static_cast<Slot *>(handle);
}

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

// (constexpr-constructed: usable before any other static of the library is)
std::mutex provider_mutex;

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
  Slot *s = slot_of(handle);
  if (s == nullptr || s->magic != kLive || !s->object) fail(DAT_INVALID_HANDLE);
  return *s->object;
}

Object &lookup(DAT_HANDLE handle, DAT_HANDLE_TYPE type, DAT_RETURN subtype) {
  Slot *s = slot_of(handle);
  if (s == nullptr || s->magic != kLive || s->type != type || !s->object)
    fail(DAT_INVALID_HANDLE, subtype);
  return *s->object;
}

std::shared_ptr<Object> share(DAT_HANDLE handle) {
  Slot *s = slot_of(handle);
  return s != nullptr && s->magic == kLive ? s->object : nullptr;
}

void retire(DAT_HANDLE handle) {
  Slot *s = slot_of(handle);
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

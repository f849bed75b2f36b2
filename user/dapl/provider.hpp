// libdaplkdat: the DAT 2.0 provider over kdat.  Internal declarations shared by the provider's
// translation units; nothing here is part of any public ABI (the library exports only
// dat_provider_init and dat_provider_fini, see provider.cpp).
//
// Model.  Every DAT handle points at a Slot of the handle table (handles.cpp): its first word is
// the DAT_PROVIDER pointer, as DAT_HANDLE_TO_PROVIDER requires, and the slot stays readable for
// the library's lifetime, so a handle that was freed still reaches this provider and fails with
// DAT_INVALID_HANDLE instead of crashing the registry.  The slot holds the object (shared_ptr:
// a waiter keeps an EVD alive while it sleeps).  All provider state is guarded by one lock
// (ProviderLock); only evd_wait and cno_wait drop it while they sleep.
//
// Connection management goes through libkdat (/dev/kdat: kernel EP state machine on rdma_cm).
// Everything that moves data is behind DataPath (data_path.hpp), one per IA.
#pragma once

// The DAT headers take what they need from their includer: the socket types
// (dat_ib_extensions.h: sockaddr_in6) and udat.h (dat_registry.h, dat_ib_extensions.h).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
// (after the socket types)
#include <dat2/udat.h>
// (after udat.h)
#include <dat2/dat_ib_extensions.h>
#include <dat2/dat_registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <kdat/kdat.hpp>
#include <kdat/user_qp.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kdat::dapl {

class DataPath;
class QueuePair;

inline constexpr DAT_RETURN error(DAT_RETURN type, DAT_RETURN subtype = 0) {
  return DAT_CLASS_ERROR | type | subtype;
}

// The IB extension's memory privilege, remote atomics, as one of DAT's (another enumeration).
inline constexpr auto kPrivRemoteAtomic =
    static_cast<DAT_MEM_PRIV_FLAGS>(DAT_IB_MEM_PRIV_REMOTE_ATOMIC);

// A failure carrying a DAT return code, thrown inside the provider and turned into the return
// value at the C boundary (guard()).
struct Failure {
  DAT_RETURN code;
};
[[noreturn]] inline void fail(DAT_RETURN type, DAT_RETURN subtype = 0) {
  throw Failure{error(type, subtype)};
}

// One registered provider instance: a dat.conf line naming this library.
struct Instance {
  DAT_PROVIDER provider{};
  DAT_PROVIDER_INFO info{};
  std::string name;         // the IA name (dat.conf's first field), provider.device_name
  std::string params;       // dat.conf's ia_params (see README: "NETDEV|IP [device=PATH]")
  bool registered = false;  // in libdat2's dynamic registry (dat_provider_fini takes it out)
};

struct Ia;

// The IB extension's counters of an IA, EP or EVD (dat_ib_extensions.h: DCNT_IA_*, DCNT_EP_*,
// DCNT_EVD_*), for dat_ib_query_counters and dat_ib_print_counters.  Counted where the provider
// sees the thing happen (README: "IB extensions"); the others stay 0.
template <std::size_t N>
using Counters = std::array<std::uint64_t, N>;

struct Object {
  Object() = default;
  Object(const Object &) = delete;
  Object &operator=(const Object &) = delete;
  virtual ~Object() = default;

  DAT_HANDLE handle = nullptr;
  DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_IA;
  DAT_CONTEXT context{};
  Ia *ia = nullptr;  // the owning IA (itself for an IA)
};

// ---- handle table (handles.cpp)

// The provider's one lock.  Every post and dequeue takes it and does little else, and an
// uncontended std::mutex (glibc's pthread_mutex_lock and unlock, which look at the mutex's kind
// on every call) cost 55 instructions a call, a third of a post's own cost.  This is the
// three-state futex lock (0 free, 1 held, 2 held with sleepers; Drepper, "Futexes Are
// Tricky"): uncontended, one atomic instruction each way, inline; contended, waiters sleep in
// the kernel as with a mutex (the lock is held across ioctls that may block).
class ProviderLock {
 public:
  void lock() {
    std::uint32_t seen = kFree;
    if (!state_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      lock_contended(seen);
  }
  bool try_lock() {
    std::uint32_t seen = kFree;
    return state_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) wake_one();
  }

 private:
  static constexpr std::uint32_t kFree = 0;
  static constexpr std::uint32_t kHeld = 1;
  static constexpr std::uint32_t kSleepers = 2;
  void lock_contended(std::uint32_t seen);
  void wake_one();
  std::atomic<std::uint32_t> state_{kFree};
};

// Everything the provider does holds this lock (inline: every post and dequeue takes it).  A call
// that never lets go of it before it returns (posts, dequeues) holds a ProviderGuard, which
// keeps no "owns" flag to test on the way out; one that sleeps holds lock_provider()'s.
extern ProviderLock provider_lock;
inline std::unique_lock<ProviderLock> lock_provider() { return std::unique_lock(provider_lock); }
using ProviderGuard = std::lock_guard<ProviderLock>;

// Registers `object` under a new handle owned by `instance`; sets object->handle.
DAT_HANDLE publish(const Instance &instance, DAT_HANDLE_TYPE type, std::shared_ptr<Object> object);
// The object behind `handle` if it is a live handle of this library of type `type`; otherwise
// Failure(DAT_INVALID_HANDLE, subtype).
// A handle is the address of a Slot in one of handles.cpp's chunks.  The lookup is inline (every
// post and dequeue makes one): it tries the chunk found last (a data path names the same few
// objects over and over) and searches the chunks only when the handle is not in it.  Slots of
// the last chunk not handed out yet are never live, so lookups of them fail like those of
// retired slots.  Caller holds the provider lock (last_start).
namespace handle_slots {
inline constexpr std::uint32_t kLive = 0x6b646174;  // "kdat"
inline constexpr std::size_t kChunk = 256;
struct Slot {
  const DAT_PROVIDER *provider = nullptr;  // must stay the first member
  std::uint32_t magic = 0;
  DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_IA;
  std::shared_ptr<Object> object;
};
static_assert(offsetof(Slot, provider) == 0);
inline constexpr std::uintptr_t kChunkBytes = kChunk * sizeof(Slot);
extern std::uintptr_t last_start;  // the chunk found last (0: none yet)
Slot *slot_of_search(DAT_HANDLE handle);
// The slot `handle` names if it is the address of one of ours, else nullptr.
inline Slot *slot_of(DAT_HANDLE handle) {
  // (an address below last_start wraps to an offset past the chunk)
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(handle) - last_start;
  if (last_start == 0 || offset >= kChunkBytes) return slot_of_search(handle);
  if (offset % sizeof(Slot) != 0) return nullptr;
  return static_cast<Slot *>(handle);
}
}  // namespace handle_slots

// Always inline: every DAT call starts here, the data-path posts included, and the compiler
// stopped inlining it into a post's large body by itself.
[[gnu::always_inline]] inline Object &lookup(DAT_HANDLE handle, DAT_HANDLE_TYPE type,
                                             DAT_RETURN subtype) {
  const handle_slots::Slot *s = handle_slots::slot_of(handle);
  if (s == nullptr || s->magic != handle_slots::kLive || s->type != type || !s->object)
    fail(DAT_INVALID_HANDLE, subtype);
  return *s->object;
}
template <typename T>
[[gnu::always_inline]] inline T &lookup_as(DAT_HANDLE handle, DAT_RETURN subtype) {
  return static_cast<T &>(lookup(handle, T::kType, subtype));
}
// Any live object (for the context calls and get_handle_type).
Object &lookup_any(DAT_HANDLE handle);
std::shared_ptr<Object> share(DAT_HANDLE handle);
// Retires the handle: later lookups fail; the object dies with its last shared_ptr.
void retire(DAT_HANDLE handle);

// ---- the objects

// An EVD's local queue: a FIFO of DAT events in a ring that grows by doubling and never shrinks.
// DAT_EVENT is about 200 bytes, so std::deque (512-byte blocks) allocated on nearly every push;
// the DTO reap path pushes and pops one event per completion and must not touch the allocator.
class EventQueue {
 public:
  [[nodiscard]] bool empty() const { return count_ == 0; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] const DAT_EVENT &front() const { return ring_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) & (ring_.size() - 1);
    --count_;
  }
  void push_back(const DAT_EVENT &event) {
    make_room();
    ring_[(head_ + count_) & (ring_.size() - 1)] = event;
    ++count_;
  }
  void push_front(const DAT_EVENT &event) {
    make_room();
    head_ = (head_ + ring_.size() - 1) & (ring_.size() - 1);
    ring_[head_] = event;
    ++count_;
  }

 private:
  void make_room() {
    if (count_ < ring_.size()) return;
    std::vector<DAT_EVENT> bigger(ring_.empty() ? 16 : 2 * ring_.size());
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
    ring_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<DAT_EVENT> ring_;  // size 0 or a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

// The data path's completion queue of a DTO EVD (data_path.cpp).
struct Cq;

struct Evd;
struct Ep;
struct Pz;
struct Cno;

class ProtectionDomain;
class MemoryRegion;
class MemoryWindow;
class SharedReceiveQueue;

struct Pz : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_PZ;
  ~Pz() override;
  int users = 0;                         // EPs and LMRs made with it
  std::unique_ptr<ProtectionDomain> pd;  // the data path's; may be null
};

// A shared receive queue (dat_srq_create): its EPs (dat_ep_create_with_srq) take their
// receives from it, which only dat_srq_post_recv posts.
struct Srq : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_SRQ;
  ~Srq() override;
  Pz *pz = nullptr;
  DAT_SRQ_ATTR attr{};
  std::unique_ptr<SharedReceiveQueue> queue;  // the data path's
  std::vector<Ep *> eps;                      // the EPs made with it (srq_free refuses while any)
};

struct Cno : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_CNO;
  UniqueFd wake;  // eventfd: evd_post_se on a member EVD, cno_trigger
  DAT_OS_WAIT_PROXY_AGENT agent{};
  std::unordered_set<Evd *> evds;
  int waiters = 0;
};

struct Evd : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_EVD;
  DAT_EVD_FLAGS flags{};
  DAT_COUNT qlen = 0;
  std::optional<kdat::Evd> kernel;  // connection and CR events (a kdat event ring)
  EventQueue local;                 // software events; DTO completions once the data path exists
  Cq *cq = nullptr;                 // the data path's CQ of this EVD, while it has one
  UniqueFd wake;                    // eventfd signalled when `local` grows
  Cno *cno = nullptr;
  bool enabled = true;
  bool waitable = true;
  int users = 0;       // EPs, PSPs and RSPs that feed it, IA async
  int waiters = 0;     // threads in evd_wait
  int connecting = 0;  // user EPs whose active connect waits on this EVD (pump_connects)
  // evd_wait's fds to sleep on, kept for their capacity: a wait that sleeps allocates nothing
  // (one waiter at a time; it stays alive while it sleeps).
  std::vector<pollfd> wait_fds;
  // Kernel events held back, in order, behind a DISCONNECTED whose EP still has DTOs on this EVD's
  // CQ that its QP's ERR has not flushed yet: they are delivered first (dat_ep_disconnect(3DAT)).
  struct Held {
    const Ep *ep = nullptr;  // whose flushes it waits for; null: none (or the EP was freed)
    DAT_EVENT event{};
    std::chrono::steady_clock::time_point since{};
  };
  std::deque<Held> held;
  std::chrono::nanoseconds ends_checked{};  // evd_dequeue's last flush_ended_eps (coarse_now)
  Counters<DCNT_EVD_ALL_COUNTERS> counters{};
};

// What one exchange of a UD EP left (DAT's "CM object" of a DAT_IB_UD_CONNECTION_EVENT_*): the
// event's private data, valid until dat_ib_ud_cm_free names it (the extension event's context
// points here) or the EP is freed.  Several exchanges' events may be pending at once.
struct UdExchange {
  std::vector<std::byte> private_data;
};

struct Ep : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_EP;
  explicit Ep(kdat::Endpoint endpoint) : own(std::move(endpoint)) {}
  explicit Ep(kdat::UserEndpoint endpoint) : user(std::move(endpoint)) {}
  // Exactly one is set: a kernel-QP EP (no data path) or a user-owned QP (the data path).
  std::optional<kdat::Endpoint> own;
  std::optional<kdat::UserEndpoint> user;
  kdat::Endpoint &kernel() { return user ? user->endpoint() : *own; }
  Pz *pz = nullptr;
  Srq *srq = nullptr;  // where its receives come from (dat_ep_create_with_srq); else its QP's own
  Evd *recv_evd = nullptr;
  Evd *request_evd = nullptr;
  Evd *connect_evd = nullptr;
  DAT_EP_ATTR attr{};
  std::unique_ptr<QueuePair> qp;
  std::vector<std::byte> event_private_data;  // of the last connection event (DAT lifetime rule)
  std::uint32_t kernel_handle = 0;            // its key in Ia::eps (kernel() says 0 once freed)
  Evd *pumped = nullptr;                      // connect_evd while counted in its `connecting`
  sockaddr_storage local_address{};
  sockaddr_storage remote_address{};
  bool active = false;  // its connection was asked for by ep_connect/dup_connect (the counters)
  bool ud = false;      // DAT_IB_SERVICE_TYPE_UD: a user UD QP, exchanges instead of connections
  std::vector<std::unique_ptr<UdExchange>> ud_exchanges;  // not yet dat_ib_ud_cm_free'd
  Counters<DCNT_EP_ALL_COUNTERS> counters{};
};

struct Psp : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_PSP;
  explicit Psp(kdat::Psp p) : kernel(std::move(p)) {}
  kdat::Psp kernel;
  DAT_CONN_QUAL conn_qual = 0;
  Evd *evd = nullptr;
  DAT_PSP_FLAGS flags{};
};

struct Rsp : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_RSP;
  explicit Rsp(kdat::Rsp r) : kernel(std::move(r)) {}
  kdat::Rsp kernel;
  DAT_CONN_QUAL conn_qual = 0;
  Evd *evd = nullptr;
  DAT_EP_HANDLE ep = nullptr;
};

struct Cr : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_CR;
  explicit Cr(kdat::ConnectionRequest r) : kernel(std::move(r)) {}
  kdat::ConnectionRequest kernel;
  DAT_HANDLE sp = nullptr;
  DAT_CONN_QUAL conn_qual = 0;
  DAT_EP_HANDLE ep = nullptr;        // the EP the request names (RSP, provider PSP)
  bool provider_ep = false;          // ...made by the provider for a provider-flag PSP
  std::optional<kdat::CrInfo> info;  // cr_query's answer, fetched once
  sockaddr_storage remote_address{};
};

struct Lmr : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_LMR;
  ~Lmr() override;
  std::unique_ptr<MemoryRegion> region;
  Pz *pz = nullptr;
  void *address = nullptr;
  DAT_VLEN length = 0;
  DAT_MEM_PRIV_FLAGS privileges{};
  DAT_LMR_CONTEXT lmr_context = 0;
  DAT_RMR_CONTEXT rmr_context = 0;
  DAT_VLEN registered_length = 0;
  DAT_VADDR registered_address = 0;
  // Whether `t` names this LMR (its LMR context) and lies within what it registered.
  [[nodiscard]] bool holds(const DAT_LMR_TRIPLET &t) const {
    return t.lmr_context == lmr_context && within(t);
  }
  // Whether `t`'s bytes lie within what this LMR registered (whatever context `t` names).
  [[nodiscard]] bool within(const DAT_LMR_TRIPLET &t) const {
    const DAT_VADDR offset = t.virtual_address - registered_address;
    return t.virtual_address >= registered_address && offset <= registered_length &&
           t.segment_length <= registered_length - offset;
  }
};

// A memory window (dat_rmr_create, dat_rmr_create_for_ep): what dat_rmr_bind bound it to last.
struct Rmr : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_RMR;
  ~Rmr() override;
  std::unique_ptr<MemoryWindow> window;
  Pz *pz = nullptr;
  DAT_RMR_SCOPE scope = DAT_RMR_SCOPE_PZ;  // DAT_RMR_SCOPE_EP: made by rmr_create_for_ep
  DAT_LMR_TRIPLET target{};                // segment_length 0: unbound
  DAT_MEM_PRIV_FLAGS privileges{};
  DAT_RMR_CONTEXT context = 0;
  const Ep *bound_ep = nullptr;  // the EP that bound it last (a type 2 window answers only there)
};

// The /dev/kdat file that the IAs of one device path in this process share: one kernel owner,
// whose handles name the EPs of all of them.  So an EP may take another of these IAs' EVDs for
// its connection events (DAT allows it; dapltest's limit tests with -w do it).  Lives while an
// IA uses it.
struct KernelFile {
  explicit KernelFile(const std::string &path) : device(path) {}
  kdat::Device device;
  std::uint32_t abi = 0;  // the module's KDAT_ABI_VERSION, once asked (offers_ud)
  // kernel handle -> provider object, to translate events (whichever IA's EVD they come on)
  std::unordered_map<std::uint32_t, Ep *> eps;
  // EPs freed while connected: their DISCONNECTED is still to be taken, and names the freed
  // DAT handle, as over DAPL (ep_free).  An entry goes when its event is translated.
  std::unordered_map<std::uint32_t, DAT_EP_HANDLE> freed_connected_eps;
};

struct Ia : Object {
  static constexpr DAT_HANDLE_TYPE kType = DAT_HANDLE_TYPE_IA;
  Ia(const Instance &inst, std::shared_ptr<KernelFile> kernel_file, std::string_view name,
     kdat::Ia::PrivateData pdata);
  ~Ia() override;

  const Instance *instance;
  std::shared_ptr<KernelFile> file;
  kdat::Ia kernel;
  IaAttributes attributes;
  sockaddr_storage address{};
  std::unique_ptr<DataPath> data_path;
  Evd *async_evd = nullptr;
  bool own_async_evd = false;
  std::unordered_set<Object *> children;
  // kernel handle -> provider object, to translate events
  std::unordered_map<std::uint32_t, Evd *> evds;
  std::vector<Evd *> connecting_evds;  // the EVDs whose `connecting` is not 0
  std::unordered_map<std::uint32_t, Object *> service_points;
  // ia_query's provider-specific attributes: the consumer keeps pointers into them while the
  // IA is open, so they live here.
  std::string transport_mtu;
  std::array<DAT_NAMED_ATTR, 10> provider_specific{};
  Counters<DCNT_IA_ALL_COUNTERS> counters{};
};

// The LMR of `ia` that holds the segment `t` (by its LMR context); nullptr if none does.
inline const Lmr *lmr_holding(const Ia &ia, const DAT_LMR_TRIPLET &t) {
  for (const Object *o : ia.children) {
    if (o->type != DAT_HANDLE_TYPE_LMR) continue;
    const auto &lmr = static_cast<const Lmr &>(*o);
    if (lmr.holds(t)) return &lmr;
  }
  return nullptr;
}

// Creates a child object of `ia`, publishes it, and returns it.
template <typename T, typename... Args>
T &make_child(Ia &ia, Args &&...args) {
  auto object = std::make_shared<T>(std::forward<Args>(args)...);
  T &ref = *object;
  ref.ia = &ia;
  publish(*ia.instance, T::kType, std::move(object));
  ia.children.insert(&ref);
  return ref;
}
// Removes a child from its IA's books and retires its handle.
void drop_child(Object &object);

// ---- helpers

// Why a call failed, for the person running the program (provider.cpp).  Out of line and cold:
// the entry points pay for them only when they fail.
//   report_failure: the reason behind every failed call, on stderr when DAPL_KDAT_DEBUG asks.
//   report_unusable: a reason no program can work past (no kdat module, no permission on the
//   device node, a module that does not speak libkdat's ABI), on stderr once per process.
[[gnu::cold, gnu::noinline]] void report_failure(const char *call, DAT_RETURN code,
                                                 const char *reason) noexcept;
[[gnu::cold, gnu::noinline]] void report_unusable(const kdat::Error &error) noexcept;

// The C boundary: runs `body`, mapping Failure, kdat::Error and allocation failure to a
// DAT_RETURN, and reports why (report_failure; `call` is the entry point's name).  Never lets an
// exception out.  Always inline: it is every entry point's frame (the data path's posts must stay
// one function; see post_to).
template <typename Body>
[[gnu::always_inline]] inline DAT_RETURN guard(Body &&body,
                                               const char *call = __builtin_FUNCTION()) noexcept {
  try {
    return body();
  } catch (const Failure &f) {
    report_failure(call, f.code, nullptr);
    return f.code;
  } catch (const kdat::Error &e) {
    report_failure(call, e.code().value, e.what());
    return e.code().value;
  } catch (const std::bad_alloc &) {
    report_failure(call, error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY), "out of memory");
    return error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  } catch (const std::exception &e) {
    report_failure(call, error(DAT_INTERNAL_ERROR), e.what());
    return error(DAT_INTERNAL_ERROR);
  } catch (...) {
    report_failure(call, error(DAT_INTERNAL_ERROR), "an unknown exception");
    return error(DAT_INTERNAL_ERROR);
  }
}

// sockaddr <-> kdat::Address.  to_address: Failure(DAT_INVALID_ADDRESS) for other families.
kdat::Address to_address(const sockaddr *addr);
void to_sockaddr(const kdat::Address &address, sockaddr_storage &out);

// Private data a consumer hands over: (size, pointer) checked as DAT demands.
kdat::PrivateDataView private_data(DAT_COUNT size, const void *data, DAT_RETURN arg);

// Event translation (evd.cpp): the DAT form of a kdat event taken from `evd`.
void translate(Evd &evd, const kdat::Event &event, DAT_EVENT &out);
// A user EP's active connect has begun (watch) or is no longer pending (unwatch): its
// connect EVD is pumped by waits elsewhere meanwhile (pump_connects in evd.cpp).
void watch_connect(Ep &ep);
void unwatch_connect(Ep &ep);
// `ep` is freed or reset: events held for its flushes wait no longer.
void unhold(Ep &ep);
// Frees an EVD.  quiet (abrupt IA close): no errors, the kernel EVD goes with the IA.
void free_evd(Evd &evd, bool quiet = false);
// Frees an EP and everything that must go with it (evd refcounts, PZ).
void free_ep(Ep &ep);
void remember_freed_connection(Ia &ia, std::uint32_t kernel_handle, DAT_EP_HANDLE handle);
// Wraps a kernel EP the provider made for a provider-flag PSP.
Ep &adopt_ep(Ia &ia, std::uint32_t handle);

// The IA calls the IB extension's open and close query share with dat_ia_open/close (provider.cpp);
// the caller holds the provider lock.
// A new IA of the dat.conf entry named `name`, without an async EVD (Failure as dat_ia_open).
Ia &open_ia(const char *name);
// Frees everything `ia` owns and closes it (abrupt); refused while a thread waits on its EVDs.
void close_ia(Ia &ia);
// dat_ia_query's attributes of `ia` (masks 0: not filled).
void query_ia(Ia &ia, DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
              DAT_PROVIDER_ATTR_MASK provider_mask, DAT_PROVIDER_ATTR *provider_attr);

// Answers DAT_NOT_IMPLEMENTED with the signature of the table slot it fills.
template <typename F>
struct NotImplemented;
template <typename... A>
struct NotImplemented<DAT_RETURN (*)(A...)> {
  static DAT_RETURN call(A...) { return error(DAT_NOT_IMPLEMENTED); }
};
#define KDAT_NOT_IMPLEMENTED(p, field) (p).field = &NotImplemented<decltype((p).field)>::call

// Entry points, grouped by unit; each returns a DAT_RETURN and never throws.
void fill_provider_table(DAT_PROVIDER &provider);
void fill_evd_table(DAT_PROVIDER &p);
void fill_connection_table(DAT_PROVIDER &p);
void fill_data_table(DAT_PROVIDER &p);
// Queues `event` on `evd`'s local queue and wakes its waiters (and its CNO's).
void queue_event(Evd &evd, const DAT_EVENT &event);
void fill_srq_table(DAT_PROVIDER &p);
void fill_extension_table(DAT_PROVIDER &p);

}  // namespace kdat::dapl

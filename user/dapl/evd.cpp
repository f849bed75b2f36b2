// EVDs and CNOs.
//
// An EVD with the CONNECTION or CR flag owns a kdat EVD in ring mode: connection and CR events
// come from the kernel's ring.  Every EVD also has a local queue (software events from
// evd_post_se; DTO completions once the data path fills it) with an eventfd that wakes waiters of
// software events and evd_set_unwaitable.  A dequeue that finds nothing queued (locally or held)
// takes the CQ's next completion straight into the consumer's event (DataPath::take_completion).
// evd_wait sleeps in ppoll on the ring's fd, the eventfd and the data path's completion channel fd
// (its CQ armed first: data_path.hpp), with the provider lock dropped; the path that finds an event
// at once makes no system call.
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {
namespace {

using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC_COARSE: the vDSO answers it from memory whatever the clocksource.  steady_clock
// reads the clocksource's counter, which on the TCG guest's HPET costs 1.2 us a call (0.07 for
// the coarse clock): more than an empty evd_dequeue in a polling loop can afford.
std::chrono::nanoseconds coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

constexpr DAT_EVD_FLAGS kKnownFlags = static_cast<DAT_EVD_FLAGS>(
    DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG |
    DAT_EVD_RMR_BIND_FLAG | DAT_EVD_ASYNC_FLAG);

void signal(int fd) {
  if (fd < 0) return;
  const std::uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}

void drain(int fd) {
  std::uint64_t value = 0;
  (void)!::read(fd, &value, sizeof(value));
}

UniqueFd make_eventfd() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (fd.get() < 0) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  return fd;
}

// A DAT timeout (µs; DAT_TIMEOUT_INFINITE = none), counted from the first sleep: a wait that finds
// its event at once reads no clock (1.2 µs a read on the TCG guest's HPET, see coarse_now), and
// the work before that first sleep is microseconds, so the wait never ends early.
class Deadline {
 public:
  explicit Deadline(DAT_TIMEOUT timeout) : timeout_(timeout) {}

  // The time left (zero once past), at most `cap`; nullopt: no limit.
  std::optional<std::chrono::microseconds> left(std::chrono::microseconds cap) {
    if (timeout_ == DAT_TIMEOUT_INFINITE) {
      if (cap == std::chrono::microseconds::max()) return std::nullopt;
      return cap;
    }
    const auto timeout = std::chrono::microseconds(timeout_);
    if (!at_) {
      at_ = Clock::now() + timeout;
      return std::min(cap, timeout);
    }
    const auto now = Clock::now();
    if (now >= *at_) return std::chrono::microseconds::zero();
    return std::min(cap, std::chrono::duration_cast<std::chrono::microseconds>(*at_ - now));
  }

 private:
  DAT_TIMEOUT timeout_;
  std::optional<Clock::time_point> at_;
};

// ppoll on `fds` until the deadline, for at most `cap`; false once the deadline has passed.
// EINTR: Failure(DAT_INTERRUPTED_CALL).
bool sleep_on(std::vector<pollfd> &fds, Deadline &deadline,
              std::chrono::microseconds cap = std::chrono::microseconds::max()) {
  timespec ts{};
  timespec *tsp = nullptr;
  const auto left = deadline.left(cap);
  if (left) {
    if (*left == std::chrono::microseconds::zero()) return false;
    ts.tv_sec = static_cast<time_t>(left->count() / 1000000);
    ts.tv_nsec = static_cast<long>((left->count() % 1000000) * 1000);
    tsp = &ts;
  }
  const int n = ::ppoll(fds.data(), fds.size(), tsp, nullptr);
  if (n < 0 && errno == EINTR) fail(DAT_INTERRUPTED_CALL);
  if (n < 0) fail(DAT_INTERNAL_ERROR);
  return true;
}

// A device that never flushes the DTOs of a QP in ERR does not hold a DISCONNECTED for ever.
constexpr auto kFlushLimit = std::chrono::seconds(10);

// A peer may end a connection while a thread sleeps on the EP's DTO EVD and nobody takes the
// DISCONNECTED from its connect EVD.  libdaplofa's CM thread moves the QP to ERR at once, so the
// posted requests flush and the waiter wakes; this provider has no thread of its own, so a DTO
// wait reads the states of the EVD's user EPs in the shared table (no system call) before it
// sleeps and at least every kEndWatch while it does (an empty dequeue: every kEndWatch), and
// moves the QP of an EP that ended to ERR (UserEndpoint::sync; once per connection).  True
// while one of them may still end.
constexpr auto kEndWatch = std::chrono::milliseconds(100);

// While an EP of the IA holds its first requests (DataPath::holding), a waiter wakes this often:
// the receive that releases them may complete on another EVD's CQ, which does not wake it.
constexpr auto kHoldPoll = std::chrono::milliseconds(1);

bool flush_ended_eps(Evd &evd) {
  if (evd.cq == nullptr) return false;
  bool watch = false;
  for (auto &[handle, ep] : evd.ia->file->eps) {
    if (!ep->user || (ep->recv_evd != &evd && ep->request_evd != &evd)) continue;
    const kdat::EpState state = ep->user->endpoint().state();
    if (!kdat::has_ended(state)) {
      watch = watch || kdat::has_connection(state) || kdat::is_accepting(state) ||
              kdat::is_connecting(state);
      continue;
    }
    try {
      ep->user->sync();
    } catch (const kdat::Error &) {
      // The QP could not be moved (the device is gone): nothing is left to flush.
    }
  }
  return watch;
}

// Moves the held events that wait for nothing more -- their EP's flushes arrived (polled into
// evd.local ahead of them), the EP was freed, or kFlushLimit passed -- to evd.local, in order.
void release_held(Evd &evd) {
  if (evd.held.empty()) return;
  (void)evd.ia->data_path->poll_completions(evd);
  const auto now = Clock::now();
  while (!evd.held.empty()) {
    const Evd::Held &first = evd.held.front();
    if (first.ep != nullptr && now - first.since < kFlushLimit &&
        evd.ia->data_path->outstanding(*first.ep, evd))
      break;
    evd.local.push_back(first.event);
    evd.held.pop_front();
  }
}

// Events ready now, without polling the CQ.
std::size_t queued(Evd &evd) { return evd.local.size() + (evd.kernel ? evd.kernel->pending() : 0); }

std::size_t available(Evd &evd) {
  (void)evd.ia->data_path->poll_completions(evd);
  release_held(evd);
  return queued(evd);
}

// Queues the DAT form of a kernel event just taken from `evd`.  libkdat moved the QP of an EP that
// ended to ERR while taking it: the flushed DTOs of that EP on this EVD come first, so a
// DISCONNECTED never overtakes them on a shared EVD (dat_ep_disconnect(3DAT) puts "all successful
// Completion events of in-progress DTOs" before the Disconnect Completion event; kdat puts flushed
// ones there too).  Those already in the CQ are polled now; if some are still to come (rxe flushes
// from a tasklet), the DISCONNECTED -- and every kernel event after it, to keep their order -- is
// held until they are in (release_held).  Holding instead of waiting here keeps evd_wait's timeout
// and evd_dequeue's "never blocks".
void accept(Evd &evd, const kdat::Event &event) {
  DAT_EVENT translated{};
  translate(evd, event, translated);
  const Ep *flushing = nullptr;
  if (event.is_connection_event()) {
    const auto it = evd.ia->file->eps.find(event.ep);
    if (it != evd.ia->file->eps.end() && it->second->user) {
      Ep &ep = *it->second;
      const kdat::EpState state = ep.kernel().state();
      if (!kdat::is_connecting(state)) unwatch_connect(ep);
      if (kdat::has_ended(state)) {
        (void)evd.ia->data_path->poll_completions(evd);
        if (evd.ia->data_path->outstanding(ep, evd)) flushing = &ep;
      }
    }
  }
  if (flushing == nullptr && evd.held.empty())
    evd.local.push_back(translated);
  else
    evd.held.push_back({flushing, translated, Clock::now()});
}

// A user-owned QP's active connect completes only when libkdat takes the REP from the EP's
// connect EVD (user_qp.hpp).  A consumer may be waiting elsewhere -- e.g. on the passive side's
// EVD in the same process -- so every wait and dequeue first moves the events of connect EVDs
// of actively connecting user EPs (nobody waiting on them) to those EVDs' local queues, and
// watches their ring fds while it sleeps.  Those EVDs are counted as connects begin and end
// (watch_connect), so a wait costs one step per such EVD, not one per EP.
void pump_connects(Ia &ia, const Evd *self, std::vector<pollfd> *fds) {
  // Backwards by index, with no copy: accept() may unwatch an EVD, erasing it, which moves the
  // later elements down one place -- every one not yet visited stays below i (one may be seen
  // twice, which only pumps it again).
  auto &evds = ia.connecting_evds;
  for (std::size_t i = evds.size(); i-- > 0;) {
    if (i >= evds.size()) continue;
    Evd *other = evds[i];
    if (other == self || !other->kernel || other->waiters > 0) continue;
    for (std::uint32_t n = other->kernel->pending(); n > 0; --n) {
      auto event = other->kernel->dequeue();
      if (!event) continue;  // libkdat's own (the REP): handled inside dequeue()
      accept(*other, *event);
      signal(other->wake.get());
      if (other->cno != nullptr) signal(other->cno->wake.get());
    }
    if (fds != nullptr) fds->push_back({other->kernel->fd(), POLLIN, 0});
  }
}

// The IA's CM counters of a connection event: how connections were made, refused or lost.
void count_connection_event(Ia &ia, const Ep *ep, DAT_EVENT_NUMBER number) {
  auto &c = ia.counters;
  switch (number) {
    case DAT_CONNECTION_EVENT_ESTABLISHED:
      ++c[ep != nullptr && ep->active ? DCNT_IA_CM_ACTIVE_EST : DCNT_IA_CM_PASSIVE_EST];
      break;
    case DAT_CONNECTION_EVENT_PEER_REJECTED: ++c[DCNT_IA_CM_USER_REJ_RX]; break;
    case DAT_CONNECTION_EVENT_NON_PEER_REJECTED:
      ++c[DCNT_IA_CM_ERR];
      ++c[DCNT_IA_CM_ERR_REFUSED];
      break;
    case DAT_CONNECTION_EVENT_TIMED_OUT:
      ++c[DCNT_IA_CM_ERR];
      ++c[DCNT_IA_CM_ERR_TIMEOUT];
      break;
    case DAT_CONNECTION_EVENT_BROKEN:
    case DAT_CONNECTION_EVENT_UNREACHABLE: ++c[DCNT_IA_CM_ERR]; break;
    default: break;
  }
}

}  // namespace

void watch_connect(Ep &ep) {
  if (!ep.user || ep.pumped != nullptr || ep.connect_evd == nullptr) return;
  ep.pumped = ep.connect_evd;
  if (ep.pumped->connecting++ == 0) ep.ia->connecting_evds.push_back(ep.pumped);
}

void unwatch_connect(Ep &ep) {
  Evd *evd = std::exchange(ep.pumped, nullptr);
  if (evd != nullptr && --evd->connecting == 0) std::erase(ep.ia->connecting_evds, evd);
}

void unhold(Ep &ep) {
  for (auto &[handle, evd] : ep.ia->evds)
    for (Evd::Held &h : evd->held)
      if (h.ep == &ep) h.ep = nullptr;
}

namespace {

// Takes the oldest event (local first); false if there was none after all (or the one the
// kernel had is held: accept()).
bool take(Evd &evd, DAT_EVENT &out) {
  release_held(evd);
  if (evd.local.empty() && evd.kernel) {
    if (auto event = evd.kernel->dequeue()) accept(evd, *event);
  }
  if (evd.local.empty()) return false;
  out = evd.local.front();
  evd.local.pop_front();
  return true;
}

// Adds the fds a sleeper on `evd` waits on (its eventfd, its ring's fd, its CQ's channel, armed);
// returns the index of the channel's fd in `fds`, or -1 if the EVD has no CQ.
int append_fds(Evd &evd, std::vector<pollfd> &fds) {
  fds.push_back({evd.wake.get(), POLLIN, 0});
  if (evd.kernel) fds.push_back({evd.kernel->fd(), POLLIN, 0});
  const int cq = evd.ia->data_path->arm(evd);
  if (cq < 0) return -1;
  fds.push_back({cq, POLLIN, 0});
  return static_cast<int>(fds.size() - 1);
}

// After a sleep: takes the channel event of a CQ whose fd woke it, so that the next sleep arms
// the CQ again.
void take_notification(Evd &evd, const std::vector<pollfd> &fds, int cq_index) {
  if (cq_index >= 0 && (fds[static_cast<std::size_t>(cq_index)].revents & POLLIN))
    evd.ia->data_path->notified(evd);
}

DAT_RETURN evd_create(DAT_IA_HANDLE ia_handle, DAT_COUNT qlen, DAT_CNO_HANDLE cno_handle,
                      DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    if (qlen <= 0 || static_cast<std::uint32_t>(qlen) > ia.attributes.max_evd_qlen)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    Cno *cno = nullptr;
    if (cno_handle != DAT_HANDLE_NULL) {
      cno = &lookup_as<Cno>(cno_handle, DAT_INVALID_HANDLE_CNO);
      if (cno->ia != &ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    }
    if (flags == 0 || (flags & ~kKnownFlags) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    std::uint32_t kernel_flags = 0;
    if (flags & DAT_EVD_CONNECTION_FLAG) kernel_flags |= KDAT_EVD_CONNECTION;
    if (flags & DAT_EVD_CR_FLAG) kernel_flags |= KDAT_EVD_CR;
    auto wake = make_eventfd();
    std::optional<kdat::Evd> kernel;
    if (kernel_flags != 0)
      kernel.emplace(ia.kernel, static_cast<std::uint32_t>(qlen), kernel_flags);
    auto &evd = make_child<Evd>(ia);
    evd.flags = flags;
    evd.qlen = qlen;
    evd.wake = std::move(wake);
    evd.kernel = std::move(kernel);
    if (evd.kernel) ia.evds[evd.kernel->handle()] = &evd;
    ++ia.counters[DCNT_IA_EVD_CREATE];
    if (cno != nullptr) {
      evd.cno = cno;
      cno->evds.insert(&evd);
    }
    *out = evd.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN evd_query(DAT_EVD_HANDLE handle, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if ((mask & ~DAT_EVD_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = evd.ia->handle;
    param->evd_qlen = evd.qlen;
    param->evd_state = static_cast<DAT_EVD_STATE>(
        (evd.enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
        (evd.waitable ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE));
    param->cno_handle = evd.cno != nullptr ? evd.cno->handle : DAT_HANDLE_NULL;
    param->evd_flags = evd.flags;
    return DAT_SUCCESS;
  });
}

DAT_RETURN evd_modify_cno(DAT_EVD_HANDLE handle, DAT_CNO_HANDLE cno_handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    Cno *cno = nullptr;
    if (cno_handle != DAT_HANDLE_NULL) {
      cno = &lookup_as<Cno>(cno_handle, DAT_INVALID_HANDLE_CNO);
      if (cno->ia != evd.ia) fail(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    }
    if (evd.cno != nullptr) evd.cno->evds.erase(&evd);
    evd.cno = cno;
    if (cno != nullptr) cno->evds.insert(&evd);
    return DAT_SUCCESS;
  });
}

template <bool Enable>
DAT_RETURN evd_set_enabled(DAT_EVD_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST).enabled = Enable;
    return DAT_SUCCESS;
  });
}

template <bool Waitable>
DAT_RETURN evd_set_waitable(DAT_EVD_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    evd.waitable = Waitable;
    if (!Waitable) signal(evd.wake.get());  // a waiter returns DAT_INVALID_STATE
    return DAT_SUCCESS;
  });
}

DAT_RETURN evd_wait(DAT_EVD_HANDLE handle, DAT_TIMEOUT timeout, DAT_COUNT threshold,
                    DAT_EVENT *event, DAT_COUNT *nmore) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (threshold <= 0 || threshold > evd.qlen) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (event == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    if (!evd.waitable) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
    if (evd.waiters > 0) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
    std::shared_ptr<Object> keep;  // the EVD alive while the lock is dropped (taken then)
    ++evd.counters[DCNT_EVD_WAIT];
    ++evd.waiters;
    struct Leave {
      Evd &e;
      ~Leave() { --e.waiters; }
    } leave{evd};
    Deadline deadline(timeout);
    const auto need = static_cast<std::size_t>(threshold);
    for (;;) {
      if (!evd.waitable) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
      pump_connects(*evd.ia, &evd, nullptr);
      const std::size_t have = available(evd);
      if (have >= need && take(evd, *event)) {
        // What is left of what the poll just found (as libdaplofa: no second poll of the CQ).
        if (nmore != nullptr) *nmore = static_cast<DAT_COUNT>(queued(evd));
        return DAT_SUCCESS;
      }
      std::vector<pollfd> &fds = evd.wait_fds;
      fds.clear();
      const int cq_index = append_fds(evd, fds);
      // arm() may have found the completions that were missing
      if (available(evd) >= need) continue;
      pump_connects(*evd.ia, &evd, &fds);
      // (the CQ is armed: the flushes of a QP this moves to ERR wake the sleep below)
      const bool watch_ends = flush_ended_eps(evd);
      ++evd.counters[DCNT_EVD_WAIT_BLOCKED];
      if (!keep) keep = share(handle);
      lock.unlock();
      bool slept = false;
      try {
        // An event held for flushes is released by kFlushLimit even if no completion wakes us.
        if (evd.ia->data_path->holding())
          slept = sleep_on(fds, deadline, kHoldPoll);
        else if (!evd.held.empty())
          slept = sleep_on(fds, deadline, std::chrono::milliseconds(100));
        else if (watch_ends)
          slept = sleep_on(fds, deadline, kEndWatch);
        else
          slept = sleep_on(fds, deadline);
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
      if (!slept) fail(DAT_TIMEOUT_EXPIRED);
      ++evd.counters[DCNT_EVD_WAIT_NOTIFY];  // woken before the deadline
      if (fds[0].revents & POLLIN) drain(evd.wake.get());
      take_notification(evd, fds, cq_index);
      // The ring's fd stays readable once the kernel counted an overflow; if it woke us with
      // nothing in the ring, sleep in the kernel (which reports the overflow once) for a slice.
      if (evd.kernel && fds.size() > 1 && (fds[1].revents & POLLIN) && evd.kernel->pending() == 0) {
        lock.unlock();
        std::optional<kdat::Event> got;
        try {
          got = evd.kernel->try_wait(1, std::chrono::milliseconds(10));
        } catch (...) {
          lock.lock();
          throw;
        }
        lock.lock();
        // As every kernel event: behind the EP's flushes and any events held for them.
        if (got) accept(evd, *got);
      }
    }
  });
}

// An empty dequeue of a kernel-fed EVD (connection or CR events) gives up the CPU once, after
// dropping the provider lock.  Consumers such as dtestcm poll dequeue in a tight loop, and what
// they wait for is kernel work on the same machine -- ib_cm's and rdma_cm's workqueues, kdat's
// handlers -- that a spinning task holds off until its time slice ends; a yield lets a runnable
// worker go first and costs one syscall when none is.  DTO-only EVDs do not yield: their
// completions come from the device, not from a task waiting for this CPU.
DAT_RETURN evd_dequeue(DAT_EVD_HANDLE handle, DAT_EVENT *event) {
  bool yield = false;
  const DAT_RETURN ret = guard([&]() -> DAT_RETURN {
    const ProviderGuard lock(provider_lock);
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (event == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    ++evd.counters[DCNT_EVD_DEQUEUE];
    if (!evd.ia->connecting_evds.empty()) pump_connects(*evd.ia, &evd, nullptr);
    // As libdaplofa: an EVD that has a CQ (any flag besides SOFTWARE, CONNECTION and CR; not
    // the async EVD) answers a bare DAT_QUEUE_EMPTY, the others DAT_QUEUE_EMPTY with the
    // error class.  dtest -p polls its DTO EVDs with `== DAT_QUEUE_EMPTY`.
    constexpr int no_cq = DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG | DAT_EVD_CR_FLAG;
    const bool has_cq = (evd.flags & DAT_EVD_ASYNC_FLAG) == 0 && (evd.flags & ~no_cq) != 0;
    // The DTO completion a polling consumer waits for goes from the CQ straight into its event
    // when nothing is queued before it; otherwise through evd.local (take()).
    const int direct = evd.local.empty() && evd.held.empty()
                           ? evd.ia->data_path->take_completion(evd, *event)
                           : -1;
    const std::size_t polled =
        direct >= 0 ? static_cast<std::size_t>(direct) : evd.ia->data_path->poll_completions(evd);
    if (has_cq) {
      ++evd.counters[DCNT_EVD_DEQUEUE_POLL];
      if (polled > 0) ++evd.counters[DCNT_EVD_DEQUEUE_POLL_FOUND];
    }
    if (direct != 1 && !take(evd, *event)) {
      ++evd.counters[DCNT_EVD_DEQUEUE_NOT_FOUND];
      // A polling consumer waits for a peer that went away as a sleeping one does, at the
      // same pace (flush_ended_eps): the clock is read only when the EVD is empty, and it is
      // the coarse one (kEndWatch is 25 of its ticks or more).
      if (evd.cq != nullptr) {
        const auto now = coarse_now();
        if (now - evd.ends_checked >= kEndWatch) {
          evd.ends_checked = now;
          (void)flush_ended_eps(evd);
        }
      }
      yield = evd.kernel.has_value();
      return has_cq ? static_cast<DAT_RETURN>(DAT_QUEUE_EMPTY) : error(DAT_QUEUE_EMPTY);
    }
    ++evd.counters[DCNT_EVD_DEQUEUE_FOUND];
    return DAT_SUCCESS;
  });
  if (yield) sched_yield();
  return ret;
}

DAT_RETURN evd_post_se(DAT_EVD_HANDLE handle, const DAT_EVENT *event) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (event == nullptr || event->event_number != DAT_SOFTWARE_EVENT)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (evd.local.size() >= static_cast<std::size_t>(evd.qlen)) fail(DAT_QUEUE_FULL);
    DAT_EVENT copy = *event;
    copy.evd_handle = evd.handle;
    queue_event(evd, copy);
    return DAT_SUCCESS;
  });
}

DAT_RETURN evd_resize(DAT_EVD_HANDLE handle, DAT_COUNT qlen) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (qlen <= 0 || static_cast<std::uint32_t>(qlen) > evd.ia->attributes.max_evd_qlen)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (static_cast<std::size_t>(qlen) < available(evd)) fail(DAT_INVALID_STATE);
    // A kernel EVD's ring cannot grow: kdat has no resize.
    if (evd.kernel && static_cast<std::uint32_t>(qlen) > evd.kernel->qlen())
      fail(DAT_NOT_IMPLEMENTED);
    evd.qlen = qlen;
    return DAT_SUCCESS;
  });
}

DAT_RETURN evd_free(DAT_EVD_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &evd = lookup_as<Evd>(handle, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (evd.waiters > 0) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
    if (evd.users > 0 || evd.ia->async_evd == &evd)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
    ++evd.ia->counters[DCNT_IA_EVD_FREE];
    free_evd(evd);
    return DAT_SUCCESS;
  });
}

// ---- CNO

DAT_RETURN cno_create(DAT_IA_HANDLE ia_handle, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(ia_handle, DAT_INVALID_HANDLE_IA);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    auto wake = make_eventfd();
    auto &cno = make_child<Cno>(ia);
    cno.wake = std::move(wake);
    cno.agent = agent;
    *out = cno.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN cno_modify_agent(DAT_CNO_HANDLE handle, DAT_OS_WAIT_PROXY_AGENT agent) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    lookup_as<Cno>(handle, DAT_INVALID_HANDLE_CNO).agent = agent;
    return DAT_SUCCESS;
  });
}

DAT_RETURN cno_query(DAT_CNO_HANDLE handle, DAT_CNO_PARAM_MASK, DAT_CNO_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cno = lookup_as<Cno>(handle, DAT_INVALID_HANDLE_CNO);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    param->ia_handle = cno.ia->handle;
    param->proxy_type = DAT_PROXY_TYPE_AGENT;
    param->proxy.agent = cno.agent;
    return DAT_SUCCESS;
  });
}

DAT_RETURN cno_free(DAT_CNO_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cno = lookup_as<Cno>(handle, DAT_INVALID_HANDLE_CNO);
    if (!cno.evds.empty() || cno.waiters > 0) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
    drop_child(cno);
    return DAT_SUCCESS;
  });
}

// Waits until an enabled EVD of the CNO has an event and returns that EVD (the event stays).
DAT_RETURN cno_wait(DAT_CNO_HANDLE handle, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *out) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &cno = lookup_as<Cno>(handle, DAT_INVALID_HANDLE_CNO);
    if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    const auto keep = share(handle);
    ++cno.waiters;
    struct Leave {
      Cno &c;
      ~Leave() { --c.waiters; }
    } leave{cno};
    Deadline deadline(timeout);
    for (;;) {
      std::vector<pollfd> fds{{cno.wake.get(), POLLIN, 0}};
      std::vector<std::pair<Evd *, int>> cqs;  // each EVD's channel fd's index in fds
      bool holding = false;
      for (Evd *evd : cno.evds) {
        if (!evd->enabled) continue;
        holding = holding || evd->ia->data_path->holding();
        if (available(*evd) > 0) {
          *out = evd->handle;
          return DAT_SUCCESS;
        }
        cqs.emplace_back(evd, append_fds(*evd, fds));
        if (available(*evd) > 0) {  // arm() found completions
          *out = evd->handle;
          return DAT_SUCCESS;
        }
      }
      lock.unlock();
      bool slept = false;
      try {
        // Bounded slices: an EVD added to the CNO meanwhile is seen within 100 ms.
        slept = sleep_on(fds, deadline, holding ? kHoldPoll : std::chrono::milliseconds(100));
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
      if (!slept) fail(DAT_TIMEOUT_EXPIRED);
      drain(cno.wake.get());
      // The EVDs cannot have gone while the lock was dropped: an EVD of a CNO with a waiter is
      // still in cno.evds (evd_free takes it out under the lock), so check before touching one.
      for (const auto &[evd, index] : cqs)
        if (cno.evds.contains(evd)) take_notification(*evd, fds, index);
    }
  });
}

}  // namespace

void free_evd(Evd &evd, bool quiet) {
  Ia &ia = *evd.ia;
  if (evd.kernel) {
    const std::uint32_t k = evd.kernel->handle();
    if (!quiet) evd.kernel->free();  // else the kdat::Evd's destructor frees it, errors ignored
    ia.evds.erase(k);
  }
  ia.data_path->forget_evd(evd);
  if (evd.cno != nullptr) evd.cno->evds.erase(&evd);
  evd.cno = nullptr;
  drop_child(evd);
}

// An SRQ's EP whose connection ended takes no more of the SRQ's receives: the IA's async EVD
// gets DAT_ASYNC_ERROR_EP_BROKEN for it, as DAPL turns verbs' "last WQE reached" of an SRQ's QP
// into, and as dtestsrq waits for before it frees the EP.  rxe never raises that verbs event, so
// the provider says it at the end of the connection, when its QP goes to error (libkdat).
static void srq_ep_done(Ia &ia, const Ep &ep) {
  Evd *async = ia.async_evd;
  if (async == nullptr || async->local.size() >= static_cast<std::size_t>(async->qlen)) return;
  DAT_EVENT broken{};
  broken.event_number = DAT_ASYNC_ERROR_EP_BROKEN;
  broken.evd_handle = async->handle;
  broken.event_data.asynch_error_event_data.dat_handle = ep.handle;
  broken.event_data.asynch_error_event_data.reason = DAT_EP_TRANSFER_TO_ERROR;
  queue_event(*async, broken);
}

void queue_event(Evd &evd, const DAT_EVENT &event) {
  evd.local.push_back(event);
  signal(evd.wake.get());
  if (evd.cno != nullptr) signal(evd.cno->wake.get());
}

// A UD EP's exchange ended (the kernel's connection event carries the UD tail): the IB
// extension's DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED (our connect answered: DAT_IB_UD_REMOTE_AH;
// a request we accepted: DAT_IB_UD_PASSIVE_REMOTE_AH), _REJECT_EVENT (the peer consumer refused)
// or _ERROR_EVENT (unreachable, timed out).  The extension data names the peer: an AH for it
// (made on the EP's QP, NULL where the kernel had no address vector), its QPN and IA address;
// its context is the exchange's record, which keeps the private data until dat_ib_ud_cm_free.
static void translate_ud(Ia &ia, Ep *ep, const kdat::Event &event, DAT_EVENT &out) {
  const kdat::UdPeer &peer = *event.ud;
  DAT_IB_EXTENSION_EVENT_DATA ext{};
  bool established = false;
  switch (event.number) {
    case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED:
      established = true;
      out.event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
      ext.type = peer.passive ? DAT_IB_UD_PASSIVE_REMOTE_AH : DAT_IB_UD_REMOTE_AH;
      ext.status = DAT_OP_SUCCESS;
      ++ia.counters[peer.passive ? DCNT_IA_CM_PASSIVE_EST : DCNT_IA_CM_ACTIVE_EST];
      if (!peer.passive) ++ia.counters[DCNT_IA_CM_AH_RESOLVED];
      break;
    case KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED:
      out.event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_UD_CONNECTION_REJECT_EVENT);
      ext.type = DAT_IB_UD_CONNECT_REJECT;
      ext.status = DAT_IB_OP_ERR;
      ++ia.counters[DCNT_IA_CM_USER_REJ_RX];
      break;
    default:  // UNREACHABLE, TIMED_OUT (and anything else that ends an exchange)
      out.event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_UD_CONNECTION_ERROR_EVENT);
      ext.type = DAT_IB_UD_CONNECT_ERROR;
      ext.status = DAT_IB_OP_ERR;
      ++ia.counters[DCNT_IA_CM_ERR];
      if (event.number == KDAT_DAT_CONNECTION_EVENT_TIMED_OUT)
        ++ia.counters[DCNT_IA_CM_ERR_TIMEOUT];
      break;
  }
  ext.remote_ah.qpn = peer.qpn;
  sockaddr_storage address{};
  to_sockaddr(peer.address, address);
  static_assert(sizeof(ext.remote_ah.ia_addr) <= sizeof(address));
  std::memcpy(&ext.remote_ah.ia_addr, &address, sizeof(ext.remote_ah.ia_addr));
  auto &data = out.event_data.connect_event_data;
  if (ep != nullptr) {
    data.ep_handle = ep->handle;
    auto &exchange = *ep->ud_exchanges.emplace_back(std::make_unique<UdExchange>());
    exchange.private_data = event.private_data;
    data.private_data_size = static_cast<DAT_COUNT>(exchange.private_data.size());
    data.private_data = exchange.private_data.empty() ? nullptr : exchange.private_data.data();
    ext.context.as_ptr = &exchange;
    if (established && peer.ah_valid && ep->qp) {
      try {
        ext.remote_ah.ah = ep->qp->make_address_handle(peer);
      } catch (const Failure &) {
        // No AH, no way to send to the peer: the exchange failed after all.
        out.event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_UD_CONNECTION_ERROR_EVENT);
        ext.type = DAT_IB_UD_CONNECT_ERROR;
        ext.status = DAT_IB_OP_ERR;
      }
    }
  }
  static_assert(sizeof(ext) <= sizeof(out.event_extension_data));
  std::memcpy(out.event_extension_data, &ext, sizeof(ext));
}

void translate(Evd &evd, const kdat::Event &event, DAT_EVENT &out) {
  Ia &ia = *evd.ia;
  std::memset(&out, 0, sizeof(out));
  out.event_number = static_cast<DAT_EVENT_NUMBER>(event.number);
  out.evd_handle = evd.handle;
  if (event.is_connection_request() || event.is_connection_event())
    ++evd.counters[DCNT_EVD_CONN_CALLBACK];
  auto find_ep = [&](std::uint32_t k) -> Ep * {
    const auto it = ia.file->eps.find(k);
    return it != ia.file->eps.end() ? it->second : nullptr;
  };
  if (event.is_connection_request()) {
    const auto sp = ia.service_points.find(event.sp);
    auto &cr = make_child<Cr>(ia, kdat::ConnectionRequest(*evd.kernel, event));
    if (sp != ia.service_points.end()) {
      cr.sp = sp->second->handle;
      if (sp->second->type == DAT_HANDLE_TYPE_PSP)
        cr.conn_qual = static_cast<Psp *>(sp->second)->conn_qual;
      else
        cr.conn_qual = static_cast<Rsp *>(sp->second)->conn_qual;
    }
    if (event.ep != 0) {
      Ep *ep = find_ep(event.ep);
      if (ep == nullptr) {
        ep = &adopt_ep(ia, event.ep);
        cr.provider_ep = true;
      }
      cr.ep = ep->handle;
    }
    ++ia.counters[DCNT_IA_SP_CR];
    ++ia.counters[DCNT_IA_CM_REQ_RX];
    auto &data = out.event_data.cr_arrival_event_data;
    data.sp_handle.psp_handle = cr.sp;
    data.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia.address);
    data.conn_qual = cr.conn_qual;
    data.cr_handle = cr.handle;
    data.truncate_flag = DAT_FALSE;
  } else if (event.is_connection_event() && event.ud) {
    translate_ud(ia, find_ep(event.ep), event, out);
  } else if (event.is_connection_event()) {
    Ep *ep = find_ep(event.ep);
    count_connection_event(ia, ep, out.event_number);
    auto &data = out.event_data.connect_event_data;
    if (ep != nullptr) {
      ep->event_private_data = event.private_data;
      data.ep_handle = ep->handle;
      data.private_data_size = static_cast<DAT_COUNT>(ep->event_private_data.size());
      data.private_data = ep->event_private_data.empty() ? nullptr : ep->event_private_data.data();
    } else if (const auto freed = ia.file->freed_connected_eps.find(event.ep);
               freed != ia.file->freed_connected_eps.end()) {
      data.ep_handle = freed->second;  // the DISCONNECTED of an EP freed connected
      ia.file->freed_connected_eps.erase(freed);
    }
    if (ep != nullptr && ep->srq != nullptr &&
        (out.event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
         out.event_number == DAT_CONNECTION_EVENT_BROKEN))
      srq_ep_done(*ep->ia, *ep);
  } else if (event.is_dto_completion()) {
    auto &data = out.event_data.dto_completion_event_data;
    Ep *ep = find_ep(event.ep);
    data.ep_handle = ep != nullptr ? ep->handle : DAT_HANDLE_NULL;
    data.user_cookie.as_64 = event.cookie;
    data.status = static_cast<DAT_DTO_COMPLETION_STATUS>(event.dto_status);
    data.transfered_length = event.transfered_length;
  } else if ((event.number & 0xf000u) == 0x8000u) {  // DAT_ASYNC_ERROR_*
    Ep *ep = find_ep(event.ep);
    out.event_data.asynch_error_event_data.dat_handle = ep != nullptr ? ep->handle : ia.handle;
  }
}

void fill_evd_table(DAT_PROVIDER &p) {
  p.evd_create_func = &evd_create;
  p.evd_query_func = &evd_query;
  p.evd_modify_cno_func = &evd_modify_cno;
  p.evd_enable_func = &evd_set_enabled<true>;
  p.evd_disable_func = &evd_set_enabled<false>;
  p.evd_wait_func = &evd_wait;
  p.evd_resize_func = &evd_resize;
  p.evd_post_se_func = &evd_post_se;
  p.evd_dequeue_func = &evd_dequeue;
  p.evd_free_func = &evd_free;
  p.evd_set_unwaitable_func = &evd_set_waitable<false>;
  p.evd_clear_unwaitable_func = &evd_set_waitable<true>;
  p.cno_create_func = &cno_create;
  p.cno_modify_agent_func = &cno_modify_agent;
  p.cno_query_func = &cno_query;
  p.cno_free_func = &cno_free;
  p.cno_wait_func = &cno_wait;
  KDAT_NOT_IMPLEMENTED(p, cno_fd_create_func);
  KDAT_NOT_IMPLEMENTED(p, cno_trigger_func);
}

}  // namespace kdat::dapl

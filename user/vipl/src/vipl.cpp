// libvipl-kdat: the VIPL connection API (vipl.h) on libkdat.  C at the boundary (VIP_RETURN),
// C++ and kdat::Error inside; every entry point translates exceptions in guarded().
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vipl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <kdat/kdat.hpp>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>

#include "wire.hpp"

namespace vipl {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A call ends with this code: thrown inside, returned at the boundary.
struct Fail {
  VIP_RETURN code;
};

[[noreturn]] void fail(VIP_RETURN code) { throw Fail{code}; }

// A DISCONNECTED EP is made reusable (the table's RESET rule); any other is left as it is.
void reset_if_disconnected(kdat::Endpoint &ep) {
  if (kdat::lookup(ep.state(), kdat::Stimulus::RESET).action == kdat::StepAction::go) ep.reset();
}

VIP_RETURN from_dat(kdat::DatReturn r) {
  switch (r.type()) {
    case KDAT_DAT_SUCCESS: return VIP_SUCCESS;
    case KDAT_DAT_INVALID_STATE: return VIP_INVALID_STATE;
    case KDAT_DAT_INVALID_PARAMETER:
    case KDAT_DAT_INVALID_HANDLE:
    case KDAT_DAT_INVALID_ADDRESS:
    case KDAT_DAT_LENGTH_ERROR: return VIP_INVALID_PARAMETER;
    case KDAT_DAT_TIMEOUT_EXPIRED: return VIP_TIMEOUT;
    case KDAT_DAT_MODEL_NOT_SUPPORTED:
    case KDAT_DAT_NOT_IMPLEMENTED: return VIP_ERROR_NOT_SUPPORTED;
    case KDAT_DAT_PROVIDER_NOT_FOUND: return VIP_INVALID_PARAMETER;
    default: return VIP_ERROR_RESOURCE;  // resources, qualifier in use, device gone, ...
  }
}

template <class F>
VIP_RETURN guarded(F &&f) noexcept {
  try {
    return f();
  } catch (const Fail &e) {
    return e.code;
  } catch (const kdat::Error &e) {
    return from_dat(e.code());
  } catch (const std::bad_alloc &) {
    return VIP_ERROR_RESOURCE;
  } catch (...) {
    return VIP_ERROR_RESOURCE;
  }
}

// ---- addresses -------------------------------------------------------------------------------

struct NetAddress {
  Bytes host;
  Bytes discriminator;
};

// Reads a caller's VIP_NET_ADDRESS: host 4 (IPv4) or 16 (IPv6) bytes, discriminator 0..16.
NetAddress read_address(const VIP_NET_ADDRESS *a) {
  if (a == nullptr) fail(VIP_INVALID_PARAMETER);
  if ((a->HostAddressLen != 4 && a->HostAddressLen != 16) ||
      a->DiscriminatorLen > max_discriminator)
    fail(VIP_INVALID_PARAMETER);
  const auto *p = a->HostAddress;
  return NetAddress{Bytes(p, p + a->HostAddressLen),
                    Bytes(p + a->HostAddressLen, p + a->HostAddressLen + a->DiscriminatorLen)};
}

void write_address(VIP_NET_ADDRESS *out, const Bytes &host, const Bytes &discriminator) {
  out->HostAddressLen = static_cast<VIP_UINT16>(host.size());
  out->DiscriminatorLen = static_cast<VIP_UINT16>(discriminator.size());
  std::copy(host.begin(), host.end(), out->HostAddress);
  std::copy(discriminator.begin(), discriminator.end(), out->HostAddress + host.size());
}

Bytes host_bytes(const kdat::Address &a) {
  if (a.raw.family == KDAT_AF_INET) return Bytes(a.raw.addr, a.raw.addr + 4);
  if (a.raw.family == KDAT_AF_INET6) return Bytes(a.raw.addr, a.raw.addr + 16);
  return {};
}

kdat::Address to_kdat(const Bytes &host) {
  kdat::Address a;
  a.raw.family = host.size() == 4 ? KDAT_AF_INET : KDAT_AF_INET6;
  std::copy(host.begin(), host.end(), a.raw.addr);
  return a;
}

std::span<const std::uint8_t> as_u8(const kdat::PrivateData &d) {
  return {reinterpret_cast<const std::uint8_t *>(d.data()), d.size()};
}
kdat::PrivateDataView as_pd(const Bytes &b) { return std::as_bytes(std::span(b)); }

void write_attributes(VIP_VI_ATTRIBUTES *out, const Attributes &a) {
  out->ReliabilityLevel = a.reliability;
  out->MaxTransferSize = a.max_transfer_size;
  out->QoS = a.qos;
  out->Ptag = nullptr;
  out->EnableRdmaWrite = a.rdma_write ? VIP_TRUE : VIP_FALSE;
  out->EnableRdmaRead = a.rdma_read ? VIP_TRUE : VIP_FALSE;
}

// ---- deadlines -------------------------------------------------------------------------------

struct Deadline {
  std::optional<Clock::time_point> at;  // nullopt: VIP_INFINITE

  static Deadline after(VIP_ULONG timeout_ms) {
    if (timeout_ms >= VIP_INFINITE) return {};
    return {Clock::now() + std::chrono::milliseconds(timeout_ms)};
  }
  [[nodiscard]] bool passed() const { return at && Clock::now() >= *at; }
  // VIP_TIMEOUT comes after the timeout: kdat's timer runs on jiffies, which may end a
  // few milliseconds before this process's clock says the time is up.
  void wait_out() const {
    if (at) std::this_thread::sleep_until(*at);
  }
  // `t`, or the deadline if that comes first: a pause between attempts never outlasts it.
  [[nodiscard]] Clock::time_point cap(Clock::time_point t) const {
    return at ? std::min(t, *at) : t;
  }
  // What is left, for kdat (µs, at least 1 ms); kdat::infinite when the ABI cannot carry it
  // (more than about 71 minutes): the caller then enforces the deadline itself.
  [[nodiscard]] kdat::Timeout remaining() const {
    if (!at) return kdat::infinite;
    const auto left = std::chrono::duration_cast<kdat::Timeout>(*at - Clock::now());
    if (left >= kdat::Timeout(KDAT_TIMEOUT_INFINITE - 1)) return kdat::infinite;
    return std::max(left, kdat::Timeout(1000));
  }
};

// ---- objects ---------------------------------------------------------------------------------

struct Vi;

// A VipConnectWait or the passive half of a peer connection, waiting for a request.
struct Waiter {
  std::uint16_t port = 0;
  Bytes local_discriminator;
  Vi *peer_vi = nullptr;  // peer: the VI to accept on (it unregisters before it dies)
  Bytes peer_host;        // peer: whom we expect
  Bytes peer_discriminator;
  // Filled by the dispatcher under Nic::mu:
  std::optional<kdat::ConnectionRequest> cr;  // server: the request to hand out
  Request request;
  Bytes remote_host;
  bool accepted = false;  // peer: accepted on peer_vi
  bool mismatch = false;  // peer: it asked with another reliability level (and was refused)
};

struct Listener {
  kdat::Psp psp;
  int users = 0;
};

struct Nic {
  explicit Nic(const std::string &name) : ia(device, name), attrs(ia.query()) {
    host = host_bytes(attrs.local_address);
    if (host.empty()) fail(VIP_ERROR_RESOURCE);
  }
  ~Nic() { shutdown(); }
  Nic(const Nic &) = delete;
  Nic &operator=(const Nic &) = delete;

  void shutdown();
  void acquire_listener(std::uint16_t port);  // caller holds mu
  void release_listener(std::uint16_t port);  // caller holds mu
  void dispatch();
  void handle_request(const kdat::Event &ev);

  kdat::Device device;
  kdat::Ia ia;
  kdat::IaAttributes attrs;
  Bytes host;

  bool registered = true;  // its handle is valid (guarded by the registry's lock)

  std::mutex mu;  // everything below
  std::condition_variable cv;
  std::atomic<bool> closed = false;  // VipCloseNic ran; written under mu
  std::optional<kdat::Evd> crevd;    // CR events of every listener; only the dispatcher reads it
  std::map<std::uint16_t, Listener> listeners;
  std::list<Waiter *> waiters;
  kdat::UniqueFd stop_fd;
  std::thread dispatcher;
  int ptags = 0;
};

struct Ptag {
  std::shared_ptr<Nic> nic;
  int users = 0;  // VIs created with it (under registry lock)
};

enum class Phase { idle, pending, connected };

struct Vi {
  Vi(std::shared_ptr<Nic> n, const Attributes &a, kdat::EpAttributes ep_attrs)
      : nic(std::move(n)),
        attributes(a),
        evd(nic->ia, 8, KDAT_EVD_CONNECTION),
        ep(nic->ia, evd, ep_attrs) {}
  ~Vi() { unregister_peer(); }
  Vi(const Vi &) = delete;
  Vi &operator=(const Vi &) = delete;

  void unregister_peer() {
    if (!peer_waiter) return;
    std::lock_guard lock(nic->mu);
    nic->waiters.remove(peer_waiter.get());
    nic->release_listener(peer_waiter->port);
    peer_waiter.reset();
  }
  void drain() {
    while (evd.dequeue()) {
    }
  }
  // The EP UNCONNECTED again, whatever connection or attempt it had: the table says which
  // states an abrupt disconnect ends and which a reset leaves.
  void reset_ep() {
    if (kdat::lookup(ep.state(), kdat::Stimulus::DISCONNECT_ABRUPT).action == kdat::StepAction::go)
      ep.disconnect(kdat::CloseMode::abrupt);
    reset_if_disconnected(ep);
    drain();
  }
  // Back to Idle after a failed or ended connection.
  void make_idle() {
    reset_ep();
    phase = Phase::idle;
  }
  VIP_VI_STATE state_locked() const {
    switch (phase) {
      case Phase::idle: return VIP_STATE_IDLE;
      case Phase::pending: return VIP_STATE_CONNECT_PENDING;
      case Phase::connected: break;
    }
    const auto s = ep.state();
    if (kdat::has_connection(s)) return VIP_STATE_CONNECTED;
    // The connection is gone (peer disconnect, transport failure).  Reliable Delivery and
    // Reliable Reception VIs are in the Error state (kdat flushed their receives); an
    // Unreliable VI is Idle again.
    return attributes.reliability == VIP_SERVICE_UNRELIABLE ? VIP_STATE_IDLE : VIP_STATE_ERROR;
  }
  // Starts a connection operation: the VI must be Idle.
  void begin() {
    std::lock_guard lock(mu);
    if (busy || state_locked() != VIP_STATE_IDLE) fail(VIP_INVALID_STATE);
    if (phase == Phase::connected) make_idle();  // an Unreliable VI whose connection ended
    phase = Phase::pending;
    busy = true;
  }
  void end(Phase p) {
    std::lock_guard lock(mu);
    if (p == Phase::idle) make_idle();
    phase = p;
    busy = false;
    peer_pending = false;
  }

  std::shared_ptr<Nic> nic;
  Attributes attributes;
  std::shared_ptr<Ptag> ptag;
  VIP_PROTECTION_HANDLE ptag_handle = nullptr;
  kdat::Evd evd;
  kdat::Endpoint ep;

  std::mutex mu;  // phase, busy, remote, the peer state
  Phase phase = Phase::idle;
  bool busy = false;          // a connection operation runs on it
  bool peer_pending = false;  // ... and it is a peer request (VipDisconnect may abandon it)
  Attributes remote;

  // The peer model (VipConnectPeerRequest .. Done/Wait).
  std::mutex peer_mu;  // held while someone drives the peer connection forward
  bool peer_active = false;
  NetAddress peer_local, peer_remote;
  Deadline peer_deadline;
  std::optional<Clock::time_point> peer_retry_at;
  std::unique_ptr<Waiter> peer_waiter;
};

struct Conn {
  std::shared_ptr<Nic> nic;
  std::optional<kdat::ConnectionRequest> cr;
  Request request;
};

// ---- the handle registry: tokens, never reused, so stale handles are recognised ----------

struct Registry {
  std::mutex mu;
  std::uintptr_t next = 0x10000;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Nic>> nics;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Vi>> vis;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Conn>> conns;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Ptag>> ptags;

  void *add_locked(auto &map, auto object) {
    const auto id = next;
    next += 0x10;
    map.emplace(id, std::move(object));
    return reinterpret_cast<void *>(id);
  }
  template <class T>
  std::shared_ptr<T> find(std::unordered_map<std::uintptr_t, std::shared_ptr<T>> &map,
                          const void *handle) {
    std::lock_guard lock(mu);
    const auto it = map.find(reinterpret_cast<std::uintptr_t>(handle));
    if (it == map.end()) fail(VIP_INVALID_PARAMETER);
    return it->second;
  }
};

Registry &registry() {
  static Registry r;
  return r;
}

// ---- Nic: listeners and the request dispatcher ----------------------------------------------

void Nic::shutdown() {
  {
    std::lock_guard lock(mu);
    closed = true;
  }
  cv.notify_all();
  if (dispatcher.joinable()) {
    const std::uint64_t one = 1;
    if (::write(stop_fd.get(), &one, sizeof one) < 0) {
      // eventfd writes fail only on overflow; the thread is stopping anyway
    }
    dispatcher.join();
  }
}

void Nic::acquire_listener(std::uint16_t port) {
  if (closed) fail(VIP_INVALID_PARAMETER);
  if (!crevd) {
    crevd.emplace(ia, 64, KDAT_EVD_CR);
    stop_fd = kdat::UniqueFd(::eventfd(0, EFD_CLOEXEC));
    if (stop_fd.get() < 0) fail(VIP_ERROR_RESOURCE);
    dispatcher = std::thread([this] { dispatch(); });
  }
  auto it = listeners.find(port);
  if (it == listeners.end()) {
    // Another process may listen on this qualifier (a discriminator of the same hash).
    it = listeners.emplace(port, Listener{kdat::Psp(ia, *crevd, port), 0}).first;
  }
  ++it->second.users;
}

void Nic::release_listener(std::uint16_t port) {
  const auto it = listeners.find(port);
  if (it != listeners.end() && --it->second.users == 0) listeners.erase(it);
}

void Nic::dispatch() {
  pollfd fds[2] = {{crevd->fd(), POLLIN, 0}, {stop_fd.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0 || (fds[0].revents & (POLLHUP | POLLERR)) != 0) return;
    try {
      while (auto ev = crevd->dequeue()) {
        if (ev->is_connection_request()) handle_request(*ev);
      }
    } catch (const std::exception &) {
      // A request that vanished under us (the requester gave up): go on with the next.
    }
  }
}

// One incoming request: hand it to the waiter that matches its discriminators, or refuse it.
void Nic::handle_request(const kdat::Event &ev) {
  kdat::ConnectionRequest cr(*crevd, ev);
  const auto info = cr.query();
  const auto request = decode_request(as_u8(info.private_data));
  const auto port = info.local_address.port();
  const auto from = host_bytes(info.remote_address);
  std::unique_lock lock(mu);
  if (request) {
    for (auto *w : waiters) {
      if (w->port != port || w->local_discriminator != request->remote_discriminator) continue;
      if (request->kind == Kind::client && w->peer_vi == nullptr && !w->cr) {
        w->cr.emplace(std::move(cr));
        w->request = *request;
        w->remote_host = from;
        lock.unlock();
        cv.notify_all();
        return;
      }
      if (request->kind == Kind::peer && w->peer_vi != nullptr && !w->accepted &&
          w->peer_host == from && w->peer_discriminator == request->local_discriminator) {
        // The VI Architecture connects VIs of one reliability level only: both sides fail.
        if (request->attributes.reliability != w->peer_vi->attributes.reliability) {
          w->mismatch = true;
          lock.unlock();
          cr.reject(as_pd(encode_reject(RejectReason::mismatch)));
          return;
        }
        try {
          cr.accept(w->peer_vi->ep, as_pd(encode_accept(w->peer_vi->attributes)));
        } catch (const kdat::Error &) {
          break;  // the VI cannot take it now (e.g. still tearing down a failed attempt)
        }
        w->request = *request;
        w->remote_host = from;
        w->accepted = true;
        return;
      }
    }
  }
  lock.unlock();
  cr.reject(as_pd(encode_reject(RejectReason::no_match)));
}

// ---- helpers for the connect calls -----------------------------------------------------------

Attributes check_vi_attributes(const Nic &nic, const VIP_VI_ATTRIBUTES *a) {
  if (a == nullptr) fail(VIP_INVALID_PARAMETER);
  if (a->ReliabilityLevel != VIP_SERVICE_UNRELIABLE &&
      a->ReliabilityLevel != VIP_SERVICE_RELIABLE_DELIVERY &&
      a->ReliabilityLevel != VIP_SERVICE_RELIABLE_RECEPTION)
    fail(VIP_INVALID_RELIABILITY_LEVEL);
  if (a->MaxTransferSize == 0 || a->MaxTransferSize > 0x80000000u) fail(VIP_INVALID_MTU);
  if (a->EnableRdmaRead && a->ReliabilityLevel == VIP_SERVICE_UNRELIABLE)
    fail(VIP_INVALID_RDMAREAD);  // the VI Architecture: RDMA read needs a reliable service
  if (a->EnableRdmaRead && nic.attrs.max_rdma_read_out == 0) fail(VIP_INVALID_RDMAREAD);
  return Attributes{static_cast<std::uint8_t>(a->ReliabilityLevel), a->EnableRdmaWrite != 0,
                    a->EnableRdmaRead != 0, a->MaxTransferSize, a->QoS};
}

// Waits for the VI's next connection event until `deadline` (plus slack for kdat's own timer,
// which fires at the same deadline).  With no kdat timer (VIP_INFINITE or beyond the ABI's
// range) an expired deadline aborts the attempt: the EP then reports DISCONNECTED.
kdat::Event next_event(Vi &vi, const Deadline &deadline, bool kdat_timer) {
  for (;;) {
    kdat::Timeout wait = kdat::infinite;
    if (deadline.at) {
      const auto left = *deadline.at - Clock::now() + (kdat_timer ? 2s : 0s);
      wait = std::max(std::chrono::duration_cast<kdat::Timeout>(left), kdat::Timeout(0));
      wait = std::min(wait, kdat::Timeout(3600s));
    }
    if (auto ev = vi.evd.try_wait(1, wait)) {
      if (ev->is_connection_event()) return std::move(*ev);
      continue;
    }
    if (deadline.passed()) {
      // kdat's timer should have ended it; make sure, then take the outcome.
      if (kdat::is_connecting(vi.ep.state())) vi.ep.disconnect(kdat::CloseMode::abrupt);
      kdat::Event timed_out;
      timed_out.number = KDAT_DAT_CONNECTION_EVENT_TIMED_OUT;
      return timed_out;
    }
  }
}

// What a failed active attempt means to VIPL; nullopt: try again (not answered yet).
std::optional<VIP_RETURN> outcome_of(const kdat::Event &ev, Attributes *remote) {
  switch (ev.number) {
    case KDAT_DAT_CONNECTION_EVENT_ESTABLISHED: {
      const auto a = decode_accept(as_u8(ev.private_data));
      if (!a) return VIP_NO_MATCH;  // something that is not VIPL accepted: not our server
      *remote = *a;
      return VIP_SUCCESS;
    }
    case KDAT_DAT_CONNECTION_EVENT_PEER_REJECTED: {
      const auto why = decode_reject(as_u8(ev.private_data));
      if (why == RejectReason::mismatch) return VIP_INVALID_RELIABILITY_LEVEL;
      return why == RejectReason::no_match ? VIP_NO_MATCH : VIP_REJECT;
    }
    // The server's host answered, but nobody listens on the discriminator's qualifier.
    case KDAT_DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return VIP_NO_MATCH;
    case KDAT_DAT_CONNECTION_EVENT_TIMED_OUT: return VIP_TIMEOUT;
    // The transport gave up before the timeout: keep trying until it expires.
    case KDAT_DAT_CONNECTION_EVENT_UNREACHABLE: return std::nullopt;
    default: return VIP_TIMEOUT;  // DISCONNECTED after an abort at the deadline
  }
}

void connect_once(Vi &vi, const NetAddress &remote, const Request &req, const Deadline &deadline) {
  vi.drain();
  reset_if_disconnected(vi.ep);
  vi.ep.connect(to_kdat(remote.host), conn_qual(remote.discriminator), deadline.remaining(),
                as_pd(encode_request(req)));
}

Request request_for(const Vi &vi, Kind kind, const NetAddress &local, const NetAddress &remote) {
  return Request{kind, vi.attributes, local.discriminator, remote.discriminator};
}

// The peer connection's next steps.  blocking: until it ends; else VIP_NOT_DONE while pending.
// Caller holds vi.peer_mu and has checked that a peer request is pending.
VIP_RETURN peer_step(Vi &vi, bool blocking, VIP_VI_ATTRIBUTES *remote_out) {
  const auto finish = [&](VIP_RETURN r) {
    if (r == VIP_TIMEOUT) vi.peer_deadline.wait_out();
    vi.unregister_peer();
    if (r == VIP_SUCCESS) {
      write_attributes(remote_out, vi.remote);
      vi.end(Phase::connected);
    } else {
      vi.end(Phase::idle);
    }
    return r;
  };
  const bool kdat_timer = vi.peer_deadline.remaining() != kdat::infinite;
  for (;;) {
    if (vi.nic->closed) return finish(VIP_ERROR_RESOURCE);
    if (!vi.peer_active) {
      // Passive: the dispatcher accepts the peer's request on our EP; wait for the outcome.
      std::optional<kdat::Event> ev;
      if (blocking) {
        // Look again every 200 ms (the NIC's close, the dispatcher's flags), and at the deadline
        // while nothing is accepted: VIP_TIMEOUT comes at the timeout, not up to 200 ms late.
        auto until = Clock::now() + 200ms;
        bool accepted_now;
        {
          std::lock_guard lock(vi.nic->mu);
          accepted_now = vi.peer_waiter->accepted;
        }
        if (!accepted_now) until = vi.peer_deadline.cap(until);
        const auto wait = std::chrono::ceil<kdat::Timeout>(until - Clock::now());
        ev = vi.evd.try_wait(1, std::max(wait, kdat::Timeout(0)));
      } else {
        ev = vi.evd.dequeue();
      }
      if (ev && ev->number == KDAT_DAT_CONNECTION_EVENT_ESTABLISHED) {
        {
          std::lock_guard lock(vi.nic->mu);
          vi.remote = vi.peer_waiter->request.attributes;
        }
        return finish(VIP_SUCCESS);  // (takes nic->mu itself)
      }
      bool accepted, mismatch;
      {
        std::lock_guard lock(vi.nic->mu);
        accepted = vi.peer_waiter->accepted;
        mismatch = vi.peer_waiter->mismatch;
        if (ev && ev->is_connection_event()) {
          // The accepted connection failed (the peer gave up): wait for another request.
          accepted = vi.peer_waiter->accepted = false;
          reset_if_disconnected(vi.ep);
        }
      }
      if (mismatch) return finish(VIP_INVALID_RELIABILITY_LEVEL);
      if (!accepted && vi.peer_deadline.passed()) return finish(VIP_TIMEOUT);
      if (!blocking) return VIP_NOT_DONE;
      continue;
    }
    // Active: connect, and again while the peer has not asked yet (NO_MATCH), until the end.
    if (vi.peer_retry_at) {
      if (vi.peer_deadline.passed()) return finish(VIP_TIMEOUT);
      if (Clock::now() < *vi.peer_retry_at) {
        if (!blocking) return VIP_NOT_DONE;
        std::this_thread::sleep_until(vi.peer_deadline.cap(*vi.peer_retry_at));
        if (vi.peer_deadline.passed()) return finish(VIP_TIMEOUT);
      }
      vi.peer_retry_at.reset();
      connect_once(vi, vi.peer_remote, request_for(vi, Kind::peer, vi.peer_local, vi.peer_remote),
                   vi.peer_deadline);
    }
    std::optional<kdat::Event> ev;
    if (blocking) {
      ev = next_event(vi, vi.peer_deadline, kdat_timer);
    } else {
      ev = vi.evd.dequeue();
      if (!ev) {
        if (vi.peer_deadline.passed() && !kdat_timer) {
          vi.ep.disconnect(kdat::CloseMode::abrupt);
          return finish(VIP_TIMEOUT);
        }
        return VIP_NOT_DONE;
      }
      if (!ev->is_connection_event()) continue;
    }
    const auto r = outcome_of(*ev, &vi.remote);
    if (r == VIP_SUCCESS) return finish(VIP_SUCCESS);
    if (r && *r != VIP_NO_MATCH) return finish(*r);
    // Not there yet (NO_MATCH) or unreachable: try again shortly.
    vi.reset_ep();
    vi.peer_retry_at = Clock::now() + 50ms;
  }
}

VIP_RETURN peer_progress(Vi &vi, bool blocking, VIP_VI_ATTRIBUTES *remote_out) {
  std::unique_lock op(vi.peer_mu, std::defer_lock);
  if (blocking) {
    op.lock();
  } else if (!op.try_lock()) {
    return VIP_NOT_DONE;  // another thread drives it
  }
  {
    std::lock_guard lock(vi.mu);
    if (!vi.peer_pending) fail(VIP_INVALID_STATE);  // no peer request pending
  }
  try {
    return peer_step(vi, blocking, remote_out);
  } catch (...) {
    // A failure underneath ends the peer request: the VI is Idle again.
    vi.unregister_peer();
    vi.end(Phase::idle);
    throw;
  }
}

}  // namespace
}  // namespace vipl

using namespace vipl;

// ---- the C API -------------------------------------------------------------------------------

extern "C" {

VIP_RETURN VipOpenNic(const VIP_CHAR *DeviceName, VIP_NIC_HANDLE *NicHandle) {
  return guarded([&] {
    if (DeviceName == nullptr || NicHandle == nullptr || *DeviceName == '\0')
      fail(VIP_INVALID_PARAMETER);
    auto nic = std::make_shared<Nic>(DeviceName);
    auto &r = registry();
    std::lock_guard lock(r.mu);
    *NicHandle = r.add_locked(r.nics, std::move(nic));
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle) {
  return guarded([&] {
    auto &r = registry();
    std::shared_ptr<Nic> nic;
    std::vector<std::shared_ptr<Vi>> vis;  // released after the lock
    std::vector<std::shared_ptr<Conn>> conns;
    {
      std::lock_guard lock(r.mu);
      const auto it = r.nics.find(reinterpret_cast<std::uintptr_t>(NicHandle));
      if (it == r.nics.end()) fail(VIP_INVALID_PARAMETER);
      nic = it->second;
      nic->registered = false;  // nothing new is made on it from here on
      r.nics.erase(it);
      // Everything made on the NIC goes with it (a call still running keeps its object).
      std::erase_if(r.vis, [&](auto &e) {
        if (e.second->nic != nic) return false;
        vis.push_back(e.second);
        return true;
      });
      std::erase_if(r.conns, [&](auto &e) {
        if (e.second->nic != nic) return false;
        conns.push_back(e.second);
        return true;
      });
      std::erase_if(r.ptags, [&](auto &e) { return e.second->nic == nic; });
    }
    nic->shutdown();
    // Calls blocked on the NIC's VIs end now (VIP_ERROR_RESOURCE): abort their attempts.
    for (const auto &vi : vis) {
      try {
        const auto s = vi->ep.state();
        if (kdat::is_connecting(s) || kdat::is_accepting(s))
          vi->ep.disconnect(kdat::CloseMode::abrupt);
      } catch (const kdat::Error &) {
      }
    }
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *Attributes) {
  return guarded([&] {
    auto nic = registry().find(registry().nics, NicHandle);
    if (Attributes == nullptr) fail(VIP_INVALID_PARAMETER);
    *Attributes = VIP_NIC_ATTRIBUTES{};
    std::snprintf(Attributes->Name, sizeof Attributes->Name, "%s", nic->attrs.device_name.c_str());
    Attributes->HardwareVersion = 0;
    Attributes->ProviderVersion = 0x00010000;  // VIPL 1.0 connection API
    Attributes->NicAddressLen = static_cast<VIP_UINT16>(nic->host.size());
    Attributes->LocalNicAddress = nic->host.data();
    Attributes->ThreadSafe = VIP_TRUE;
    Attributes->MaxDiscriminatorLen = max_discriminator;
    Attributes->MaxVI = nic->attrs.max_eps;
    Attributes->MaxDescriptorsPerQueue = nic->attrs.max_dtos;
    Attributes->MaxSegmentsPerDesc = nic->attrs.max_iov;
    Attributes->MaxCQ = 0;  // no data path, no completion queues
    Attributes->MaxTransferSize = 0x80000000u;
    Attributes->NativeMTU = 1024;  // RoCE's default path MTU on a 1500-byte netdev
    Attributes->MaxPtags = 1024;
    Attributes->ReliabilityLevelSupport =
        VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
    Attributes->RDMAReadSupport =
        nic->attrs.max_rdma_read_out > 0
            ? VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION
            : 0;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE *ProtectionTag) {
  return guarded([&] {
    auto &r = registry();
    auto nic = r.find(r.nics, NicHandle);
    if (ProtectionTag == nullptr) fail(VIP_INVALID_PARAMETER);
    std::lock_guard lock(r.mu);
    if (!nic->registered) fail(VIP_INVALID_PARAMETER);
    if (nic->ptags >= 1024) fail(VIP_ERROR_RESOURCE);
    ++nic->ptags;
    *ProtectionTag = r.add_locked(r.ptags, std::make_shared<Ptag>(Ptag{nic, 0}));
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE ProtectionTag) {
  return guarded([&] {
    auto &r = registry();
    auto nic = r.find(r.nics, NicHandle);
    std::lock_guard lock(r.mu);
    const auto it = r.ptags.find(reinterpret_cast<std::uintptr_t>(ProtectionTag));
    if (it == r.ptags.end() || it->second->nic != nic) fail(VIP_INVALID_PTAG);
    if (it->second->users > 0) fail(VIP_INVALID_STATE);  // VIs still use it
    --nic->ptags;
    r.ptags.erase(it);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                       VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                       VIP_VI_HANDLE *ViHandle) {
  return guarded([&] {
    auto &r = registry();
    auto nic = r.find(r.nics, NicHandle);
    if (ViHandle == nullptr || SendCQHandle != nullptr || RecvCQHandle != nullptr)
      fail(VIP_INVALID_PARAMETER);
    const auto attrs = check_vi_attributes(*nic, ViAttribs);
    std::shared_ptr<Ptag> ptag;
    {
      std::lock_guard lock(r.mu);
      const auto it = r.ptags.find(reinterpret_cast<std::uintptr_t>(ViAttribs->Ptag));
      if (it == r.ptags.end() || it->second->nic != nic) fail(VIP_INVALID_PTAG);
      ptag = it->second;
    }
    kdat::EpAttributes ep_attrs;
    if (attrs.rdma_read) {
      ep_attrs.max_rdma_read_in = std::min(nic->attrs.max_rdma_read_in, 4u);
      ep_attrs.max_rdma_read_out = std::min(nic->attrs.max_rdma_read_out, 4u);
    }
    auto vi = std::make_shared<Vi>(nic, attrs, ep_attrs);
    vi->ptag_handle = ViAttribs->Ptag;
    std::lock_guard lock(r.mu);
    if (!nic->registered) fail(VIP_INVALID_PARAMETER);  // closed meanwhile
    if (!r.ptags.contains(reinterpret_cast<std::uintptr_t>(ViAttribs->Ptag)))
      fail(VIP_INVALID_PTAG);  // destroyed meanwhile
    vi->ptag = ptag;
    ++ptag->users;
    *ViHandle = r.add_locked(r.vis, std::move(vi));
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    auto &r = registry();
    auto vi = r.find(r.vis, ViHandle);
    {
      std::lock_guard lock(vi->mu);
      if (vi->busy || vi->state_locked() != VIP_STATE_IDLE) fail(VIP_INVALID_STATE);
    }
    std::lock_guard lock(r.mu);
    if (r.vis.erase(reinterpret_cast<std::uintptr_t>(ViHandle)) == 0) fail(VIP_INVALID_PARAMETER);
    --vi->ptag->users;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE *State, VIP_VI_ATTRIBUTES *Attributes,
                      VIP_BOOLEAN *ViSendQEmpty, VIP_BOOLEAN *ViRecvQEmpty) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    if (State == nullptr) fail(VIP_INVALID_PARAMETER);
    std::lock_guard lock(vi->mu);
    *State = vi->state_locked();
    if (Attributes != nullptr) {
      write_attributes(Attributes, vi->attributes);
      Attributes->Ptag = vi->ptag_handle;
    }
    // No descriptors can be posted through this library: the queues are always empty.
    if (ViSendQEmpty != nullptr) *ViSendQEmpty = VIP_TRUE;
    if (ViRecvQEmpty != nullptr) *ViRecvQEmpty = VIP_TRUE;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr, VIP_ULONG Timeout,
                          VIP_NET_ADDRESS *RemoteAddr, VIP_VI_ATTRIBUTES *RemoteViAttribs,
                          VIP_CONN_HANDLE *ConnHandle) {
  return guarded([&] {
    auto nic = registry().find(registry().nics, NicHandle);
    if (Timeout == 0 || RemoteAddr == nullptr || RemoteViAttribs == nullptr ||
        ConnHandle == nullptr)
      fail(VIP_INVALID_PARAMETER);
    const auto local = read_address(LocalAddr);
    if (local.host != nic->host) fail(VIP_INVALID_PARAMETER);
    const auto deadline = Deadline::after(Timeout);
    Waiter w;
    w.port = conn_qual(local.discriminator);
    w.local_discriminator = local.discriminator;
    std::unique_lock lock(nic->mu);
    nic->acquire_listener(w.port);
    nic->waiters.push_back(&w);
    const auto ready = [&] { return w.cr.has_value() || nic->closed; };
    if (deadline.at)
      nic->cv.wait_until(lock, *deadline.at, ready);
    else
      nic->cv.wait(lock, ready);
    nic->waiters.remove(&w);
    nic->release_listener(w.port);
    if (nic->closed) return VIP_ERROR_RESOURCE;  // a request it got dies with the NIC
    if (!w.cr) return VIP_TIMEOUT;
    lock.unlock();
    auto conn = std::make_shared<Conn>(Conn{nic, std::move(w.cr), w.request});
    {
      auto &r = registry();
      std::lock_guard rlock(r.mu);
      if (!nic->registered) return VIP_ERROR_RESOURCE;
      *ConnHandle = r.add_locked(r.conns, std::move(conn));
    }
    write_address(RemoteAddr, w.remote_host, w.request.local_discriminator);
    write_attributes(RemoteViAttribs, w.request.attributes);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    auto &r = registry();
    auto conn = r.find(r.conns, ConnHandle);
    auto vi = r.find(r.vis, ViHandle);
    if (vi->nic != conn->nic) fail(VIP_INVALID_PARAMETER);
    // The VI Architecture connects VIs of one reliability level only.
    if (vi->attributes.reliability != conn->request.attributes.reliability)
      fail(VIP_INVALID_RELIABILITY_LEVEL);
    vi->begin();
    {
      std::lock_guard lock(r.mu);  // the request is answered once
      if (r.conns.erase(reinterpret_cast<std::uintptr_t>(ConnHandle)) == 0) {
        vi->end(Phase::idle);
        fail(VIP_INVALID_PARAMETER);
      }
    }
    try {
      vi->drain();
      conn->cr->accept(vi->ep, as_pd(encode_accept(vi->attributes)));
    } catch (...) {
      vi->end(Phase::idle);
      throw;
    }
    // The connection is there once the requester's RTU arrives; it may have given up.
    const auto ev = vi->evd.try_wait(1, kdat::Timeout(60s));
    if (ev && ev->number == KDAT_DAT_CONNECTION_EVENT_ESTABLISHED) {
      {
        std::lock_guard lock(vi->mu);
        vi->remote = conn->request.attributes;
      }
      vi->end(Phase::connected);
      return VIP_SUCCESS;
    }
    vi->end(Phase::idle);
    return VIP_TIMEOUT;
  });
}

VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle) {
  return guarded([&] {
    auto &r = registry();
    std::shared_ptr<Conn> conn;
    {
      std::lock_guard lock(r.mu);
      const auto it = r.conns.find(reinterpret_cast<std::uintptr_t>(ConnHandle));
      if (it == r.conns.end()) fail(VIP_INVALID_PARAMETER);
      conn = it->second;
      r.conns.erase(it);
    }
    conn->cr->reject(as_pd(encode_reject(RejectReason::rejected)));
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                             VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout,
                             VIP_VI_ATTRIBUTES *RemoteViAttribs) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    if (Timeout == 0 || RemoteViAttribs == nullptr) fail(VIP_INVALID_PARAMETER);
    const auto local = read_address(LocalAddr);
    const auto remote = read_address(RemoteAddr);
    if (local.host != vi->nic->host) fail(VIP_INVALID_PARAMETER);
    const auto deadline = Deadline::after(Timeout);
    vi->begin();
    VIP_RETURN result = VIP_TIMEOUT;
    try {
      const auto req = request_for(*vi, Kind::client, local, remote);
      for (;;) {
        const bool kdat_timer = deadline.remaining() != kdat::infinite;
        connect_once(*vi, remote, req, deadline);
        const auto ev = next_event(*vi, deadline, kdat_timer);
        if (vi->nic->closed) fail(VIP_ERROR_RESOURCE);
        Attributes attrs;
        const auto r = outcome_of(ev, &attrs);
        if (r) {
          result = *r;
          if (result == VIP_SUCCESS) {
            std::lock_guard lock(vi->mu);
            vi->remote = attrs;
          }
          break;
        }
        // Unreachable before the timeout: the server may come up; try again until it expires.
        if (deadline.passed()) break;
        std::this_thread::sleep_until(deadline.cap(Clock::now() + 200ms));
        if (deadline.passed()) break;
      }
    } catch (...) {
      vi->end(Phase::idle);
      throw;
    }
    if (result != VIP_SUCCESS) {
      vi->end(Phase::idle);
      if (result == VIP_TIMEOUT) deadline.wait_out();
      return result;
    }
    write_attributes(RemoteViAttribs, vi->remote);
    vi->end(Phase::connected);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    {
      std::lock_guard lock(vi->mu);
      if (vi->phase == Phase::connected) {
        vi->make_idle();
        return VIP_SUCCESS;
      }
      // Idle, or a VipConnectRequest/VipConnectAccept running in another thread.
      if (!vi->peer_pending) fail(VIP_INVALID_STATE);
    }
    // A pending peer connection is abandoned, unless another thread is driving it right now.
    std::unique_lock op(vi->peer_mu, std::try_to_lock);
    if (!op.owns_lock()) fail(VIP_INVALID_STATE);
    vi->unregister_peer();
    vi->end(Phase::idle);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectPeerRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                 VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    if (Timeout == 0) fail(VIP_INVALID_PARAMETER);
    auto local = read_address(LocalAddr);
    auto remote = read_address(RemoteAddr);
    if (local.host != vi->nic->host) fail(VIP_INVALID_PARAMETER);
    // One side must listen, the other connect: the larger (host, discriminator) connects.
    const auto key = [](const NetAddress &a) { return std::pair(a.host, a.discriminator); };
    if (key(local) == key(remote)) fail(VIP_INVALID_PARAMETER);
    const bool active = key(remote) < key(local);
    std::lock_guard op(vi->peer_mu);
    vi->begin();
    try {
      vi->peer_active = active;
      vi->peer_deadline = Deadline::after(Timeout);
      vi->peer_retry_at.reset();
      {
        std::lock_guard lock(vi->mu);
        vi->peer_pending = true;
      }
      if (active) {
        connect_once(*vi, remote, request_for(*vi, Kind::peer, local, remote), vi->peer_deadline);
      } else {
        auto w = std::make_unique<Waiter>();
        w->port = conn_qual(local.discriminator);
        w->local_discriminator = local.discriminator;
        w->peer_vi = vi.get();
        w->peer_host = remote.host;
        w->peer_discriminator = remote.discriminator;
        std::lock_guard lock(vi->nic->mu);
        vi->nic->acquire_listener(w->port);
        vi->nic->waiters.push_back(w.get());
        vi->peer_waiter = std::move(w);
      }
      vi->peer_local = std::move(local);
      vi->peer_remote = std::move(remote);
    } catch (...) {
      vi->unregister_peer();
      vi->end(Phase::idle);
      throw;
    }
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectPeerDone(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttribs) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    if (RemoteViAttribs == nullptr) fail(VIP_INVALID_PARAMETER);
    return peer_progress(*vi, false, RemoteViAttribs);
  });
}

VIP_RETURN VipConnectPeerWait(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttribs) {
  return guarded([&] {
    auto vi = registry().find(registry().vis, ViHandle);
    if (RemoteViAttribs == nullptr) fail(VIP_INVALID_PARAMETER);
    return peer_progress(*vi, true, RemoteViAttribs);
  });
}

VIP_UINT16 vipl_kdat_conn_qual(const VIP_UINT8 *Discriminator, VIP_UINT16 DiscriminatorLen) {
  if (DiscriminatorLen > max_discriminator || (Discriminator == nullptr && DiscriminatorLen > 0))
    return 0;
  return conn_qual(std::span(Discriminator, DiscriminatorLen));
}

const char *vipl_kdat_return_name(VIP_RETURN Status) {
  switch (Status) {
#define VIPL_KDAT_NAME_(x) \
  case x: return #x;
    VIPL_KDAT_NAME_(VIP_SUCCESS)
    VIPL_KDAT_NAME_(VIP_NOT_DONE)
    VIPL_KDAT_NAME_(VIP_INVALID_PARAMETER)
    VIPL_KDAT_NAME_(VIP_ERROR_RESOURCE)
    VIPL_KDAT_NAME_(VIP_TIMEOUT)
    VIPL_KDAT_NAME_(VIP_REJECT)
    VIPL_KDAT_NAME_(VIP_INVALID_RELIABILITY_LEVEL)
    VIPL_KDAT_NAME_(VIP_INVALID_MTU)
    VIPL_KDAT_NAME_(VIP_INVALID_QOS)
    VIPL_KDAT_NAME_(VIP_INVALID_PTAG)
    VIPL_KDAT_NAME_(VIP_INVALID_RDMAREAD)
    VIPL_KDAT_NAME_(VIP_DESCRIPTOR_ERROR)
    VIPL_KDAT_NAME_(VIP_INVALID_STATE)
    VIPL_KDAT_NAME_(VIP_ERROR_NAMESERVICE)
    VIPL_KDAT_NAME_(VIP_NO_MATCH)
    VIPL_KDAT_NAME_(VIP_NOT_REACHABLE)
    VIPL_KDAT_NAME_(VIP_ERROR_NOT_SUPPORTED)
#undef VIPL_KDAT_NAME_
  }
  return "VIP_?";
}

}  // extern "C"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <kdat/evd.hpp>
#include <kdat/ia.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

Evd::Evd(const Ia &ia, std::uint32_t qlen, std::uint32_t flags) : state_(ia.device()), qlen_(qlen) {
  kdat_evd_create create{};
  create.ia = ia.handle();
  create.qlen = qlen;
  create.flags = flags | KDAT_EVD_RING_MODE;  // its ring is its only way out
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EVD_CREATE, create, "evd_create");
  handle_ = create.evd;
  try {
    kdat_evd_ring ring{};
    ring.evd = handle_;
    detail::ioctl_checked(state_->file.get(), KDAT_IOC_EVD_RING, ring, "evd_ring");
    ring_fd_ = UniqueFd(ring.fd);
    region_ = MappedRegion::map(ring_fd_.get(), 0, ring.map_size, PROT_READ | PROT_WRITE,
                                "mmap event ring");
    ring_ = RingConsumer(region_.data(), region_.size(), ring.off);
    overflow_seen_ = ring_.overflow();
  } catch (...) {
    free();
    throw;
  }
}

Evd::Evd(Evd &&other) noexcept
    : state_(std::move(other.state_)),
      handle_(std::exchange(other.handle_, 0)),
      qlen_(other.qlen_),
      ring_fd_(std::move(other.ring_fd_)),
      region_(std::move(other.region_)),
      ring_(std::exchange(other.ring_, RingConsumer())),
      overflow_seen_(other.overflow_seen_) {}

Evd &Evd::operator=(Evd &&other) noexcept {
  if (this != &other) {
    detail::free_quietly(state_.get(), KDAT_IOC_EVD_FREE, handle_, &kdat_evd_free::evd);
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
    qlen_ = other.qlen_;
    ring_ = std::exchange(other.ring_, RingConsumer());
    region_ = std::move(other.region_);
    ring_fd_ = std::move(other.ring_fd_);
    overflow_seen_ = other.overflow_seen_;
  }
  return *this;
}

Evd::~Evd() { detail::free_quietly(state_.get(), KDAT_IOC_EVD_FREE, handle_, &kdat_evd_free::evd); }

void Evd::free() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EVD_CONN, "evd_free");
  kdat_evd_free arg{};
  arg.evd = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EVD_FREE, arg, "evd_free");
  handle_ = 0;
  ring_ = RingConsumer();
  region_ = MappedRegion();
  ring_fd_.reset();
}

void Evd::check_overflow() {
  const std::uint32_t overflow = ring_.overflow();
  if (overflow != overflow_seen_) {
    overflow_seen_ = overflow;
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_QUEUE_FULL}, "evd: events lost (overflow)");
  }
}

std::uint32_t Evd::ring_wait(std::uint32_t threshold, Timeout timeout) {
  kdat_evd_ring_wait arg{};
  arg.evd = handle_;
  arg.threshold = threshold;
  arg.timeout_us = detail::timeout_us(timeout, "evd_ring_wait");
  for (;;) {
    detail::ioctl_raw(state_->file.get(), KDAT_IOC_EVD_RING_WAIT, arg, "evd_ring_wait");
    const DatReturn status{arg.status};
    if (status.type() != KDAT_DAT_QUEUE_FULL) return arg.status;
    // The kernel reports an overflow once; the header's counter may already have told us.
    const std::uint32_t overflow = ring_.overflow();
    if (overflow != overflow_seen_) {
      overflow_seen_ = overflow;
      return arg.status;
    }
  }
}

Event Evd::take() {
  auto raw = ring_.pop_entry();
  if (!raw) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERNAL_ERROR},
                "evd_wait: the kernel said the ring was ready but it is empty");
  }
  return Event::from_raw(raw->event, raw->ud);
}

std::optional<Event> Evd::try_wait(std::uint32_t threshold, Timeout timeout) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EVD_CONN, "evd_wait");
  if (threshold == 0 || threshold > ring_.entries()) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER | KDAT_DAT_INVALID_ARG3},
                "evd_wait: threshold must be 1.." + std::to_string(ring_.entries()));
  }
  (void)detail::timeout_us(timeout, "evd_wait");  // refuses a negative or too long one up front
  using Clock = std::chrono::steady_clock;
  const bool forever = timeout == infinite;
  const auto deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
  for (;;) {
    check_overflow();
    std::optional<Event> event;
    // The fast path: enough events already in the ring, no syscall.
    if (ring_.available() >= threshold) {
      event = take();
    } else {
      Timeout left = infinite;
      if (!forever) {
        left =
            std::max(Timeout::zero(), std::chrono::duration_cast<Timeout>(deadline - Clock::now()));
      }
      const DatReturn status{ring_wait(threshold, left)};
      if (status.type() == KDAT_DAT_TIMEOUT_EXPIRED) {
        // The kernel counts in jiffies and may end a wait up to one early: sleep the rest.
        if (!forever && Clock::now() < deadline) continue;
        return std::nullopt;
      }
      if (!status.ok()) throw Error(status, "evd_wait");
      event = take();
    }
    // A user-QP EP's kdat-internal event is handled here and never returned (user_qp.hpp).
    if (!detail::user_qp_filter(*state_, *event)) return event;
  }
}

Event Evd::wait(std::uint32_t threshold, Timeout timeout) {
  auto event = try_wait(threshold, timeout);
  if (!event) throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_TIMEOUT_EXPIRED}, "evd_wait");
  return std::move(*event);
}

std::optional<Event> Evd::dequeue() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EVD_CONN, "evd_dequeue");
  for (;;) {
    check_overflow();
    if (ring_.available() == 0) {
      if (ring_.backlog() == 0) return std::nullopt;
      // Events wait behind the full ring we just drained: have the kernel move them in.
      const DatReturn status{ring_wait(1, Timeout::zero())};
      if (!status.ok() && status.type() != KDAT_DAT_TIMEOUT_EXPIRED)
        throw Error(status, "evd_dequeue");
      if (ring_.available() == 0) return std::nullopt;
    }
    Event event = take();
    if (!detail::user_qp_filter(*state_, event)) return event;
  }
}

}  // namespace kdat

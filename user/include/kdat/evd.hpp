// Event dispatcher with an mmap'ed event ring: events already in the ring are taken without a
// syscall; the kernel is asked only to sleep or to move its backlog into the ring.
#pragma once

#include <cstdint>
#include <kdat/device.hpp>
#include <kdat/ring.hpp>
#include <kdat/types.hpp>
#include <memory>
#include <optional>

namespace kdat {

class Ia;

// An EVD in ring mode.  fd() is the ring's file: poll()/epoll report EPOLLIN while events
// wait and EPOLLHUP|EPOLLERR once the EVD is freed.  Destruction frees the EVD (errors, e.g.
// DAT_INVALID_STATE while an EP still uses it, are ignored: the IA or the file frees it later).
//
// Thread-safety: wait/try_wait/dequeue consume from the ring, which has one consumer: call them
// from one thread at a time.  handle(), fd(), pending() may be used from any thread.
class Evd {
 public:
  // qlen: events it must hold, 1..max_evd_qlen; flags: KDAT_EVD_* streams that may feed it.
  Evd(const Ia &ia, std::uint32_t qlen, std::uint32_t flags = KDAT_EVD_FLAGS_ALL);
  Evd(Evd &&other) noexcept;
  Evd &operator=(Evd &&other) noexcept;
  Evd(const Evd &) = delete;
  Evd &operator=(const Evd &) = delete;
  ~Evd();

  [[nodiscard]] std::uint32_t handle() const { return handle_; }
  [[nodiscard]] int fd() const { return ring_fd_.get(); }
  [[nodiscard]] std::uint32_t qlen() const { return qlen_; }
  [[nodiscard]] std::uint32_t ring_entries() const { return ring_.entries(); }
  // Events in the ring plus those the kernel holds behind it (the header's view, no syscall).
  [[nodiscard]] std::uint32_t pending() const { return ring_.available() + ring_.backlog(); }

  // dat_evd_wait: the oldest event once `threshold` (1..ring_entries()) are there.  Takes from
  // the ring directly when enough are in it; otherwise sleeps in KDAT_IOC_EVD_RING_WAIT.
  // Errors: DAT_TIMEOUT_EXPIRED, DAT_INTERRUPTED_CALL, DAT_ABORT (freed), DAT_QUEUE_FULL (events
  // the kernel could not queue; reported once, the next call goes on).
  [[nodiscard]] Event wait(std::uint32_t threshold = 1, Timeout timeout = infinite);
  // As wait(), but a timeout is nullopt instead of an Error.
  [[nodiscard]] std::optional<Event> try_wait(std::uint32_t threshold = 1,
                                              Timeout timeout = infinite);
  // dat_evd_dequeue: the oldest event if there is one, never sleeps (nullopt = DAT_QUEUE_EMPTY).
  [[nodiscard]] std::optional<Event> dequeue();

  void free();

  [[nodiscard]] const std::shared_ptr<detail::DeviceState> &device() const { return state_; }

 private:
  void check_overflow();
  [[nodiscard]] std::uint32_t ring_wait(std::uint32_t threshold, Timeout timeout);
  [[nodiscard]] Event take();

  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
  std::uint32_t qlen_ = 0;
  UniqueFd ring_fd_;
  MappedRegion region_;
  RingConsumer ring_;
  std::uint32_t overflow_seen_ = 0;  // ring header overflow count already reported
};

}  // namespace kdat

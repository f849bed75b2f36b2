// A connection request that arrived on a PSP or RSP, to accept or reject.
#pragma once

#include <cstdint>
#include <kdat/device.hpp>
#include <kdat/types.hpp>
#include <memory>

namespace kdat {

class Evd;
class Endpoint;

struct CrInfo {
  std::uint32_t sp = 0;  // the PSP or RSP it arrived on
  std::uint32_t ep = 0;  // the EP it names (RSP, provider PSP), else 0
  std::uint32_t remote_rdma_read_in = 0;
  std::uint32_t remote_rdma_read_out = 0;
  PrivateData private_data;
  Address remote_address;
  Address local_address;
  std::uint8_t remote_retry_count = 0;
  std::uint8_t remote_rnr_retry_count = 0;
  bool remote_flow_control = false;
};

// Made from a CONNECTION_REQUEST_EVENT.  The kernel frees the CR when it is accepted or rejected;
// after that this object is spent (calls fail with DAT_INVALID_HANDLE without a syscall).
// Destroying an unanswered request does nothing: it stays pending in the kernel (the requester
// waits for its timeout) until the file closes, so answer every request.
// Move-only.  Thread-safety: one thread at a time.
class ConnectionRequest {
 public:
  // Error(DAT_INVALID_PARAMETER) unless `event` is a CONNECTION_REQUEST_EVENT.
  ConnectionRequest(const Evd &evd, const Event &event);
  ConnectionRequest(ConnectionRequest &&other) noexcept;
  ConnectionRequest &operator=(ConnectionRequest &&other) noexcept;
  ConnectionRequest(const ConnectionRequest &) = delete;
  ConnectionRequest &operator=(const ConnectionRequest &) = delete;
  ~ConnectionRequest() = default;

  [[nodiscard]] std::uint32_t handle() const { return handle_; }
  // The EP the request names (RSP, provider PSP), else 0.
  [[nodiscard]] std::uint32_t named_ep() const { return named_ep_; }
  [[nodiscard]] CrInfo query() const;
  void accept(const Endpoint &ep, PrivateDataView private_data = {});
  // Accept on the EP the request names (RSP, provider PSP).
  void accept(PrivateDataView private_data = {});
  void reject(PrivateDataView private_data = {});

 private:
  void accept_on(std::uint32_t ep, PrivateDataView private_data);
  void require_pending(const char *what) const;
  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
  std::uint32_t named_ep_ = 0;
};

}  // namespace kdat

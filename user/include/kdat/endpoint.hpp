// Endpoint: one side of a connection, driven by the state machine of include/kdat/ep_table.h.
#pragma once

#include <cstdint>
#include <kdat/device.hpp>
#include <kdat/ep_state.hpp>
#include <kdat/ia.hpp>
#include <kdat/table.hpp>
#include <kdat/types.hpp>
#include <memory>

namespace kdat {

class Evd;

// EP attributes (struct kdat_ep_attr); zeros at create pick the provider's defaults.
struct EpAttributes {
  std::uint32_t max_rdma_read_in = 0;   // IRD
  std::uint32_t max_rdma_read_out = 0;  // ORD
  std::uint32_t max_recv_dtos = 0;
  std::uint32_t max_request_dtos = 0;
  std::uint32_t max_recv_iov = 0;
  std::uint32_t max_request_iov = 0;
  std::uint8_t retry_count = 0;      // 0..7
  std::uint8_t rnr_retry_count = 0;  // 0..7, 7 = infinite
  bool flow_control = false;

  [[nodiscard]] kdat_ep_attr to_raw() const;
  [[nodiscard]] static EpAttributes from_raw(const kdat_ep_attr &raw);
  friend bool operator==(const EpAttributes &, const EpAttributes &) = default;
};

// What ep_query reports.
struct EpInfo {
  EpState state = EpState::UNCONNECTED;
  EpAttributes attributes;  // IRD/ORD negotiated once connected
  Address local_address;
  Address remote_address;
  std::uint32_t connect_evd = 0;
  std::uint32_t request_evd = 0;
  std::uint32_t recv_evd = 0;
  std::uint32_t transitions = 0;
};

// An EP.  Destruction frees it (a connected EP is torn down by the kernel; errors ignored).
// Move-only; a moved-from Endpoint has handle 0.
// Thread-safety: state(), record() and can() read the shared table without a syscall and are
// safe from any thread at any time (also while another thread connects or disconnects); the
// other calls may run concurrently with each other (the kernel serialises them), but not with
// destruction or a move.
class Endpoint {
 public:
  Endpoint(const Ia &ia, const Evd &connect_evd, const EpAttributes &attributes = {},
           const Evd *request_evd = nullptr, const Evd *recv_evd = nullptr);
  // Take ownership of an EP the provider made (a provider-flag PSP's CR names it).
  [[nodiscard]] static Endpoint adopt(const Ia &ia, std::uint32_t handle);
  Endpoint(Endpoint &&other) noexcept;
  Endpoint &operator=(Endpoint &&other) noexcept;
  Endpoint(const Endpoint &) = delete;
  Endpoint &operator=(const Endpoint &) = delete;
  ~Endpoint();

  [[nodiscard]] std::uint32_t handle() const { return handle_; }

  // The state from the shared table: no syscall.  Error(DAT_INVALID_HANDLE) when the slot now
  // belongs to another object (this EP was freed, e.g. by an abrupt IA close).
  [[nodiscard]] EpState state() const;
  // state() compiled into the caller, for paths that ask on every call (a DAT provider's
  // posts): the same lock-free read of the record; a record being written, or none, goes the
  // way of state().
  [[nodiscard]] EpState state_inline() const {
    EpState state{};
    return try_state(state) ? state : this->state();
  }
  // The whole record (state, addresses, IRD/ORD, transitions, last event, times), same rules.
  [[nodiscard]] Record record() const;
  // Would the state table accept `stimulus` now?  (A snapshot: the state may move on.)
  [[nodiscard]] bool can(Stimulus stimulus) const;
  // Throws the DAT_INVALID_STATE Error the kernel would return if the table refuses `stimulus`.
  void require(Stimulus stimulus) const;

  [[nodiscard]] EpInfo query() const;
  // mask: KDAT_EP_ATTR_* bits of the attributes to change.
  void modify(std::uint32_t mask, const EpAttributes &attributes);
  void reset();
  // Connect to the service `conn_qual` at `remote` (its port is ignored); the outcome arrives
  // as a connection event on the connect EVD.
  void connect(const Address &remote, std::uint64_t conn_qual, Timeout timeout,
               PrivateDataView private_data = {}, std::uint32_t qos = KDAT_DAT_QOS_BEST_EFFORT,
               std::uint32_t flags = KDAT_CONNECT_DEFAULT);
  // Connect to the remote end `dup` (a CONNECTED, actively connected EP) is connected to.
  void dup_connect(const Endpoint &dup, Timeout timeout, PrivateDataView private_data = {},
                   std::uint32_t qos = KDAT_DAT_QOS_BEST_EFFORT);
  void disconnect(CloseMode mode = CloseMode::abrupt);
  void free();

 private:
  // Made inside libkdat only, from its internals: not exported.
  [[gnu::visibility("hidden")]] Endpoint(std::shared_ptr<detail::DeviceState> state,
                                         std::uint32_t handle);
  // The hot path of state(): three words of the record (its address is fixed for the file's
  // life); false if the record is being written (or there is none).
  [[nodiscard]] bool try_state(EpState &out) const {
    std::uint32_t handle = 0;
    std::uint32_t state = 0;
    if (record_ == nullptr || handle_ == 0 || !seqcount::try_read_state(record_, handle, state) ||
        handle != handle_)
      return false;
    out = static_cast<EpState>(state);
    return true;
  }
  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
  const kdat_record *record_ = nullptr;  // this EP's slot in the mapped table
};

}  // namespace kdat

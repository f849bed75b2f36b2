#include <kdat/endpoint.hpp>
#include <kdat/evd.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

kdat_ep_attr EpAttributes::to_raw() const {
  kdat_ep_attr raw{};
  raw.max_rdma_read_in = max_rdma_read_in;
  raw.max_rdma_read_out = max_rdma_read_out;
  raw.max_recv_dtos = max_recv_dtos;
  raw.max_request_dtos = max_request_dtos;
  raw.max_recv_iov = max_recv_iov;
  raw.max_request_iov = max_request_iov;
  raw.retry_count = retry_count;
  raw.rnr_retry_count = rnr_retry_count;
  raw.flow_control = flow_control ? 1 : 0;
  return raw;
}

EpAttributes EpAttributes::from_raw(const kdat_ep_attr &raw) {
  EpAttributes a;
  a.max_rdma_read_in = raw.max_rdma_read_in;
  a.max_rdma_read_out = raw.max_rdma_read_out;
  a.max_recv_dtos = raw.max_recv_dtos;
  a.max_request_dtos = raw.max_request_dtos;
  a.max_recv_iov = raw.max_recv_iov;
  a.max_request_iov = raw.max_request_iov;
  a.retry_count = raw.retry_count;
  a.rnr_retry_count = raw.rnr_retry_count;
  a.flow_control = raw.flow_control != 0;
  return a;
}

Endpoint::Endpoint(const Ia &ia, const Evd &connect_evd, const EpAttributes &attributes,
                   const Evd *request_evd, const Evd *recv_evd)
    : state_(ia.device()) {
  kdat_ep_create arg{};
  arg.ia = ia.handle();
  arg.connect_evd = connect_evd.handle();
  arg.request_evd = request_evd != nullptr ? request_evd->handle() : 0;
  arg.recv_evd = recv_evd != nullptr ? recv_evd->handle() : 0;
  arg.attr = attributes.to_raw();
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_CREATE, arg, "ep_create");
  handle_ = arg.ep;
  record_ = state_->own_table().slot_address(KDAT_HANDLE_SLOT(handle_));
}

Endpoint::Endpoint(std::shared_ptr<detail::DeviceState> state, std::uint32_t handle)
    : state_(std::move(state)), handle_(handle) {
  record_ = state_->own_table().slot_address(KDAT_HANDLE_SLOT(handle_));
}

Endpoint Endpoint::adopt(const Ia &ia, std::uint32_t handle) {
  Endpoint ep(ia.device(), handle);
  (void)ep.record();  // refuses a handle that names no live object of this file
  return ep;
}

Endpoint::Endpoint(Endpoint &&other) noexcept
    : state_(std::move(other.state_)),
      handle_(std::exchange(other.handle_, 0)),
      record_(std::exchange(other.record_, nullptr)) {}

Endpoint &Endpoint::operator=(Endpoint &&other) noexcept {
  if (this != &other) {
    detail::free_quietly(state_.get(), KDAT_IOC_EP_FREE, handle_, &kdat_ep_free::ep);
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
    record_ = std::exchange(other.record_, nullptr);
  }
  return *this;
}

Endpoint::~Endpoint() {
  detail::free_quietly(state_.get(), KDAT_IOC_EP_FREE, handle_, &kdat_ep_free::ep);
}

Record Endpoint::record() const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_state");
  const auto record = state_->own_table().find(handle_);
  if (!record || record->type != KDAT_REC_EP) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_HANDLE | KDAT_DAT_INVALID_HANDLE_EP},
                "ep_state: the EP's slot holds another object (freed)");
  }
  return *record;
}

EpState Endpoint::state() const {
  // A record mid-write falls back to the full reader, which spins, yields and bounds the wait.
  EpState state{};
  return try_state(state) ? state : static_cast<EpState>(record().state);
}

bool Endpoint::can(Stimulus stimulus) const { return allows(state(), stimulus); }

void Endpoint::require(Stimulus stimulus) const {
  const EpState now = state();
  if (!allows(now, stimulus)) {
    throw Error(invalid_state_error(now),
                std::string("ep ") + stimulus_name(stimulus) + " in " + ep_state_name(now));
  }
}

EpInfo Endpoint::query() const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_query");
  kdat_ep_query arg{};
  arg.ep = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_QUERY, arg, "ep_query");
  EpInfo info;
  info.state = static_cast<EpState>(arg.state);
  info.attributes = EpAttributes::from_raw(arg.attr);
  info.local_address.raw = arg.local_addr;
  info.remote_address.raw = arg.remote_addr;
  info.connect_evd = arg.connect_evd;
  info.request_evd = arg.request_evd;
  info.recv_evd = arg.recv_evd;
  info.transitions = arg.transitions;
  return info;
}

void Endpoint::modify(std::uint32_t mask, const EpAttributes &attributes) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_modify");
  kdat_ep_modify arg{};
  arg.ep = handle_;
  arg.mask = mask;
  arg.attr = attributes.to_raw();
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_MODIFY, arg, "ep_modify");
}

void Endpoint::reset() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_reset");
  kdat_ep_reset arg{};
  arg.ep = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_RESET, arg, "ep_reset");
}

void Endpoint::connect(const Address &remote, std::uint64_t conn_qual, Timeout timeout,
                       PrivateDataView private_data, std::uint32_t qos, std::uint32_t flags) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_connect");
  kdat_ep_connect arg{};
  arg.ep = handle_;
  arg.timeout_us = detail::timeout_us(timeout, "ep_connect");
  arg.remote_addr = remote.raw;
  arg.conn_qual = conn_qual;
  arg.qos = qos;
  arg.flags = flags;
  arg.private_data_size = detail::copy_private_data(arg.private_data, private_data, "ep_connect");
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_CONNECT, arg, "ep_connect");
}

void Endpoint::dup_connect(const Endpoint &dup, Timeout timeout, PrivateDataView private_data,
                           std::uint32_t qos) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_dup_connect");
  kdat_ep_dup_connect arg{};
  arg.ep = handle_;
  arg.dup_ep = dup.handle();
  arg.timeout_us = detail::timeout_us(timeout, "ep_dup_connect");
  arg.qos = qos;
  arg.private_data_size =
      detail::copy_private_data(arg.private_data, private_data, "ep_dup_connect");
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_DUP_CONNECT, arg, "ep_dup_connect");
}

void Endpoint::disconnect(CloseMode mode) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_disconnect");
  kdat_ep_disconnect arg{};
  arg.ep = handle_;
  arg.flags = static_cast<std::uint32_t>(mode);
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_DISCONNECT, arg, "ep_disconnect");
}

void Endpoint::free() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_EP, "ep_free");
  kdat_ep_free arg{};
  arg.ep = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_EP_FREE, arg, "ep_free");
  handle_ = 0;
  record_ = nullptr;
}

}  // namespace kdat

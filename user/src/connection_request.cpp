#include <kdat/connection_request.hpp>
#include <kdat/endpoint.hpp>
#include <kdat/evd.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

ConnectionRequest::ConnectionRequest(const Evd &evd, const Event &event) : state_(evd.device()) {
  if (!event.is_connection_request() || event.cr == 0) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER | KDAT_DAT_INVALID_ARG2},
                "connection request from a " + event.name());
  }
  // The CR belongs to the file of the EVD that reported it.
  if (evd.handle() == 0 || event.evd != evd.handle()) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER | KDAT_DAT_INVALID_ARG1},
                "connection request: the event is not from this EVD");
  }
  handle_ = event.cr;
  named_ep_ = event.ep;
}

ConnectionRequest::ConnectionRequest(ConnectionRequest &&other) noexcept
    : state_(std::move(other.state_)),
      handle_(std::exchange(other.handle_, 0)),
      named_ep_(std::exchange(other.named_ep_, 0)) {}

ConnectionRequest &ConnectionRequest::operator=(ConnectionRequest &&other) noexcept {
  if (this != &other) {
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
    named_ep_ = std::exchange(other.named_ep_, 0);
  }
  return *this;
}

void ConnectionRequest::require_pending(const char *what) const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_CR, what);
}

CrInfo ConnectionRequest::query() const {
  require_pending("cr_query");
  kdat_cr_query arg{};
  arg.cr = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_CR_QUERY, arg, "cr_query");
  CrInfo info;
  info.sp = arg.sp;
  info.ep = arg.ep;
  info.remote_rdma_read_in = arg.remote_rdma_read_in;
  info.remote_rdma_read_out = arg.remote_rdma_read_out;
  info.private_data =
      detail::private_data_from(arg.private_data, arg.private_data_size, sizeof(arg.private_data));
  info.remote_address.raw = arg.remote_addr;
  info.local_address.raw = arg.local_addr;
  info.remote_retry_count = arg.remote_retry_count;
  info.remote_rnr_retry_count = arg.remote_rnr_retry_count;
  info.remote_flow_control = arg.remote_flow_control != 0;
  return info;
}

void ConnectionRequest::accept_on(std::uint32_t ep, PrivateDataView private_data) {
  require_pending("cr_accept");
  kdat_cr_accept arg{};
  arg.cr = handle_;
  arg.ep = ep;
  arg.private_data_size = detail::copy_private_data(arg.private_data, private_data, "cr_accept");
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_CR_ACCEPT, arg, "cr_accept");
  handle_ = 0;  // the kernel freed the CR
}

void ConnectionRequest::accept(const Endpoint &ep, PrivateDataView private_data) {
  accept_on(ep.handle(), private_data);
}

void ConnectionRequest::accept(PrivateDataView private_data) { accept_on(0, private_data); }

void ConnectionRequest::reject(PrivateDataView private_data) {
  require_pending("cr_reject");
  kdat_cr_reject arg{};
  arg.cr = handle_;
  arg.private_data_size = detail::copy_private_data(arg.private_data, private_data, "cr_reject");
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_CR_REJECT, arg, "cr_reject");
  handle_ = 0;
}

}  // namespace kdat

#include <kdat/ia.hpp>
#include <kdat/names.hpp>
#include <string>
#include <utility>

#include "detail.hpp"

namespace kdat {

Ia::Ia(const Device &device, std::string_view name) : Ia(device, name, PrivateData::framed) {}

Ia::Ia(const Device &device, std::string_view name, PrivateData format) : state_(device.state()) {
  kdat_ia_open arg{};
  arg.flags = format == PrivateData::raw ? KDAT_IA_PDATA_RAW : 0;
  if (name.size() >= sizeof(arg.name)) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER | KDAT_DAT_INVALID_ARG1},
                "ia_open: name too long");
  }
  name.copy(arg.name, name.size());
  // The name in the text: the netdev or address the kernel did not find is the usual reason.
  const std::string what = "ia_open " + std::string(name);
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_IA_OPEN, arg, what.c_str());
  handle_ = arg.ia;
}

Ia::Ia(Ia &&other) noexcept
    : state_(std::move(other.state_)), handle_(std::exchange(other.handle_, 0)) {}

Ia &Ia::operator=(Ia &&other) noexcept {
  if (this != &other) {
    if (handle_ != 0) {
      try {
        close(CloseMode::abrupt);
      } catch (...) {  // noexcept: the file's close frees it anyway
      }
    }
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

Ia::~Ia() {
  if (handle_ == 0) return;
  kdat_ia_close arg{};
  arg.size = sizeof(arg);
  arg.ia = handle_;
  arg.flags = KDAT_IA_CLOSE_ABRUPT;
  (void)::ioctl(state_->file.get(), KDAT_IOC_IA_CLOSE, &arg);
}

std::vector<IaCounter> Ia::counters() const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_IA, "ia_counters");
  return detail::read_ia_counters(state_->file.get(), 0, handle_);
}

IaAttributes Ia::query() const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_IA, "ia_query");
  kdat_ia_query arg{};
  arg.ia = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_IA_QUERY, arg, "ia_query");
  IaAttributes a;
  a.device_name = fixed_string(arg.device_name);
  a.netdev_name = fixed_string(arg.netdev_name);
  a.local_address.raw = arg.local_addr;
  a.max_connect_private_data = arg.max_connect_private_data;
  a.max_accept_private_data = arg.max_accept_private_data;
  a.max_reject_private_data = arg.max_reject_private_data;
  a.max_rdma_read_in = arg.max_rdma_read_in;
  a.max_rdma_read_out = arg.max_rdma_read_out;
  a.max_eps = arg.max_eps;
  a.max_evd_qlen = arg.max_evd_qlen;
  a.max_dtos = arg.max_dtos;
  a.max_iov = arg.max_iov;
  a.supported_qos = arg.supported_qos;
  return a;
}

void Ia::close(CloseMode mode) {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_IA, "ia_close");
  kdat_ia_close arg{};
  arg.ia = handle_;
  arg.flags = static_cast<std::uint32_t>(mode);
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_IA_CLOSE, arg, "ia_close");
  handle_ = 0;
}

}  // namespace kdat

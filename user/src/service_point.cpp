#include <kdat/endpoint.hpp>
#include <kdat/evd.hpp>
#include <kdat/ia.hpp>
#include <kdat/service_point.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

Psp::Psp(const Ia &ia, const Evd &cr_evd, std::uint64_t conn_qual, PspFlags flags)
    : state_(ia.device()) {
  kdat_psp_create arg{};
  arg.ia = ia.handle();
  arg.evd = cr_evd.handle();
  arg.conn_qual = conn_qual;
  arg.flags = static_cast<std::uint32_t>(flags);
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_PSP_CREATE, arg, "psp_create");
  handle_ = arg.psp;
}

Psp::Psp(Psp &&other) noexcept
    : state_(std::move(other.state_)), handle_(std::exchange(other.handle_, 0)) {}

Psp &Psp::operator=(Psp &&other) noexcept {
  if (this != &other) {
    detail::free_quietly(state_.get(), KDAT_IOC_PSP_FREE, handle_, &kdat_psp_free::psp);
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

Psp::~Psp() { detail::free_quietly(state_.get(), KDAT_IOC_PSP_FREE, handle_, &kdat_psp_free::psp); }

PspInfo Psp::query() const {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_PSP, "psp_query");
  kdat_psp_query arg{};
  arg.psp = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_PSP_QUERY, arg, "psp_query");
  return PspInfo{arg.ia, arg.conn_qual, arg.evd, static_cast<PspFlags>(arg.flags)};
}

void Psp::free() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_PSP, "psp_free");
  kdat_psp_free arg{};
  arg.psp = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_PSP_FREE, arg, "psp_free");
  handle_ = 0;
}

Rsp::Rsp(const Ia &ia, const Endpoint &ep, std::uint64_t conn_qual, const Evd &cr_evd)
    : state_(ia.device()) {
  kdat_rsp_create arg{};
  arg.ia = ia.handle();
  arg.ep = ep.handle();
  arg.conn_qual = conn_qual;
  arg.evd = cr_evd.handle();
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_RSP_CREATE, arg, "rsp_create");
  handle_ = arg.rsp;
}

Rsp::Rsp(Rsp &&other) noexcept
    : state_(std::move(other.state_)), handle_(std::exchange(other.handle_, 0)) {}

Rsp &Rsp::operator=(Rsp &&other) noexcept {
  if (this != &other) {
    detail::free_quietly(state_.get(), KDAT_IOC_RSP_FREE, handle_, &kdat_rsp_free::rsp);
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

Rsp::~Rsp() { detail::free_quietly(state_.get(), KDAT_IOC_RSP_FREE, handle_, &kdat_rsp_free::rsp); }

void Rsp::free() {
  if (handle_ == 0) detail::throw_null_handle(KDAT_DAT_INVALID_HANDLE_RSP, "rsp_free");
  kdat_rsp_free arg{};
  arg.rsp = handle_;
  detail::ioctl_checked(state_->file.get(), KDAT_IOC_RSP_FREE, arg, "rsp_free");
  handle_ = 0;
}

}  // namespace kdat

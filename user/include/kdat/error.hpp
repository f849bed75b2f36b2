// Errors of libkdat: every failure carries a DAT return code (type and subtype).
#pragma once

#if __cplusplus < 202002L
#error "libkdat's headers need C++20 or later (-std=c++20)"
#endif

#include <kdat/uapi/kdat_dat.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kdat {

// A DAT_RETURN value: class | type | subtype, as in dat_error.h.
struct DatReturn {
  std::uint32_t value = KDAT_DAT_SUCCESS;

  [[nodiscard]] std::uint32_t type() const { return value & KDAT_DAT_TYPE_MASK; }
  [[nodiscard]] std::uint32_t subtype() const { return value & KDAT_DAT_SUBTYPE_MASK; }
  [[nodiscard]] bool ok() const { return type() == KDAT_DAT_SUCCESS; }
  friend bool operator==(DatReturn, DatReturn) = default;
};

// The DAT name of a return type, e.g. "DAT_INVALID_STATE".
[[nodiscard]] const char *dat_type_name(std::uint32_t type);
// The DAT name of a subtype, e.g. "DAT_INVALID_ARG5"; nullptr for 0 and for a subtype the kernel
// never reports (uapi/kdat_dat.h lists those it does).
[[nodiscard]] const char *dat_subtype_name(std::uint32_t subtype);
// A DAT_RETURN in words: "DAT_INVALID_PARAMETER (DAT_INVALID_ARG5)", "DAT_TIMEOUT_EXPIRED",
// "DAT_INVALID_STATE (subtype 0x99)" for a subtype without a name.
[[nodiscard]] std::string dat_return_text(DatReturn code);

// Thrown by every libkdat call that fails.  what() is "<what>: <dat_return_text(code)>", then
// any advice in parentheses.
class Error : public std::runtime_error {
 public:
  Error(DatReturn code, const std::string &what);
  // A failed system call: sys_errno is its errno (`what` says it in words already); `advice`,
  // if any, what the user can do about it, appended in parentheses.
  Error(DatReturn code, const std::string &what, int sys_errno, const std::string &advice = {});
  [[nodiscard]] DatReturn code() const { return code_; }
  // The errno of the system call that failed (open, ioctl, mmap), or 0 when the kernel or the
  // library answered with a DAT status instead.
  [[nodiscard]] int sys_errno() const { return errno_; }

 private:
  DatReturn code_;
  int errno_ = 0;
};

// Maps an errno from the device to the DAT code the kernel would have used.
[[nodiscard]] DatReturn dat_from_errno(int err);

}  // namespace kdat

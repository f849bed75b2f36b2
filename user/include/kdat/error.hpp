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

// Thrown by every libkdat call that fails.
class Error : public std::runtime_error {
 public:
  Error(DatReturn code, const std::string &what);
  [[nodiscard]] DatReturn code() const { return code_; }

 private:
  DatReturn code_;
};

// Maps an errno from the device to the DAT code the kernel would have used.
[[nodiscard]] DatReturn dat_from_errno(int err);

}  // namespace kdat

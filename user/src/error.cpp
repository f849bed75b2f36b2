#include <cerrno>
#include <kdat/error.hpp>
#include <string>

namespace kdat {

const char *dat_type_name(std::uint32_t type) {
  switch (type & KDAT_DAT_TYPE_MASK) {
    case KDAT_DAT_SUCCESS: return "DAT_SUCCESS";
    case KDAT_DAT_ABORT: return "DAT_ABORT";
    case KDAT_DAT_CONN_QUAL_IN_USE: return "DAT_CONN_QUAL_IN_USE";
    case KDAT_DAT_INSUFFICIENT_RESOURCES: return "DAT_INSUFFICIENT_RESOURCES";
    case KDAT_DAT_INTERNAL_ERROR: return "DAT_INTERNAL_ERROR";
    case KDAT_DAT_INVALID_HANDLE: return "DAT_INVALID_HANDLE";
    case KDAT_DAT_INVALID_PARAMETER: return "DAT_INVALID_PARAMETER";
    case KDAT_DAT_INVALID_STATE: return "DAT_INVALID_STATE";
    case KDAT_DAT_LENGTH_ERROR: return "DAT_LENGTH_ERROR";
    case KDAT_DAT_MODEL_NOT_SUPPORTED: return "DAT_MODEL_NOT_SUPPORTED";
    case KDAT_DAT_PROVIDER_NOT_FOUND: return "DAT_PROVIDER_NOT_FOUND";
    case KDAT_DAT_PRIVILEGES_VIOLATION: return "DAT_PRIVILEGES_VIOLATION";
    case KDAT_DAT_PROTECTION_VIOLATION: return "DAT_PROTECTION_VIOLATION";
    case KDAT_DAT_QUEUE_EMPTY: return "DAT_QUEUE_EMPTY";
    case KDAT_DAT_QUEUE_FULL: return "DAT_QUEUE_FULL";
    case KDAT_DAT_TIMEOUT_EXPIRED: return "DAT_TIMEOUT_EXPIRED";
    case KDAT_DAT_INVALID_ADDRESS: return "DAT_INVALID_ADDRESS";
    case KDAT_DAT_INTERRUPTED_CALL: return "DAT_INTERRUPTED_CALL";
    case KDAT_DAT_CONN_QUAL_UNAVAILABLE: return "DAT_CONN_QUAL_UNAVAILABLE";
    case KDAT_DAT_NOT_IMPLEMENTED: return "DAT_NOT_IMPLEMENTED";
    default: return "DAT_(unknown)";
  }
}

static std::string describe(DatReturn code, const std::string &what) {
  std::string text = what + ": " + dat_type_name(code.type());
  if (code.subtype() != 0) {
    text += " (subtype " + std::to_string(code.subtype()) + ")";
  }
  return text;
}

Error::Error(DatReturn code, const std::string &what)
    : std::runtime_error(describe(code, what)), code_(code) {}

DatReturn dat_from_errno(int err) {
  switch (err) {
    case 0: return {KDAT_DAT_SUCCESS};
    case ENOMEM:
      return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INSUFFICIENT_RESOURCES | KDAT_DAT_RESOURCE_MEMORY};
    case ENOENT:
    case ENODEV:
    case ENXIO: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_PROVIDER_NOT_FOUND};
    case EBADF: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_HANDLE};
    case EINVAL:
    case EFAULT:
    case ENOTTY: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER};
    case EINTR: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERRUPTED_CALL};
    case ETIMEDOUT: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_TIMEOUT_EXPIRED};
    case EACCES:
    case EPERM: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_PRIVILEGES_VIOLATION};
    default: return {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INTERNAL_ERROR};
  }
}

}  // namespace kdat

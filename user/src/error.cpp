#include <cerrno>
#include <cstdio>
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

const char *dat_subtype_name(std::uint32_t subtype) {
  switch (subtype & KDAT_DAT_SUBTYPE_MASK) {
#define KDAT_SUBTYPE_(name) \
  case KDAT_DAT_##name: return "DAT_" #name;
    KDAT_SUBTYPE_(SUB_INTERRUPTED)
    KDAT_SUBTYPE_(RESOURCE_MEMORY)
    KDAT_SUBTYPE_(RESOURCE_DEVICE)
    KDAT_SUBTYPE_(RESOURCE_TEP)
    KDAT_SUBTYPE_(RESOURCE_TEVD)
    KDAT_SUBTYPE_(RESOURCE_PROTECTION_DOMAIN)
    KDAT_SUBTYPE_(RESOURCE_MEMORY_REGION)
    KDAT_SUBTYPE_(RESOURCE_CREDITS)
    KDAT_SUBTYPE_(INVALID_HANDLE_IA)
    KDAT_SUBTYPE_(INVALID_HANDLE_EP)
    KDAT_SUBTYPE_(INVALID_HANDLE_LMR)
    KDAT_SUBTYPE_(INVALID_HANDLE_RMR)
    KDAT_SUBTYPE_(INVALID_HANDLE_PZ)
    KDAT_SUBTYPE_(INVALID_HANDLE_PSP)
    KDAT_SUBTYPE_(INVALID_HANDLE_RSP)
    KDAT_SUBTYPE_(INVALID_HANDLE_CR)
    KDAT_SUBTYPE_(INVALID_HANDLE_EVD_CR)
    KDAT_SUBTYPE_(INVALID_HANDLE_EVD_REQUEST)
    KDAT_SUBTYPE_(INVALID_HANDLE_EVD_RECV)
    KDAT_SUBTYPE_(INVALID_HANDLE_EVD_CONN)
    KDAT_SUBTYPE_(INVALID_HANDLE_EVD_ASYNC)
    KDAT_SUBTYPE_(INVALID_HANDLE1)
    KDAT_SUBTYPE_(INVALID_HANDLE2)
    KDAT_SUBTYPE_(INVALID_ARG1)
    KDAT_SUBTYPE_(INVALID_ARG2)
    KDAT_SUBTYPE_(INVALID_ARG3)
    KDAT_SUBTYPE_(INVALID_ARG4)
    KDAT_SUBTYPE_(INVALID_ARG5)
    KDAT_SUBTYPE_(INVALID_ARG6)
    KDAT_SUBTYPE_(INVALID_ARG7)
    KDAT_SUBTYPE_(INVALID_ARG8)
    KDAT_SUBTYPE_(INVALID_STATE_EP_UNCONNECTED)
    KDAT_SUBTYPE_(INVALID_STATE_EP_ACTCONNPENDING)
    KDAT_SUBTYPE_(INVALID_STATE_EP_PASSCONNPENDING)
    KDAT_SUBTYPE_(INVALID_STATE_EP_TENTCONNPENDING)
    KDAT_SUBTYPE_(INVALID_STATE_EP_CONNECTED)
    KDAT_SUBTYPE_(INVALID_STATE_EP_DISCONNECTED)
    KDAT_SUBTYPE_(INVALID_STATE_EP_RESERVED)
    KDAT_SUBTYPE_(INVALID_STATE_EP_COMPLPENDING)
    KDAT_SUBTYPE_(INVALID_STATE_EP_DISCPENDING)
    KDAT_SUBTYPE_(INVALID_STATE_EP_NOTREADY)
    KDAT_SUBTYPE_(INVALID_STATE_EVD_IN_USE)
    KDAT_SUBTYPE_(INVALID_STATE_EVD_WAITER)
    KDAT_SUBTYPE_(INVALID_STATE_IA_IN_USE)
#undef KDAT_SUBTYPE_
    default: return nullptr;
  }
}

std::string dat_return_text(DatReturn code) {
  std::string text = dat_type_name(code.type());
  if (code.subtype() == 0) return text;
  if (const char *name = dat_subtype_name(code.subtype())) return text + " (" + name + ")";
  char number[32];
  std::snprintf(number, sizeof(number), " (subtype 0x%x)", code.subtype());
  return text + number;
}

Error::Error(DatReturn code, const std::string &what)
    : std::runtime_error(what + ": " + dat_return_text(code)), code_(code) {}

Error::Error(DatReturn code, const std::string &what, int sys_errno, const std::string &advice)
    : std::runtime_error(what + ": " + dat_return_text(code) +
                         (advice.empty() ? "" : " (" + advice + ")")),
      code_(code),
      errno_(sys_errno) {}

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

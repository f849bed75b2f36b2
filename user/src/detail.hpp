// libkdat internals: the shared open file and the ioctl plumbing.
#pragma once

#include <kdat/uapi/kdat.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>
#include <kdat/device.hpp>
#include <kdat/error.hpp>
#include <kdat/table.hpp>
#include <kdat/types.hpp>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kdat::detail {

// A user-QP EP of this file, told about its connection events by the Evd that takes them
// (user_qp.cpp).  Called with DeviceState::uqp_mutex held; must not throw.
class UserQpHook {
 public:
  virtual void on_connect_response() noexcept = 0;  // KDAT_EVENT_UQP_CONNECT_RESPONSE
  virtual void on_connection_event() noexcept = 0;  // any DAT connection event of the EP

 protected:
  ~UserQpHook() = default;
};

struct DeviceState {
  explicit DeviceState(UniqueFd fd) : file(std::move(fd)) {}
  // The own table, mapped on first use (call_once retries if mapping throws).
  const TableView &own_table();

  UniqueFd file;
  std::once_flag table_once;
  MappedRegion table_region;
  TableView table_view;
  // The live UserEndpoints of this file, by EP handle.
  std::mutex uqp_mutex;
  std::unordered_map<std::uint32_t, UserQpHook *> uqps;
};

// For every event an Evd takes: lets the EP's UserEndpoint act on it.  True if the event was
// kdat-internal (KDAT_EVENT_UQP_CONNECT_RESPONSE) and is consumed: the caller takes the next one.
[[nodiscard]] bool user_qp_filter(DeviceState &state, const Event &event) noexcept;

[[noreturn]] void throw_errno(int err, const char *what);

// Issue one ioctl with arg.size set; the ioctl failing itself (EINVAL, EFAULT, ...) throws.
// The DAT status is left for the caller.
template <typename Struct>
void ioctl_raw(int fd, unsigned long cmd, Struct &arg, const char *what) {
  arg.size = sizeof(Struct);
  if (::ioctl(fd, cmd, &arg) != 0) throw_errno(errno, what);
}

// ioctl_raw, and a DAT status other than success throws Error(status).
template <typename Struct>
void ioctl_checked(int fd, unsigned long cmd, Struct &arg, const char *what) {
  ioctl_raw(fd, cmd, arg, what);
  const DatReturn status{arg.status};
  if (!status.ok()) throw Error(status, what);
}

// KDAT_IOC_IA_COUNTERS on an open /dev/kdat file (kdat::ia_counters, Ia::counters).
[[nodiscard]] std::vector<IaCounter> read_ia_counters(int fd, std::uint64_t table,
                                                      std::uint32_t ia);

// A freed or moved-from object: the error the kernel gives for handle 0.
[[noreturn]] void throw_null_handle(std::uint32_t subtype, const char *what);

// Timeout -> µs for the ABI (KDAT_TIMEOUT_INFINITE for infinite).
[[nodiscard]] std::uint32_t timeout_us(Timeout timeout, const char *what);

// Copy private data into an ABI buffer; more than it holds is DAT_LENGTH_ERROR.
template <std::size_t N>
[[nodiscard]] std::int32_t copy_private_data(std::uint8_t (&dst)[N], PrivateDataView data,
                                             const char *what) {
  if (data.size() > N) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_LENGTH_ERROR},
                std::string(what) + ": " + std::to_string(data.size()) + " bytes of private data");
  }
  if (!data.empty()) std::memcpy(dst, data.data(), data.size());
  return static_cast<std::int32_t>(data.size());
}

[[nodiscard]] PrivateData private_data_from(const std::uint8_t *data, std::uint32_t size,
                                            std::size_t capacity);

// Free a kernel object in a destructor: errors are swallowed (the file's close frees it anyway).
template <typename Struct>
void free_quietly(DeviceState *state, unsigned long cmd, std::uint32_t handle,
                  std::uint32_t Struct::*field) noexcept {
  if (state == nullptr || handle == 0) return;
  Struct arg{};
  arg.size = sizeof(Struct);
  arg.*field = handle;
  (void)::ioctl(state->file.get(), cmd, &arg);
}

}  // namespace kdat::detail

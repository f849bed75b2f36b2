// The /dev/kdat character device: RAII owner of one open file.
#pragma once

#include <cstdint>
#include <kdat/error.hpp>
#include <string>

namespace kdat {

struct Version {
  std::uint32_t abi = 0;        // KDAT_ABI_VERSION of the running module
  std::uint32_t dat_major = 0;  // DAT API version served
  std::uint32_t dat_minor = 0;
  std::uint32_t num_devices = 0;  // RDMA devices the module sees
};

// One open file of /dev/kdat.  Every object created through it belongs to it and
// is torn down by the kernel when it closes.  Move-only.  Thread-safety: the
// ioctls it issues are safe to call from several threads at once.
class Device {
 public:
  static constexpr const char *default_path = "/dev/kdat";

  explicit Device(const std::string &path = default_path);
  Device(Device &&other) noexcept;
  Device &operator=(Device &&other) noexcept;
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device();

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] Version version() const;

 private:
  int fd_ = -1;
};

}  // namespace kdat

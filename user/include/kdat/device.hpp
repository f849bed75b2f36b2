// The /dev/kdat character device: RAII owner of one open file.
#pragma once

#include <cstdint>
#include <kdat/error.hpp>
#include <kdat/table.hpp>
#include <memory>
#include <string>

namespace kdat {

struct Version {
  std::uint32_t abi = 0;        // KDAT_ABI_VERSION of the running module
  std::uint32_t dat_major = 0;  // DAT API version served
  std::uint32_t dat_minor = 0;
  std::uint32_t num_devices = 0;  // RDMA devices the module sees
};

// An owned file descriptor, closed on destruction.  Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(other.release()) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept;
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

namespace detail {
// The open file and its lazily mapped own table, shared by the Device and every object made
// through it, so the file stays open (and its objects alive) while any of them is.
struct DeviceState;
}  // namespace detail

// One open file of /dev/kdat.  Every object created through it belongs to it; the kernel tears
// them all down when the last reference (the Device or any object made from it) goes away.
// Move-only.  Thread-safety: all members may be called from several threads at once.
class Device {
 public:
  static constexpr const char *default_path = "/dev/kdat";

  explicit Device(const std::string &path = default_path);
  Device(Device &&other) noexcept = default;
  Device &operator=(Device &&other) noexcept = default;
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device();

  [[nodiscard]] int fd() const;
  [[nodiscard]] Version version() const;
  // This file's own object table, mapped read-only at KDAT_MMAP_TABLE on first use.
  [[nodiscard]] const TableView &table() const;

  // For the library's objects: the shared open file.
  [[nodiscard]] const std::shared_ptr<detail::DeviceState> &state() const { return state_; }

 private:
  std::shared_ptr<detail::DeviceState> state_;
};

}  // namespace kdat

#include <fcntl.h>
#include <sys/ioctl.h>
#include <uapi/kdat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <kdat/device.hpp>
#include <utility>

namespace kdat {

Device::Device(const std::string &path) : fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {
  if (fd_ < 0) {
    const int err = errno;
    throw Error(dat_from_errno(err), "open " + path + ": " + std::strerror(err));
  }
}

Device::Device(Device &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

Device &Device::operator=(Device &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Device::~Device() {
  if (fd_ >= 0) ::close(fd_);
}

Version Device::version() const {
  kdat_version v{};
  v.size = sizeof(v);
  if (::ioctl(fd_, KDAT_IOC_VERSION, &v) != 0) {
    const int err = errno;
    throw Error(dat_from_errno(err), std::string("KDAT_IOC_VERSION: ") + std::strerror(err));
  }
  return Version{v.abi_version, v.dat_major, v.dat_minor, v.num_devices};
}

}  // namespace kdat

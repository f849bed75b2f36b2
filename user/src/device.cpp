#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <kdat/device.hpp>
#include <utility>

#include "detail.hpp"

namespace kdat {

namespace detail {

void throw_errno(int err, const char *what) {
  // The kernel refuses a command it does not know, or a struct longer than it knows with a
  // non-zero tail: libkdat is newer than the module, or the file is not kdat's.
  const bool abi = err == ENOTTY || err == E2BIG;
  throw Error(dat_from_errno(err), std::string(what) + ": " + std::strerror(err), err,
              abi ? "is this kdat's /dev/kdat, and is the loaded kdat.ko as new as libkdat? "
                    "'kdatctl version' shows both"
                  : "");
}

void throw_null_handle(std::uint32_t subtype, const char *what) {
  throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_HANDLE | subtype},
              std::string(what) + ": object already freed");
}

std::uint32_t timeout_us(Timeout timeout, const char *what) {
  if (timeout == infinite) return KDAT_TIMEOUT_INFINITE;
  // The largest finite value is one below the INFINITE marker.
  if (timeout.count() < 0 || timeout.count() >= static_cast<Timeout::rep>(KDAT_TIMEOUT_INFINITE)) {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER},
                std::string(what) + ": timeout out of range");
  }
  return static_cast<std::uint32_t>(timeout.count());
}

PrivateData private_data_from(const std::uint8_t *data, std::uint32_t size, std::size_t capacity) {
  const auto *bytes = reinterpret_cast<const std::byte *>(data);
  return PrivateData(bytes, bytes + std::min<std::size_t>(size, capacity));
}

const TableView &DeviceState::own_table() {
  std::call_once(table_once, [this] {
    table_region = MappedRegion::map(file.get(), KDAT_MMAP_TABLE, KDAT_TABLE_MAP_SIZE, PROT_READ,
                                     "mmap table");
    table_view = TableView(table_region.data(), table_region.size());
  });
  return table_view;
}

}  // namespace detail

UniqueFd &UniqueFd::operator=(UniqueFd &&other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// What to do about the usual reasons /dev/kdat does not open.
std::string open_advice(int err) {
  switch (err) {
    case ENOENT:
    case ENODEV:
    case ENXIO:
      return "is the kdat module loaded? 'modprobe kdat' loads it; 'lsmod | grep kdat' shows it";
    case EACCES:
    case EPERM:
      return "the node's mode and group decide who may open it: kdat's udev rule gives it to "
             "group 'rdma' ('adduser USER rdma', then log in again; 'ls -l /dev/kdat' shows the "
             "node's), or run as root";
    default: return "";
  }
}

}  // namespace

Device::Device(const std::string &path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw Error(dat_from_errno(err), "open " + path + ": " + std::strerror(err), err,
                open_advice(err));
  }
  state_ = std::make_shared<detail::DeviceState>(std::move(fd));
}

Device::~Device() = default;

int Device::fd() const { return state_ ? state_->file.get() : -1; }

Version Device::version() const {
  kdat_version v{};
  detail::ioctl_raw(fd(), KDAT_IOC_VERSION, v, "KDAT_IOC_VERSION");
  return Version{v.abi_version, v.dat_major, v.dat_minor, v.num_devices};
}

const TableView &Device::table() const { return state_->own_table(); }

}  // namespace kdat

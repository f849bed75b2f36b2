// Service points: a PSP listens on a connection qualifier for any number of requests, an RSP
// reserves one EP for exactly one request.
#pragma once

#include <cstdint>
#include <kdat/device.hpp>
#include <memory>

namespace kdat {

class Ia;
class Evd;
class Endpoint;

enum class PspFlags : std::uint32_t {
  consumer = KDAT_PSP_CONSUMER,  // the consumer brings the EP to accept on
  provider = KDAT_PSP_PROVIDER,  // kdat makes an EP per request (see Endpoint::adopt)
};

struct PspInfo {
  std::uint32_t ia = 0;
  std::uint64_t conn_qual = 0;
  std::uint32_t evd = 0;
  PspFlags flags = PspFlags::consumer;
};

// A PSP; destruction frees it (errors ignored).  Move-only.  Thread-safety: as Ia.
class Psp {
 public:
  // cr_evd: an EVD created with KDAT_EVD_CR; conn_qual: the port, 1..65535.
  Psp(const Ia &ia, const Evd &cr_evd, std::uint64_t conn_qual,
      PspFlags flags = PspFlags::consumer);
  Psp(Psp &&other) noexcept;
  Psp &operator=(Psp &&other) noexcept;
  Psp(const Psp &) = delete;
  Psp &operator=(const Psp &) = delete;
  ~Psp();

  [[nodiscard]] std::uint32_t handle() const { return handle_; }
  [[nodiscard]] PspInfo query() const;
  void free();

 private:
  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
};

// An RSP: `ep` (UNCONNECTED) becomes RESERVED until the one request arrives or the RSP is freed.
// Destruction frees it (errors ignored).  Move-only.  Thread-safety: as Ia.
class Rsp {
 public:
  Rsp(const Ia &ia, const Endpoint &ep, std::uint64_t conn_qual, const Evd &cr_evd);
  Rsp(Rsp &&other) noexcept;
  Rsp &operator=(Rsp &&other) noexcept;
  Rsp(const Rsp &) = delete;
  Rsp &operator=(const Rsp &) = delete;
  ~Rsp();

  [[nodiscard]] std::uint32_t handle() const { return handle_; }
  void free();

 private:
  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
};

}  // namespace kdat

// Interface adapter: an RDMA device, opened by netdev name or IP address.
#pragma once

#include <cstdint>
#include <kdat/device.hpp>
#include <kdat/table.hpp>
#include <kdat/types.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kdat {

// How to close an IA or disconnect an EP (DAT_CLOSE_FLAGS).
enum class CloseMode : std::uint32_t {
  abrupt = KDAT_CLOSE_ABRUPT,      // IA: free what it owns; EP: tear the connection down now
  graceful = KDAT_CLOSE_GRACEFUL,  // IA: refuse while it owns anything; EP: let requests drain
};
static_assert(KDAT_IA_CLOSE_ABRUPT == KDAT_CLOSE_ABRUPT &&
              KDAT_IA_CLOSE_GRACEFUL == KDAT_CLOSE_GRACEFUL);

struct IaAttributes {
  std::string device_name;  // the RDMA device, e.g. rxe_kdat0
  std::string netdev_name;
  Address local_address;
  std::uint32_t max_connect_private_data = 0;
  std::uint32_t max_accept_private_data = 0;
  std::uint32_t max_reject_private_data = 0;
  std::uint32_t max_rdma_read_in = 0;
  std::uint32_t max_rdma_read_out = 0;
  std::uint32_t max_eps = 0;
  std::uint32_t max_evd_qlen = 0;
  std::uint32_t max_dtos = 0;
  std::uint32_t max_iov = 0;
  std::uint32_t supported_qos = 0;
};

// An open IA.  Destruction closes it abruptly (freeing whatever it still owns) unless close()
// ran.  Move-only; a moved-from Ia has handle 0.  Thread-safety: calls on one Ia may run
// concurrently (the kernel serialises them), but not concurrently with its destruction or a move.
class Ia {
 public:
  // How the IA's private data goes on the wire (KDAT_IA_PDATA_RAW in <kdat/uapi/kdat.h>):
  // framed (kdat peers get exactly the bytes sent) or raw (byte-exact with plain rdma_cm peers).
  enum class PrivateData { framed, raw };

  // `name` is a netdev name ("kdat0") or an IP literal ("192.0.2.1").
  Ia(const Device &device, std::string_view name);
  Ia(const Device &device, std::string_view name, PrivateData format);
  Ia(Ia &&other) noexcept;
  Ia &operator=(Ia &&other) noexcept;
  Ia(const Ia &) = delete;
  Ia &operator=(const Ia &) = delete;
  ~Ia();

  [[nodiscard]] std::uint32_t handle() const { return handle_; }
  [[nodiscard]] IaAttributes query() const;
  // Its connection counters (kdat::ia_counters of this IA).
  [[nodiscard]] std::vector<IaCounter> counters() const;
  // Graceful fails with DAT_INVALID_STATE while EPs, EVDs, ... exist (the IA stays open then).
  void close(CloseMode mode = CloseMode::graceful);

  [[nodiscard]] const std::shared_ptr<detail::DeviceState> &device() const { return state_; }

 private:
  std::shared_ptr<detail::DeviceState> state_;
  std::uint32_t handle_ = 0;
};

}  // namespace kdat

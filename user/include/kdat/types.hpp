// Value types shared by the libkdat API: timeouts, addresses, private data, events.
// All of them are plain values: copyable, and safe to use from any thread like any value.
#pragma once

#include <kdat/uapi/kdat.h>
#include <kdat/uapi/kdat_dat.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <kdat/error.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kdat {

// DAT timeouts are microseconds; `infinite` waits forever (KDAT_TIMEOUT_INFINITE).  Longer finite
// timeouts than the ABI can carry (about 71 minutes) are refused with DAT_INVALID_PARAMETER.
using Timeout = std::chrono::microseconds;
inline constexpr Timeout infinite = Timeout::max();

// Private data as the caller hands it over: any contiguous bytes.
using PrivateDataView = std::span<const std::byte>;
// ...and as libkdat hands it back.
using PrivateData = std::vector<std::byte>;

// Helpers to build private data from text (tests, tools): no terminating NUL is sent.
[[nodiscard]] inline PrivateDataView as_private_data(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}
[[nodiscard]] inline std::string to_string(PrivateDataView data) {
  return std::string(reinterpret_cast<const char *>(data.data()), data.size());
}

// An IPv4 or IPv6 address with a port: the ABI's struct kdat_addr.
struct Address {
  kdat_addr raw{};

  // "192.0.2.1" or "2001:db8::1" (optionally "[...]"); throws Error(DAT_INVALID_ADDRESS).
  [[nodiscard]] static Address parse(std::string_view literal, std::uint16_t port = 0);
  [[nodiscard]] bool empty() const { return raw.family == 0; }
  [[nodiscard]] std::uint16_t port() const { return raw.port; }
  // "192.0.2.1:20000", "[2001:db8::1]:20000", "-" for none.
  [[nodiscard]] std::string to_string() const;
};

// The peer a UD EP's exchange named (ABI 7): the UD tail (struct kdat_event_ud) of the connection
// event that ended one of its exchanges -- an ep_connect's SIDR request (its ESTABLISHED, or the
// PEER_REJECTED, UNREACHABLE or TIMED_OUT that ended it) or a request the EP accepted.
struct UdPeer {
  kdat_uqp_ah ah{};        // its address vector (to_ibv_ah_attr, user_qp.hpp), if ah_valid
  bool ah_valid = false;   // the kernel gave one (on InfiniBand a passive side gets none)
  bool passive = false;    // the peer asked and this EP accepted; else our connect was answered
  Address address;         // its IA address and connection qualifier
  std::uint32_t qpn = 0;   // its UD QP; 0 if it did not say (a raw IA's peer)
  std::uint32_t qkey = 0;  // its Q_Key, for a send's remote_qkey

  // nullopt unless raw.flags has KDAT_UD_EVENT (the tail of every other event is zero).
  [[nodiscard]] static std::optional<UdPeer> from_raw(const kdat_event_ud &raw);
  // "qpn 0x12 qkey 0x1234567 192.0.2.1:20000 passive" (+ " ah" when the AH is valid).
  [[nodiscard]] std::string to_string() const;
};

// One event as dat_evd_wait/dequeue return it.
struct Event {
  std::uint32_t number = 0;  // DAT_EVENT_NUMBER (KDAT_DAT_*_EVENT*)
  std::uint32_t evd = 0;     // the EVD it came from
  std::uint32_t ep = 0;      // connection and DTO events; the EP a CR names
  std::uint32_t sp = 0;      // CR events: the PSP or RSP
  std::uint32_t cr = 0;      // CR events: the connection request
  std::uint32_t dto_status = 0;
  std::uint64_t cookie = 0;
  std::uint32_t transfered_length = 0;
  PrivateData private_data;  // connection events: the peer's private data
  // A UD EP's connection event (the tail's KDAT_UD_EVENT): whom its exchange reached.
  std::optional<UdPeer> ud;

  // An event without its UD tail (as ABI 6 and older kernels give it).
  [[nodiscard]] static Event from_raw(const kdat_event &raw);
  // An event and its UD tail, as EVD_WAIT, EVD_DEQUEUE and ring entries (ABI 7) give them.
  [[nodiscard]] static Event from_raw(const kdat_event &raw, const kdat_event_ud &ud);
  // "CONNECTION_EVENT_ESTABLISHED", "CONNECTION_REQUEST_EVENT", ...
  [[nodiscard]] std::string name() const;
  [[nodiscard]] bool is_connection_request() const {
    return number == KDAT_DAT_CONNECTION_REQUEST_EVENT;
  }
  [[nodiscard]] bool is_connection_event() const {
    return (number & 0xf000u) == 0x4000u;  // DAT_CONNECTION_EVENT_* are 0x400x
  }
  [[nodiscard]] bool is_dto_completion() const { return number == KDAT_DAT_DTO_COMPLETION_EVENT; }
  [[nodiscard]] std::string private_data_string() const { return to_string(private_data); }
};

}  // namespace kdat

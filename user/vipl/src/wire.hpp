// What VIPL on kdat puts into the connection private data, and how a discriminator picks its
// connection qualifier.  Pure functions (host-tested in vipl_wire_test).
//
// Every message starts with 'V' 'I', version 1, a kind byte.  All numbers are big-endian.
//   request (client or peer), at most 16 + 2 * 16 = 48 bytes, within RoCE's 52:
//     0 'V' 'I' 1 kind | 4 reliability | 5 flags (1 = RDMA write, 2 = RDMA read)
//     | 6 local disc len | 7 remote disc len | 8 MaxTransferSize | 12 QoS
//     | 16 local discriminator, then remote discriminator
//   accept: the same first 16 bytes (the accepting VI's attributes), lens 0.
//   reject: 'V' 'I' 1 kind=reject | 4 reason (1 = VipConnectReject, 2 = no match,
//     3 = peer VIs of different reliability levels)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace vipl {

inline constexpr std::size_t max_discriminator = 16;
inline constexpr std::size_t header_size = 16;
// Discriminators are listened for on 16384 + hash % 16384: below Linux's ephemeral port range,
// so an active connection's automatic local port never takes one.
inline constexpr std::uint16_t conn_qual_base = 16384;
inline constexpr std::uint16_t conn_qual_count = 16384;

enum class Kind : std::uint8_t { client = 1, peer = 2, accept = 3, reject = 4 };
// mismatch: a peer connection between VIs of different reliability levels.
enum class RejectReason : std::uint8_t { rejected = 1, no_match = 2, mismatch = 3 };

struct Attributes {
  std::uint8_t reliability = 0;
  bool rdma_write = false;
  bool rdma_read = false;
  std::uint32_t max_transfer_size = 0;
  std::uint32_t qos = 0;
  friend bool operator==(const Attributes &, const Attributes &) = default;
};

using Bytes = std::vector<std::uint8_t>;

struct Request {
  Kind kind = Kind::client;
  Attributes attributes;
  Bytes local_discriminator;   // the requester's LocalAddr discriminator
  Bytes remote_discriminator;  // the one it asks for
  friend bool operator==(const Request &, const Request &) = default;
};

// FNV-1a (32 bit) of the bytes, folded into the qualifier range.
[[nodiscard]] inline std::uint16_t conn_qual(std::span<const std::uint8_t> discriminator) {
  std::uint32_t h = 2166136261u;
  for (const auto b : discriminator) {
    h ^= b;
    h *= 16777619u;
  }
  return static_cast<std::uint16_t>(conn_qual_base + h % conn_qual_count);
}

namespace detail {
inline void put32(std::uint8_t *p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 24);
  p[1] = static_cast<std::uint8_t>(v >> 16);
  p[2] = static_cast<std::uint8_t>(v >> 8);
  p[3] = static_cast<std::uint8_t>(v);
}
inline std::uint32_t get32(const std::uint8_t *p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 |
         std::uint32_t{p[3]};
}
inline Bytes header(Kind kind, const Attributes &a) {
  Bytes out(header_size, 0);
  out[0] = 'V';
  out[1] = 'I';
  out[2] = 1;
  out[3] = static_cast<std::uint8_t>(kind);
  out[4] = a.reliability;
  out[5] = static_cast<std::uint8_t>((a.rdma_write ? 1 : 0) | (a.rdma_read ? 2 : 0));
  put32(&out[8], a.max_transfer_size);
  put32(&out[12], a.qos);
  return out;
}
inline bool is_vipl(std::span<const std::uint8_t> in, Kind kind) {
  return in.size() >= 4 && in[0] == 'V' && in[1] == 'I' && in[2] == 1 &&
         in[3] == static_cast<std::uint8_t>(kind);
}
inline Attributes attributes(std::span<const std::uint8_t> in) {
  return Attributes{in[4], (in[5] & 1) != 0, (in[5] & 2) != 0, get32(&in[8]), get32(&in[12])};
}
}  // namespace detail

[[nodiscard]] inline Bytes encode_request(const Request &r) {
  Bytes out = detail::header(r.kind, r.attributes);
  out[6] = static_cast<std::uint8_t>(r.local_discriminator.size());
  out[7] = static_cast<std::uint8_t>(r.remote_discriminator.size());
  out.insert(out.end(), r.local_discriminator.begin(), r.local_discriminator.end());
  out.insert(out.end(), r.remote_discriminator.begin(), r.remote_discriminator.end());
  return out;
}

// nullopt for anything that is not exactly a VIPL request.
[[nodiscard]] inline std::optional<Request> decode_request(std::span<const std::uint8_t> in) {
  if (in.size() < header_size) return std::nullopt;
  const bool client = detail::is_vipl(in, Kind::client);
  if (!client && !detail::is_vipl(in, Kind::peer)) return std::nullopt;
  const std::size_t l = in[6], r = in[7];
  if (l > max_discriminator || r > max_discriminator || in.size() != header_size + l + r)
    return std::nullopt;
  Request out;
  out.kind = client ? Kind::client : Kind::peer;
  out.attributes = detail::attributes(in);
  out.local_discriminator.assign(in.begin() + header_size, in.begin() + header_size + l);
  out.remote_discriminator.assign(in.begin() + header_size + l, in.end());
  return out;
}

[[nodiscard]] inline Bytes encode_accept(const Attributes &a) {
  return detail::header(Kind::accept, a);
}

[[nodiscard]] inline std::optional<Attributes> decode_accept(std::span<const std::uint8_t> in) {
  if (in.size() != header_size || !detail::is_vipl(in, Kind::accept)) return std::nullopt;
  return detail::attributes(in);
}

[[nodiscard]] inline Bytes encode_reject(RejectReason reason) {
  return Bytes{'V', 'I', 1, static_cast<std::uint8_t>(Kind::reject),
               static_cast<std::uint8_t>(reason)};
}

[[nodiscard]] inline std::optional<RejectReason> decode_reject(std::span<const std::uint8_t> in) {
  if (in.size() != 5 || !detail::is_vipl(in, Kind::reject)) return std::nullopt;
  if (in[4] < static_cast<std::uint8_t>(RejectReason::rejected) ||
      in[4] > static_cast<std::uint8_t>(RejectReason::mismatch))
    return std::nullopt;
  return static_cast<RejectReason>(in[4]);
}

}  // namespace vipl

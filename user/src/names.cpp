#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <kdat/ep_state.hpp>
#include <kdat/error.hpp>
#include <kdat/names.hpp>
#include <kdat/types.hpp>
#include <string>

namespace kdat {

std::string event_name(std::uint32_t number) {
  switch (number) {
    case 0: return "NONE";
#define KDAT_CXX_EVENT_(name) \
  case KDAT_DAT_##name: return #name;
      KDAT_CXX_EVENT_(DTO_COMPLETION_EVENT)
      KDAT_CXX_EVENT_(RMR_BIND_COMPLETION_EVENT)
      KDAT_CXX_EVENT_(CONNECTION_REQUEST_EVENT)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_ESTABLISHED)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_PEER_REJECTED)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_NON_PEER_REJECTED)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_DISCONNECTED)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_BROKEN)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_TIMED_OUT)
      KDAT_CXX_EVENT_(CONNECTION_EVENT_UNREACHABLE)
      KDAT_CXX_EVENT_(ASYNC_ERROR_EVD_OVERFLOW)
      KDAT_CXX_EVENT_(ASYNC_ERROR_IA_CATASTROPHIC)
      KDAT_CXX_EVENT_(ASYNC_ERROR_EP_BROKEN)
      KDAT_CXX_EVENT_(SOFTWARE_EVENT)
#undef KDAT_CXX_EVENT_
    default: {
      char text[32];
      std::snprintf(text, sizeof(text), "EVENT_0x%x", number);
      return text;
    }
  }
}

const char *record_type_name(std::uint32_t type) {
  switch (type) {
    case KDAT_REC_FREE: return "FREE";
    case KDAT_REC_IA: return "IA";
    case KDAT_REC_EVD: return "EVD";
    case KDAT_REC_EP: return "EP";
    case KDAT_REC_PSP: return "PSP";
    case KDAT_REC_RSP: return "RSP";
    case KDAT_REC_CR: return "CR";
    default: return "?";
  }
}

namespace {

std::string hex(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "%x", value);
  return text;
}

}  // namespace

std::string record_state_name(const kdat_record &record) {
  switch (record.type) {
    case KDAT_REC_EP: return ep_state_name(record.state);
    case KDAT_REC_PSP:
    case KDAT_REC_RSP:
      if (record.state == KDAT_SP_LISTENING) return "LISTENING";
      if (record.state == KDAT_SP_USED) return "USED";
      break;
    case KDAT_REC_CR:
      if (record.state == KDAT_CR_PENDING) return "PENDING";
      if (record.state == KDAT_CR_REMOTE_GONE) return "REMOTE_GONE";
      break;
    case KDAT_REC_IA:
      if (record.state == KDAT_IA_UP) return "UP";
      if (record.state == KDAT_IA_DEVICE_REMOVED) return "DEVICE_REMOVED";
      break;
    case KDAT_REC_EVD: {  // the streams that may feed it (KDAT_EVD_* flags)
      std::string text;
      if (record.state & KDAT_EVD_DTO) text += "DTO|";
      if (record.state & KDAT_EVD_CONNECTION) text += "CONNECTION|";
      if (record.state & KDAT_EVD_CR) text += "CR|";
      if (record.state & ~KDAT_EVD_FLAGS_ALL)
        text += "0x" + hex(record.state & ~KDAT_EVD_FLAGS_ALL) + "|";
      if (text.empty()) return "NONE";
      text.pop_back();
      return text;
    }
    case KDAT_REC_FREE: return "-";
    default: break;
  }
  return "STATE_" + std::to_string(record.state);
}

Address Address::parse(std::string_view literal, std::uint16_t port) {
  std::string text(literal);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  Address a;
  a.raw.port = port;
  if (::inet_pton(AF_INET, text.c_str(), a.raw.addr) == 1) {
    a.raw.family = KDAT_AF_INET;
  } else if (::inet_pton(AF_INET6, text.c_str(), a.raw.addr) == 1) {
    a.raw.family = KDAT_AF_INET6;
  } else {
    throw Error({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_ADDRESS},
                "not an IP address: '" + std::string(literal) + "'");
  }
  return a;
}

std::string Address::to_string() const {
  char text[INET6_ADDRSTRLEN] = "";
  switch (raw.family) {
    case KDAT_AF_INET:
      ::inet_ntop(AF_INET, raw.addr, text, sizeof(text));
      return std::string(text) + ":" + std::to_string(raw.port);
    case KDAT_AF_INET6:
      ::inet_ntop(AF_INET6, raw.addr, text, sizeof(text));
      return "[" + std::string(text) + "]:" + std::to_string(raw.port);
    case 0: return "-";
    default: return "family" + std::to_string(raw.family);
  }
}

Event Event::from_raw(const kdat_event &raw) {
  Event e;
  e.number = raw.number;
  e.evd = raw.evd;
  e.ep = raw.ep;
  e.sp = raw.sp;
  e.cr = raw.cr;
  e.dto_status = raw.dto_status;
  e.cookie = raw.cookie;
  e.transfered_length = raw.transfered_length;
  const auto *bytes = reinterpret_cast<const std::byte *>(raw.private_data);
  e.private_data.assign(
      bytes, bytes + std::min<std::size_t>(raw.private_data_size, sizeof(raw.private_data)));
  return e;
}

Event Event::from_raw(const kdat_event &raw, const kdat_event_ud &ud) {
  Event e = from_raw(raw);
  e.ud = UdPeer::from_raw(ud);
  return e;
}

std::string Event::name() const { return event_name(number); }

std::optional<UdPeer> UdPeer::from_raw(const kdat_event_ud &raw) {
  if ((raw.flags & KDAT_UD_EVENT) == 0) return std::nullopt;
  UdPeer p;
  p.ah = raw.ah;
  p.ah_valid = (raw.flags & KDAT_UD_AH_VALID) != 0;
  p.passive = (raw.flags & KDAT_UD_PASSIVE) != 0;
  p.address.raw = raw.addr;
  p.qpn = raw.qpn;
  p.qkey = raw.qkey;
  return p;
}

std::string UdPeer::to_string() const {
  std::string text = "qpn 0x" + hex(qpn) + " qkey 0x" + hex(qkey) + " " + address.to_string();
  if (passive) text += " passive";
  if (ah_valid) text += " ah";
  return text;
}

}  // namespace kdat

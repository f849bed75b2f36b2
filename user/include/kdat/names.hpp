// Names and text forms for what the kernel reports: events, table records.
// Pure functions, thread-safe.
#pragma once

#if __cplusplus < 202002L
#error "libkdat's headers need C++20 or later (-std=c++20)"
#endif

#include <kdat/uapi/kdat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kdat {

// "CONNECTION_EVENT_ESTABLISHED", "CONNECTION_REQUEST_EVENT", ... (DAT names without "DAT_");
// "NONE" for 0 and "EVENT_0x..." for numbers DAT does not define.
[[nodiscard]] std::string event_name(std::uint32_t number);

// "IA", "EVD", "EP", "PSP", "RSP", "CR", "FREE".
[[nodiscard]] const char *record_type_name(std::uint32_t type);

// The state of a table record as text: EPs their DAT_EP_STATE name ("CONNECTED"), service points
// "LISTENING"/"USED", CRs "PENDING"/"REMOTE_GONE", IAs "UP"/"DEVICE_REMOVED", EVDs the streams
// that feed them ("CONNECTION|CR", from the KDAT_EVD_* flags).
[[nodiscard]] std::string record_state_name(const kdat_record &record);

// A fixed-size char array from the kernel (comm[16], names) that need not be NUL-terminated.
template <std::size_t N>
[[nodiscard]] std::string fixed_string(const char (&chars)[N]) {
  std::size_t len = 0;
  while (len < N && chars[len] != '\0') ++len;
  return std::string(chars, len);
}

}  // namespace kdat

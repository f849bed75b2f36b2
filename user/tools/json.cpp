#include "json.hpp"

#include <cstdint>
#include <cstdio>

namespace kdatctl {

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if there is none.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t len;
  std::uint32_t min;
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) {
    len = 2;
    min = 0x80;
  } else if ((lead & 0xf0) == 0xe0) {
    len = 3;
    min = 0x800;
  } else if ((lead & 0xf8) == 0xf0) {
    len = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  std::uint32_t cp = lead & (0x7fu >> len);
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3fu);
  }
  // Overlong forms, surrogates and values past Unicode are not valid UTF-8.
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char hex[8];
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(hex, sizeof(hex), "\\u%04x", c);
      out += hex;
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence(text, i);
    if (len == 0) {  // a stray byte: keep it visible as the code point of the same value
      std::snprintf(hex, sizeof(hex), "\\u%04x", c);
      out += hex;
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::string json_string(std::string_view text) { return "\"" + json_escape(text) + "\""; }

}  // namespace kdatctl

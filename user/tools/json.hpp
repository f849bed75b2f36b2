// JSON string literals for kdatctl's and its tests' output.  kdatctl's own, not libkdat's API.
#pragma once

#include <string>
#include <string_view>

namespace kdatctl {

// The body of a JSON string literal for arbitrary bytes: quotes, backslashes and control
// characters escaped; bytes that are not valid UTF-8 become \u00XX of the byte (so the output
// is always valid JSON, if lossy for such bytes).
[[nodiscard]] std::string json_escape(std::string_view text);
// json_escape with the surrounding quotes.
[[nodiscard]] std::string json_string(std::string_view text);

}  // namespace kdatctl

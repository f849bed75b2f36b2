// kdatctl's JSON: nlohmann::json, printed one document a line.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

namespace kdatctl {

// Keys in the order they are built, so that a person reading the JSON finds them as the text
// shows them.
using Json = nlohmann::ordered_json;

// Names kdat did not make (comm, device names) may hold any bytes: bytes that are not UTF-8
// become U+FFFD rather than an exception.
inline void print_json(std::ostream &out, const Json &doc) {
  out << doc.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
}

}  // namespace kdatctl

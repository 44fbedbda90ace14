// One JSON value on one line with a space after every ',' and ':' ({"a": 1, "b": [2, 3]}), as mocbench's JSON
// outputs have always been laid out (nlohmann-json's compact dump has no spaces, its indented dump many lines).
// The text of every string and number is nlohmann-json's own (escaping, shortest round-trip numbers); a
// number that is not finite is null.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace moc {

template <class Json>
std::string json_line(const Json& j) {
  if (j.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) s += ", ";
      first = false;
      s += Json(k).dump();
      s += ": ";
      s += json_line(v);
    }
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (i) s += ", ";
      s += json_line(j[i]);
    }
    return s + "]";
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moc

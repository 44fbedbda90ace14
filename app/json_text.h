// JSON string escaping shared by the runner's records and the report printers.
#pragma once
#include <cstdio>
#include <string>

namespace moc {

// The characters of s escaped for use inside a JSON string literal (without the quotes).
inline std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o;
}

// s as a quoted JSON string.
inline std::string json_quote(const std::string& s) {
  std::string o(1, '"');  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "\"" + std::string
  o.append(json_escape(s));
  o.push_back('"');
  return o;
}

}  // namespace moc

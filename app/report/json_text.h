// JSON and CSV text escaping shared by the runner's records and the report printers (export, compare, stats).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

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

// s as a CSV cell (RFC 4180): quoted, with doubled quotes, when it holds a comma, quote or line break.
inline std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o(1, '"');
  for (char c : s) {
    if (c == '"') o.push_back('"');
    o.push_back(c);
  }
  o.push_back('"');
  return o;
}

// One CSV line of cells, with its newline. Built piecewise: GCC 12 warns falsely on "," + std::string.
inline std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i) line.push_back(',');
    line.append(csv_cell(cells[i]));
  }
  line.push_back('\n');
  return line;
}

}  // namespace moc

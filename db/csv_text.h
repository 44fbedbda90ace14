// CSV text for the shared table printer (db/table.cpp). JSON is written through nlohmann-json,
// never by hand.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace moc {

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

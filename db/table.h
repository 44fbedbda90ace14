// The one table model every reader of results prints through (Tracy's server/ feeding both its GUI and
// csvexport; nvbench's one result model with several printers): `mocbench show` (app/report/summary.cpp),
// `mocbench stats` (app/report/profile_stats.cpp) and `mocbench compare` (app/report/report.cpp) build a
// Table; four printers render any Table:
//   text      an aligned grid (headers, dashes, rows; text columns left-aligned, numbers right-aligned, widths in
//             characters so "µs" counts one), each caller framing it with its own heading
//   Markdown  "Title", a pipe table with the same cells, notes as bullets
//   CSV       RFC 4180, one header row of column keys then the rows, numbers exact (shortest round trip),
//             several tables as one CSV over the union of their columns, prefix columns first
//   JSON      through nlohmann-json: {"id", "title", "columns": [{"key", "title", "unit"}], "rows":
//             [{key: value}], "notes"}; a missing or non-finite number is null
// What the text printers show for a number is the cell's own text when it has one ("1.50x", "87.0!"),
// otherwise the value formatted by its column; the machine printers (CSV, JSON) always carry the value.
#pragma once
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace moc::report {

struct Column {
  std::string key;    // CSV header and JSON key: "latency_us", "Total Time (ns)", "ratio_b_over_a"
  std::string title;  // text and Markdown header: "latency (µs)"; empty: the key
  std::string unit;   // "ns", "us", "ms", "%", "x", "GiB", "GB/s", "1/s", ...; "" for counts and text columns
  bool text = false;  // text cells (names, axes, statuses), left-aligned
  int decimals = -1;  // digits after the point where a printer formats a value; -1: three significant digits
  bool grouped = false;     // thousands separators in the text printers (1,234,567.0)
  bool scale_ns = false;    // ns values shown by the text printers in one unit per table (ns, us, ms or s,
                            // from the median of the table's scale_ns values); the title gets " (unit)"
  bool machine_only = false;  // carried by CSV and JSON only (compare's status_a, unit)
  const std::string& header() const { return title.empty() ? key : title; }
};

struct Cell {
  std::optional<double> value;  // a number: CSV and JSON carry it exactly (not finite: empty / null)
  std::string text;             // a text column's text; for a number, what the text printers show instead of
                                // formatting it ("1.50x", "87.0!", a status where there is no number)
  Cell() = default;
  Cell(double v) : value(v) {}  // NOLINT: cells are written as {1.5, "name", {}}
  Cell(std::string t) : text(std::move(t)) {}
  Cell(const char* t) : text(t) {}
  Cell(std::optional<double> v, std::string shown) : value(v), text(std::move(shown)) {}
  bool empty() const { return !value && text.empty(); }
};

struct Table {
  std::string id;     // "cuda_gpu_kern_sum", "ffn-decode", "compare"
  std::string title;  // "CUDA GPU Kernel Summary"
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // a row shorter than the columns has empty cells at the end
  std::vector<std::string> notes;       // said after the table (headlines, what its times count)
  const Cell& cell(std::size_t row, std::size_t col) const;
  std::size_t column(const std::string& key) const;  // its index; throws std::out_of_range when none
};

// A number as the text printers show it: `decimals` digits after the point (-1: three significant digits
// without an exponent: 1.72, 30.1, 581, 2175; below 0.01 four decimals), thousands separators when grouped.
std::string format_number(double v, int decimals, bool grouped = false);
// Thousands separators on a fixed-point number: group_thousands(1234.5, 1) == "1,234.5".
std::string group_thousands(double v, int decimals);
// The shortest text that reads back as v (integers without a point); "" when v is not finite.
std::string exact_number(double v);

// ---- text: the grid alone; callers print their heading and notes around it.
struct TextStyle {
  std::string indent;  // before every line
  // An ANSI colour for a cell (nullptr: none); absent: no colours.
  std::function<const char*(const Column&, const Cell&)> colour;
};
void print_grid(const Table& t, std::ostream& out, const TextStyle& style = {});
// The shown text of every cell and header (what print_grid and print_markdown lay out), columns that are not
// machine_only only; for tests and the dashboard.
struct Shown {
  std::vector<std::size_t> columns;  // indices into Table::columns
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};
Shown shown(const Table& t);

// ---- Markdown: "\n" title "\n\n", the pipe table, then "\n- note" lines.
void print_markdown(const Table& t, std::ostream& out);

// ---- CSV: one header (prefix keys, then the union of the tables' column keys in first-seen order) and every
// row of every table; prefix_values[i] are table i's prefix cells (absent: empty).
void print_csv(const std::vector<const Table*>& tables, std::ostream& out,
               const std::vector<std::string>& prefix_keys = {},
               const std::vector<std::vector<std::string>>& prefix_values = {});
inline void print_csv(const Table& t, std::ostream& out, const std::vector<std::pair<std::string, std::string>>& prefix) {
  std::vector<std::string> keys, values;
  for (const auto& [k, v] : prefix) keys.push_back(k), values.push_back(v);
  print_csv({&t}, out, keys, {values});
}

// ---- JSON
using Json = nlohmann::ordered_json;  // keys in the table's order
Json row_json(const Table& t, std::size_t row);  // {key: value | text | null}
Json to_json(const Table& t);                    // {"id", "title", "columns", "rows", "notes"}

}  // namespace moc::report

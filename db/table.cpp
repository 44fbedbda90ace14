#include "db/table.h"

#include "db/csv_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <stdexcept>

namespace moc::report {

namespace {

// Width in characters: UTF-8 continuation bytes do not count ("µs" is two wide).
std::size_t width_of(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void csv_line(std::ostream& out, const std::vector<std::string>& cells) { out << moc::csv_line(cells); }

// The one unit of a table's scale_ns columns in the text printers, from the median of their values.
struct TimeScale {
  double divide = 1;
  const char* unit = "ns";
};
TimeScale time_scale(const Table& t) {
  std::vector<double> ns;
  for (const auto& row : t.rows)
    for (std::size_t c = 0; c < t.columns.size() && c < row.size(); ++c)
      if (t.columns[c].scale_ns && row[c].value) ns.push_back(*row[c].value);
  if (ns.empty()) return {};
  const auto mid = ns.begin() + static_cast<std::ptrdiff_t>(ns.size() / 2);
  std::nth_element(ns.begin(), mid, ns.end());
  if (*mid >= 1e10) return {1e9, "s"};
  if (*mid >= 1e7) return {1e6, "ms"};
  if (*mid >= 1e4) return {1e3, "us"};
  return {};
}

// A pipe inside a Markdown table cell is escaped.
std::string escape_markdown(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '|') o.push_back('\\');
    o.push_back(c);
  }
  return o;
}

}  // namespace

const Cell& Table::cell(std::size_t row, std::size_t col) const {
  static const Cell none;
  const auto& r = rows.at(row);
  return col < r.size() ? r[col] : none;
}

std::size_t Table::column(const std::string& key) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i].key == key) return i;
  throw std::out_of_range("table " + id + " has no column " + key);
}

std::string group_thousands(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  const std::string s = buf;
  const std::size_t begin = s[0] == '-' ? 1 : 0;
  std::size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  std::string out = s.substr(0, begin);
  for (std::size_t i = begin; i < end; ++i) {
    out.push_back(s[i]);
    const std::size_t left = end - i - 1;
    if (left > 0 && left % 3 == 0) out.push_back(',');
  }
  out += s.substr(end);
  return out;
}

std::string format_number(double v, int decimals, bool grouped) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (decimals < 0) {
    const double a = std::fabs(v);
    decimals = a >= 100 || a == 0 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    if (a != 0 && a < 0.01) decimals = 4;
  }
  if (grouped) return group_thousands(v, decimals);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string exact_number(double v) {
  if (!std::isfinite(v)) return "";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Shown shown(const Table& t) {
  Shown s;
  const TimeScale scale = time_scale(t);
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const Column& col = t.columns[c];
    if (col.machine_only) continue;
    s.columns.push_back(c);
    s.headers.push_back(col.scale_ns ? col.header() + " (" + scale.unit + ")" : col.header());
  }
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    std::vector<std::string> line;
    for (const std::size_t c : s.columns) {
      const Column& col = t.columns[c];
      const Cell& x = t.cell(r, c);
      if (!x.text.empty()) line.push_back(x.text);
      else if (!x.value) line.emplace_back("-");
      else if (col.scale_ns && scale.divide != 1) line.push_back(group_thousands(*x.value / scale.divide, 3));
      else line.push_back(format_number(*x.value, col.decimals, col.grouped));
    }
    s.rows.push_back(std::move(line));
  }
  return s;
}

void print_grid(const Table& t, std::ostream& out, const TextStyle& style) {
  const Shown s = shown(t);
  const std::size_t nc = s.columns.size();
  std::vector<std::size_t> w(nc);
  for (std::size_t i = 0; i < nc; ++i) {
    w[i] = width_of(s.headers[i]);
    for (const auto& line : s.rows) w[i] = std::max(w[i], width_of(line[i]));
  }
  // One line: text columns padded on the right (the last one not at all), numbers on the left.
  auto emit = [&](const std::vector<std::string>& line, const std::vector<const char*>& colours) {
    std::string o = style.indent;
    for (std::size_t i = 0; i < nc; ++i) {
      if (i) o += "  ";
      const std::size_t pad = w[i] - std::min(w[i], width_of(line[i]));
      const bool left = t.columns[s.columns[i]].text;
      if (!left) o.append(pad, ' ');
      const char* colour = colours.empty() ? nullptr : colours[i];
      if (colour) o += colour;
      o += line[i];
      if (colour) o += "\033[0m";
      if (left && i + 1 < nc) o.append(pad, ' ');
    }
    out << o << "\n";
  };
  emit(s.headers, {});
  std::vector<std::string> dashes(nc);
  for (std::size_t i = 0; i < nc; ++i) dashes[i] = std::string(w[i], '-');
  emit(dashes, {});
  for (std::size_t r = 0; r < s.rows.size(); ++r) {
    std::vector<const char*> colours;
    if (style.colour)
      for (const std::size_t c : s.columns) colours.push_back(style.colour(t.columns[c], t.cell(r, c)));
    emit(s.rows[r], colours);
  }
}

void print_markdown(const Table& t, std::ostream& out) {
  const Shown s = shown(t);
  out << "\n" << t.title << "\n\n|";
  for (const auto& h : s.headers) out << " " << escape_markdown(h) << " |";
  out << "\n|";
  for (const std::size_t c : s.columns) out << (t.columns[c].text ? "---|" : "---:|");
  out << "\n";
  for (const auto& line : s.rows) {
    out << "|";
    for (const auto& cell : line) out << " " << escape_markdown(cell) << " |";
    out << "\n";
  }
  if (!t.notes.empty()) out << "\n";
  for (const auto& n : t.notes) out << "- " << n << "\n";
}

void print_csv(const std::vector<const Table*>& tables, std::ostream& out, const std::vector<std::string>& prefix_keys,
               const std::vector<std::vector<std::string>>& prefix_values) {
  std::vector<std::string> keys;
  for (const Table* t : tables)
    for (const auto& c : t->columns)
      if (std::find(keys.begin(), keys.end(), c.key) == keys.end()) keys.push_back(c.key);
  std::vector<std::string> header = prefix_keys;
  header.insert(header.end(), keys.begin(), keys.end());
  csv_line(out, header);
  for (std::size_t ti = 0; ti < tables.size(); ++ti) {
    const Table& t = *tables[ti];
    // Where each union key sits in this table (npos: not one of its columns).
    std::vector<std::size_t> at(keys.size(), std::string::npos);
    for (std::size_t k = 0; k < keys.size(); ++k)
      for (std::size_t c = 0; c < t.columns.size(); ++c)
        if (t.columns[c].key == keys[k]) at[k] = c;
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      std::vector<std::string> line(prefix_keys.size());
      if (ti < prefix_values.size())
        for (std::size_t p = 0; p < line.size() && p < prefix_values[ti].size(); ++p) line[p] = prefix_values[ti][p];
      for (std::size_t k = 0; k < keys.size(); ++k) {
        if (at[k] == std::string::npos) {
          line.emplace_back();
          continue;
        }
        const Cell& x = t.cell(r, at[k]);
        line.push_back(t.columns[at[k]].text ? x.text : x.value ? exact_number(*x.value) : std::string());
      }
      csv_line(out, line);
    }
  }
}

Json row_json(const Table& t, std::size_t row) {
  Json r = Json::object();
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const Column& col = t.columns[c];
    const Cell& x = t.cell(row, c);
    if (col.text) r[col.key] = x.text;
    else if (x.value && std::isfinite(*x.value)) r[col.key] = *x.value;
    else r[col.key] = nullptr;
  }
  return r;
}

Json to_json(const Table& t) {
  Json columns = Json::array(), rows = Json::array();
  for (const auto& c : t.columns)
    columns.push_back(Json{{"key", c.key}, {"title", c.header()}, {"unit", c.text ? std::string("text") : c.unit}});
  for (std::size_t r = 0; r < t.rows.size(); ++r) rows.push_back(row_json(t, r));
  return Json{{"id", t.id}, {"title", t.title}, {"columns", std::move(columns)}, {"rows", std::move(rows)},
              {"notes", t.notes}};
}

}  // namespace moc::report

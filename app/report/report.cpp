#include "app/report/report.h"

#include "db/metrics.h"

#include <nlohmann/json.hpp>

#include "app/report/json_line.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <ostream>
#include <stdexcept>

namespace moc {

namespace {
// Key order as written; numbers that are not finite become null.
using Json = nlohmann::ordered_json;


std::string iso_utc(std::int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

template <class V>
const V* find_kv(const std::vector<std::pair<std::string, V>>& kv, const std::string& key) {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

std::string point_mode(const db::RunRecord& run, const db::PointRecord& point) {
  if (!point.mode.empty()) return point.mode;
  if (const auto* v = find_kv(point.axes, std::string("mode"))) return *v;
  // A run whose scenario fixes the mode: its top-level `mode = "..."` line.
  std::size_t pos = 0;
  const std::string& t = run.scenario_text;
  while (pos < t.size()) {
    std::size_t eol = t.find('\n', pos);
    if (eol == std::string::npos) eol = t.size();
    std::string line = t.substr(pos, eol - pos);
    pos = eol + 1;
    std::size_t i = line.find_first_not_of(" \t");
    if (i != std::string::npos && line[i] == '[') break;  // top-level keys come before every table
    if (i == std::string::npos || line.compare(i, 4, "mode") != 0) continue;
    i = line.find_first_not_of(" \t", i + 4);
    if (i == std::string::npos || line[i] != '=') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || (line[i] != '"' && line[i] != '\'')) continue;
    const std::size_t close = line.find(line[i], i + 1);
    if (close == std::string::npos) continue;
    return line.substr(i + 1, close - i - 1);
  }
  return "";
}

void write_export(const db::ResultsDb& store, const std::vector<std::int64_t>& run_ids, ExportFormat format,
                  std::ostream& out) {
  struct Item {
    const db::RunRecord* run;
    db::PointRecord point;
  };
  std::vector<db::RunRecord> runs;
  for (auto id : run_ids) {
    auto r = store.run(id);
    if (!r) throw std::invalid_argument("no run " + std::to_string(id) + " in " + store.path());
    runs.push_back(*r);
  }
  std::vector<Item> items;
  std::vector<std::string> axes, metrics;
  for (const auto& r : runs)
    for (auto& p : store.points(r.id)) {
      for (const auto& kv : p.axes) add_unique(axes, kv.first);
      for (const auto& kv : p.metrics) add_unique(metrics, kv.first);
      items.push_back({&r, std::move(p)});
    }
  const std::vector<std::string> fixed = {"run",     "scenario", "scenario_hash", "device_kind", "device_name",
                                          "mocbench_version", "started", "point", "status", "mode", "error"};
  auto fixed_values = [](const Item& it) {
    const auto& r = *it.run;
    return std::vector<std::string>{std::to_string(r.id), r.scenario_name, r.scenario_hash, r.device_kind,
                                    r.device_name, r.mocbench_version, iso_utc(r.started_unix_ms),
                                    std::to_string(it.point.index), it.point.status, point_mode(r, it.point),
                                    it.point.error};
  };
  // The mode axis is the fixed mode column already: CSV does not repeat it (JSON keeps it in "axes").
  std::vector<std::string> csv_axes;
  for (const auto& a : axes)
    if (a != "mode") csv_axes.push_back(a);
  if (format == ExportFormat::csv) {  // the shared table's CSV printer: text cells as written, numbers exact
    report::Table t;
    t.id = "export";
    auto col = [&t](const std::string& key, bool text) {
      report::Column c;
      c.key = key;
      c.text = text;
      c.unit = text ? "" : std::string(metrics::unit(key));
      t.columns.push_back(std::move(c));
    };
    for (const auto& f : fixed) col(f, true);
    for (const auto& a : csv_axes) col(a, true);
    for (const auto& m : metrics) col(m, false);
    for (const auto& it : items) {
      std::vector<report::Cell> row;
      for (auto& v : fixed_values(it)) row.emplace_back(std::move(v));
      for (const auto& a : csv_axes) {
        const auto* v = find_kv(it.point.axes, a);
        row.emplace_back(v ? *v : std::string());
      }
      for (const auto& m : metrics) {
        const auto* v = find_kv(it.point.metrics, m);
        row.push_back(v && std::isfinite(*v) ? report::Cell(*v) : report::Cell());
      }
      t.rows.push_back(std::move(row));
    }
    report::print_csv({&t}, out);
    return;
  }
  // One point per line, through nlohmann-json (a metric that is not finite is null).
  out << "[";
  bool first = true;
  for (const auto& it : items) {
    Json row = Json::object();
    const auto vals = fixed_values(it);
    for (std::size_t i = 0; i < fixed.size(); ++i) {
      if (fixed[i] == "run" || fixed[i] == "point") row[fixed[i]] = std::stoll(vals[i]);
      else row[fixed[i]] = vals[i];
    }
    Json axes_obj = Json::object(), metrics_obj = Json::object();
    for (const auto& [k, v] : it.point.axes) axes_obj[k] = v;
    for (const auto& [k, v] : it.point.metrics) metrics_obj[k] = v;
    row["axes"] = std::move(axes_obj);
    row["metrics"] = std::move(metrics_obj);
    out << (first ? "\n  " : ",\n  ") << json_line(row);
    first = false;
  }
  out << (first ? "]\n" : "\n]\n");
}

RunRef parse_run_ref(const std::string& text, const std::string& default_db) {
  auto all_digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (all_digits(text)) return {default_db, std::stoll(text)};
  const auto colon = text.rfind(':');
  if (colon != std::string::npos && all_digits(text.substr(colon + 1)))
    return {text.substr(0, colon), std::stoll(text.substr(colon + 1))};
  if (text.empty()) throw std::invalid_argument("empty run reference: use RUN, FILE:RUN or FILE");
  return {text, std::nullopt};
}

Comparison compare_runs(const db::ResultsDb& da, std::int64_t ra, const db::ResultsDb& dbb, std::int64_t rb,
                        const std::vector<std::string>& names, bool allow_different_scenarios) {
  auto run_a = da.run(ra);
  auto run_b = dbb.run(rb);
  if (!run_a) throw std::invalid_argument("no run " + std::to_string(ra) + " in " + da.path());
  if (!run_b) throw std::invalid_argument("no run " + std::to_string(rb) + " in " + dbb.path());
  Comparison c;
  c.label_a = da.path() + ":" + std::to_string(ra) + " (" + run_a->device_name + ")";
  c.label_b = dbb.path() + ":" + std::to_string(rb) + " (" + run_b->device_name + ")";
  if (run_a->scenario_name != run_b->scenario_name && !allow_different_scenarios)
    throw std::invalid_argument("run A is scenario '" + run_a->scenario_name + "', run B is '" +
                                run_b->scenario_name + "'; compare runs of one scenario (or pass --force)");
  if (run_a->scenario_hash != run_b->scenario_hash)
    c.warnings.push_back("the scenario files differ (hash " + run_a->scenario_hash.substr(0, 12) + " vs " +
                         run_b->scenario_hash.substr(0, 12) + "): points are matched by their axes");
  if (run_a->device_kind != run_b->device_kind || run_a->device_name != run_b->device_name)
    c.warnings.push_back("devices: A ran on " + run_a->device_kind + " " + run_a->device_name + ", B on " +
                         run_b->device_kind + " " + run_b->device_name);
  if (run_a->mocbench_version != run_b->mocbench_version)
    c.warnings.push_back("mocbench versions: A " + run_a->mocbench_version + ", B " + run_b->mocbench_version);

  const auto pa = da.points(ra), pb = dbb.points(rb);
  const metrics::PointComparison pc = metrics::compare_points(pa, pb, names);
  c.matched = pc.matched;
  c.only_a = pc.only_a;
  c.only_b = pc.only_b;
  for (const auto& pair : pc.pairs) {
    const std::string status_a = pair.a ? pair.a->status : "missing", status_b = pair.b ? pair.b->status : "missing";
    for (std::size_t i = 0; i < pc.metrics.size(); ++i) {
      const metrics::MetricCell& cell = pair.cells[i];
      CompareRow row{pair.label, pc.metrics[i], std::nullopt, std::nullopt, status_a, status_b, cell.verdict};
      if (!std::isnan(cell.a)) row.a = cell.a;
      if (!std::isnan(cell.b)) row.b = cell.b;
      // A default metric this point's mode does not produce (latency_us of a training point) is left out.
      if (names.empty() && !row.a && !row.b && row.status_a == "ok" && row.status_b == "ok") continue;
      c.rows.push_back(std::move(row));
    }
  }
  return c;
}

report::Table comparison_table(const Comparison& c) {
  report::Table t;
  t.id = "compare";
  t.title = "A: " + c.label_a + "\nB: " + c.label_b;
  auto col = [&t](std::string key, std::string title, bool text, bool machine_only = false) {
    report::Column x;
    x.key = std::move(key);
    x.title = std::move(title);
    x.text = text;
    x.machine_only = machine_only;
    t.columns.push_back(std::move(x));
  };
  col("point", "point", true);
  col("metric", "metric", true);
  col("a", "A", false);
  col("b", "B", false);
  col("ratio_b_over_a", "B/A", false);
  col("status_a", "", true, true);
  col("status_b", "", true, true);
  col("verdict", "B is", true);  // better / worse / same (within both sides' noise, or no better direction)
  col("unit", "", true, true);
  auto side = [](const std::optional<double>& v, const std::string& status) {
    if (!v) return report::Cell(std::nullopt, status == "ok" ? "-" : status);
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", *v);
    return report::Cell(v, b);
  };
  for (const auto& r : c.rows) {
    std::optional<double> q;
    if (r.a && r.b && *r.a != 0) q = *r.b / *r.a;
    char rb[32] = "-";
    if (q) std::snprintf(rb, sizeof rb, "%.3fx", *q);
    t.rows.push_back({r.key, r.metric, side(r.a, r.status_a), side(r.b, r.status_b), report::Cell(q, rb), r.status_a,
                      r.status_b, metrics::verdict_name(r.verdict), std::string(metrics::unit(r.metric))});
  }
  std::string matched = std::to_string(c.matched) + " points matched";
  if (c.only_a) matched += ", " + std::to_string(c.only_a) + " only in A";
  if (c.only_b) matched += ", " + std::to_string(c.only_b) + " only in B";
  t.notes.push_back(matched);
  return t;
}

void print_comparison(const Comparison& c, ComparisonFormat format, std::ostream& out) {
  const report::Table t = comparison_table(c);
  switch (format) {
    case ComparisonFormat::csv: report::print_csv({&t}, out); return;
    case ComparisonFormat::json: {
      // An array of the rows (row_json's objects), one per line.
      out << "[";
      for (std::size_t i = 0; i < t.rows.size(); ++i) out << (i ? ",\n " : "\n ") << json_line(report::row_json(t, i));
      out << (t.rows.empty() ? "]\n" : "\n]\n");
      return;
    }
    case ComparisonFormat::markdown:
      for (const auto& w : c.warnings) out << "note: " << w << "\n";
      report::print_markdown(t, out);
      return;
    case ComparisonFormat::table:
      out << t.title << "\n";
      for (const auto& w : c.warnings) out << "note: " << w << "\n";
      report::print_grid(t, out);
      for (const auto& n : t.notes) out << n << "\n";
      return;
  }
}

}  // namespace moc

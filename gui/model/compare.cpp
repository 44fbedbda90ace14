#include "gui/model/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gui/model/units.h"

namespace moc::gui {

CompareTable build_compare(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                           std::vector<std::string> names) {
  metrics::PointComparison c = metrics::compare_points(a, b, std::move(names));
  CompareTable t;
  t.metrics = std::move(c.metrics);
  t.only_a = c.only_a;
  t.only_b = c.only_b;
  for (auto& p : c.pairs)
    if (p.matched()) t.rows.push_back({std::move(p.mode), std::move(p.label), p.a->id, p.b->id, std::move(p.cells)});
  return t;
}

std::vector<report::Table> compare_tables(const CompareTable& t) {
  std::vector<std::string> modes;
  for (const auto& row : t.rows)
    if (std::find(modes.begin(), modes.end(), row.mode) == modes.end()) modes.push_back(row.mode);
  std::vector<report::Table> out;
  for (const auto& mode : modes) {
    auto has_metric = [&](const std::string& m) {
      const auto it = std::find(t.metrics.begin(), t.metrics.end(), m);
      if (it == t.metrics.end()) return false;
      const auto i = static_cast<std::size_t>(it - t.metrics.begin());
      return std::any_of(t.rows.begin(), t.rows.end(), [&](const CompareRow& row) {
        return row.mode == mode && row.cells[i].verdict != Verdict::missing;
      });
    };
    const bool median_repeats = has_metric("latency_us") || has_metric("ms_per_token");
    std::vector<std::size_t> shown;
    for (std::size_t i = 0; i < t.metrics.size(); ++i)
      if (has_metric(t.metrics[i]) && !(median_repeats && t.metrics[i] == "median_ms")) shown.push_back(i);
    report::Table tb;
    tb.id = mode;
    tb.title = mode.empty() ? "(no mode)" : mode;
    auto col = [&tb](std::string key, std::string title, std::string unit, bool text, bool machine_only = false) {
      report::Column c;
      c.key = std::move(key);
      c.title = std::move(title);
      c.unit = std::move(unit);
      c.text = text;
      c.machine_only = machine_only;
      tb.columns.push_back(std::move(c));
    };
    col("point", "point", "", true);
    for (const std::size_t i : shown) {
      const std::string& m = t.metrics[i];
      const std::string unit(metrics::unit(m));
      col(m + "_a", m + " A", unit, false);
      col(m + "_b", m + " B", unit, false);
      col(m + "_ratio", "B/A", "x", false);
      col(m + "_verdict", "", "", true, true);
    }
    for (const auto& row : t.rows) {
      if (row.mode != mode) continue;
      std::vector<report::Cell> cells{row.label};
      for (const std::size_t i : shown) {
        const CompareCell& c = row.cells[i];
        const bool bytes = is_bytes_metric(t.metrics[i]);
        auto side = [bytes](double v) {
          if (std::isnan(v)) return report::Cell();
          return report::Cell(v, bytes ? format_bytes(v) : format_value(v));
        };
        cells.push_back(side(c.a));
        cells.push_back(side(c.b));
        if (std::isnan(c.ratio)) {
          cells.emplace_back();
        } else {
          char r[32];
          std::snprintf(r, sizeof r, "%.3fx", c.ratio);
          cells.emplace_back(c.ratio, r);
        }
        cells.emplace_back(metrics::verdict_name(c.verdict));
      }
      tb.rows.push_back(std::move(cells));
    }
    out.push_back(std::move(tb));
  }
  return out;
}

}  // namespace moc::gui

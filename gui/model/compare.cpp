#include "gui/model/compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "gui/model/sweep.h"
#include "gui/model/units.h"

namespace moc::gui {

namespace {
std::string key_of(const db::PointRecord& p) {
  std::string k = p.mode;
  for (const auto& [n, v] : p.axes) k += "|" + n + "=" + v;
  return k;
}

std::string label_of(const db::PointRecord& p) {
  std::string s = p.mode;
  for (const auto& [n, v] : p.axes)
    if (n != "mode") s += " " + n + "=" + v;
  return s;
}
}  // namespace

Verdict judge(const std::string& metric, double a, double b, double noise_a, double noise_b) {
  if (std::isnan(a) || std::isnan(b)) return Verdict::missing;
  const Better dir = better_direction(metric);
  double tolerance = 0;
  if (is_timed_metric(metric)) {
    tolerance = std::fabs(a) * (std::isnan(noise_a) ? 0 : noise_a) + std::fabs(b) * (std::isnan(noise_b) ? 0 : noise_b);
  }
  if (std::fabs(b - a) <= tolerance || dir == Better::neither || a == b) return Verdict::same;
  const bool lower = b < a;
  return (lower == (dir == Better::lower)) ? Verdict::better : Verdict::worse;
}

CompareTable build_compare(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                           std::vector<std::string> metrics) {
  CompareTable t;
  if (metrics.empty()) {
    static const char* kMain[] = {"latency_us", "pct_of_floor", "ms_per_token", "tokens_per_s", "median_ms",
                                  "mfu_pct", "peak_bytes", "peak_activation_bytes"};
    const auto ma = sweep_metrics(a), mb = sweep_metrics(b);
    for (const char* m : kMain)
      if (std::find(ma.begin(), ma.end(), m) != ma.end() && std::find(mb.begin(), mb.end(), m) != mb.end())
        metrics.push_back(m);
  }
  t.metrics = metrics;
  std::map<std::string, const db::PointRecord*> by_key;
  for (const auto& p : b) by_key[key_of(p)] = &p;
  std::map<std::string, bool> used;
  for (const auto& pa : a) {
    auto it = by_key.find(key_of(pa));
    if (it == by_key.end()) {
      ++t.only_a;
      continue;
    }
    used[it->first] = true;
    const db::PointRecord& pb = *it->second;
    CompareRow row;
    row.mode = pa.mode;
    row.label = label_of(pa);
    row.a_point = pa.id;
    row.b_point = pb.id;
    const double na = metric_of(pa, "noise"), nb = metric_of(pb, "noise");
    for (const auto& m : metrics) {
      CompareCell c;
      c.a = metric_of(pa, m);
      c.b = metric_of(pb, m);
      c.ratio = c.a != 0 ? c.b / c.a : std::nan("");
      c.verdict = judge(m, c.a, c.b, na, nb);
      row.cells.push_back(c);
    }
    t.rows.push_back(std::move(row));
  }
  t.only_b = static_cast<int>(b.size() - used.size());
  return t;
}

}  // namespace moc::gui

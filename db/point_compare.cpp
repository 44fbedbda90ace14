#include "db/point_compare.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "db/metrics.h"

namespace moc::metrics {

namespace {
double value_of(const db::PointRecord& p, std::string_view name) {
  if (name.empty()) return std::nan("");
  for (const auto& [k, v] : p.metrics)
    if (k == name) return v;
  return std::nan("");
}

bool any_ok_point_has(const std::vector<db::PointRecord>& pts, const std::string& m) {
  return std::any_of(pts.begin(), pts.end(), [&](const db::PointRecord& p) {
    return p.status == "ok" && !std::isnan(value_of(p, m));
  });
}

std::vector<std::string> default_metrics(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b) {
  std::vector<std::string> out;
  for (const auto& m : default_compare_metrics())
    if (any_ok_point_has(a, m) && any_ok_point_has(b, m)) out.push_back(m);
  if (out.empty()) out.push_back("median_ms");
  return out;
}

MetricCell cell_of(const db::PointRecord* pa, const db::PointRecord* pb, const std::string& m) {
  MetricCell c;
  c.a = pa ? value_of(*pa, m) : std::nan("");
  c.b = pb ? value_of(*pb, m) : std::nan("");
  c.ratio = c.a != 0 ? c.b / c.a : std::nan("");  // NaN propagates from either side
  const auto noise = noise_metric(m);
  const double na = pa ? value_of(*pa, noise) : std::nan(""), nb = pb ? value_of(*pb, noise) : std::nan("");
  c.verdict = judge(m, c.a, c.b, na, nb);
  return c;
}
}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::better: return "better";
    case Verdict::worse: return "worse";
    case Verdict::same: return "same";
    case Verdict::missing: break;
  }
  return "missing";
}

Verdict judge(const std::string& metric, double a, double b, double noise_a, double noise_b) {
  if (std::isnan(a) || std::isnan(b)) return Verdict::missing;
  const Direction dir = direction(metric);
  double tolerance = 0;
  if (noisy(metric))
    tolerance = std::fabs(a) * (std::isnan(noise_a) ? 0 : noise_a) + std::fabs(b) * (std::isnan(noise_b) ? 0 : noise_b);
  if (dir == Direction::neither || a == b || std::fabs(b - a) <= tolerance) return Verdict::same;
  return ((b < a) == (dir == Direction::lower)) ? Verdict::better : Verdict::worse;
}

std::string mode_of(const db::PointRecord& p) {
  if (!p.mode.empty()) return p.mode;
  for (const auto& [n, v] : p.axes)
    if (n == "mode") return v;
  return "";
}

std::string match_key(const db::PointRecord& p) {
  // '\x1f' (unit separator) cannot occur in a scenario's axis names or values, so keys cannot collide.
  std::string k = mode_of(p);
  for (const auto& [n, v] : p.axes)
    if (n != "mode") k += "\x1f" + n + "=" + v;
  return k;
}

std::string point_label(const db::PointRecord& p) {
  std::string s = mode_of(p);
  for (const auto& [n, v] : p.axes)
    if (n != "mode") s += (s.empty() ? "" : " ") + n + "=" + v;
  return s.empty() ? "(single point)" : s;
}

PointComparison compare_points(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                               std::vector<std::string> names) {
  PointComparison c;
  c.metrics = names.empty() ? default_metrics(a, b) : std::move(names);
  // B's points by key, in B's order: A's points with one key take B's points with it one by one.
  std::map<std::string, std::deque<const db::PointRecord*>> by_key;
  for (const auto& p : b) by_key[match_key(p)].push_back(&p);
  std::vector<bool> used(b.size(), false);
  auto add = [&](const db::PointRecord* pa, const db::PointRecord* pb) {
    const db::PointRecord& p = pa ? *pa : *pb;
    PointPair pair{pa, pb, mode_of(p), point_label(p), {}};
    for (const auto& m : c.metrics) pair.cells.push_back(cell_of(pa, pb, m));
    c.pairs.push_back(std::move(pair));
  };
  for (const auto& pa : a) {
    auto& queue = by_key[match_key(pa)];
    const db::PointRecord* pb = nullptr;
    if (!queue.empty()) {
      pb = queue.front();
      queue.pop_front();
      used[static_cast<std::size_t>(pb - b.data())] = true;
      ++c.matched;
    } else {
      ++c.only_a;
    }
    add(&pa, pb);
  }
  for (std::size_t i = 0; i < b.size(); ++i)
    if (!used[i]) {
      ++c.only_b;
      add(nullptr, &b[i]);
    }
  return c;
}

}  // namespace moc::metrics

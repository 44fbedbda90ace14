#include "gui/model/sweep.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "db/metrics.h"
#include "gui/model/units.h"

namespace moc::gui {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool positive_decade(const std::vector<double>& v) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (double x : v) {
    if (!(x > 0)) return false;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  return !v.empty() && hi / lo >= 8;
}
}  // namespace

double metric_of(const db::PointRecord& p, const std::string& name) {
  for (const auto& [k, v] : p.metrics)
    if (k == name) return v;
  return kNaN;
}

const std::string* axis_of(const db::PointRecord& p, const std::string& name) {
  for (const auto& [k, v] : p.axes)
    if (k == name) return &v;
  if (name == "mode" && !p.mode.empty()) return &p.mode;
  return nullptr;
}

std::vector<std::string> sweep_metrics(const std::vector<db::PointRecord>& points) {
  static const char* kMain[] = {"latency_us", "ms_per_token", "eval_ppl", "tokens_per_s", "median_ms", "mfu_pct",
                                "pct_of_floor", "peak_bytes", "peak_activation_bytes", "rows_per_s"};
  std::vector<std::string> seen;
  for (const auto& p : points) {
    if (p.status != "ok") continue;
    for (const auto& [k, v] : p.metrics)
      if (std::find(seen.begin(), seen.end(), k) == seen.end()) seen.push_back(k);
  }
  std::vector<std::string> out;
  for (const char* m : kMain)
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) out.push_back(m);
  for (const auto& m : seen)
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

std::vector<std::string> varying_axes(const std::vector<db::PointRecord>& points) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string>> values;
  auto note = [&](const std::string& k, const std::string& v) {
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
    auto& vs = values[k];
    if (std::find(vs.begin(), vs.end(), v) == vs.end()) vs.push_back(v);
  };
  for (const auto& p : points) {
    if (!p.mode.empty()) note("mode", p.mode);
    for (const auto& [k, v] : p.axes) note(k, v);
  }
  std::vector<std::string> out;
  for (const auto& n : names)
    if (values[n].size() > 1) out.push_back(n);
  return out;
}

std::string default_metric(const std::vector<db::PointRecord>& points) {
  const auto ms = sweep_metrics(points);
  return ms.empty() ? std::string() : ms.front();
}

SweepPlot build_sweep(const std::vector<db::PointRecord>& points, const std::string& metric, const std::string& axis) {
  SweepPlot plot;
  plot.metric = metric;
  plot.axis = axis;
  const auto axes = varying_axes(points);
  std::vector<std::string> others;
  for (const auto& a : axes)
    if (a != axis) others.push_back(a);

  // Numeric when every value of the axis parses as a number.
  std::vector<std::string> cats;
  for (const auto& p : points) {
    const std::string* v = axis_of(p, axis);
    if (!v) continue;
    double d;
    if (!parse_number(*v, &d)) plot.x_numeric = false;
    if (std::find(cats.begin(), cats.end(), *v) == cats.end()) cats.push_back(*v);
  }
  if (!plot.x_numeric) plot.categories = cats;

  // The error bars: the noise the registry names for this metric (none for exact ones).
  const std::string noise_name(metrics::noise_metric(metric));
  const bool with_floor = metric == "latency_us";
  std::vector<std::string> order;
  std::map<std::string, SweepSeries> by_label, floors;
  for (const auto& p : points) {
    if (p.status != "ok") continue;
    const double y = metric_of(p, metric);
    const std::string* xv = axis_of(p, axis);
    if (std::isnan(y) || !xv) continue;
    double x = 0;
    if (plot.x_numeric) parse_number(*xv, &x);
    else x = static_cast<double>(std::find(cats.begin(), cats.end(), *xv) - cats.begin());
    std::string label;
    for (const auto& o : others) {
      const std::string* v = axis_of(p, o);
      label += (label.empty() ? "" : " ") + o + "=" + (v ? *v : "-");
    }
    if (!by_label.count(label)) order.push_back(label);
    auto& s = by_label[label];
    s.label = label;
    const double noise = noise_name.empty() ? std::nan("") : metric_of(p, noise_name);
    s.x.push_back(x);
    s.y.push_back(y);
    s.err.push_back(!std::isnan(noise) ? std::fabs(y) * noise : 0.0);
    s.point_ids.push_back(p.id);
    s.not_final.push_back(metric_of(p, "noise_met") == 0.0 ? 1 : 0);
    if (with_floor) {
      const double f = metric_of(p, "floor_us");
      if (!std::isnan(f)) {
        auto& fs = floors[label];
        fs.label = (label.empty() ? std::string("") : label + " ") + "byte floor";
        fs.floor = true;
        fs.x.push_back(x);
        fs.y.push_back(f);
        fs.err.push_back(0);
        fs.point_ids.push_back(p.id);
      }
    }
  }
  std::vector<double> all_x, all_y;
  for (const auto& l : order) {
    auto sort_by_x = [](SweepSeries& s) {
      std::vector<std::size_t> idx(s.x.size());
      for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return s.x[a] < s.x[b]; });
      SweepSeries o = s;
      for (std::size_t i = 0; i < idx.size(); ++i) {
        o.x[i] = s.x[idx[i]];
        o.y[i] = s.y[idx[i]];
        o.err[i] = s.err[idx[i]];
        o.point_ids[i] = s.point_ids[idx[i]];
      }
      s = std::move(o);
    };
    sort_by_x(by_label[l]);
    all_x.insert(all_x.end(), by_label[l].x.begin(), by_label[l].x.end());
    all_y.insert(all_y.end(), by_label[l].y.begin(), by_label[l].y.end());
    plot.series.push_back(std::move(by_label[l]));
    if (auto it = floors.find(l); it != floors.end()) {
      sort_by_x(it->second);
      plot.series.push_back(std::move(it->second));
    }
  }
  plot.log_x = plot.x_numeric && positive_decade(all_x);
  plot.log_y = positive_decade(all_y);
  return plot;
}

}  // namespace moc::gui

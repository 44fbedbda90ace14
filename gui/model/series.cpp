#include "gui/model/series.h"

#include <algorithm>
#include <cmath>

#include "gui/model/sweep.h"

namespace moc::gui {

namespace {
bool is_histogram(const std::string& name) {
  return name.find("_hist") != std::string::npos || name.ends_with("_by_batch");
}
}  // namespace

std::vector<std::string> curve_names(Store& store, const RunRef& run) {
  std::vector<std::string> names;
  for (const auto& p : store.points(run))
    for (const auto& s : store.series(run, p.id))
      if (!is_histogram(s.name) && std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
  // The main ones first, in this order; the rest as found.
  std::vector<std::string> out;
  for (const char* main : {"val_ppl", "val_loss", "train_loss", "lr", "tokens_seen"})
    if (std::find(names.begin(), names.end(), main) != names.end()) out.push_back(main);
  for (const auto& n : names)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

CurvePlot build_curves(Store& store, const RunRef& run, const std::string& name) {
  CurvePlot plot;
  plot.name = name;
  const auto& pts = store.points(run);
  const auto axes = varying_axes(pts);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& p : pts) {
    for (const auto& s : store.series(run, p.id)) {
      if (s.name != name) continue;
      CurveLine line;
      for (const auto& a : axes)
        if (const std::string* v = axis_of(p, a)) line.label += (line.label.empty() ? "" : " ") + a + "=" + *v;
      if (line.label.empty()) line.label = "point #" + std::to_string(p.index);
      line.point_id = p.id;
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.y[i])) continue;
        line.x.push_back(s.x[i]);
        line.y.push_back(s.y[i]);
        lo = std::min(lo, s.y[i]);
        hi = std::max(hi, s.y[i]);
      }
      if (!line.x.empty()) plot.lines.push_back(std::move(line));
    }
  }
  plot.log_y = lo > 0 && hi / lo >= 10;
  return plot;
}

std::vector<GateLayer> gate_layers(Store& store, const RunRef& run, std::int64_t point_id) {
  std::vector<GateLayer> layers;
  const auto& series = store.series(run, point_id);
  auto find = [&](const std::string& n) -> const db::SeriesRecord* {
    for (const auto& s : series)
      if (s.name == n) return &s;
    return nullptr;
  };
  const db::PointRecord* p = store.point(run, point_id);
  for (int l = 0;; ++l) {
    const std::string sfx = ".L" + std::to_string(l);
    const auto *pre = find("gate_pre_hist" + sfx), *post = find("gate_post_hist" + sfx), *ov = find("overlap_hist" + sfx);
    if (!pre || !post) break;
    GateLayer g;
    g.pre_x = pre->x;
    g.pre_y = pre->y;
    g.post_x = post->x;
    g.post_y = post->y;
    if (ov) {
      g.overlap_x = ov->x;
      g.overlap_y = ov->y;
    }
    g.threshold_pre = p ? metric_of(*p, "gate_threshold_pre" + sfx) : NAN;
    g.threshold_post = p ? metric_of(*p, "gate_threshold_post" + sfx) : NAN;
    layers.push_back(std::move(g));
  }
  return layers;
}

}  // namespace moc::gui

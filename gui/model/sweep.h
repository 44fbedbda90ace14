// The Sweep view's data: a metric against one axis of a run, one series per combination of the other axes
// that vary, with each value's noise and the byte floor where the run has one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace moc::gui {

struct SweepSeries {
  std::string label;           // "ffn=moc mode=decode" (the other varying axes); "" when there are none
  std::vector<double> x, y;    // x: the axis value, or the category's index when the axis is not numeric
  std::vector<double> err;     // absolute noise of each y (0 when unknown)
  std::vector<std::int64_t> point_ids;
  // 1 where the point's repetitions stopped at a bound before its noise met the target (noise_met = 0): the
  // median is not final, and the view marks it.
  std::vector<char> not_final;
  bool floor = false;          // a floor series (drawn dashed), paired with the series before it
};

struct SweepPlot {
  std::string metric, axis;
  bool x_numeric = true;
  std::vector<std::string> categories;  // x tick labels when !x_numeric
  std::vector<SweepSeries> series;
  bool log_x = false, log_y = false;  // suggested: the values span a decade or more and are positive
};

// Metric names that some ok point of the run has (first-seen order, the main ones first).
std::vector<std::string> sweep_metrics(const std::vector<db::PointRecord>& points);
// Axes that take more than one value in the run (sweep order); `mode` first when it varies.
std::vector<std::string> varying_axes(const std::vector<db::PointRecord>& points);
// A sensible first metric for a run: latency_us, ms_per_token, eval_ppl, tokens_per_s, median_ms, ... .
std::string default_metric(const std::vector<db::PointRecord>& points);

// The plot. Points without the metric (or not ok) are left out; series without points are dropped. When the
// metric is latency_us and points have floor_us, each series gets a floor series right after it.
SweepPlot build_sweep(const std::vector<db::PointRecord>& points, const std::string& metric, const std::string& axis);

// Value of a metric or an axis of a point (NaN when absent / not a number).
double metric_of(const db::PointRecord& p, const std::string& name);
const std::string* axis_of(const db::PointRecord& p, const std::string& name);

}  // namespace moc::gui

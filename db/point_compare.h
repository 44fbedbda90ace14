// Two runs point by point, the one way both `mocbench compare` (app/report/report.cpp) and the dashboard's Compare
// view (gui/model/compare.cpp) do it: points are matched by their mode and axis values, the default metrics
// are metrics::default_compare_metrics() that both runs have, and a verdict follows the registry (db/metrics.h):
// a difference within both sides' noise is `same`, otherwise better or worse by the metric's direction.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace moc::metrics {

enum class Verdict { better, worse, same, missing };
const char* verdict_name(Verdict v);  // "better", "worse", "same", "missing"

// Noisy metrics (the registry names their noise): a difference within noise_a * |a| + noise_b * |b| (each
// side's relative noise; NaN counts as 0) is `same`. Exact metrics: any difference counts. Metrics with no
// better direction are always `same`; a NaN value is `missing`.
Verdict judge(const std::string& metric, double a, double b, double noise_a, double noise_b);

// A point's mode: PointRecord::mode, else its `mode` axis, else "".
std::string mode_of(const db::PointRecord& p);
// What pairs a point with its counterpart in the other run: the mode and every axis but `mode`, in order.
std::string match_key(const db::PointRecord& p);
// The same, for people: "ffn-decode ffn=moc batch=2" ("(single point)" for a point without mode or axes).
std::string point_label(const db::PointRecord& p);

struct MetricCell {
  double a = 0, b = 0, ratio = 0;  // NaN where absent; ratio = b / a (NaN when a is 0 or either is absent)
  Verdict verdict = Verdict::missing;
};

struct PointPair {
  const db::PointRecord* a = nullptr;  // null: only in B
  const db::PointRecord* b = nullptr;  // null: only in A
  std::string mode, label;
  std::vector<MetricCell> cells;  // one per PointComparison::metrics
  bool matched() const { return a && b; }
};

struct PointComparison {
  std::vector<std::string> metrics;
  // Every point: A's in A's order (matched or not), then B's unmatched ones in B's order. The records are
  // the caller's: they must outlive this.
  std::vector<PointPair> pairs;
  int matched = 0, only_a = 0, only_b = 0;
};

// names empty: default_compare_metrics() that some ok point of each run has (median_ms when none is).
// Each B point matches at most one A point (the first unmatched one with its key).
PointComparison compare_points(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                               std::vector<std::string> names = {});

}  // namespace moc::metrics

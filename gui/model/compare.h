// The Compare view's data: two runs point by point (matched by mode and axis values), per metric the values,
// the ratio B/A and a verdict -- better, worse, or within both sides' noise (not highlighted).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace moc::gui {

enum class Verdict { better, worse, same, missing };

struct CompareCell {
  double a = 0, b = 0, ratio = 0;  // ratio = b / a
  Verdict verdict = Verdict::missing;
};

struct CompareRow {
  std::string mode;
  std::string label;  // mode and axes
  std::int64_t a_point = 0, b_point = 0;
  std::vector<CompareCell> cells;  // one per CompareTable::metrics
};

struct CompareTable {
  std::vector<std::string> metrics;
  std::vector<CompareRow> rows;
  int only_a = 0, only_b = 0;  // points without a match
};

// Timed metrics: a difference within noise_a * a + noise_b * b (each side's relative noise of its median) is
// `same`; otherwise better/worse by the metric's direction. Other metrics (bytes): any difference counts.
Verdict judge(const std::string& metric, double a, double b, double noise_a, double noise_b);

// metrics empty: the main metrics both runs have (latency, tokens/s, MFU, peak memory, ...).
CompareTable build_compare(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                           std::vector<std::string> metrics = {});

}  // namespace moc::gui

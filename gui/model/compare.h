// The Compare view's data: two runs point by point, per metric the values, the ratio B/A and a verdict --
// better, worse, or within both sides' noise (not highlighted). The matching, the default metrics and the
// verdict are db/point_compare.h's, the same as `mocbench compare`'s; this keeps the matched points only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "db/point_compare.h"
#include "db/results_db.h"
#include "db/table.h"

namespace moc::gui {

using Verdict = metrics::Verdict;
using CompareCell = metrics::MetricCell;
using metrics::judge;

struct CompareRow {
  std::string mode;
  std::string label;  // mode and axes
  std::int64_t a_point = 0, b_point = 0;
  std::vector<CompareCell> cells;  // one per CompareTable::metrics
};

struct CompareTable {
  std::vector<std::string> metrics;
  std::vector<CompareRow> rows;  // the matched points, in A's order
  int only_a = 0, only_b = 0;    // points without a match
};

// names empty: metrics::default_compare_metrics() that both runs have (latency, tokens/s, GB/s, MFU, peak
// memory, ...).
CompareTable build_compare(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                           std::vector<std::string> names = {});

// The comparison as the shared table model (db/table.h), one table per mode (id and title: the mode, in A's
// order), as the view draws it and as its "Copy CSV" / "Copy Markdown" buttons put it on the clipboard: the
// point, then per metric that mode's points have, A, B (bytes in binary units, other values with four
// significant digits), B/A ("0.500x") and, for the machine printers only, the verdict (better, worse, same,
// missing); keys <metric>_a, <metric>_b, <metric>_ratio, <metric>_verdict. median_ms is left out where
// latency_us or ms_per_token (the same time) is shown.
std::vector<report::Table> compare_tables(const CompareTable& t);

}  // namespace moc::gui

// The Kernels view's data (Tracy's most-asked GPU feature): per kernel name, how long its instances ran --
// count, total, mean, median, min, max and the durations themselves for a histogram -- in one point's
// profiled steps and in every profiled point of the run, each instance timed exclusive or inclusive
// (prof::device_times): exclusive by default, so PDL kernels that start early are not counted twice.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "db/results_db.h"
#include "profiling/trace.h"

namespace moc::gui {

struct DurationStats {
  std::size_t count = 0;
  double total_ns = 0, mean_ns = 0, median_ns = 0, min_ns = 0, max_ns = 0;
};
// Of any durations (ns); the median of an even count is the mean of the middle two.
DurationStats duration_stats(std::vector<double> ns);

// One kernel name of a trace: its instances' durations (ns, sorted) and their statistics.
struct KernelRow {
  std::string name;  // kernel_name(): the short name
  std::vector<double> durations_ns;
  DurationStats stats;
};
// Every kernel name of a trace, by total time (largest first).
std::vector<KernelRow> kernel_table(const prof::ProfileTrace& t, prof::TimeMode mode);

// One kernel over a run: a row per profiled point that ran it.
struct KernelPointRow {
  std::int64_t point_id = 0;
  int steps = 0;  // the point's profiled steps
  DurationStats stats;
};
using ProfileOfPoint = std::function<std::shared_ptr<const prof::ProfileTrace>(std::int64_t point_id)>;
std::vector<KernelPointRow> kernel_over_run(const std::vector<db::PointRecord>& points, const ProfileOfPoint& profile_of,
                                            const std::string& name, prof::TimeMode mode);

}  // namespace moc::gui

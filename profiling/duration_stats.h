// Summary statistics of a set of durations, computed once for every reader of a profile: `mocbench stats`
// (app/report/profile_stats.cpp) and the dashboard's Kernels view (gui/model/kernel_stats.cpp). As nsys computes
// them: the median of an even count is the mean of the two middle values; the standard deviation is the
// sample one (n - 1; 0 for one value).
#pragma once
#include <cstddef>
#include <vector>

namespace moc::prof {

struct DurationSummary {
  std::size_t count = 0;
  double total = 0, mean = 0, median = 0, min = 0, max = 0, stddev = 0;
};

DurationSummary summarize_durations(std::vector<double> values);

}  // namespace moc::prof

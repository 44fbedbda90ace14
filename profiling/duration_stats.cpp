#include "profiling/duration_stats.h"

#include <algorithm>
#include <cmath>

namespace moc::prof {

DurationSummary summarize_durations(std::vector<double> v) {
  DurationSummary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.total += x;
  const double n = static_cast<double>(v.size());
  s.mean = s.total / n;
  const std::size_t mid = v.size() / 2;
  s.median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2.0;
  s.min = v.front();
  s.max = v.back();
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / (n - 1));
  }
  return s;
}

}  // namespace moc::prof

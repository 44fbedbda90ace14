#include "app/harness/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace moc {

Stats summarize(const std::vector<double>& v) {
  Stats s;
  s.reps = static_cast<int>(v.size());
  if (v.empty()) return s;
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.median_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  s.mean_s = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  s.min_s = sorted.front();
  s.max_s = sorted.back();
  double ss = 0;
  for (double x : v) ss += (x - s.mean_s) * (x - s.mean_s);
  s.stddev_s = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0.0;
  s.noise = s.median_s > 0 ? s.stddev_s / s.median_s : 0.0;
  return s;
}

Stats measure(const MeasureSettings& st, const std::function<double()>& rep, const std::function<double()>& elapsed) {
  const auto t0 = std::chrono::steady_clock::now();
  auto wall = elapsed ? elapsed : [t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < st.warmup; ++i) rep();
  const double start = wall();
  std::vector<double> samples;
  const int min_reps = std::max(1, st.min_reps), max_reps = std::max(min_reps, st.max_reps);
  Stats s;
  while (true) {
    samples.push_back(rep());
    const int n = static_cast<int>(samples.size());
    if (n < min_reps) continue;
    s = summarize(samples);
    const bool converged = s.noise < st.target_noise;
    bool stop = converged || n >= max_reps || wall() - start >= st.time_bound_s;
    if (st.agree) stop = st.agree(stop);
    if (stop) {
      s.converged = converged;
      break;
    }
  }
  return s;
}

}  // namespace moc

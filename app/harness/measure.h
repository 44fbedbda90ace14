// The measuring loop every sweep point goes through (nvbench-like): warm up, then repeat until the
// median is stable (relative noise below a target) or a repetition / time bound is reached.
#pragma once
#include <functional>
#include <vector>

namespace moc {

struct MeasureSettings {
  int warmup = 3;
  int min_reps = 5;
  int max_reps = 100;
  double time_bound_s = 10.0;  // wall-clock bound on the timed repetitions
  double target_noise = 0.02;  // stop once stddev / median falls below this (after min_reps)
  // Ranks of a data-parallel point must run the same number of repetitions: when set, each stop decision
  // after min_reps goes through it (this rank's wish in, the ranks' common answer out).
  std::function<bool(bool)> agree;
};

struct Stats {
  double median_s = 0, mean_s = 0, min_s = 0, max_s = 0, stddev_s = 0;
  int reps = 0;
  double noise = 0;        // stddev / median
  bool converged = false;  // stopped on noise rather than on a bound
};

Stats summarize(const std::vector<double>& samples_s);

// rep() runs one repetition and returns its duration in seconds (host timer on the CPU, CUDA events on
// the GPU). elapsed() returns the wall time spent so far (injectable so tests need no clock).
Stats measure(const MeasureSettings& s, const std::function<double()>& rep,
              const std::function<double()>& elapsed = {});

}  // namespace moc

// The modes of a sweep point as benchmarks over one harness (nvbench's benchmark + state shape): a Mode
// declares its name, what it needs, what one repetition is, how it gets cold, and what it refuses before
// allocating; its run() builds what it needs and hands the harness (PointState) one repetition. The harness
// (run_point, app/harness/point_bench.cpp) owns the ranges, the tracer, warm-up and timed repetitions, the profile
// pass and the metrics every point shares (median_ms .. noise_met, peak memory, phases), appended after the
// mode's own.
#pragma once
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "app/harness/point_bench.h"

namespace moc {

namespace prof {
class Tracer;
}

struct ExecOptions {
  // Re-records the point's CUDA graphs once the profile pass's tracer is up (it must see their nodes made).
  std::function<void()> recapture;
  bool profile = true;  // false: no profile pass even when the point asks for one
  // The ranks' common stop decision of a data-parallel point (MeasureSettings::agree); empty: none.
  std::function<bool(bool)> agree;
};

struct Harness;  // the driver's side (app/harness/point_bench.cpp)

// What a mode is given: the backend, the point, its model and one source of random values, and the calls
// that put its work through the harness.
class PointState {
 public:
  explicit PointState(Harness& h) : h_(h) {}
  Ops& ops() const;
  const PointSpec& spec() const;
  const ModelConfig& config() const;  // spec().model with seq_len covering the point, validated
  std::mt19937& rng() const;          // seeded with the model's seed
  RangeSink* ranges() const;          // phase ranges: the backend's timeline, NVTX, the profile's tracer
  PointOutcome& outcome() const;
  void metric(std::string name, double value) const;  // in order, before the harness's shared metrics

  // One repetition of fn: interruptible, cold when the mode flushes, its memory events and ranges recorded
  // for the first timed one, traced in the profile pass. Returns its time in seconds (the backend's timer).
  double repetition(const std::function<void()>& fn) const;
  // Warm-up and timed repetitions of sample (each one repetition() or a fixed number of them), then the
  // profile pass when the point asks for one. Sets and returns outcome().stats.
  const Stats& exec(const std::function<double()>& sample, const ExecOptions& opt = {}) const;
  // In exec's measuring loop (warm-up and timed repetitions), not the profile pass: what a mode records per
  // repetition (a loss, a phase's time) leaves the profile pass's repetitions out.
  bool timing() const;
  bool flushes() const;  // caches are flushed before each repetition (cold, and the mode flushes)
  // The profile's tracer where one is up: on the CPU from the start of a profiled point (the recording
  // decorator), on the GPU only during the profile pass; else null.
  prof::Tracer* tracer() const;
  void check_stop() const;       // throws Interrupted once the point is asked to stop
  void set_cost(const RepetitionCost& c) const;  // into outcome().cost

 private:
  Harness& h_;
};

struct Mode {
  std::string_view name;
  std::string_view needs;       // what it builds or reads beyond the point's shapes (for the reader)
  std::string_view repetition;  // what one timed repetition is (for the reader; stats are per repetition)
  // cold = true: the harness flushes the caches before each repetition, unless the mode makes its work cold
  // itself (ffn-decode rotates weight copies inside a repetition).
  bool flush_when_cold = true;
  // Before anything is allocated: throws OutOfMemory for a point known not to fit (null: no check).
  void (*refuse)(const PointSpec& spec, const ModelConfig& cfg) = nullptr;
  void (*run)(PointState& state) = nullptr;
};

// The registry, in the order modes are listed to the user (app/modes/registry.cpp).
const std::vector<const Mode*>& all_modes();
const Mode* find_mode(std::string_view name);  // null when there is none of that name

}  // namespace moc

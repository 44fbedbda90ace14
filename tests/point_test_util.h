// Shared by the tests that run sweep points directly (run_point): a tiny point of any mode and a metric by name.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "app/harness/point_bench.h"
#include "model/config.h"

namespace moc::test {

// The tiny preset, batch 2 x seq 8 (decode: prompt 4, generate 4), a 1 MiB cold buffer, a few repetitions.
inline PointSpec tiny_point(const std::string& mode, const std::string& ffn) {
  PointSpec p;
  p.mode = mode;
  p.model = preset("tiny");
  apply_override(p.model, "ffn", ffn);
  p.batch = 2;
  p.seq = 8;
  p.prompt = 4;
  p.generate = 4;
  p.cold_bytes = 1 << 20;
  p.measure.warmup = 1;
  p.measure.min_reps = 3;
  p.measure.max_reps = 6;
  p.measure.time_bound_s = 5;
  return p;
}

// The point's metric `name` (a test failure, and 0, when it has none).
inline double metric(const PointOutcome& o, const std::string& name) {
  for (const auto& [k, v] : o.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

}  // namespace moc::test

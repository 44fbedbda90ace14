// [measure] cold changes what runs (scenarios/README.md): ffn-decode rotates copies of the layer's weights inside
// each repetition; every other mode asks the backend to evict its cache (Ops::flush_caches: the GPU writes twice
// its L2; the CPU backend does nothing) before each repetition, outside its timing; cold = false does neither.
// Checked through the scenario path (parse, expand, to_spec, run_point) on the CPU backend, by what the backend
// was asked to do -- not by timing.
#include <gtest/gtest.h>

#include <string>

#include "app/harness/point_bench.h"
#include "app/harness/point_spec.h"
#include "app/scenario/scenario.h"
#include "kernels/ops.h"

namespace moc {
namespace {

struct ColdRun {
  std::uint64_t flushes = 0;
  double weight_copies = -1;  // ffn-decode's metric (-1: none)
  double calls_per_replay = -1;
  int reps = 0;
};

ColdRun run_cold(const std::string& mode, bool cold) {
  const std::string text = "mode = \"" + mode +
                           "\"\n"
                           "[model]\npreset = \"tiny\"\nffn = \"moc\"\n"
                           "[measure]\nwarmup = 1\nmin_reps = 2\nmax_reps = 2\nprompt = 4\ngenerate = 4\ncold = " +
                           std::string(cold ? "true" : "false") +
                           "\n"
                           "[axes]\nbatch = 2\nseq = 16\n";
  const auto pts = parse_scenario(text, "cold.toml").expand("cpu");
  EXPECT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts.at(0).measure.cold, cold);
  auto ops = make_cpu_ops();
  const PointOutcome out = run_point(*ops, to_spec(pts.at(0), /*no_profile=*/true));
  ColdRun r;
  r.flushes = ops->cache_flushes();
  r.reps = out.stats.reps;
  for (const auto& [k, v] : out.metrics)
    if (k == "weight_copies") r.weight_copies = v;
    else if (k == "calls_per_replay") r.calls_per_replay = v;
  return r;
}

TEST(ScenarioCold, EveryModeButFfnDecodeFlushesTheCacheBeforeEachRepetition) {
  for (const std::string mode : {"decode", "train", "ffn-train", "topk"}) {
    SCOPED_TRACE(mode);
    const ColdRun c = run_cold(mode, true);
    ASSERT_EQ(c.reps, 2);
    // One flush per repetition, warm-up included (decode also flushes before each timed prefill).
    EXPECT_GE(c.flushes, 3u);
    if (mode != "decode") {
      EXPECT_EQ(c.flushes, 3u);
    }
    EXPECT_EQ(run_cold(mode, false).flushes, 0u);
  }
}

TEST(ScenarioCold, FfnDecodeRotatesWeightCopiesInsteadOfFlushing) {
  const ColdRun cold = run_cold("ffn-decode", true), warm = run_cold("ffn-decode", false);
  EXPECT_EQ(cold.flushes, 0u);
  EXPECT_EQ(warm.flushes, 0u);
  EXPECT_GE(cold.weight_copies, 2.0);  // more weight bytes than the cache, rotated within each repetition
  EXPECT_EQ(warm.weight_copies, 1.0);
  // The CPU backend has no launch cost to hide: one round over the copies per repetition (the GPU's rule,
  // at least 16 calls, is checked by GpuProfiling.FfnDecodePointProfilesTheDecodeStepsKernels).
  EXPECT_EQ(cold.calls_per_replay, cold.weight_copies);
  EXPECT_EQ(warm.calls_per_replay, 1.0);
}

}  // namespace
}  // namespace moc

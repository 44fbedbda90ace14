// The measuring loop (with synthetic timings: no clocks asserted) and one point of every mode on the CPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "app/harness/measure.h"
#include "app/harness/point_bench.h"
#include "tests/point_test_util.h"
#include "model/memory_model.h"

namespace moc {
namespace {

TEST(Measure, SummaryStatistics) {
  const auto s = summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_DOUBLE_EQ(s.median_s, 2.5);
  EXPECT_DOUBLE_EQ(s.mean_s, 2.5);
  EXPECT_DOUBLE_EQ(s.min_s, 1.0);
  EXPECT_DOUBLE_EQ(s.max_s, 4.0);
  EXPECT_NEAR(s.stddev_s, 1.2909944, 1e-6);
  EXPECT_EQ(s.reps, 4);
}

TEST(Measure, StableSamplesStopAtTheMinimumAfterWarmUp) {
  int calls = 0;
  MeasureSettings st;
  st.warmup = 2;
  st.min_reps = 5;
  const auto s = measure(st, [&] { ++calls; return 1.0; }, [] { return 0.0; });
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(s.reps, 5);
  EXPECT_TRUE(s.converged);
}

TEST(Measure, NoisySamplesStopAtTheRepetitionBound) {
  int calls = 0;
  MeasureSettings st;
  st.warmup = 0;
  st.max_reps = 20;
  const auto s = measure(st, [&] { return ++calls % 2 ? 1.0 : 2.0; }, [] { return 0.0; });
  EXPECT_EQ(s.reps, 20);
  EXPECT_FALSE(s.converged);
}

TEST(Measure, TheTimeBoundStopsALongMeasurement) {
  double clock = 0;
  int calls = 0;
  MeasureSettings st;
  st.warmup = 0;
  st.max_reps = 1000;
  st.time_bound_s = 5.0;
  const auto s = measure(st, [&] { clock += 1.0; return ++calls % 2 ? 1.0 : 3.0; }, [&] { return clock; });
  EXPECT_FALSE(s.converged);
  EXPECT_EQ(s.reps, 5);
}

using test::metric;
using test::tiny_point;

class EveryMode : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryMode, RunsOnTheCpuAndReportsMetricsMemoryAndRanges) {
  for (const char* ffn : {"dense", "moc", "moc_2:8"}) {
    auto ops = make_cpu_ops();
    const auto out = run_point(*ops, tiny_point(GetParam(), ffn));
    EXPECT_GE(out.stats.reps, 3) << ffn;
    EXPECT_GT(out.stats.median_s, 0) << ffn;
    EXPECT_GT(out.peak_bytes, 0) << ffn;
    EXPECT_FALSE(out.ranges.empty()) << ffn;
    EXPECT_GT(metric(out, "median_ms"), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EveryMode, ::testing::Values("train", "decode", "ffn-train", "ffn-decode", "topk"),
                         [](const auto& i) {
                           std::string n = i.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Point, TrainReportsMeasuredActivationsEqualToTheEngineModel) {
  auto ops = make_cpu_ops();
  auto spec = tiny_point("train", "moc");
  const auto out = run_point(*ops, spec);
  EXPECT_DOUBLE_EQ(metric(out, "peak_activation_bytes"), engine_activation_model(spec.model, spec.batch, spec.seq).total());
  EXPECT_DOUBLE_EQ(metric(out, "activation_model_bytes"), metric(out, "peak_activation_bytes"));
}

TEST(Point, MemoryEventsOfARepetitionReplayToTheReportedPeak) {
  auto ops = make_cpu_ops();
  const auto out = run_point(*ops, tiny_point("train", "dense"));
  ASSERT_FALSE(out.memory_events.empty());
  std::int64_t live = out.memory_baseline_bytes, peak = live;
  for (const auto& e : out.memory_events) peak = std::max(peak, live += e.bytes);
  EXPECT_EQ(peak, out.peak_bytes);
}

TEST(Point, FfnDecodeReportsTheByteFloorOfEachVariant) {
  auto ops = make_cpu_ops();
  auto dense = tiny_point("ffn-decode", "dense"), moc = tiny_point("ffn-decode", "moc");
  const double d = 32, F = 85, K = 17;
  EXPECT_DOUBLE_EQ(metric(run_point(*ops, dense), "floor_bytes"), 3 * d * F * 4);
  // Batch 2: the rows' selections overlap partly; each selected weight row is counted once.
  const auto two = run_point(*ops, moc);
  const double U = metric(two, "union_channels");
  EXPECT_GE(U, K);
  EXPECT_LE(U, 2 * K);
  EXPECT_DOUBLE_EQ(metric(two, "floor_bytes"), (d * F + 2 * U * d) * 4);
  moc.batch = 1;
  const auto one = run_point(*ops, moc);
  EXPECT_DOUBLE_EQ(metric(one, "union_channels"), K);
  EXPECT_DOUBLE_EQ(metric(one, "floor_bytes"), (d * F + 2 * K * d) * 4);
}

// Decode and ffn-decode on the CPU: the greedy step, prefill timed with repetitions; ffn-decode times its
// parts apart (gate, top-K, up & down, other).
TEST(Point, DecodeAndFfnDecodeRun) {
  auto ops = make_cpu_ops();
  auto dec = tiny_point("decode", "moc");
  const auto d = run_point(*ops, dec);
  EXPECT_GT(metric(d, "ms_per_token"), 0);
  EXPECT_GT(metric(d, "prefill_ms"), 0);
  EXPECT_GE(metric(d, "prefill_reps"), dec.measure.min_reps);
  EXPECT_GE(metric(d, "prefill_noise"), 0);
  auto ffn = tiny_point("ffn-decode", "moc");
  const auto f = run_point(*ops, ffn);
  EXPECT_GT(metric(f, "latency_us"), 0);
  EXPECT_GE(metric(f, "union_channels"), 17);
  for (const char* part : {"gate_us", "topk_us", "up_down_us", "other_us", "up_down_alone_us"}) {
    const bool has = std::any_of(f.metrics.begin(), f.metrics.end(), [&](const auto& m) { return m.first == part; });
    EXPECT_TRUE(has) << part;
  }
  // The breakdown adds up to the call; other is what a floor at 0 left (none where the gate and top-K passes fit).
  const double parts = metric(f, "gate_us") + metric(f, "topk_us") + metric(f, "up_down_us") + metric(f, "other_us");
  EXPECT_NEAR(parts, metric(f, "latency_us"), 1e-9 * metric(f, "latency_us"));
  EXPECT_GE(metric(f, "up_down_us"), 0.0);
  if (metric(f, "latency_us") - metric(f, "gate_us") - metric(f, "topk_us") >= 0) {
    EXPECT_EQ(metric(f, "other_us"), 0.0);
  }
  const auto dense = run_point(*ops, tiny_point("ffn-decode", "dense"));
  EXPECT_NEAR(metric(dense, "gate_us") + metric(dense, "up_down_us") + metric(dense, "other_us"),
              metric(dense, "latency_us"), 1e-9 * metric(dense, "latency_us"));
  EXPECT_FALSE(std::any_of(dense.metrics.begin(), dense.metrics.end(),
                           [](const auto& m) { return m.first == "up_down_alone_us"; }))
      << "dense's gate, up and down are one pass: nothing to time alone";
}

TEST(Point, AnOversizedPointRaisesOutOfMemory) {
  auto ops = make_cpu_ops(256 << 10);
  auto spec = tiny_point("train", "dense");
  spec.batch = 64;
  EXPECT_THROW(run_point(*ops, spec), OutOfMemory);
}

// Where the memory model can tell, a train point that cannot fit is refused before anything is allocated,
// with the bytes needed and the limit; the bound it uses never exceeds what a step really holds.
TEST(Point, ATrainPointBeyondTheLimitIsRefusedBeforeAllocating) {
  auto ops = make_cpu_ops();
  auto spec = tiny_point("train", "moc");
  spec.batch = 64;
  spec.memory_limit_bytes = 256 << 10;
  try {
    run_point(*ops, spec);
    FAIL() << "not refused";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("refused before allocating"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256.00 KiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ops->memory().peak_total(), 0) << "nothing allocated";
  for (const char* ffn : {"dense", "moc", "moc_2:8"})
    for (bool gcp : {false, true}) {
      SCOPED_TRACE(std::string(ffn) + (gcp ? "+gcp" : ""));
      auto cpu = make_cpu_ops();
      auto fits = tiny_point("train", ffn);
      fits.model.ffn.gcp = gcp;
      const auto out = run_point(*cpu, fits);
      EXPECT_LE(training_lower_bound_bytes(fits.model, fits.batch, fits.seq), metric(out, "peak_bytes"));
    }
}

TEST(Point, AnUnknownModeIsAConfigError) {
  auto ops = make_cpu_ops();
  EXPECT_THROW(run_point(*ops, tiny_point("inference", "dense")), ConfigError);
}

}  // namespace
}  // namespace moc

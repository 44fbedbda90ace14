// The modes as benchmarks over one harness (app/modes/): the registry, what each mode declares (how it gets
// cold, the bytes and FLOPs of one repetition, checked against the metrics and cost models they come from),
// the order of a point's metrics (the mode's, then the harness's), and the runner's point statuses.
#include <gtest/gtest.h>

#include <algorithm>

#include "app/modes/mode.h"
#include "app/harness/point_bench.h"
#include "app/harness/runner.h"
#include "app/scenario/scenario.h"
#include "kernels/op_cost.h"
#include "tests/point_test_util.h"

namespace moc {
namespace {

using test::metric;

// The shared tiny point, unprofiled, at most 4 repetitions.
PointSpec small_point(const std::string& mode, const std::string& ffn) {
  PointSpec p = test::tiny_point(mode, ffn);
  p.profile = false;
  p.measure.max_reps = 4;
  return p;
}

std::size_t position(const PointOutcome& o, const std::string& name) {
  const auto it = std::find_if(o.metrics.begin(), o.metrics.end(), [&](const auto& m) { return m.first == name; });
  EXPECT_NE(it, o.metrics.end()) << name;
  return static_cast<std::size_t>(it - o.metrics.begin());
}

TEST(Modes, TheRegistryListsEveryModeInItsOrder) {
  const std::vector<std::string> names{"train", "decode", "eval", "ffn-train", "ffn-decode", "topk"};
  EXPECT_EQ(point_modes(), names);
  // The scenario parser keeps its own list (app/scenario/scenario.cpp, scenario_modes()): a mode added here must be added there too.
  EXPECT_EQ(scenario_modes(), names);
  ASSERT_EQ(all_modes().size(), names.size());
  for (const auto& n : names) {
    const Mode* m = find_mode(n);
    ASSERT_NE(m, nullptr) << n;
    EXPECT_EQ(m->name, n);
    EXPECT_NE(m->run, nullptr) << n;
    EXPECT_FALSE(m->repetition.empty()) << n;
    EXPECT_FALSE(m->needs.empty()) << n;
    // ffn-decode makes its repetitions cold with rotating weight copies; the others flush the caches.
    EXPECT_EQ(m->flush_when_cold, n != "ffn-decode") << n;
  }
  EXPECT_EQ(find_mode("inference"), nullptr);
  // The only mode that refuses a point before allocating is train (the memory model's lower bound).
  EXPECT_NE(find_mode("train")->refuse, nullptr);
}

TEST(Modes, AnUnknownModeNamesTheModesThereAre) {
  auto ops = make_cpu_ops();
  try {
    run_point(*ops, small_point("inference", "dense"));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "unknown mode 'inference'; use one of train, decode, eval, ffn-train, ffn-decode, topk");
  }
}

TEST(Modes, TrainDeclaresTheStepsModelFlops) {
  auto ops = make_cpu_ops();
  const auto spec = small_point("train", "moc");
  const auto out = run_point(*ops, spec);
  EXPECT_DOUBLE_EQ(out.cost.flops, train_flops_per_token(spec.model, spec.seq) * spec.batch * spec.seq);
  EXPECT_DOUBLE_EQ(out.cost.flops, metric(out, "model_flops_per_token") * spec.batch * spec.seq);
  EXPECT_DOUBLE_EQ(metric(out, "model_tflops"), out.cost.flops / out.stats.median_s / 1e12);
  EXPECT_EQ(out.cost.bytes, 0) << "no byte count is known for a training step";
}

TEST(Modes, FfnTrainDeclaresTheLayersModelFlops) {
  auto ops = make_cpu_ops();
  for (const char* ffn : {"dense", "moc"}) {
    const auto spec = small_point("ffn-train", ffn);
    const auto out = run_point(*ops, spec);
    const double d = spec.model.hidden, F = spec.model.d_ffn, rows = spec.batch * spec.seq;
    const double params = std::string(ffn) == "dense" ? 3 * d * F : 2 * d * F + d * spec.model.kept_channels();
    EXPECT_DOUBLE_EQ(out.cost.flops, 6 * params * rows) << ffn;
    EXPECT_DOUBLE_EQ(ffn_matmul_params(spec.model), params) << ffn;
    // The harness turns the declared FLOPs into the mode's rate.
    EXPECT_DOUBLE_EQ(metric(out, "model_tflops"), out.cost.flops / out.stats.median_s / 1e12) << ffn;
  }
}

TEST(Modes, FfnDecodeDeclaresItsByteFloorAndTheCostModelsFlops) {
  auto ops = make_cpu_ops();
  for (const char* ffn : {"dense", "moc"}) {
    const auto spec = small_point("ffn-decode", ffn);
    const auto out = run_point(*ops, spec);
    EXPECT_DOUBLE_EQ(out.cost.bytes, metric(out, "floor_bytes")) << ffn;
    EXPECT_DOUBLE_EQ(metric(out, "achieved_GBps"), out.cost.bytes / out.stats.median_s / 1e9) << ffn;
    const bool moc = std::string(ffn) == "moc";
    cost::FfnDecodeShape s;
    s.rows = spec.batch;
    s.d = spec.model.hidden;
    s.d_ffn = spec.model.d_ffn;
    s.kept = moc ? spec.model.kept_channels() : spec.model.d_ffn;
    s.elem = 4;  // the tiny preset: fp32
    s.moc = moc;
    EXPECT_DOUBLE_EQ(out.cost.flops, static_cast<double>(cost::ffn_decode(s, kFfnAll).flops)) << ffn;
  }
}

TEST(Modes, TopkDeclaresTheSelectionsBytesAndFlops) {
  auto ops = make_cpu_ops();
  const auto spec = small_point("topk", "moc");
  const auto out = run_point(*ops, spec);
  const double rows = spec.batch * spec.seq, F = spec.model.d_ffn, K = spec.model.kept_channels();
  EXPECT_DOUBLE_EQ(out.cost.bytes, rows * F * 4 + rows * K * 2);  // fp32 gate values in, i16 indices out
  EXPECT_DOUBLE_EQ(out.cost.flops, rows * F);
  // The harness turns the declared cost into the selection's achieved bandwidth and FLOP rate.
  EXPECT_DOUBLE_EQ(metric(out, "achieved_GBps"), out.cost.bytes / out.stats.median_s / 1e9);
  EXPECT_DOUBLE_EQ(metric(out, "model_tflops"), out.cost.flops / out.stats.median_s / 1e12);
}

TEST(Modes, DecodeDeclaresNoCost) {
  auto ops = make_cpu_ops();
  const auto out = run_point(*ops, small_point("decode", "dense"));
  EXPECT_EQ(out.cost.bytes, 0);
  EXPECT_EQ(out.cost.flops, 0);
  for (const auto& [k, v] : out.metrics) EXPECT_NE(k, "achieved_GBps") << "no cost declared: no rate";
}

// A point's metrics: the mode's own first, then the harness's statistics, memory and phases.
TEST(Modes, TheModesMetricsComeBeforeTheHarnesss) {
  auto ops = make_cpu_ops();
  const std::vector<std::pair<std::string, std::string>> first_and_own{
      {"train", "step_ms"}, {"decode", "ms_per_token"}, {"ffn-train", "fwd_bwd_ms"},
      {"ffn-decode", "latency_us"}, {"topk", "latency_us"}};
  for (const auto& [mode, own] : first_and_own) {
    const auto out = run_point(*ops, small_point(mode, "moc"));
    ASSERT_FALSE(out.metrics.empty()) << mode;
    EXPECT_EQ(out.metrics.front().first, own) << mode;
    const std::size_t median = position(out, "median_ms");
    EXPECT_EQ(out.metrics[median + 1].first, "mean_ms") << mode;
    EXPECT_LT(position(out, "noise_met"), position(out, "peak_bytes")) << mode;
    EXPECT_DOUBLE_EQ(metric(out, "median_ms"), out.stats.median_s * 1e3) << mode;
  }
}

TEST(Modes, PointStatusesKeepTheirStoredNames) {
  for (PointStatus s : {PointStatus::ok, PointStatus::oom, PointStatus::failed, PointStatus::interrupted})
    EXPECT_EQ(parse_point_status(point_status_name(s)), s);
  EXPECT_EQ(point_status_name(PointStatus::ok), "ok");
  EXPECT_EQ(point_status_name(PointStatus::oom), "oom");
  EXPECT_EQ(point_status_name(PointStatus::failed), "failed");
  EXPECT_EQ(point_status_name(PointStatus::interrupted), "interrupted");
  EXPECT_EQ(parse_point_status("something else"), PointStatus::failed);
}

}  // namespace
}  // namespace moc

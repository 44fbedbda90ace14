// Training on the GPU against the CPU oracle: the tiny model's loss and every parameter gradient for dense,
// MoC and MoC 2:8, with and without GCP, in fp32 and bf16 (the CPU model runs under the GPU's MoC
// selections: near the K-th value bf16 rounding may pick another channel, and under one selection the
// gradients must agree); a few hundred AdamW steps on a fixed batch reach the same loss on both backends,
// in both precision modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "gpu_util.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;
using moc::testing::impose_selection;

ModelConfig tiny(const char* ffn, bool gcp, DType dt, std::uint64_t seed) {
  ModelConfig cfg = preset("tiny-gqa");
  apply_override(cfg, "ffn", ffn);
  cfg.d_ffn = 85;  // odd: stored padded to 88 columns
  cfg.ffn.k = 17;
  cfg.ffn.gcp = gcp;
  cfg.seed = seed;
  cfg.init_std = 0.2f;
  cfg.param_dtype = cfg.act_dtype = dt;
  return cfg;
}

struct Batch {
  Tensor tok, tgt;
};
Batch upload_batch(Ops& o, const std::vector<std::int32_t>& ids, std::int64_t n) {
  Batch b{o.empty({n}, DType::i32, workspace_tag()), o.empty({n}, DType::i32, workspace_tag())};
  o.upload_i32(b.tok, std::vector<std::int32_t>(ids.begin(), ids.begin() + n));
  o.upload_i32(b.tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.begin() + n + 1));
  return b;
}

using GradCase = std::tuple<const char*, bool, bool>;  // ffn, gcp, bf16
class GpuTrainGrad : public ::testing::TestWithParam<GradCase> {};

TEST_P(GpuTrainGrad, LossAndEveryParameterGradientMatchTheCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto [ffn, gcp, bf16] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const ModelConfig cfg = tiny(ffn, gcp, bf16 ? DType::bf16 : DType::f32, seed);
  Transformer mg(*gpu, cfg), mc(*cpu, cfg);
  const int B = 3, S = 13;  // 39 rows: no multiple of anything
  const auto ids = random_ids(rng, B * S + 1, cfg.vocab);
  const Batch bg = upload_batch(*gpu, ids, B * S), bc = upload_batch(*cpu, ids, B * S);
  mg.allocate_grads();
  mc.allocate_grads();
  const double lg = mg.forward(bg.tok, bg.tgt, B, S, true);
  impose_selection(mg, *gpu, mc, *cpu);
  const double lc = mc.forward(bc.tok, bc.tgt, B, S, true);
  const double tol = bf16 ? 3e-2 : 2e-3;
  EXPECT_NEAR(lg, lc, tol * std::fabs(lc)) << "loss";
  mg.backward();
  mc.backward();
  moc::testing::expect_gradients_match(mg, *gpu, mc, *cpu, bf16 ? 5e-2 : 5e-3);
  // The padding channels of the FFN weights (85 of 88 columns are real) get no gradient on the GPU either.
  const int d = cfg.hidden, F = cfg.d_ffn, Fp = cfg.ffn_cols();
  ASSERT_GT(Fp, F);
  const auto gw = gpu->download_f32(mg.param("layer0.w_gate").grad);
  for (int r = 0; r < d; ++r)
    for (int c = F; c < Fp; ++c) EXPECT_EQ(gw[static_cast<std::size_t>(r * Fp + c)], 0.0f);
  const auto dw = gpu->download_f32(mg.param("layer1.w_down").grad);
  for (std::size_t i = static_cast<std::size_t>(F) * d; i < dw.size(); ++i) EXPECT_EQ(dw[i], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Variants, GpuTrainGrad,
                         ::testing::Combine(::testing::Values("dense", "moc", "moc_2:8"), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<GradCase>& i) {
                           std::string n = std::get<0>(i.param);
                           std::replace(n.begin(), n.end(), ':', 'x');
                           return n + (std::get<1>(i.param) ? "_gcp" : "") + (std::get<2>(i.param) ? "_bf16" : "_fp32");
                         });

// Memorizing one fixed batch for a few hundred AdamW steps (warm-up, cosine, clipping): the GPU's loss
// curve ends where the CPU's does (fp32, the same weights), and the bf16 precision modes on the GPU get there too.
using StepsCase = std::tuple<const char*, int>;  // ffn, 0: fp32 / 1: pure bf16 / 2: bf16 + fp32 master
class GpuTrainSteps : public ::testing::TestWithParam<StepsCase> {};

TEST_P(GpuTrainSteps, AFixedBatchReachesTheCpuLoss) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto [ffn, mode] = GetParam();
  const std::uint64_t seed = 7;
  std::mt19937 rng(seed);
  const ModelConfig cfg32 = tiny(ffn, false, DType::f32, seed);
  const ModelConfig cfg = tiny(ffn, false, mode == 0 ? DType::f32 : DType::bf16, seed);
  const int B = 4, S = 16, steps = 300;
  const auto ids = random_ids(rng, B * S + 1, cfg.vocab);
  TrainConfig tc;
  tc.lr = 3e-3f;
  tc.warmup_steps = 20;
  tc.total_steps = steps;
  auto train = [&](Ops& o, const ModelConfig& c, bool master) {
    Transformer m(o, c);
    TrainConfig t = tc;
    t.fp32_master = master;
    Trainer tr(m, t);
    const Batch b = upload_batch(o, ids, B * S);
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i) losses.push_back(tr.step(b.tok, b.tgt, B, S).loss);
    return losses;
  };
  const auto lc = train(*cpu, cfg32, false);
  const auto lg = train(*gpu, cfg, mode == 2);
  SCOPED_TRACE("cpu " + std::to_string(lc.front()) + " -> " + std::to_string(lc.back()) + ", gpu " +
               std::to_string(lg.front()) + " -> " + std::to_string(lg.back()));
  EXPECT_NEAR(lg.front(), lc.front(), 0.02 * lc.front());
  EXPECT_LT(lc.back(), 0.25 * lc.front());  // the CPU memorized the batch
  EXPECT_NEAR(lg.back(), lc.back(), 0.1 + 0.25 * lc.back());
}

INSTANTIATE_TEST_SUITE_P(PrecisionModes, GpuTrainSteps,
                         ::testing::Combine(::testing::Values("dense", "moc", "moc_2:8"), ::testing::Values(0, 1, 2)),
                         [](const ::testing::TestParamInfo<StepsCase>& i) {
                           std::string n = std::get<0>(i.param);
                           std::replace(n.begin(), n.end(), ':', 'x');
                           const int m = std::get<1>(i.param);
                           return n + (m == 0 ? "_fp32" : m == 1 ? "_bf16" : "_bf16_fp32master");
                         });

}  // namespace
}  // namespace moc

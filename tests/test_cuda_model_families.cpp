// The Qwen3-like (QK-norm) and Mixtral-like (MoE) families on the GPU against the CPU oracle: the MoE row
// ops (gather_rows, scatter_add_rows, rows_dot) on fresh random odd-size inputs with poisoned outputs, f32
// and bf16; a training step's loss and every parameter gradient (the GPU's routing and MoC selections
// imposed on the CPU: a near-tie of two router logits, like a near-tie at the K-th channel, may go either
// way under bf16 rounding). QK-norm prefill and decode logits: GpuModel (test_cuda_model.cpp). Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "gpu_util.h"
#include "op_harness.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;
using moc::testing::impose_routing;
using moc::testing::impose_selection;


TEST(GpuMoeOps, GatherScatterAndRowDotsMatchTheCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [m, n, d] : {std::tuple{37, 23, 29}, std::tuple{300, 131, 2048}, std::tuple{5, 5, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " m " + std::to_string(m) + " n " + std::to_string(n) + " d " +
                   std::to_string(d));
      // n distinct rows of m (as one expert sees its tokens), in a shuffled order.
      std::vector<std::int32_t> all(static_cast<std::size_t>(m));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<std::int32_t> rows(all.begin(), all.begin() + n);
      Tensor rg = gpu->empty({n}, DType::i32, workspace_tag()), rc = cpu->empty({n}, DType::i32, workspace_tag());
      gpu->upload_i32(rg, rows);
      cpu->upload_i32(rc, rows);
      auto src = twin(*gpu, *cpu, {m, d}, dt, randn(rng, static_cast<std::size_t>(m * d)));
      auto scale = twin(*gpu, *cpu, {n}, DType::f32, randn(rng, static_cast<std::size_t>(n)));
      auto compact = twin(*gpu, *cpu, {n, d}, dt, randn(rng, static_cast<std::size_t>(n * d)));
      const double tol = dt == DType::bf16 ? 1e-2 : 1e-5;
      for (bool scaled : {false, true}) {
        SCOPED_TRACE(scaled ? "scaled" : "unscaled");
        auto out = twin_poison(*gpu, *cpu, {n, d}, dt);
        gpu->gather_rows(src.g, rg, scaled ? &scale.g : nullptr, out.g);
        cpu->gather_rows(src.c, rc, scaled ? &scale.c : nullptr, out.c);
        expect_twin_close("gather_rows", *gpu, *cpu, out, tol);
        // Scatter-add into existing values: the rows not named keep theirs exactly.
        auto acc = twin(*gpu, *cpu, {m, d}, dt, randn(rng, static_cast<std::size_t>(m * d)));
        const auto before = cpu->download_f32(acc.c);
        gpu->scatter_add_rows(compact.g, rg, scaled ? &scale.g : nullptr, acc.g);
        cpu->scatter_add_rows(compact.c, rc, scaled ? &scale.c : nullptr, acc.c);
        const auto g = gpu->download_f32(acc.g), c = cpu->download_f32(acc.c);
        expect_close("scatter_add_rows", g, c, tol);
        for (int r : std::vector<std::int32_t>(all.begin() + n, all.end()))
          for (int j = 0; j < d; ++j)
            ASSERT_EQ(g[static_cast<std::size_t>(r * d + j)], before[static_cast<std::size_t>(r * d + j)]) << "row " << r;
      }
      auto dg = twin_poison(*gpu, *cpu, {n}, DType::f32);
      gpu->rows_dot(src.g, rg, compact.g, dg.g);
      cpu->rows_dot(src.c, rc, compact.c, dg.c);
      expect_twin_close("rows_dot", *gpu, *cpu, dg, dt == DType::bf16 ? 1e-3 : 1e-5);
    }
}

ModelConfig family(const char* p, const char* ffn, bool gcp, DType dt, std::uint64_t seed) {
  ModelConfig cfg = preset(p);
  apply_override(cfg, "ffn", ffn);
  cfg.d_ffn = 85;  // odd: stored padded to 88 columns
  cfg.ffn.k = 17;
  cfg.ffn.gcp = gcp;
  cfg.seed = seed;
  cfg.init_std = 0.2f;
  cfg.param_dtype = cfg.act_dtype = dt;
  return cfg;
}

using FamilyCase = std::tuple<const char*, const char*, bool, bool>;  // preset, ffn, gcp, bf16
class GpuFamilyTrain : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(GpuFamilyTrain, LossAndEveryParameterGradientMatchTheCpu) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto [p, ffn, gcp, bf16] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const ModelConfig cfg = family(p, ffn, gcp, bf16 ? DType::bf16 : DType::f32, seed);
  Transformer mg(*gpu, cfg), mc(*cpu, cfg);
  const int B = 3, S = 13;  // 39 rows
  const auto ids = random_ids(rng, B * S + 1, cfg.vocab);
  auto batch = [&](Ops& o) {
    std::pair<Tensor, Tensor> t{o.empty({B * S}, DType::i32, workspace_tag()), o.empty({B * S}, DType::i32, workspace_tag())};
    o.upload_i32(t.first, std::vector<std::int32_t>(ids.begin(), ids.begin() + B * S));
    o.upload_i32(t.second, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
    return t;
  };
  const auto bg = batch(*gpu), bc = batch(*cpu);
  mg.allocate_grads();
  mc.allocate_grads();
  const double lg = mg.forward(bg.first, bg.second, B, S, true);
  if (cfg.moe()) impose_routing(mg, *gpu, mc, *cpu);
  else impose_selection(mg, *gpu, mc, *cpu);
  const double lc = mc.forward(bc.first, bc.second, B, S, true);
  EXPECT_NEAR(lg, lc, (bf16 ? 3e-2 : 2e-3) * std::fabs(lc)) << "loss";
  mg.backward();
  mc.backward();
  moc::testing::expect_gradients_match(mg, *gpu, mc, *cpu, bf16 ? 5e-2 : 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, GpuFamilyTrain,
                         ::testing::Values(FamilyCase{"tiny-qwen3", "dense", false, false},
                                           FamilyCase{"tiny-qwen3", "moc", false, true},
                                           FamilyCase{"tiny-qwen3", "moc_2:8", true, true},
                                           FamilyCase{"tiny-moe", "dense", false, false},
                                           FamilyCase{"tiny-moe", "dense", true, true},
                                           FamilyCase{"tiny-moe", "moc", false, false},
                                           FamilyCase{"tiny-moe", "moc", true, true},
                                           FamilyCase{"tiny-moe", "moc_2:8", false, true}),
                         [](const ::testing::TestParamInfo<FamilyCase>& i) {
                           std::string n = std::string(std::get<0>(i.param)) + "_" + std::get<1>(i.param) +
                                           (std::get<2>(i.param) ? "_gcp" : "") + (std::get<3>(i.param) ? "_bf16" : "_fp32");
                           for (char& ch : n)
                             if (ch == ':' || ch == '-') ch = 'x';
                           return n;
                         });

}  // namespace
}  // namespace moc

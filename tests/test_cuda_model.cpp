// The whole tiny model on the GPU against the CPU oracle: prefill and decode-step logits for batch 1 and 3
// (dense, MoC, MoC 2:8, bf16 weights; the Qwen3-like QK-norm model dense and MoC) with the MoC selections of
// the GPU imposed on the CPU (selection ties and bf16 rounding may pick a different channel near the K-th
// value; under one selection the outputs must agree), and KV-cache decoding against the full forward on the
// GPU itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "gpu_util.h"
#include "model/decoder.h"
#include "model/transformer.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;
using moc::testing::impose_selection;

class GpuModel : public ::testing::TestWithParam<std::tuple<const char*, const char*, int>> {};

TEST_P(GpuModel, PrefillAndDecodeLogitsMatchTheCpuUnderOneSelection) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto [preset_name, ffn, batch] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  ModelConfig cfg = preset(preset_name);  // tiny-qwen3: QK-norm in the prefill and the decode kernels
  apply_override(cfg, "ffn", ffn);
  cfg.d_ffn = 85;  // odd
  cfg.ffn.k = 17;
  cfg.seed = seed;
  cfg.init_std = 0.2f;
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  Transformer mg(*gpu, cfg), mc(*cpu, cfg);
  const int S = 12, P = 5, V = cfg.vocab;
  Decoder dg(mg, batch, S), dc(mc, batch, S);
  for (int l = 0; l < cfg.layers; ++l) mg.ffn(l).set_record_selection(true);
  auto ids = random_ids(rng, static_cast<std::size_t>(batch) * S, V);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < batch; ++i) prompt.insert(prompt.end(), ids.begin() + i * S, ids.begin() + i * S + P);
  const auto pg = gpu->download_f32(dg.prefill(prompt, P));
  impose_selection(mg, *gpu, mc, *cpu);
  const auto pc = cpu->download_f32(dc.prefill(prompt, P));
  EXPECT_LT(rel_err(pg, pc), 5e-2) << "prefill logits";  // bf16 both sides: see the decode bound below
  for (int t = P; t < S; ++t) {
    std::vector<std::int32_t> step;
    for (int i = 0; i < batch; ++i) step.push_back(ids[static_cast<std::size_t>(i * S + t)]);
    const auto lg = gpu->download_f32(dg.step(step));
    impose_selection(mg, *gpu, mc, *cpu);
    const auto lc = cpu->download_f32(dc.step(step));
    // Both sides are bf16 with different accumulation orders (init_std 0.2: large logits), and the error
    // grows along the KV cache. On an H100 (2026-11-25, fresh seeds): 1.7% of 1500 cases had a decode step in
    // [0.020, 0.0235]; 1 of 6000 reached 0.0301 at the last position; 1 prefill in 3000 reached 0.02001. A
    // wrong kernel, selection or cache position gives errors of order 1.
    EXPECT_LT(rel_err(lg, lc), 5e-2) << "decode logits at position " << t;
  }
}

std::string gpu_model_name(const ::testing::TestParamInfo<std::tuple<const char*, const char*, int>>& i) {
  std::string n = std::string(std::get<1>(i.param)) + "_batch" + std::to_string(std::get<2>(i.param));
  std::replace(n.begin(), n.end(), ':', 'x');
  return n;
}
INSTANTIATE_TEST_SUITE_P(GpuBatchOneAndThree, GpuModel,
                         ::testing::Combine(::testing::Values("tiny-gqa"), ::testing::Values("dense", "moc", "moc_2:8"),
                                            ::testing::Values(1, 3)),
                         gpu_model_name);
INSTANTIATE_TEST_SUITE_P(GpuQkNorm, GpuModel,
                         ::testing::Combine(::testing::Values("tiny-qwen3"), ::testing::Values("dense", "moc"),
                                            ::testing::Values(1, 3)),
                         gpu_model_name);

// KV-cache decoding reproduces the full forward's logits on the GPU (dense: no selection can differ
// between the prefill's bf16 G and the decode kernels' fp32 g), and the captured step replays it.
TEST(GpuDecode, KvCacheDecodingReproducesTheFullForwardAndTheGraphReplaysIt) {
  MOC_GPU_OR_SKIP(gpu);
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  ModelConfig cfg = preset("tiny-gqa");
  cfg.seed = seed;
  cfg.init_std = 0.2f;
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  Transformer m(*gpu, cfg);
  const int batch = 3, S = 12, P = 5, V = cfg.vocab;
  auto ids = random_ids(rng, static_cast<std::size_t>(batch) * S, V);
  Tensor tok = gpu->empty({batch * S}, DType::i32, workspace_tag());
  gpu->upload_i32(tok, ids);
  const auto full = gpu->download_f32(m.forward_logits(tok, batch, S));
  Decoder dec(m, batch, S);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < batch; ++i) prompt.insert(prompt.end(), ids.begin() + i * S, ids.begin() + i * S + P);
  dec.prefill(prompt, P);
  for (int t = P; t < S; ++t) {
    std::vector<std::int32_t> step;
    for (int i = 0; i < batch; ++i) step.push_back(ids[static_cast<std::size_t>(i * S + t)]);
    const auto lg = gpu->download_f32(dec.step(step));
    std::vector<float> want;
    for (int i = 0; i < batch; ++i)
      want.insert(want.end(), full.begin() + (static_cast<std::ptrdiff_t>(i) * S + t) * V,
                  full.begin() + (static_cast<std::ptrdiff_t>(i) * S + t + 1) * V);
    // bf16 weights and activations on both sides, summed in different orders (the full forward's GEMMs, the decode
    // GEMVs and attention): 2e-2 failed 9 of 3000 fresh seeds on an H200 (largest 0.0293; seed 2523705769 gives
    // 0.0243 at position 5 with 93d30f8's kernels and c213056's alike). GpuModel's decode bound above; a wrong
    // kernel or cache position gives errors of order 1.
    EXPECT_LT(rel_err(lg, want), 5e-2) << "position " << t;
  }
  // Greedy generation: the captured step replayed equals stepping eagerly.
  Decoder a(m, 2, 16), b(m, 2, 16);
  const std::vector<std::int32_t> pr = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(a.generate(pr, 3, 10, true), b.generate(pr, 3, 10, false));
}

}  // namespace
}  // namespace moc

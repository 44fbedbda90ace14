// The kernel path's fused decode ops on the GPU against their CPU twins composed from the existing ops
// (issue #26): Ops::decode_qkv (RMSNorm + q/k/v GEMV + RoPE + cache write in one kernel) and the decode GEMV
// behind CudaOps::gemm for 1-4 rows of [out, in] weights (the o projection with its residual, the LM head).
// Fresh random inputs, poisoned outputs, odd sizes, GQA, head_dim 64 and 128, positions at both cache ends.
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "op_harness.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

struct QkvShape {
  int d, h, kvh, hd;
};

// decode_qkv on both backends; the caches start with the same random rows, so rows the op must not touch are
// compared too (bit for bit: they are copies).
void check_qkv(Ops& gpu, Ops& cpu, std::mt19937& rng, const QkvShape& s, int b, int T, std::vector<std::int32_t> pos,
               bool weights) {
  std::ostringstream os;
  os << "d " << s.d << " h " << s.h << "/" << s.kvh << " hd " << s.hd << " b " << b << " T " << T << " pos";
  for (auto p : pos) os << " " << p;
  SCOPED_TRACE(os.str());
  const MemTag wt = weights ? weights_tag() : workspace_tag();
  auto x = twin_rand(gpu, cpu, rng, {b, s.d}, DType::bf16, 1.0f);
  std::vector<float> nw = randn(rng, static_cast<std::size_t>(s.d), 0.2f);
  for (auto& v : nw) v += 1.0f;
  auto norm = twin(gpu, cpu, {s.d}, DType::bf16, nw, wt);
  const float wstd = 1.0f / std::sqrt(static_cast<float>(s.d));
  auto wq = twin_rand(gpu, cpu, rng, {s.h * s.hd, s.d}, DType::bf16, wstd, wt);
  auto wk = twin_rand(gpu, cpu, rng, {s.kvh * s.hd, s.d}, DType::bf16, wstd, wt);
  auto wv = twin_rand(gpu, cpu, rng, {s.kvh * s.hd, s.d}, DType::bf16, wstd, wt);
  auto kc = twin_rand(gpu, cpu, rng, {b, s.kvh, T, s.hd}, DType::bf16, 1.0f);
  auto vc = twin_rand(gpu, cpu, rng, {b, s.kvh, T, s.hd}, DType::bf16, 1.0f);
  Twin q = twin_poison(gpu, cpu, {b, s.h, s.hd}, DType::bf16);
  Tensor pg = gpu.empty({b}, DType::i32, workspace_tag()), pc = cpu.empty({b}, DType::i32, workspace_tag());
  gpu.upload_i32(pg, pos);
  cpu.upload_i32(pc, pos);
  const float eps = 1e-5f, theta = 10000.0f;
  gpu.decode_qkv(x.g, norm.g, eps, wq.g, wk.g, wv.g, pg, theta, q.g, kc.g, vc.g);
  cpu.decode_qkv(x.c, norm.c, eps, wq.c, wk.c, wv.c, pc, theta, q.c, kc.c, vc.c);
  gpu.synchronize();
  expect_close("q", gpu.download_f32(q.g), cpu.download_f32(q.c), 1e-2);
  for (const auto* c : {&kc, &vc}) {
    const auto got = gpu.download_f32(c->g), want = cpu.download_f32(c->c);
    ASSERT_EQ(got.size(), want.size());
    // Written rows within bf16 rounding; every other row exactly as it was.
    std::vector<float> gw, ww;
    std::size_t changed = 0;
    for (int r = 0; r < b; ++r)
      for (int kh = 0; kh < s.kvh; ++kh)
        for (int t = 0; t < T; ++t)
          for (int e = 0; e < s.hd; ++e) {
            const std::size_t i = ((static_cast<std::size_t>(r) * s.kvh + kh) * T + t) * s.hd + e;
            if (t == pos[static_cast<std::size_t>(r)]) {
              gw.push_back(got[i]);
              ww.push_back(want[i]);
            } else if (!(got[i] == want[i])) {
              ++changed;
            }
          }
    EXPECT_EQ(changed, 0u) << (c == &kc ? "k" : "v") << " cache: rows other than pos changed";
    expect_close(c == &kc ? "k rows" : "v rows", gw, ww, 1e-2);
  }
}

TEST(GpuDecodeFused, QkvMatchesTheComposedOps) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // MHA 32/32 and GQA 32/8 at the 1b width, 9/3 (an odd head count), head_dim 128, and head_dim 8 (the
  // composed ops: the fused kernel pairs 8 rows with their RoPE partners, so it takes head_dim % 16 == 0);
  // d 2560: a batch-1 row longer than the 2048 columns one warp loads at once (two load batches per row).
  const QkvShape shapes[] = {{2048, 32, 32, 64}, {2048, 32, 8, 64}, {576, 9, 3, 64}, {1024, 8, 2, 128}, {8, 1, 1, 8},
                             {2560, 4, 4, 64}};
  for (const auto& s : shapes)
    for (int b = 1; b <= 4; ++b)
      for (int T : {37, 300}) {
        std::vector<std::int32_t> pos(static_cast<std::size_t>(b));
        std::uniform_int_distribution<int> pick(0, T - 1);
        for (auto& p : pos) p = pick(rng);
        pos[0] = T - 1;
        if (b > 1) pos[1] = 0;
        check_qkv(*gpu, *cpu, rng, s, b, T, pos, b % 2 == 1);
      }
}

// CudaOps::gemm with trans_b at 1-8 rows runs the decode GEMV; odd output counts, both output dtypes, the
// residual form (beta 1) and a poisoned output (beta 0); a width that is no multiple of 8 keeps cuBLASLt, as does
// an x wider than the kernels' shared memory.
TEST(GpuDecodeFused, GemvMatchesCpuGemm) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int k : {8, 2048, 5464, 5461})
    for (int n : {1, 37, 2048, 5461})
      for (int m : {1, 2, 3, 4, 8})
        for (DType out : {DType::bf16, DType::f32})
          for (float beta : {0.0f, 1.0f}) {
            std::ostringstream os;
            os << "m " << m << " k " << k << " n " << n << " " << dtype_name(out) << " beta " << beta;
            SCOPED_TRACE(os.str());
            auto a = twin_rand(*gpu, *cpu, rng, {m, k}, DType::bf16, 1.0f);
            auto w = twin_rand(*gpu, *cpu, rng, {n, k}, DType::bf16, 1.0f / std::sqrt(static_cast<float>(k)), weights_tag());
            Twin c = beta != 0.0f ? twin_rand(*gpu, *cpu, rng, {m, n}, out) : twin_poison(*gpu, *cpu, {m, n}, out);
            gpu->gemm(a.g, false, w.g, true, c.g, 1.0f, beta);
            cpu->gemm(a.c, false, w.c, true, c.c, 1.0f, beta);
            expect_close("c", gpu->download_f32(c.g), cpu->download_f32(c.c), out == DType::f32 ? 2e-3 : 1e-2);
          }
  // x too wide for the kernels' shared memory on any device (8 x 16384 bf16: 256 KB): the composed path, still right.
  for (int m : {2, 8}) {
    SCOPED_TRACE("m " + std::to_string(m) + " k 16384");
    auto a = twin_rand(*gpu, *cpu, rng, {m, 16384}, DType::bf16, 1.0f);
    auto w = twin_rand(*gpu, *cpu, rng, {37, 16384}, DType::bf16, 1.0f / 128.0f, weights_tag());
    Twin c = twin_poison(*gpu, *cpu, {m, 37}, DType::f32);
    gpu->gemm(a.g, false, w.g, true, c.g, 1.0f, 0.0f);
    cpu->gemm(a.c, false, w.c, true, c.c, 1.0f, 0.0f);
    expect_close("c", gpu->download_f32(c.g), cpu->download_f32(c.c), 2e-3);
  }
}

// Ops::lm_head_argmax (greedy decoding's LM head with each row's argmax kept in the GEMV): the logits as the CPU's
// gemm, next as the first maximum of the GPU's own logits (ties: lowest id; a row of NaN gives 0, as sample).
// 1-8 rows (the one-row and the tensor-core kernels), odd vocabularies, rows that tie exactly (copies of one weight
// row), a NaN row, several calls in a row on the same words (each call leaves them zero).
TEST(GpuDecodeFused, LmHeadArgmaxMatchesGemmThenSample) {
  MOC_GPU_OR_SKIP(gpu);
  auto cpu = make_cpu_ops();
  const auto seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto first_max = [](const std::vector<float>& l, int row, int V) {
    int bi = 0;
    bool any = false;
    for (int j = 0; j < V; ++j) {
      const float v = l[static_cast<std::size_t>(row) * V + j];
      if (std::isnan(v)) continue;
      if (!any || v > l[static_cast<std::size_t>(row) * V + bi]) bi = j;
      any = true;
    }
    return bi;
  };
  for (int k : {8, 2048, 5464})
    for (int V : {1, 37, 5461, 32000}) {
      std::vector<float> wv = randn(rng, static_cast<std::size_t>(V) * k, 1.0f / std::sqrt(static_cast<float>(k)));
      if (V >= 37) {  // three copies of one row, scaled up: an exact tie, likely the maximum
        const int j = V / 2;
        for (int c = 0; c < k; ++c) {
          const float v = 4.0f * wv[static_cast<std::size_t>(j) * k + c];
          for (int r : {j, j + 1, V - 1}) wv[static_cast<std::size_t>(r) * k + c] = v;
        }
      }
      auto w = twin(*gpu, *cpu, {V, k}, DType::bf16, wv, weights_tag());
      for (int m : {1, 2, 3, 4, 8}) {
        std::ostringstream os;
        os << "m " << m << " k " << k << " V " << V;
        SCOPED_TRACE(os.str());
        Twin logits = twin_poison(*gpu, *cpu, {m, V}, DType::f32);
        Tensor next = gpu->empty({m}, DType::i32, workspace_tag());
        for (int call = 0; call < 3; ++call) {
          SCOPED_TRACE("call " + std::to_string(call));
          std::vector<float> xv = randn(rng, static_cast<std::size_t>(m) * k, 1.0f);
          if (call == 2 && m > 1)
            for (int c = 0; c < k; ++c) xv[static_cast<std::size_t>(k) + c] = std::nanf("");  // row 1: NaN logits
          auto x = twin(*gpu, *cpu, {m, k}, DType::bf16, xv);
          gpu->upload_i32(next, std::vector<std::int32_t>(static_cast<std::size_t>(m), -7));
          gpu->lm_head_argmax(x.g, w.g, logits.g, next);
          cpu->gemm(x.c, false, w.c, true, logits.c);
          const auto lg = gpu->download_f32(logits.g);
          if (!(call == 2 && m > 1)) expect_close("logits", lg, cpu->download_f32(logits.c), 2e-3);
          const auto got = gpu->download_i32(next);
          for (int r = 0; r < m; ++r)
            EXPECT_EQ(got[static_cast<std::size_t>(r)], first_max(lg, r, V)) << "row " << r;
        }
      }
    }
}

}  // namespace
}  // namespace moc

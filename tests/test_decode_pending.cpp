// The decode step's pending residual sum (Ops::ffn_decode's pend, read by decode_qkv and folded by
// decode_out_proj) on the CPU: the ops' default compositions and the CPU twin of ffn_decode, which adds into
// out and leaves pend zero. GPU counterparts: test_cuda_decode_fused.cpp, test_cuda_ffn_decode.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/ops.h"
#include "test_util.h"

namespace moc {
namespace {
using namespace moc::test;

Tensor make(Ops& ops, const Shape& s, DType dt, const std::vector<float>& v) {
  Tensor t = ops.empty(s, dt, workspace_tag());
  ops.upload_f32(t, v);
  return t;
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

TEST(DecodePending, QkvReadsTheRoundedSumAndChangesNeither) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  const int b = 2, d = 64, h = 4, kvh = 2, hd = 16, T = 9;
  const auto xv = randn(rng, b * d), pv = randn(rng, b * d, 0.5f);
  std::vector<float> folded(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) folded[i] = round_bf16(round_bf16(xv[i]) + pv[i]);
  Tensor x = make(*ops, {b, d}, DType::bf16, xv), xf = make(*ops, {b, d}, DType::bf16, folded);
  Tensor pend = make(*ops, {b, d}, DType::f32, pv);
  std::vector<float> nw(d, 1.0f);
  Tensor norm = make(*ops, {d}, DType::bf16, nw);
  Tensor wq = make(*ops, {h * hd, d}, DType::bf16, randn(rng, h * hd * d, 0.1f));
  Tensor wk = make(*ops, {kvh * hd, d}, DType::bf16, randn(rng, kvh * hd * d, 0.1f));
  Tensor wv = make(*ops, {kvh * hd, d}, DType::bf16, randn(rng, kvh * hd * d, 0.1f));
  Tensor pos = ops->empty({b}, DType::i32, workspace_tag());
  ops->upload_i32(pos, {3, 8});
  auto run = [&](const Tensor& xin, const Tensor* pd) {
    Tensor q = ops->empty({b, h, hd}, DType::bf16, workspace_tag());
    Tensor kc = make(*ops, {b, kvh, T, hd}, DType::bf16, std::vector<float>(b * kvh * T * hd, 0.0f));
    Tensor vc = make(*ops, {b, kvh, T, hd}, DType::bf16, std::vector<float>(b * kvh * T * hd, 0.0f));
    ops->decode_qkv(xin, norm, 1e-5f, wq, wk, wv, pos, 10000.0f, q, kc, vc, pd);
    std::vector<float> all = ops->download_f32(q);
    for (const Tensor* c : {&kc, &vc}) {
      const auto v = ops->download_f32(*c);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  EXPECT_EQ(run(x, &pend), run(xf, nullptr));
  EXPECT_EQ(ops->download_f32(pend), pv) << "pend changed";
  EXPECT_EQ(ops->download_f32(x), ops->download_f32(make(*ops, {b, d}, DType::bf16, xv))) << "x changed";
}

TEST(DecodePending, OutProjFoldsThenAddsAndClearsPend) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  const int m = 3, k = 40, n = 24;
  const auto av = randn(rng, m * k), wv = randn(rng, n * k, 0.2f), xv = randn(rng, m * n), pv = randn(rng, m * n, 0.5f);
  Tensor a = make(*ops, {m, k}, DType::bf16, av), w = make(*ops, {n, k}, DType::bf16, wv);
  Tensor x = make(*ops, {m, n}, DType::bf16, xv), pend = make(*ops, {m, n}, DType::f32, pv);
  ops->decode_out_proj(a, w, x, &pend);
  const auto got = ops->download_f32(x);
  const auto ar = ops->download_f32(a), wr = ops->download_f32(w), xr = ops->download_f32(make(*ops, {m, n}, DType::bf16, xv));
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      double dot = 0;
      for (int i = 0; i < k; ++i) dot += static_cast<double>(ar[r * k + i]) * wr[c * k + i];
      const float base = round_bf16(xr[r * n + c] + pv[r * n + c]);
      EXPECT_NEAR(got[r * n + c], round_bf16(static_cast<float>(dot) + base), 1e-2 * (1.0 + std::fabs(dot)))
          << "row " << r << " col " << c;
    }
  EXPECT_EQ(ops->download_f32(pend), std::vector<float>(m * n, 0.0f)) << "pend not cleared";
  // Without pend: the residual gemm, bit for bit.
  Tensor x2 = make(*ops, {m, n}, DType::bf16, xv), x3 = make(*ops, {m, n}, DType::bf16, xv);
  ops->decode_out_proj(a, w, x2, nullptr);
  ops->gemm(a, false, w, true, x3, 1.0f, 1.0f);
  EXPECT_EQ(ops->download_f32(x2), ops->download_f32(x3));
}

TEST(DecodePending, CpuFfnDecodeAddsIntoOutAndLeavesPendZero) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(fresh_seed());
  const int R = 2, d = 16, F = 37;
  Tensor x = make(*ops, {R, d}, DType::bf16, randn(rng, R * d));
  Tensor wg = make(*ops, {F, d}, DType::bf16, randn(rng, F * d, 0.25f));
  Tensor wu = make(*ops, {F, d}, DType::bf16, randn(rng, F * d, 0.25f));
  Tensor wd = make(*ops, {F, d}, DType::bf16, randn(rng, F * d, 0.25f));
  const auto ov = randn(rng, R * d);
  Tensor o1 = make(*ops, {R, d}, DType::bf16, ov), o2 = make(*ops, {R, d}, DType::bf16, ov);
  Tensor pend = make(*ops, {R, d}, DType::f32, std::vector<float>(R * d, 0.0f));
  MocSelect sel;
  sel.k = 9;
  ops->ffn_decode(x, {&wg, &wu, &wd}, &sel, o1, nullptr, nullptr, kFfnAll, &pend);
  ops->ffn_decode(x, {&wg, &wu, &wd}, &sel, o2);
  EXPECT_EQ(ops->download_f32(o1), ops->download_f32(o2));
  EXPECT_EQ(ops->download_f32(pend), std::vector<float>(R * d, 0.0f));
  Tensor bad = make(*ops, {R, d + 1}, DType::f32, std::vector<float>(R * (d + 1), 0.0f));
  EXPECT_THROW(ops->ffn_decode(x, {&wg, &wu, &wd}, &sel, o1, nullptr, nullptr, kFfnAll, &bad), std::invalid_argument);
}

}  // namespace
}  // namespace moc

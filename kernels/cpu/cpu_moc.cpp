// CPU Mixture-of-Channels ops: row / grouped top-K selection (paper eq. 4), compact gather/scatter and
// the sparse down projection Z'·W_down with its backward (paper eq. 6-7).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moc::cpu {

namespace {
float select_key(float g, SelectRule rule) {
  float key = g;
  if (rule == SelectRule::silu) key = silu(g);
  if (rule == SelectRule::abs_silu) key = std::fabs(silu(g));
  return std::isnan(key) ? -std::numeric_limits<float>::infinity() : key;  // NaN never wins
}
}  // namespace

void CpuOps::moc_select(const Tensor& g, const MocSelect& sel, Tensor& idx) {
  const std::int64_t n = g.rows(), ld = g.cols(), F = sel.channels(ld);
  require(F <= ld, "moc_select", "width " + std::to_string(F) + " exceeds the row's " + std::to_string(ld) + " columns");
  require(!(sel.backend == TopkBackend::raft && !sel.grouped()), "moc_select",
          "topk_backend raft needs the CUDA backend built with RAFT; the CPU backend has only its own top-K");
  const int kept = sel.kept(static_cast<int>(F));
  require(F <= 65536, "moc_select", "d_ffn above 65536 does not fit i16 channel indices");
  require(kept > 0 && kept <= F, "moc_select", "kept channels " + std::to_string(kept) + " not in [1, d_ffn]");
  require(idx.rows() == n && idx.cols() == kept, "moc_select",
          "idx must be [" + std::to_string(n) + ", " + std::to_string(kept) + "], got " + shape_str(idx.shape()));
  if (sel.grouped())
    require(sel.group_a > 0 && sel.group_a <= sel.group_b, "moc_select", "a:b needs 0 < a <= b");
  F32In G(g);
  auto* out = idx.data<std::uint16_t>();
#pragma omp parallel
  {
    std::vector<float> key(static_cast<std::size_t>(F));
    std::vector<std::int32_t> order(static_cast<std::size_t>(F));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < F; ++j) key[static_cast<std::size_t>(j)] = select_key(G[i * ld + j], sel.rule);
      // Larger key first; equal keys: lower channel index first (deterministic tie rule).
      auto better = [&](std::int32_t x, std::int32_t y) {
        float kx = key[static_cast<std::size_t>(x)], ky = key[static_cast<std::size_t>(y)];
        return kx > ky || (kx == ky && x < y);
      };
      std::uint16_t* row = out + i * kept;
      if (!sel.grouped()) {
        std::iota(order.begin(), order.end(), 0);
        std::nth_element(order.begin(), order.begin() + (kept - 1), order.end(), better);
        std::sort(order.begin(), order.begin() + kept);
        for (int j = 0; j < kept; ++j) row[j] = static_cast<std::uint16_t>(order[static_cast<std::size_t>(j)]);
      } else {
        int w = 0;
        for (std::int64_t g0 = 0; g0 < F; g0 += sel.group_b) {
          const std::int64_t len = std::min<std::int64_t>(sel.group_b, F - g0);
          const int take = static_cast<int>(std::min<std::int64_t>(sel.group_a, len));
          auto first = order.begin();
          std::iota(first, first + len, static_cast<std::int32_t>(g0));
          std::partial_sort(first, first + take, first + len, better);
          std::sort(first, first + take);
          for (int j = 0; j < take; ++j) row[w++] = static_cast<std::uint16_t>(order[static_cast<std::size_t>(j)]);
        }
      }
    }
  }
}

void CpuOps::gather_cols(const Tensor& src, const Tensor& idx, Tensor& out) {
  const std::int64_t n = src.rows(), F = src.cols(), K = idx.cols();
  require(idx.rows() == n && out.rows() == n && out.cols() == K, "gather_cols", "shape mismatch");
  F32In S(src);
  F32Out O(out, false);
  const auto* ix = idx_ptr(idx);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < K; ++j) O[i * K + j] = S[i * F + ix[i * K + j]];
}

void CpuOps::scatter_cols(const Tensor& compact, const Tensor& idx, Tensor& dense) {
  const std::int64_t n = dense.rows(), F = dense.cols(), K = idx.cols();
  require(idx.rows() == n && compact.rows() == n && compact.cols() == K, "scatter_cols", "shape mismatch");
  F32In C(compact);
  F32Out D(dense, false);
  const auto* ix = idx_ptr(idx);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    std::fill_n(D.get() + i * F, F, 0.0f);
    for (std::int64_t j = 0; j < K; ++j) D[i * F + ix[i * K + j]] = C[i * K + j];
  }
}

void CpuOps::sparse_rows_matmul(const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) {
  const std::int64_t n = z.rows(), K = z.cols(), d = w.cols();
  require(idx.rows() == n && idx.cols() == K && out.rows() == n && out.cols() == d, "sparse_rows_matmul",
          "shape mismatch");
  F32In Z(z), W(w);
  F32Out O(out, beta != 0.0f);
  const auto* ix = idx_ptr(idx);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float* oi = O.get() + i * d;
    for (std::int64_t c = 0; c < d; ++c) oi[c] *= beta;
    if (beta == 0.0f) std::fill_n(oi, d, 0.0f);  // 0 * NaN poison must not survive
    for (std::int64_t j = 0; j < K; ++j) {
      const float zj = Z[i * K + j];
      const float* wr = W.get() + static_cast<std::int64_t>(ix[i * K + j]) * d;
      for (std::int64_t c = 0; c < d; ++c) oi[c] += zj * wr[c];
    }
  }
}

void CpuOps::sparse_rows_matmul_backward(const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                         Tensor& dz, Tensor& dw) {
  const std::int64_t n = z.rows(), K = z.cols(), d = w.cols();
  require(dz.rows() == n && dz.cols() == K && dw.shape() == w.shape() && dout.rows() == n && dout.cols() == d,
          "sparse_rows_matmul_backward", "shape mismatch");
  F32In DO(dout), Z(z), W(w);
  F32Out DZ(dz, false), DW(dw, true);
  const auto* ix = idx_ptr(idx);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < K; ++j) {
      const float* wr = W.get() + static_cast<std::int64_t>(ix[i * K + j]) * d;
      const float* gi = DO.get() + i * d;
      float acc = 0;
      for (std::int64_t c = 0; c < d; ++c) acc += gi[c] * wr[c];
      DZ[i * K + j] = acc;
    }
  // dW_down rows are shared between tokens: each thread owns a slice of columns.
  constexpr std::int64_t kTile = 64;
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < d; c0 += kTile) {
    const std::int64_t c1 = std::min(d, c0 + kTile);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < K; ++j) {
        const float zj = Z[i * K + j];
        float* dwr = DW.get() + static_cast<std::int64_t>(ix[i * K + j]) * d;
        const float* gi = DO.get() + i * d;
        for (std::int64_t c = c0; c < c1; ++c) dwr[c] += zj * gi[c];
      }
  }
}

}  // namespace moc::cpu

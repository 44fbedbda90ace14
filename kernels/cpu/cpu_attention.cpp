// CPU causal attention (GQA) that keeps only out and log-sum-exp, like flash attention; backward
// recomputes the probabilities from them. Decode attention over a KV cache.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moc::cpu {

namespace {
struct AttnDims {
  std::int64_t b, s, h, kvh, hd;
};

AttnDims check_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  require(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, "q, k, v must be [b, s, heads, head_dim]");
  AttnDims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  require(k.shape() == v.shape() && k.dim(0) == d.b && k.dim(1) == d.s && k.dim(3) == d.hd, op,
          "k/v shape " + shape_str(k.shape()) + " does not match q " + shape_str(q.shape()));
  require(d.kvh > 0 && d.h % d.kvh == 0, op, "kv heads must divide heads");
  return d;
}
}  // namespace

void CpuOps::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const auto d = check_dims("attention_forward", q, k, v);
  require(out.shape() == q.shape() && lse.numel() == d.b * d.h * d.s && lse.dtype() == DType::f32,
          "attention_forward", "out must match q and lse be f32 [b, h, s]");
  F32In Q(q), K(k), V(v);
  F32Out O(out, false);
  float* L = lse.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  const std::int64_t group = d.h / d.kvh;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<std::size_t>(d.s));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t bi = 0; bi < d.b; ++bi)
      for (std::int64_t hi = 0; hi < d.h; ++hi) {
        const std::int64_t kh = hi / group;
        for (std::int64_t i = 0; i < d.s; ++i) {
          const float* qi = Q.get() + ((bi * d.s + i) * d.h + hi) * d.hd;
          float mx = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j <= i; ++j) {
            const float* kj = K.get() + ((bi * d.s + j) * d.kvh + kh) * d.hd;
            float dot = 0;
            for (std::int64_t c = 0; c < d.hd; ++c) dot += qi[c] * kj[c];
            p[static_cast<std::size_t>(j)] = dot * scale;
            mx = std::max(mx, dot * scale);
          }
          double sum = 0;
          for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(static_cast<double>(p[static_cast<std::size_t>(j)] - mx));
          const float lse_i = mx + static_cast<float>(std::log(sum));
          L[(bi * d.h + hi) * d.s + i] = lse_i;
          float* oi = O.get() + ((bi * d.s + i) * d.h + hi) * d.hd;
          std::fill_n(oi, d.hd, 0.0f);
          for (std::int64_t j = 0; j <= i; ++j) {
            const float pj = std::exp(p[static_cast<std::size_t>(j)] - lse_i);
            const float* vj = V.get() + ((bi * d.s + j) * d.kvh + kh) * d.hd;
            for (std::int64_t c = 0; c < d.hd; ++c) oi[c] += pj * vj[c];
          }
        }
      }
  }
}

void CpuOps::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  const auto d = check_dims("attention_backward", q, k, v);
  require(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape() && dout.shape() == q.shape(),
          "attention_backward", "gradient shapes must match their inputs");
  F32In Q(q), K(k), V(v), O(out), DO(dout);
  F32Out DQ(dq, false), DK(dk, false), DV(dv, false);
  std::fill_n(DQ.get(), dq.numel(), 0.0f);
  std::fill_n(DK.get(), dk.numel(), 0.0f);
  std::fill_n(DV.get(), dv.numel(), 0.0f);
  const float* L = lse.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  const std::int64_t group = d.h / d.kvh;
  // One thread owns a (batch, kv head) pair, so its dk/dv rows are never shared.
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t bi = 0; bi < d.b; ++bi)
    for (std::int64_t kh = 0; kh < d.kvh; ++kh)
      for (std::int64_t hi = kh * group; hi < (kh + 1) * group; ++hi)
        for (std::int64_t i = 0; i < d.s; ++i) {
          const std::int64_t qo = ((bi * d.s + i) * d.h + hi) * d.hd;
          const float* qi = Q.get() + qo;
          const float* doi = DO.get() + qo;
          float Di = 0;  // rowsum(dO ∘ O)
          for (std::int64_t c = 0; c < d.hd; ++c) Di += doi[c] * O[qo + c];
          const float lse_i = L[(bi * d.h + hi) * d.s + i];
          for (std::int64_t j = 0; j <= i; ++j) {
            const std::int64_t ko = ((bi * d.s + j) * d.kvh + kh) * d.hd;
            const float* kj = K.get() + ko;
            const float* vj = V.get() + ko;
            float dot = 0, dp = 0;
            for (std::int64_t c = 0; c < d.hd; ++c) {
              dot += qi[c] * kj[c];
              dp += doi[c] * vj[c];
            }
            const float p = std::exp(dot * scale - lse_i);
            const float ds = p * (dp - Di) * scale;
            for (std::int64_t c = 0; c < d.hd; ++c) {
              DV[ko + c] += p * doi[c];
              DQ[qo + c] += ds * kj[c];
              DK[ko + c] += ds * qi[c];
            }
          }
        }
}

void CpuOps::kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& start, Tensor& k_cache,
                            Tensor& v_cache) {
  require(k.rank() == 4 && k.shape() == v.shape() && k_cache.rank() == 4 && k_cache.shape() == v_cache.shape(),
          "kv_cache_write", "k/v [b, n, kvh, hd] and caches [b, kvh, max_seq, hd]");
  const std::int64_t b = k.dim(0), n = k.dim(1), kvh = k.dim(2), hd = k.dim(3), T = k_cache.dim(2);
  require(k_cache.dim(0) == b && k_cache.dim(1) == kvh && k_cache.dim(3) == hd && start.numel() == b,
          "kv_cache_write", "cache " + shape_str(k_cache.shape()) + " does not fit k " + shape_str(k.shape()));
  F32In K(k), V(v);
  F32Out KC(k_cache, true), VC(v_cache, true);
  const auto* st = start.data<std::int32_t>();
  for (std::int64_t bi = 0; bi < b; ++bi) {
    require(st[bi] >= 0 && st[bi] + n <= T, "kv_cache_write",
            "position " + std::to_string(st[bi] + n) + " exceeds the cache length " + std::to_string(T));
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t kh = 0; kh < kvh; ++kh) {
        const std::int64_t src = ((bi * n + t) * kvh + kh) * hd;
        const std::int64_t dst = ((bi * kvh + kh) * T + st[bi] + t) * hd;
        std::copy_n(K.get() + src, hd, KC.get() + dst);
        std::copy_n(V.get() + src, hd, VC.get() + dst);
      }
  }
}

void CpuOps::attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                              Tensor& out) {
  require(q.rank() == 3 && k_cache.rank() == 4 && out.shape() == q.shape(), "attention_decode",
          "q [b, h, hd], caches [b, kvh, max_seq, hd]");
  const std::int64_t b = q.dim(0), h = q.dim(1), hd = q.dim(2), kvh = k_cache.dim(1), T = k_cache.dim(2);
  require(h % kvh == 0 && pos.numel() == b, "attention_decode", "kv heads must divide heads; one position per row");
  F32In Q(q), K(k_cache), V(v_cache);
  F32Out O(out, false);
  const auto* ps = pos.data<std::int32_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    std::vector<float> p(static_cast<std::size_t>(T));
#pragma omp for collapse(2) schedule(static)
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t hi = 0; hi < h; ++hi) {
        const std::int64_t kh = hi / (h / kvh);
        const std::int64_t len = std::min<std::int64_t>(ps[bi] + 1, T);
        const float* qi = Q.get() + (bi * h + hi) * hd;
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < len; ++j) {
          const float* kj = K.get() + ((bi * kvh + kh) * T + j) * hd;
          float dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) dot += qi[c] * kj[c];
          p[static_cast<std::size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < len; ++j) sum += std::exp(static_cast<double>(p[static_cast<std::size_t>(j)] - mx));
        float* oi = O.get() + (bi * h + hi) * hd;
        std::fill_n(oi, hd, 0.0f);
        for (std::int64_t j = 0; j < len; ++j) {
          const float pj = static_cast<float>(std::exp(static_cast<double>(p[static_cast<std::size_t>(j)] - mx)) / sum);
          const float* vj = V.get() + ((bi * kvh + kh) * T + j) * hd;
          for (std::int64_t c = 0; c < hd; ++c) oi[c] += pj * vj[c];
        }
      }
  }
}

}  // namespace moc::cpu

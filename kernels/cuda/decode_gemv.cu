// Decode-time GEMVs over weights stored [out, in] (one output = one contiguous row of d values) for 1-4 rows
// of bf16 activations: the projections of the kernel path's decode step (issue #26).
//
// - gemv_rows: C[m, n] = alpha x[m, :] W^T + beta C (C bf16 or f32): the o projection with its residual add
//   (beta 1) and the LM head (f32 logits). CudaOps::gemm sends decode-sized calls here instead of cuBLASLt.
// - decode_qkv: RMSNorm in the prologue, q | k | v = xn [Wq; Wk; Wv]^T as one GEMV over the three matrices,
//   RoPE and the K/V-cache write in the epilogue (Ops::decode_qkv): one kernel where the composed ops take
//   seven (a norm, three GEMVs, two RoPEs, a cache write).
//
// Floor: the weight rows, read once (a 2048 x 6144 QKV: 25.2 MB, 8.4 us at 3 TB/s); everything else is a few
// KB. Layout of the work: a warp owns one output row (in QKV two neighbouring warps own the pair RoPE rotates
// together, i and i + hd/2 of one head, and meet in shared memory), each lane streams kU 16-byte words of
// it in flight (a 1b row in one round trip; ~60 registers, so the whole QKV grid is resident at once);
// a block of kThreads stages x (normalized, rounded to bf16 as rmsnorm_forward writes it) in shared memory.
// PDL: a weights-tagged W is streamed before the wait for the previous kernel (its first batch), x after.
// Sums are fp32, reduced across the warp by shuffles; each output is rounded once, as the CPU twin's GEMM
// output is, and RoPE rotates the rounded q and k (as rope() does after the GEMM) in double-precision angles
// from the host's frequency table, without fused multiply-adds.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/decode_device.cuh"

namespace moc::cuda {
namespace gemv {
namespace {

using namespace moc::cuda::dev;  // bf16, ld_stream, bf_lo / bf_hi

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kU = 8;                      // 16-byte words per lane and row in one batch of loads
constexpr int kBatchCols = kU * 32 * 8;    // columns of one batch (2048: a 1b row in one round trip)
constexpr int kMaxRows = 4;                // rows of x
constexpr int kRopeTable = 64;             // head_dim <= 128
constexpr std::size_t kMaxSmem = 200 * 1024;

enum Epi : int { kStore = 0, kQkv = 1 };

struct RopeTable {
  double f[kRopeTable];  // theta^(-2i/hd), computed as CpuOps::rope does
};

struct Args {
  const bf16* x;     // [M, d]
  const bf16* norm;  // [d] RMSNorm weight (kQkv), else null
  float eps;
  const bf16* w0;  // rows [0, n0)
  const bf16* w1;  // rows [n0, n0 + n1)
  const bf16* w2;  // the rest
  int n0, n1, n;   // n: all rows
  int d, units;    // units: rows (kStore) or RoPE row pairs (kQkv)
  int early;       // W may be streamed before the wait (a weights tensor)
  // kStore
  void* out;  // [M, n]
  int out_f32;
  float alpha, beta;
  // kQkv
  bf16* q;   // [M, h, hd]
  bf16* kc;  // [M, kvh, max_seq, hd]
  bf16* vc;
  const std::int32_t* pos;  // [M]
  int h, kvh, hd, max_seq;
  RopeTable rope;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ const bf16* row_ptr(const Args& a, int r) {
  if (r < a.n0) return a.w0 + static_cast<std::size_t>(r) * a.d;
  if (r < a.n0 + a.n1) return a.w1 + static_cast<std::size_t>(r - a.n0) * a.d;
  return a.w2 + static_cast<std::size_t>(r - a.n0 - a.n1) * a.d;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// x [M, d] into shared memory; with a norm weight, RMSNorm'd and rounded to bf16 exactly as
// rmsnorm_vec_kernel writes it. Every thread calls it (it ends with a barrier).
template <int M>
__device__ void stage_x(const Args& a, bf16* xs, float* red) {
  const int nv = a.d / 8;
  const uint4* xg = reinterpret_cast<const uint4*>(a.x);
  uint4* xw = reinterpret_cast<uint4*>(xs);
  if (!a.norm) {
    for (int e = threadIdx.x; e < M * nv; e += kThreads) xw[e] = __ldg(xg + e);
    __syncthreads();
    return;
  }
  float ss[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    ss[m] = 0.0f;
    for (int j = threadIdx.x; j < nv; j += kThreads) {
      const uint4 v = __ldg(xg + m * nv + j);
      xw[m * nv + j] = v;
      const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float lo = bf_lo(u[t]), hi = bf_hi(u[t]);
        ss[m] += lo * lo + hi * hi;
      }
    }
    ss[m] = warp_sum(ss[m]);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) red[warp * M + m] = ss[m];
  }
  __syncthreads();
  const uint4* wg = reinterpret_cast<const uint4*>(a.norm);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += red[w * M + m];
    const float rs = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(a.d) + a.eps));
    for (int j = threadIdx.x; j < nv; j += kThreads) {  // the words this thread staged
      const uint4 v = xw[m * nv + j], w = __ldg(wg + j);
      const bf16* xe = reinterpret_cast<const bf16*>(&v);
      const bf16* we = reinterpret_cast<const bf16*>(&w);
      uint4 o;
      bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
      for (int k = 0; k < 8; ++k) oe[k] = __float2bfloat16_rn(__bfloat162float(xe[k]) * rs * __bfloat162float(we[k]));
      xw[m * nv + j] = o;
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  acc = fmaf(bf_lo(w.x), bf_lo(x.x), acc);
  acc = fmaf(bf_hi(w.x), bf_hi(x.x), acc);
  acc = fmaf(bf_lo(w.y), bf_lo(x.y), acc);
  acc = fmaf(bf_hi(w.y), bf_hi(x.y), acc);
  acc = fmaf(bf_lo(w.z), bf_lo(x.z), acc);
  acc = fmaf(bf_hi(w.z), bf_hi(x.z), acc);
  acc = fmaf(bf_lo(w.w), bf_lo(x.w), acc);
  acc = fmaf(bf_hi(w.w), bf_hi(x.w), acc);
}

// RoPE of the pair (a, b) = (row i, row i + hd/2) of one head at position p, as rope_kernel computes it.
__device__ __forceinline__ void rotate(const Args& a, int i, int p, float& x0, float& x1) {
  const double ang = static_cast<double>(p) * a.rope.f[i];
  double sd, cd;
  sincos(ang, &sd, &cd);
  const float c = static_cast<float>(cd), s = static_cast<float>(sd);
  const float r0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  const float r1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  x0 = r0;
  x1 = r1;
}

template <int M, int EPI>
__device__ __forceinline__ void gemv_body(const Args& a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [M, d]
  __shared__ float red[kWarps * M];
  __shared__ float res[kWarps][M];  // kQkv: each warp's rounded dot products, for its RoPE partner
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // One output row per warp. kQkv: warps 2w and 2w + 1 take rows i and i + hd/2 of one head (the pair
  // RoPE rotates together); unit = that pair.
  int row = 0, unit = 0;
  if constexpr (EPI == kQkv) {
    unit = blockIdx.x * (kWarps / 2) + warp / 2;
    const int half = a.hd / 2, head = unit / half, i = unit - head * half;
    row = head * a.hd + i + (warp & 1) * half;
  } else {
    unit = blockIdx.x * kWarps + warp;
    row = unit;
  }
  const bool active = unit < a.units;
  const bf16* pw = row_ptr(a, active ? row : 0);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 A[kU];
  auto load = [&](int bt) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int col = bt * kBatchCols + (u * 32 + lane) * 8;
      A[u] = col < a.d && active ? ld_stream(pw + col) : zero;
    }
  };
  pdl_trigger();
  if (a.early) load(0);
  pdl_wait();
  if (!a.early) load(0);
  stage_x<M>(a, xs, red);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  const int nbatch = (a.d + kBatchCols - 1) / kBatchCols;
  for (int bt = 0; bt < nbatch; ++bt) {
    if (bt > 0) load(bt);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int col = bt * kBatchCols + (u * 32 + lane) * 8;
      if (col < a.d) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          fma8(acc[m], A[u], *reinterpret_cast<const uint4*>(xs + static_cast<std::size_t>(m) * a.d + col));
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
  if constexpr (EPI == kStore) {
    if (!active) return;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (lane != m) continue;  // lane m writes row m
      const std::size_t o = static_cast<std::size_t>(m) * a.n + row;
      if (a.out_f32) {
        float* out = static_cast<float*>(a.out);
        out[o] = a.beta != 0.0f ? a.alpha * acc[m] + a.beta * out[o] : a.alpha * acc[m];
      } else {
        bf16* out = static_cast<bf16*>(a.out);
        out[o] = __float2bfloat16_rn(a.beta != 0.0f ? a.alpha * acc[m] + a.beta * __bfloat162float(out[o])
                                                    : a.alpha * acc[m]);
      }
    }
  } else {
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) res[warp][m] = round_bf16(acc[m]);
    }
    __syncthreads();
    if (!active || (warp & 1)) return;  // the pair's first warp finishes it
    const int half = a.hd / 2, head = unit / half, i = unit - head * half;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (lane != m) continue;  // lane m: sequence m
      float x0 = res[warp][m], x1 = res[warp + 1][m];
      const int p = a.pos[m];
      if (head < a.h) {
        rotate(a, i, p, x0, x1);
        bf16* qo = a.q + (static_cast<std::size_t>(m) * a.h + head) * a.hd;
        qo[i] = __float2bfloat16_rn(x0);
        qo[i + half] = __float2bfloat16_rn(x1);
      } else {
        const bool is_k = head < a.h + a.kvh;
        const int kh = head - a.h - (is_k ? 0 : a.kvh);
        if (is_k) rotate(a, i, p, x0, x1);
        if (p >= 0 && p < a.max_seq) {  // rows past the cache are not written (as kv_cache_write)
          bf16* c = (is_k ? a.kc : a.vc) +
                    ((static_cast<std::size_t>(m) * a.kvh + kh) * a.max_seq + p) * static_cast<std::size_t>(a.hd);
          c[i] = __float2bfloat16_rn(x0);
          c[i + half] = __float2bfloat16_rn(x1);
        }
      }
    }
  }
}

// Two kernels (two names in a profile): the plain GEMV and the fused QKV.
template <int M>
__global__ void __launch_bounds__(kThreads) k_gemv(const Args a) {
  gemv_body<M, kStore>(a);
}
template <int M>
__global__ void __launch_bounds__(kThreads) k_qkv(const Args a) {
  gemv_body<M, kQkv>(a);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <int EPI>
void launch(cudaStream_t st, int M, const Args& a) {
  const std::size_t smem = static_cast<std::size_t>(M) * a.d * sizeof(bf16);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.units, EPI == kQkv ? kWarps / 2 : kWarps)));
  auto go = [&](auto kernel) {
    allow_smem(kernel, smem);
    launch_pdl(EPI == kQkv ? "k_qkv" : "k_gemv", kernel, grid, dim3(kThreads), smem, st, a);
  };
  if constexpr (EPI == kQkv) {
    switch (M) {
      case 1: go(k_qkv<1>); break;
      case 2: go(k_qkv<2>); break;
      case 3: go(k_qkv<3>); break;
      default: go(k_qkv<4>); break;
    }
  } else {
    switch (M) {
      case 1: go(k_gemv<1>); break;
      case 2: go(k_gemv<2>); break;
      case 3: go(k_gemv<3>); break;
      default: go(k_gemv<4>); break;
    }
  }
}

}  // namespace
}  // namespace gemv

bool gemv_rows_fits(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  if (ta || !tb) return false;
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16) return false;
  if (c.dtype() != DType::bf16 && c.dtype() != DType::f32) return false;
  if (a.rank() != 2 || b.rank() != 2) return false;
  const std::int64_t m = a.rows(), k = a.cols(), n = b.rows();
  if (m < 1 || m > gemv::kMaxRows || k < 8 || k % 8 != 0 || n < 1 || b.cols() != k) return false;
  if (n > (std::int64_t(1) << 30) || static_cast<std::size_t>(m * k) * sizeof(__nv_bfloat16) > gemv::kMaxSmem)
    return false;
  return gemv::aligned16(a.raw()) && gemv::aligned16(b.raw());
}

void gemv_rows(cudaStream_t st, const Tensor& a, const Tensor& b, Tensor& c, float alpha, float beta) {
  gemv::Args g{};
  g.x = a.data<__nv_bfloat16>();
  g.w0 = g.w1 = g.w2 = b.data<__nv_bfloat16>();
  g.n = g.n0 = static_cast<int>(b.rows());
  g.n1 = 0;
  g.d = static_cast<int>(a.cols());
  g.units = g.n;
  g.early = b.tag().category == MemCategory::weights ? 1 : 0;
  g.out = c.raw();
  g.out_f32 = c.dtype() == DType::f32 ? 1 : 0;
  g.alpha = alpha;
  g.beta = beta;
  gemv::launch<gemv::kStore>(st, static_cast<int>(a.rows()), g);
}

bool decode_qkv_fused(cudaStream_t st, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& wq_t,
                      const Tensor& wk_t, const Tensor& wv_t, const Tensor& pos, float theta, Tensor& q,
                      Tensor& k_cache, Tensor& v_cache) {
  require(x.rank() == 2 && q.rank() == 3 && k_cache.rank() == 4 && k_cache.shape() == v_cache.shape() &&
              q.dim(0) == x.dim(0) && k_cache.dim(0) == x.dim(0) && k_cache.dim(3) == q.dim(2),
          "decode_qkv", "x [b, d], q [b, h, hd], caches [b, kvh, max_seq, hd] expected");
  require(norm_w.numel() == x.dim(1) && wq_t.rank() == 2 && wk_t.rank() == 2 && wv_t.rank() == 2 &&
              wq_t.dim(0) == q.dim(1) * q.dim(2) && wk_t.dim(0) == k_cache.dim(1) * q.dim(2) &&
              wv_t.shape() == wk_t.shape() && wq_t.dim(1) == x.dim(1) && wk_t.dim(1) == x.dim(1),
          "decode_qkv", "the norm weight [d] and projections [h*hd, d], [kvh*hd, d] must fit x and q");
  require(pos.dtype() == DType::i32 && pos.numel() == x.dim(0), "decode_qkv", "pos must be i32 [b]");
  const DType bf = DType::bf16;
  for (const Tensor* t : {&x, &norm_w, &wq_t, &wk_t, &wv_t, static_cast<const Tensor*>(&q),
                          static_cast<const Tensor*>(&k_cache), static_cast<const Tensor*>(&v_cache)})
    if (t->dtype() != bf || !gemv::aligned16(t->raw())) return false;
  const std::int64_t b = x.rows(), d = x.cols(), h = q.dim(1), hd = q.dim(2), kvh = k_cache.dim(1);
  if (b < 1 || b > gemv::kMaxRows || d % 8 != 0 || hd % 2 != 0 || hd / 2 > gemv::kRopeTable) return false;
  if (static_cast<std::size_t>(b * d) * sizeof(__nv_bfloat16) > gemv::kMaxSmem) return false;
  gemv::Args g{};
  g.x = x.data<__nv_bfloat16>();
  g.norm = norm_w.data<__nv_bfloat16>();
  g.eps = eps;
  g.w0 = wq_t.data<__nv_bfloat16>();
  g.w1 = wk_t.data<__nv_bfloat16>();
  g.w2 = wv_t.data<__nv_bfloat16>();
  g.n0 = static_cast<int>(h * hd);
  g.n1 = static_cast<int>(kvh * hd);
  g.n = static_cast<int>((h + 2 * kvh) * hd);
  g.d = static_cast<int>(d);
  g.units = g.n / 2;
  g.early = wq_t.tag().category == MemCategory::weights && wk_t.tag().category == MemCategory::weights &&
                    wv_t.tag().category == MemCategory::weights
                ? 1
                : 0;
  g.q = q.data<__nv_bfloat16>();
  g.kc = k_cache.data<__nv_bfloat16>();
  g.vc = v_cache.data<__nv_bfloat16>();
  g.pos = pos.data<std::int32_t>();
  g.h = static_cast<int>(h);
  g.kvh = static_cast<int>(kvh);
  g.hd = static_cast<int>(hd);
  g.max_seq = static_cast<int>(k_cache.dim(2));
  for (std::int64_t i = 0; i < hd / 2; ++i)  // exactly as CpuOps::rope
    g.rope.f[i] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  gemv::launch<gemv::kQkv>(st, static_cast<int>(b), g);
  return true;
}

}  // namespace moc::cuda

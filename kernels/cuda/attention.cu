// Causal attention with GQA on the GPU for training and prefill: flash-style forward (online softmax over 64-key
// tiles, only out and log-sum-exp leave the chip) and a recomputing backward (one kernel for dK/dV per key tile, one
// for dQ per query tile: no atomics, deterministic). Decode attention over the KV cache: attention_decode.cu.
// The tile kernels run on fp32 CUDA cores from shared memory; head_dim is padded to 64 or 128 with zeros.
// bf16 forward/backward go to cuDNN's fused SDPA first (cudnn_sdpa.cpp, tensor cores) when the build has
// it and it takes the shape; these kernels run f32, whatever cuDNN refuses, and MOCBENCH_ATTN=own.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace {

constexpr int kTile = 64;       // query rows and key rows per tile
constexpr int kThreads = 256;   // 16 x 16: thread (ty, tx) holds rows ty*4+i and columns tx+16j of a 64x64 tile
constexpr int kPStride = kTile + 4;
constexpr float kLn2 = 0.6931471805599453f;

template <int HD> struct Tile {
  static constexpr int kStride = HD + 4;  // floats per shared row: 16-byte aligned, conflict-free float4 reads
  static constexpr int kGroups = HD / 64; // float4 column groups per thread in a [64, HD] accumulator
  static constexpr int kFloats = kTile * kStride;
};

// Rows r0.. r0+63 of a [s, ?] matrix whose row t starts at base + t * row_stride, as fp32 times mul;
// rows >= s and columns >= hd are zero.
template <int HD, class T>
__device__ __forceinline__ void load_tile(float* dst, const T* base, long long row_stride, int r0, int s, int hd,
                                          float mul) {
  for (int e = threadIdx.x; e < kTile * HD; e += kThreads) {
    const int r = e / HD, d = e % HD;
    float v = 0.0f;
    if (r0 + r < s && d < hd) v = to_f32(base[static_cast<long long>(r0 + r) * row_stride + d]) * mul;
    dst[r * Tile<HD>::kStride + d] = v;
  }
}

// acc[i][j] += sum_d A[ty*4+i][d] * B[tx+16j][d]   (A, B: [64, HD] tiles)
template <int HD>
__device__ __forceinline__ void mm_abt(const float* A, const float* B, float (&acc)[4][4]) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  constexpr int S = Tile<HD>::kStride;
#pragma unroll 4
  for (int d = 0; d < HD; d += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty * 4 + i) * S + d);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 16 * j) * S + d);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[i][j] += a[i].x * b[j].x + a[i].y * b[j].y + a[i].z * b[j].z + a[i].w * b[j].w;
  }
}

// acc[i][g] (4 columns tx*4 + 64g ..) += sum_j P[ty*4+i][j] * V[j][tx*4 + 64g ..]   (P: [64, 64], V: [64, HD])
template <int HD>
__device__ __forceinline__ void mm_ab(const float* P, const float* V, float4 (&acc)[4][Tile<HD>::kGroups]) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  constexpr int S = Tile<HD>::kStride;
  constexpr int G = Tile<HD>::kGroups;
#pragma unroll 2
  for (int j = 0; j < kTile; j += 4) {
    float4 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = *reinterpret_cast<const float4*>(P + (ty * 4 + i) * kPStride + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      float4 v[G];
#pragma unroll
      for (int g = 0; g < G; ++g) v[g] = *reinterpret_cast<const float4*>(V + (j + jj) * S + tx * 4 + 64 * g);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pj = jj == 0 ? p[i].x : jj == 1 ? p[i].y : jj == 2 ? p[i].z : p[i].w;
#pragma unroll
        for (int g = 0; g < G; ++g) {
          acc[i][g].x += pj * v[g].x;
          acc[i][g].y += pj * v[g].y;
          acc[i][g].z += pj * v[g].z;
          acc[i][g].w += pj * v[g].w;
        }
      }
    }
  }
}

// Writes rows r0 + ty*4 + i (< s) of a [64, HD] accumulator times mul, columns < hd.
template <int HD, class T>
__device__ __forceinline__ void store_rows(T* base, long long row_stride, int r0, int s, int hd,
                                           const float4 (&acc)[4][Tile<HD>::kGroups], const float (&mul)[4]) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty * 4 + i;
    if (r >= s) continue;
    T* row = base + static_cast<long long>(r) * row_stride;
#pragma unroll
    for (int g = 0; g < Tile<HD>::kGroups; ++g) {
      const int d = tx * 4 + 64 * g;
      const float v[4] = {acc[i][g].x, acc[i][g].y, acc[i][g].z, acc[i][g].w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (d + e < hd) row[d + e] = from_f32<T>(v[e] * mul[i]);
    }
  }
}

// A row's statistics over the 16 lanes that hold it (reduce.cuh).
__device__ __forceinline__ float half_warp_max(float v) { return dev::warp_max<16>(v); }
__device__ __forceinline__ float half_warp_sum(float v) { return dev::warp_sum<16>(v); }

// ---- forward: one block per (query tile, head, batch)
template <class T, int HD>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                            const T* __restrict__ v, T* __restrict__ out,
                                                            float* __restrict__ lse, int s, int h, int kvh, int hd,
                                                            float scale_log2) {
  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);
  float* KVs = Qs + Tile<HD>::kFloats;
  float* Ps = KVs + Tile<HD>::kFloats;
  constexpr int G = Tile<HD>::kGroups;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest (last) query tiles start first
  const int hi = blockIdx.y, bi = blockIdx.z, kh = hi / (h / kvh);
  const int q0 = qt * kTile;
  const long long qstride = static_cast<long long>(h) * hd, kstride = static_cast<long long>(kvh) * hd;
  const T* qb = q + (static_cast<long long>(bi) * s * h + hi) * hd;
  const T* kb = k + (static_cast<long long>(bi) * s * kvh + kh) * hd;
  const T* vb = v + (static_cast<long long>(bi) * s * kvh + kh) * hd;

  load_tile<HD>(Qs, qb, qstride, q0, s, hd, scale_log2);  // scores come out in log2 units
  float m[4], l[4];
  float4 o[4][G];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) o[i][g] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of KVs and Ps are done
    load_tile<HD>(KVs, kb, kstride, k0, s, hd, 1.0f);
    __syncthreads();
    float sc[4][4] = {};
    mm_abt<HD>(Qs, KVs, sc);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qi = q0 + ty * 4 + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kj = k0 + tx + 16 * j;
        if (kj > qi || kj >= s) sc[i][j] = -INFINITY;
        mx = fmaxf(mx, sc[i][j]);
      }
      const float m_new = fmaxf(m[i], half_warp_max(mx));
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[i] - base);
      float rs = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = exp2f(sc[i][j] - base);
        rs += p;
        Ps[(ty * 4 + i) * kPStride + tx + 16 * j] = p;
      }
      l[i] = l[i] * alpha + half_warp_sum(rs);
      m[i] = m_new;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        o[i][g].x *= alpha;
        o[i][g].y *= alpha;
        o[i][g].z *= alpha;
        o[i][g].w *= alpha;
      }
    }
    __syncthreads();  // K no longer read; P complete
    load_tile<HD>(KVs, vb, kstride, k0, s, hd, 1.0f);
    __syncthreads();
    mm_ab<HD>(Ps, KVs, o);
  }
  float inv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
  store_rows<HD>(out + (static_cast<long long>(bi) * s * h + hi) * hd, qstride, q0, s, hd, o, inv);
  if (tx == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qi = q0 + ty * 4 + i;
      if (qi < s) lse[(static_cast<long long>(bi) * h + hi) * s + qi] = m[i] * kLn2 + logf(l[i]);
    }
  }
}

// ---- backward
// D[b, h, t] = sum_d dout * out (one warp per row).
template <class T>
__global__ void attn_bwd_dot_kernel(const T* __restrict__ out, const T* __restrict__ dout, float* __restrict__ D,
                                    long long rows, int s, int h, int hd) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // row = (bi * s + t) * h + hi
  const T* o = out + row * hd;
  const T* g = dout + row * hd;
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32) acc += to_f32(o[d]) * to_f32(g[d]);
  acc = dev::warp_sum(acc);
  if (lane == 0) {
    const long long hi = row % h, bt = row / h, t = bt % s, bi = bt / s;
    D[(bi * h + hi) * s + t] = acc;
  }
}

// dK, dV of one key tile of one kv head: loops over the heads of its group and the query tiles at or after it.
template <class T, int HD>
__global__ void __launch_bounds__(kThreads, 1) attn_bwd_dkdv_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dk, T* __restrict__ dv, int s, int h,
    int kvh, int hd, float scale, float scale_log2) {
  extern __shared__ float4 smem_f4[];
  float* Ks = reinterpret_cast<float*>(smem_f4);
  float* Vs = Ks + Tile<HD>::kFloats;
  float* Qs = Vs + Tile<HD>::kFloats;
  float* dOs = Qs + Tile<HD>::kFloats;
  float* Ps = dOs + Tile<HD>::kFloats;
  float* dSs = Ps + kTile * kPStride;
  float* lse2s = dSs + kTile * kPStride;
  float* Ds = lse2s + kTile;
  constexpr int G = Tile<HD>::kGroups;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int kt = blockIdx.x, kh = blockIdx.y, bi = blockIdx.z;
  const int group = h / kvh;
  const int k0 = kt * kTile, nqt = cdiv(s, kTile);
  const long long qstride = static_cast<long long>(h) * hd, kstride = static_cast<long long>(kvh) * hd;
  const long long koff = (static_cast<long long>(bi) * s * kvh + kh) * hd;
  load_tile<HD>(Ks, k + koff, kstride, k0, s, hd, 1.0f);
  load_tile<HD>(Vs, v + koff, kstride, k0, s, hd, 1.0f);
  float4 dka[4][G], dva[4][G];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int g = 0; g < G; ++g) dka[i][g] = dva[i][g] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int hh = 0; hh < group; ++hh) {
    const int hi = kh * group + hh;
    const long long qoff = (static_cast<long long>(bi) * s * h + hi) * hd;
    const float* lse_row = lse + (static_cast<long long>(bi) * h + hi) * s;
    const float* D_row = D + (static_cast<long long>(bi) * h + hi) * s;
    for (int qt = kt; qt < nqt; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();  // the previous iteration's readers are done
      load_tile<HD>(Qs, q + qoff, qstride, q0, s, hd, 1.0f);
      load_tile<HD>(dOs, dout + qoff, qstride, q0, s, hd, 1.0f);
      if (threadIdx.x < kTile) {
        const int t = q0 + threadIdx.x;
        lse2s[threadIdx.x] = t < s ? lse_row[t] * kLog2e : 0.0f;
        Ds[threadIdx.x] = t < s ? D_row[t] : 0.0f;
      }
      __syncthreads();
      float st[4][4] = {}, dpt[4][4] = {};  // [key row][query column]
      mm_abt<HD>(Ks, Qs, st);
      mm_abt<HD>(Vs, dOs, dpt);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int kr = k0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j, qc = q0 + c;
          const bool valid = qc >= kr && qc < s && kr < s;
          const float p = valid ? exp2f(st[i][j] * scale_log2 - lse2s[c]) : 0.0f;
          Ps[(ty * 4 + i) * kPStride + c] = p;
          dSs[(ty * 4 + i) * kPStride + c] = p * (dpt[i][j] - Ds[c]);
        }
      }
      __syncthreads();
      mm_ab<HD>(Ps, dOs, dva);
      mm_ab<HD>(dSs, Qs, dka);
    }
  }
  const float ones[4] = {1.f, 1.f, 1.f, 1.f}, scales[4] = {scale, scale, scale, scale};
  store_rows<HD>(dk + koff, kstride, k0, s, hd, dka, scales);
  store_rows<HD>(dv + koff, kstride, k0, s, hd, dva, ones);
}

// dQ of one query tile of one head: loops over the key tiles at or before it.
template <class T, int HD>
__global__ void __launch_bounds__(kThreads, 1) attn_bwd_dq_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ D, T* __restrict__ dq, int s, int h, int kvh, int hd,
    float scale, float scale_log2) {
  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);
  float* dOs = Qs + Tile<HD>::kFloats;
  float* Ks = dOs + Tile<HD>::kFloats;
  float* Vs = Ks + Tile<HD>::kFloats;
  float* dSs = Vs + Tile<HD>::kFloats;
  constexpr int G = Tile<HD>::kGroups;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int hi = blockIdx.y, bi = blockIdx.z, kh = hi / (h / kvh);
  const int q0 = qt * kTile;
  const long long qstride = static_cast<long long>(h) * hd, kstride = static_cast<long long>(kvh) * hd;
  const long long qoff = (static_cast<long long>(bi) * s * h + hi) * hd;
  const long long koff = (static_cast<long long>(bi) * s * kvh + kh) * hd;
  load_tile<HD>(Qs, q + qoff, qstride, q0, s, hd, 1.0f);
  load_tile<HD>(dOs, dout + qoff, qstride, q0, s, hd, 1.0f);
  float lse2[4], Dr[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + ty * 4 + i;
    lse2[i] = t < s ? lse[(static_cast<long long>(bi) * h + hi) * s + t] * kLog2e : 0.0f;
    Dr[i] = t < s ? D[(static_cast<long long>(bi) * h + hi) * s + t] : 0.0f;
  }
  float4 dqa[4][G];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int g = 0; g < G; ++g) dqa[i][g] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile<HD>(Ks, k + koff, kstride, k0, s, hd, 1.0f);
    load_tile<HD>(Vs, v + koff, kstride, k0, s, hd, 1.0f);
    __syncthreads();
    float sc[4][4] = {}, dp[4][4] = {};
    mm_abt<HD>(Qs, Ks, sc);
    mm_abt<HD>(dOs, Vs, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qr = q0 + ty * 4 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kc = k0 + tx + 16 * j;
        const bool valid = kc <= qr && qr < s;
        const float p = valid ? exp2f(sc[i][j] * scale_log2 - lse2[i]) : 0.0f;
        dSs[(ty * 4 + i) * kPStride + tx + 16 * j] = p * (dp[i][j] - Dr[i]);
      }
    }
    __syncthreads();
    mm_ab<HD>(dSs, Ks, dqa);
  }
  const float scales[4] = {scale, scale, scale, scale};
  store_rows<HD>(dq + qoff, qstride, q0, s, hd, dqa, scales);
}

struct AttnDims {
  int b, s, h, kvh, hd;
};

AttnDims check_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  require(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, "q, k, v must be [b, s, heads, head_dim]");
  AttnDims d{static_cast<int>(q.dim(0)), static_cast<int>(q.dim(1)), static_cast<int>(q.dim(2)),
             static_cast<int>(k.dim(2)), static_cast<int>(q.dim(3))};
  require(k.shape() == v.shape() && k.dim(0) == d.b && k.dim(1) == d.s && k.dim(3) == d.hd, op,
          "k/v shape " + shape_str(k.shape()) + " does not match q " + shape_str(q.shape()));
  require(d.kvh > 0 && d.h % d.kvh == 0, op, "kv heads must divide heads");
  require(d.hd > 0 && d.hd <= 128, op, "head_dim must be in [1, 128], got " + std::to_string(d.hd));
  require(is_float(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
          "q, k, v must share one float dtype");
  return d;
}

template <class T, int HD>
void launch_forward(cudaStream_t st, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                    Tensor& lse) {
  const std::size_t smem = (2 * Tile<HD>::kFloats + kTile * kPStride) * sizeof(float);
  auto kernel = attn_fwd_kernel<T, HD>;
  allow_smem(kernel, smem);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(d.hd));
  dim3 grid(ceil_div(d.s, kTile), d.h, d.b);
  kernel<<<grid, kThreads, smem, st>>>(q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<float>(), d.s,
                                        d.h, d.kvh, d.hd, scale_log2);
  MOC_CUDA_LAUNCHED("attn_fwd_kernel");
}

template <class T, int HD>
void launch_backward(Ops& ops, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  cudaStream_t st = stream_of(ops);
  Tensor D = ops.empty({d.b, d.h, d.s}, DType::f32, workspace_tag());
  const long long rows = static_cast<long long>(d.b) * d.s * d.h;
  attn_bwd_dot_kernel<T><<<ceil_div(rows * 32, 256), 256, 0, st>>>(out.data<T>(), dout.data<T>(), D.data<float>(),
                                                                    rows, d.s, d.h, d.hd);
  MOC_CUDA_LAUNCHED("attn_bwd_dot_kernel");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  const float scale_log2 = scale * kLog2e;
  const int ntiles = ceil_div(d.s, kTile);
  {
    const std::size_t smem = (4 * Tile<HD>::kFloats + 2 * kTile * kPStride + 2 * kTile) * sizeof(float);
    auto kernel = attn_bwd_dkdv_kernel<T, HD>;
    allow_smem(kernel, smem);
    kernel<<<dim3(ntiles, d.kvh, d.b), kThreads, smem, st>>>(q.data<T>(), k.data<T>(), v.data<T>(), dout.data<T>(),
                                                             lse.data<float>(), D.data<float>(), dk.data<T>(),
                                                             dv.data<T>(), d.s, d.h, d.kvh, d.hd, scale, scale_log2);
    MOC_CUDA_LAUNCHED("attn_bwd_dkdv_kernel");
  }
  {
    const std::size_t smem = (4 * Tile<HD>::kFloats + kTile * kPStride) * sizeof(float);
    auto kernel = attn_bwd_dq_kernel<T, HD>;
    allow_smem(kernel, smem);
    kernel<<<dim3(ntiles, d.h, d.b), kThreads, smem, st>>>(q.data<T>(), k.data<T>(), v.data<T>(), dout.data<T>(),
                                                           lse.data<float>(), D.data<float>(), dq.data<T>(), d.s, d.h,
                                                           d.kvh, d.hd, scale, scale_log2);
    MOC_CUDA_LAUNCHED("attn_bwd_dq_kernel");
  }
}

}  // namespace

void attention_forward(Ops& ops, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const auto d = check_dims("attention_forward", q, k, v);
  require(out.shape() == q.shape() && out.dtype() == q.dtype(), "attention_forward",
          "out must match q in shape and dtype");
  require(lse.dtype() == DType::f32 && lse.numel() == static_cast<std::int64_t>(d.b) * d.h * d.s,
          "attention_forward", "lse must be f32 [b, h, s]");
  if (q.numel() == 0) return;
  if (cudnn_sdpa_forward(ops, {d.b, d.s, d.h, d.kvh, d.hd}, q, k, v, out, lse)) return;
  cudaStream_t st = stream_of(ops);
  dispatch_float(q.dtype(), "attention_forward", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (d.hd <= 64) launch_forward<T, 64>(st, d, q, k, v, out, lse);
    else launch_forward<T, 128>(st, d, q, k, v, out, lse);
  });
}

void attention_backward(Ops& ops, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  const auto d = check_dims("attention_backward", q, k, v);
  require(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape() &&
              dout.shape() == q.shape() && out.shape() == q.shape(),
          "attention_backward", "gradient shapes must match their inputs");
  require(out.dtype() == q.dtype() && dout.dtype() == q.dtype() && dq.dtype() == q.dtype() &&
              dk.dtype() == q.dtype() && dv.dtype() == q.dtype(),
          "attention_backward", "out, dout, dq, dk, dv must have q's dtype");
  require(lse.dtype() == DType::f32 && lse.numel() == static_cast<std::int64_t>(d.b) * d.h * d.s,
          "attention_backward", "lse must be f32 [b, h, s]");
  if (q.numel() == 0) return;
  if (cudnn_sdpa_backward(ops, {d.b, d.s, d.h, d.kvh, d.hd}, q, k, v, out, lse, dout, dq, dk, dv)) return;
  dispatch_float(q.dtype(), "attention_backward", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (d.hd <= 64) launch_backward<T, 64>(ops, d, q, k, v, out, lse, dout, dq, dk, dv);
    else launch_backward<T, 128>(ops, d, q, k, v, out, lse, dout, dq, dk, dv);
  });
}

}  // namespace moc::cuda

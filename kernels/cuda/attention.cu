// Causal attention with GQA on the GPU: flash-style forward (online softmax over 64-key tiles, only out and
// log-sum-exp leave the chip), a recomputing backward (one kernel for dK/dV per key tile, one for dQ per
// query tile: no atomics, deterministic), and split-K decode attention over the KV cache (flash-decoding).
// The tile kernels run on fp32 CUDA cores from shared memory; head_dim is padded to 64 or 128 with zeros.
// bf16 forward/backward go to cuDNN's fused SDPA first (cudnn_sdpa.cpp, tensor cores) when the build has
// it and it takes the shape; these kernels run f32, whatever cuDNN refuses, and MOCBENCH_ATTN=own.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups.h>

#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace {

constexpr int kTile = 64;       // query rows and key rows per tile
constexpr int kThreads = 256;   // 16 x 16: thread (ty, tx) holds rows ty*4+i and columns tx+16j of a 64x64 tile
constexpr int kPStride = kTile + 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }

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

// ---- decode: split the keys of each sequence into chunks (flash-decoding), then combine the partials.
// A block stages its chunk of K and V in shared memory (many 16-byte loads in flight), scores one key per
// thread for every query head of its GQA group, and accumulates one output dim per thread.
constexpr int kDecThreads = 128;
constexpr int kDecMaxHeads = 8;  // query heads (of one GQA group) per block
constexpr int kDecMaxHd = 128;

int dec_chunk(DType dt) { return dt == DType::bf16 ? 128 : 64; }  // keys per split (shared memory ~70 KB)
__host__ __device__ __forceinline__ int dec_row_stride(int hd) { return ((hd + 1) & ~1) + 2; }  // odd word stride

__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// n contiguous rows of hd elements at src into shared rows of ss elements; a padding column (odd hd) is zeroed.
template <class T>
__device__ __forceinline__ void stage_rows(T* dst, int ss, const T* __restrict__ src, int n, int hd, bool vec) {
  if (vec) {  // hd * sizeof(T) is a multiple of 16 and src is 16-byte aligned
    constexpr int E = 16 / sizeof(T);
    constexpr int kBatch = 16;
    const int per_row = hd / E, total = n * per_row;
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    for (int base = 0; base < total; base += kDecThreads * kBatch) {
      uint4 r[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int p = base + threadIdx.x + u * kDecThreads;
        if (p < total) r[u] = s4[p];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int p = base + threadIdx.x + u * kDecThreads;
        if (p < total) {
          std::uint32_t* w = reinterpret_cast<std::uint32_t*>(dst + (p / per_row) * ss + (p % per_row) * E);
          w[0] = r[u].x;
          w[1] = r[u].y;
          w[2] = r[u].z;
          w[3] = r[u].w;
        }
      }
    }
  } else {
    for (int e = threadIdx.x; e < n * hd; e += kDecThreads) dst[(e / hd) * ss + e % hd] = src[e];
  }
  if (hd & 1)
    for (int j = threadIdx.x; j < n; j += kDecThreads) dst[j * ss + hd] = from_f32<T>(0.0f);
}

// Partial attention of heads h0 .. h0+nh-1 (nh <= NH, sharing kv head kh) over keys [c0, c0+n) of one
// sequence: unnormalized output, max (log2 units) and sum of exponentials.
template <class T, int NH>
__global__ void __launch_bounds__(kDecThreads) attn_decode_split_kernel(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, const std::int32_t* __restrict__ pos,
    float* __restrict__ opart, float* __restrict__ mpart, float* __restrict__ lpart, int h, int kvh, int T_len,
    int hd, int nsplit, int chunk, float scale_log2, bool vec) {
  extern __shared__ float4 smem_f4[];
  const int split = blockIdx.x, bi = blockIdx.z;
  const int group = h / kvh;
  const int nhc = cdiv(group, NH);
  const int kh = blockIdx.y / nhc, hc = blockIdx.y % nhc;
  const int h0 = kh * group + hc * NH;
  const int nh = min(NH, group - hc * NH);
  const int len = min(pos[bi] + 1, T_len);
  const int c0 = split * chunk;
  if (c0 >= len) return;  // beyond this sequence's position: the combine step skips it
  const int n = min(chunk, len - c0);
  const int ss = dec_row_stride(hd), hde = (hd + 1) & ~1;
  T* Ks = reinterpret_cast<T*>(smem_f4);
  T* Vs = Ks + chunk * ss;
  float* qs = reinterpret_cast<float*>(Vs + chunk * ss);  // [NH][hde], pre-scaled to log2 units
  float* sc = qs + NH * hde;                                // [NH][chunk]
  const long long row0 = (static_cast<long long>(bi) * kvh + kh) * T_len + c0;
  stage_rows(Ks, ss, kc + row0 * hd, n, hd, vec);
  stage_rows(Vs, ss, vc + row0 * hd, n, hd, vec);
  for (int e = threadIdx.x; e < NH * hde; e += kDecThreads) {
    const int hh = e / hde, d = e % hde;
    qs[e] = (hh < nh && d < hd) ? to_f32(q[(static_cast<long long>(bi) * h + h0 + hh) * hd + d]) * scale_log2 : 0.0f;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kDecThreads) {  // scores: one key per thread
    float acc[NH] = {};
    const T* kr = Ks + j * ss;
    for (int d = 0; d < hde; d += 2) {
      const float2 kv = load_pair(kr + d);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
        const float2 qv = *reinterpret_cast<const float2*>(qs + hh * hde + d);
        acc[hh] += qv.x * kv.x + qv.y * kv.y;
      }
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) sc[hh * chunk + j] = acc[hh];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int hh = warp; hh < nh; hh += kDecThreads / 32) {  // softmax statistics: one warp per head
    float* row = sc + hh * chunk;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, row[j]);
    mx = dev::warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = exp2f(row[j] - mx);
      row[j] = p;
      sum += p;
    }
    sum = dev::warp_sum(sum);
    if (lane == 0) {
      const long long slot = (static_cast<long long>(bi) * h + h0 + hh) * nsplit + split;
      mpart[slot] = mx;
      lpart[slot] = sum;
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kDecThreads) {  // unnormalized output: one dim per thread
    float acc[NH] = {};
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const float vv = to_f32(Vs[j * ss + d]);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) acc[hh] += sc[hh * chunk + j] * vv;  // rows hh >= nh: discarded
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
      if (hh < nh) opart[((static_cast<long long>(bi) * h + h0 + hh) * nsplit + split) * hd + d] = acc[hh];
  }
}

template <class T>
__global__ void attn_decode_combine_kernel(const float* __restrict__ opart, const float* __restrict__ mpart,
                                           const float* __restrict__ lpart, const std::int32_t* __restrict__ pos,
                                           T* __restrict__ out, int h, int T_len, int hd, int nsplit, int chunk) {
  const int hi = blockIdx.x, bi = blockIdx.y;
  const int len = min(pos[bi] + 1, T_len);
  const int used = len > 0 ? cdiv(len, chunk) : 0;
  const long long slot0 = (static_cast<long long>(bi) * h + hi) * nsplit;
  float M = -INFINITY;
  for (int sp = 0; sp < used; ++sp) M = fmaxf(M, mpart[slot0 + sp]);
  float denom = 0.0f;
  for (int sp = 0; sp < used; ++sp) denom += exp2f(mpart[slot0 + sp] - M) * lpart[slot0 + sp];
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int sp = 0; sp < used; ++sp) acc += exp2f(mpart[slot0 + sp] - M) * opart[(slot0 + sp) * hd + d];
    out[(static_cast<long long>(bi) * h + hi) * hd + d] = from_f32<T>(acc * inv);
  }
}

// ---- decode, the fast path: one kernel, the splits of a (sequence, kv head) form a thread-block cluster.
// For caches whose rows are whole 16-byte words (hd / (16 / sizeof(T)) threads per key, a power of two):
// the split count comes from max_seq (>= 64 keys per split, 1 / 2 / 4 / 8 splits); within a block each
// warp runs an online softmax over its own keys straight from 16-byte loads of K and V (no shared-memory
// staging: 4 keys x TPK threads per load step, kFdRounds steps in flight); the block's warps and then the
// cluster's blocks merge their (max, sum, output) states, the last by pushing them into the owning rank's
// shared memory (one cluster barrier).
// No partials leave the chip and there is no second kernel. PDL-launched.
namespace cgr = cooperative_groups;
constexpr int kFdThreads = 128;
constexpr int kFdWarps = kFdThreads / 32;
constexpr int kFdRounds = 4;      // load steps per warp tile (K and V loads in flight per thread: 2 x 4 x 16 B)
constexpr int kFdMaxSplit = 8;    // portable cluster size
constexpr int kFdKeysPerSplit = 64;
constexpr int kFdMaxHeads = 4;    // query heads of one GQA group per block

__device__ __forceinline__ void unpack16(const uint4& v, float (&f)[8], const __nv_bfloat16*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack16(const uint4& v, float (&f)[4], const float*) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

template <class T, int TPK, int NH>
__global__ void __launch_bounds__(kFdThreads) attn_decode_fast_kernel(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, const std::int32_t* __restrict__ pos,
    T* __restrict__ out, int h, int kvh, int T_len, int hd, int chunk, float scale_log2) {
  constexpr int E = 16 / sizeof(T);   // elements per 16-byte word
  constexpr int KPS = 32 / TPK;       // keys per warp load step
  constexpr int TK = KPS * kFdRounds; // keys per warp tile
  __shared__ float wst[kFdWarps][NH][2];        // per warp: max (log2 units), sum
  __shared__ float wacc[kFdWarps][NH][kDecMaxHd];
  __shared__ float rst[kFdMaxSplit][NH][2];     // pushed by each rank: its block's max and sum per head
  __shared__ float racc[NH * kDecMaxHd + kFdMaxSplit];  // pushed by each rank: its outputs of this rank's share
  pdl_trigger();
  const bool clustered = gridDim.x > 1;  // the cluster spans the gridDim.x splits
  if (clustered) cluster_arrive_relaxed();  // "started": waited for before the first remote store
  pdl_wait();
  const int split = blockIdx.x, bi = blockIdx.z;
  const int group = h / kvh;
  const int nhc = cdiv(group, NH);
  const int kh = blockIdx.y / nhc, hc = blockIdx.y % nhc;
  const int h0 = kh * group + hc * NH;
  const int nh = min(NH, group - hc * NH);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % TPK, ks = lane / TPK;
  const int len = min(pos[bi] + 1, T_len);
  const int c0 = split * chunk, c1 = min(len, c0 + chunk);

  float qv[NH][E];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int e = 0; e < E; ++e)
      qv[hh][e] = hh < nh ? to_f32(q[(static_cast<long long>(bi) * h + h0 + hh) * hd + sub * E + e]) * scale_log2 : 0.0f;
  float m[NH], l[NH], acc[NH][E];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[hh][e] = 0.0f;
  }
  const long long row0 = (static_cast<long long>(bi) * kvh + kh) * T_len;
  const uint4* kbase = reinterpret_cast<const uint4*>(kc + row0 * hd) + sub;
  const uint4* vbase = reinterpret_cast<const uint4*>(vc + row0 * hd) + sub;
  const int wpr = hd / E;  // 16-byte words per cache row
  for (int t0 = c0 + warp * TK; t0 < c1; t0 += kFdWarps * TK) {
    uint4 kr[kFdRounds], vr[kFdRounds];
#pragma unroll
    for (int r = 0; r < kFdRounds; ++r) {
      const int key = t0 + r * KPS + ks;
      if (key < c1) {
        kr[r] = __ldcg(kbase + static_cast<long long>(key) * wpr);  // L2: the newest row was just written
        vr[r] = __ldcg(vbase + static_cast<long long>(key) * wpr);
      } else {
        kr[r] = vr[r] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    float s[kFdRounds][NH];
#pragma unroll
    for (int r = 0; r < kFdRounds; ++r) {
      float kf[E];
      unpack16(kr[r], kf, static_cast<const T*>(nullptr));
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) d = fmaf(qv[hh][e], kf[e], d);
        if constexpr (TPK > 1) d = dev::lane_group_sum<1, TPK>(d);
        s[r][hh] = t0 + r * KPS + ks < c1 ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) {
      float mx = s[0][hh];
#pragma unroll
      for (int r = 1; r < kFdRounds; ++r) mx = fmaxf(mx, s[r][hh]);
      if constexpr (TPK < 32) mx = dev::lane_group_max<TPK, 32>(mx);
      const float m_new = fmaxf(m[hh], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[hh] - base);
      m[hh] = m_new;
      l[hh] *= alpha;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[hh][e] *= alpha;
#pragma unroll
      for (int r = 0; r < kFdRounds; ++r) {
        const float p = exp2f(s[r][hh] - base);
        float vf[E];
        unpack16(vr[r], vf, static_cast<const T*>(nullptr));
        l[hh] += p;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[hh][e] = fmaf(p, vf[e], acc[hh][e]);
      }
    }
  }
  // The warp's state: sums over its key lanes (the TPK lanes of one key hold equal p).
#pragma unroll
  for (int hh = 0; hh < NH; ++hh) {
    if constexpr (TPK < 32) {
      l[hh] = dev::lane_group_sum<TPK, 32>(l[hh]);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[hh][e] = dev::lane_group_sum<TPK, 32>(acc[hh][e]);
    }
    if (ks == 0) {
#pragma unroll
      for (int e = 0; e < E; ++e) wacc[warp][hh][sub * E + e] = acc[hh][e];
      if (sub == 0) {
        wst[warp][hh][0] = m[hh];
        wst[warp][hh][1] = l[hh];
      }
    }
  }
  __syncthreads();
  // The block's state, pushed straight to the ranks that own its outputs: rank r finishes outputs
  // [r * per, (r + 1) * per) of the nh * hd of this block group (distributed shared memory), then one
  // cluster barrier (release / acquire), then each owner merges the ns states in rank order.
  cgr::cluster_group cluster = cgr::this_cluster();
  const int ns = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int total = nh * hd, per = cdiv(total, ns);
  if (clustered) cluster_wait();  // every rank is running: its shared memory may be written
  for (int o = threadIdx.x; o < total; o += kFdThreads) {
    const int hh = o / hd, d = o % hd;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kFdWarps; ++w) M = fmaxf(M, wst[w][hh][0]);
    const float base = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < kFdWarps; ++w) {
      const float f = exp2f(wst[w][hh][0] - base);
      L += f * wst[w][hh][1];
      A += f * wacc[w][hh][d];
    }
    const int owner = o / per;
    (clustered ? cluster.map_shared_rank(&racc[0], owner) : racc)[rank * per + (o - owner * per)] = A;
    if (d == 0)
      for (int q = 0; q < ns; ++q) {
        float* st = (clustered ? cluster.map_shared_rank(&rst[0][0][0], q) : &rst[0][0][0]) + (rank * NH + hh) * 2;
        st[0] = M;
        st[1] = L;
      }
  }
  if (clustered) cluster.sync();  // release / acquire: the pushed states are visible
  else __syncthreads();
  for (int j = threadIdx.x; j < min(per, total - rank * per); j += kFdThreads) {
    const int o = rank * per + j, hh = o / hd, d = o % hd;
    float M = -INFINITY;
    for (int q = 0; q < ns; ++q) M = fmaxf(M, rst[q][hh][0]);
    const float base = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, A = 0.0f;
    for (int q = 0; q < ns; ++q) {
      const float f = exp2f(rst[q][hh][0] - base);
      L += f * rst[q][hh][1];
      A += f * racc[q * per + j];
    }
    out[(static_cast<long long>(bi) * h + h0 + hh) * hd + d] = from_f32<T>(L > 0.0f ? A * (1.0f / L) : 0.0f);
  }
}

template <class T>
bool launch_decode_fast(cudaStream_t st, const T* q, const T* kc, const T* vc, const std::int32_t* pos, T* out,
                        int b, int h, int kvh, int T_len, int hd) {
  constexpr int E = 16 / static_cast<int>(sizeof(T));
  if (T_len <= 0 || hd % E != 0 || reinterpret_cast<std::uintptr_t>(kc) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(vc) % 16 != 0)
    return false;
  const int tpk = hd / E;
  if (tpk > 32 || (tpk & (tpk - 1)) != 0) return false;
  const int group = h / kvh;
  const int NHr = group >= 4 ? 4 : group >= 2 ? 2 : 1;
  int ns = 1;  // a power of two: cluster shapes 1, 2, 4, 8
  while (ns < kFdMaxSplit && ns * kFdKeysPerSplit < T_len) ns *= 2;
  const int chunk = ceil_div(T_len, ns);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(hd));
  const dim3 grid(static_cast<unsigned>(ns), static_cast<unsigned>(kvh * ceil_div(group, NHr)),
                  static_cast<unsigned>(b));
  auto go = [&](auto tpk_tag, auto nh_tag) {
    constexpr int TPK = decltype(tpk_tag)::value, NH = decltype(nh_tag)::value;
    if constexpr (TPK * E <= kDecMaxHd)  // always true at run time: hd <= 128
    launch_pdl_cluster("attn_decode_fast_kernel", attn_decode_fast_kernel<T, TPK, NH>, grid, dim3(kFdThreads), 0, st,
                       dim3(static_cast<unsigned>(ns), 1, 1), q, kc, vc, pos, out, h, kvh, T_len, hd, chunk,
                       scale_log2);
  };
  auto with_nh = [&](auto tpk_tag) {
    if (NHr == 1) go(tpk_tag, std::integral_constant<int, 1>{});
    else if (NHr == 2) go(tpk_tag, std::integral_constant<int, 2>{});
    else go(tpk_tag, std::integral_constant<int, kFdMaxHeads>{});
  };
  switch (tpk) {
    case 1: with_nh(std::integral_constant<int, 1>{}); break;
    case 2: with_nh(std::integral_constant<int, 2>{}); break;
    case 4: with_nh(std::integral_constant<int, 4>{}); break;
    case 8: with_nh(std::integral_constant<int, 8>{}); break;
    case 16: with_nh(std::integral_constant<int, 16>{}); break;
    default: with_nh(std::integral_constant<int, 32>{}); break;
  }
  return true;
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

void attention_decode(Ops& ops, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                      Tensor& out) {
  require(q.rank() == 3 && k_cache.rank() == 4 && out.shape() == q.shape(), "attention_decode",
          "q [b, h, hd], caches [b, kvh, max_seq, hd], out like q");
  const int b = static_cast<int>(q.dim(0)), h = static_cast<int>(q.dim(1)), hd = static_cast<int>(q.dim(2));
  const int kvh = static_cast<int>(k_cache.dim(1)), T_len = static_cast<int>(k_cache.dim(2));
  require(k_cache.shape() == v_cache.shape() && k_cache.dim(0) == b && k_cache.dim(3) == hd, "attention_decode",
          "cache " + shape_str(k_cache.shape()) + " does not fit q " + shape_str(q.shape()));
  require(kvh > 0 && h % kvh == 0, "attention_decode", "kv heads must divide heads");
  require(hd > 0 && hd <= kDecMaxHd, "attention_decode", "head_dim must be in [1, 128]");
  require(pos.dtype() == DType::i32 && pos.numel() == b, "attention_decode", "pos must be i32 [b]");
  require(is_float(q.dtype()) && k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype() &&
              out.dtype() == q.dtype(),
          "attention_decode", "q, caches and out must share one float dtype");
  if (q.numel() == 0) return;
  cudaStream_t st = stream_of(ops);
  bool done = false;
  dispatch_float(q.dtype(), "attention_decode", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    done = launch_decode_fast<T>(st, q.data<T>(), k_cache.data<T>(), v_cache.data<T>(), pos.data<std::int32_t>(),
                                 out.data<T>(), b, h, kvh, T_len, hd);
  });
  if (done) return;
  // The general path (any head_dim): split kernel staging K/V in shared memory, then a combine kernel.
  const int chunk = dec_chunk(q.dtype());
  const int nsplit = T_len > 0 ? ceil_div(T_len, chunk) : 1;
  Tensor opart = ops.empty({b, h, nsplit, hd}, DType::f32, workspace_tag());
  Tensor stats = ops.empty({2, b, h, nsplit}, DType::f32, workspace_tag());
  float* mpart = stats.data<float>();
  float* lpart = mpart + static_cast<long long>(b) * h * nsplit;
  const int group = h / kvh;
  const int nh = std::min(group, kDecMaxHeads);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(hd));
  const std::size_t elt = dtype_bytes(q.dtype());
  const bool vec = (hd * elt) % 16 == 0 && reinterpret_cast<std::uintptr_t>(k_cache.raw()) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(v_cache.raw()) % 16 == 0;
  dispatch_float(q.dtype(), "attention_decode", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (T_len > 0) {
      auto launch = [&](auto nh_tag) {
        constexpr int NH = decltype(nh_tag)::value;
        const int hde = (hd + 1) & ~1;
        const std::size_t smem = 2 * static_cast<std::size_t>(chunk) * dec_row_stride(hd) * sizeof(T) +
                                 static_cast<std::size_t>(NH) * (hde + chunk) * sizeof(float);
        auto kernel = attn_decode_split_kernel<T, NH>;
        allow_smem(kernel, smem);
        dim3 grid(nsplit, kvh * ceil_div(group, NH), b);
        kernel<<<grid, kDecThreads, smem, st>>>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(),
                                                pos.data<std::int32_t>(), opart.data<float>(), mpart, lpart, h, kvh,
                                                T_len, hd, nsplit, chunk, scale_log2, vec);
        MOC_CUDA_LAUNCHED("attn_decode_split_kernel");
      };
      if (nh == 1) launch(std::integral_constant<int, 1>{});
      else if (nh == 2) launch(std::integral_constant<int, 2>{});
      else if (nh <= 4) launch(std::integral_constant<int, 4>{});
      else launch(std::integral_constant<int, kDecMaxHeads>{});
    }
    attn_decode_combine_kernel<T><<<dim3(h, b), 128, 0, st>>>(opart.data<float>(), mpart, lpart,
                                                               pos.data<std::int32_t>(), out.data<T>(), h, T_len, hd,
                                                               nsplit, chunk);
    MOC_CUDA_LAUNCHED("attn_decode_combine_kernel");
  });
}

}  // namespace moc::cuda

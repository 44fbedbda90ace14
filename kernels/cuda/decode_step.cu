// The persistent decode step: Ops::decode_step and Ops::ffn_decode_layers as one cooperative kernel. The
// design is described in decode_step.cuh; the stages are the device functions below, in the order the
// kernel runs them.
#include "kernels/cuda/decode_step.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/stage_stamps.cuh"

namespace moc::cuda::step {
namespace {

using namespace moc::cuda::dev;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kSlice = 256;          // columns of one down-projection slice (8 per lane)
constexpr int kBins = 2048;          // first-level histogram of the top-K keys: their top 11 bits
constexpr int kKeyCache = 8192;      // rows of at most this many channels keep their keys in shared memory
constexpr int kPrefetchCap = 48 << 10;  // bytes of the next stage one block asks L2 for: about what
                                         // DRAM streams while a barrier waits (more thrashes L2)

struct Params {
  Problem p;
  int nb = 0;
  unsigned* bar = nullptr;    // grid barrier counter (zeroed by the launch's memset)
  unsigned* flag = nullptr;   // [kMaxRows]: layer + 1 once the row's top-K threshold is published
  unsigned* thr = nullptr;    // [kMaxRows][2]: threshold key and channel
  unsigned* hist = nullptr;   // [2][rows][kBins]
  float* xres = nullptr;      // [rows, d] residual stream (ffn_only: the accumulated output)
  float* qkv = nullptr;       // [rows, (h + 2 kvh) hd]
  float* attn = nullptr;      // [rows, h hd]
  float* G = nullptr;         // [rows, d_ffn] gate values
  unsigned char* mask = nullptr;  // [rows, d_ffn] forced selection
  float* Z = nullptr;         // [d_ffn slots, rows]
  unsigned* list = nullptr;   // [d_ffn slots]: channel | row mask << 16
  unsigned* cnt = nullptr;    // [nb] list length of each block's segment
  int kept_n = 0;             // channels a row keeps (Problem::kept)
  StampBuf* stamps = nullptr;  // this device's stage stamps (stage_stamps.cuh)
};

// ---------------------------------------------------------------------------------------------------------
// Synchronization

__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block arrives once per barrier; `gen` counts the barriers this block has passed. The barrier ends
// stage s of `layer`: stamped, thread 0 records its arrival and how long it waited.
__device__ __forceinline__ void grid_barrier(const Params& P, unsigned& gen, Stamper& st, StageId s, int layer) {
  __syncthreads();
  ++gen;
  if (threadIdx.x == 0) {
    unsigned long long arrived = 0;
    StampMark* k = stamp_arrive(st, s, layer, &arrived);
    red_release_add(P.bar, 1);
    const unsigned target = gen * static_cast<unsigned>(P.nb);
    while (ld_acquire(P.bar) < target) {
    }
    stamp_waited(k, arrived);
  }
  ++st.m;
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------
// Block helpers

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum / max (red: kWarps floats of shared memory); every thread gets the result.
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  __syncthreads();
  return t;
}
__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t = fmaxf(t, red[w]);
  __syncthreads();
  return t;
}
// Exclusive prefix sum over the block in thread order, and the total (scr: kWarps words).
__device__ unsigned block_scan(unsigned v, unsigned* scr, unsigned& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) scr[warp] = incl;
  __syncthreads();
  unsigned off = 0, tot = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    off += w < warp ? scr[w] : 0u;
    tot += scr[w];
  }
  __syncthreads();
  total = tot;
  return off + incl - v;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// L2 prefetch of rows [r0, r1) of a [*, width] bf16 matrix (contiguous), at most kPrefetchCap bytes.
__device__ void prefetch_rows(const void* base, long long r0, long long r1, int width) {
  if (r1 <= r0) return;
  const auto* b = static_cast<const unsigned char*>(base) + r0 * width * 2;
  const long long bytes = min((r1 - r0) * width * 2, static_cast<long long>(kPrefetchCap));
  constexpr long long kPiece = 16 << 10;
  for (long long o = static_cast<long long>(threadIdx.x) * kPiece; o < bytes; o += kThreads * kPiece)
    prefetch_l2(b + o, static_cast<unsigned>(min(kPiece, bytes - o)));
}

// The block's share [b0, b1) of n items cut into units of `align` (whole a:b groups).
__device__ __forceinline__ void block_range(int n, int align, int blk, int nb, int& b0, int& b1) {
  const long long units = (n + align - 1) / align;
  b0 = static_cast<int>(units * blk / nb) * align;
  b1 = min(n, static_cast<int>(units * (blk + 1) / nb) * align);
}

// x[r, :] (f32 in global memory) -> xs[r, :] = bf16(x / rms(x) * w) in shared memory, every row: one read
// of x (kept in registers for d <= 4096), one block reduction for all rows.
template <int R>
__device__ void norm_rows(const float* x, const bf16* w, int d, float eps, bf16* xs, float* red) {
  constexpr int KV = 2;  // float4 per thread and row held in registers (d <= 4096)
  float4 v[R][KV];
  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    ss[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      const int c = (k * kThreads + threadIdx.x) * 4;
      v[r][k] = c < d ? __ldcg(reinterpret_cast<const float4*>(x + static_cast<long long>(r) * d + c))
                      : make_float4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int k = 0; k < KV; ++k) ss[r] += v[r][k].x * v[r][k].x + v[r][k].y * v[r][k].y + v[r][k].z * v[r][k].z + v[r][k].w * v[r][k].w;
    for (int c = (KV * kThreads + threadIdx.x) * 4; c < d; c += kThreads * 4) {  // wide rows: the rest
      const float4 u = __ldcg(reinterpret_cast<const float4*>(x + static_cast<long long>(r) * d + c));
      ss[r] += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
    ss[r] = warp_sum(ss[r]);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; ++r) red[warp * R + r] = ss[r];
  __syncthreads();
  float rs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float t = 0;
    for (int w2 = 0; w2 < kWarps; ++w2) t += red[w2 * R + r];
    rs[r] = rsqrtf(t / static_cast<float>(d) + eps);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      const int c = (k * kThreads + threadIdx.x) * 4;
      if (c < d) {
        const float4 u = v[r][k];
        xs[r * d + c] = __float2bfloat16_rn(u.x * rs[r] * __bfloat162float(w[c]));
        xs[r * d + c + 1] = __float2bfloat16_rn(u.y * rs[r] * __bfloat162float(w[c + 1]));
        xs[r * d + c + 2] = __float2bfloat16_rn(u.z * rs[r] * __bfloat162float(w[c + 2]));
        xs[r * d + c + 3] = __float2bfloat16_rn(u.w * rs[r] * __bfloat162float(w[c + 3]));
      }
    }
    for (int c = (KV * kThreads + threadIdx.x) * 4; c < d; c += kThreads * 4)
      for (int i = 0; i < 4; ++i)
        xs[r * d + c + i] =
            __float2bfloat16_rn(__ldcg(x + static_cast<long long>(r) * d + c + i) * rs[r] * __bfloat162float(w[c + i]));
  }
  __syncthreads();
}

// Dot products of NW weight rows (bf16, d values each) with the R rows of xs; every lane gets them all.
template <int R, int NW>
__device__ __forceinline__ void warp_dot(const bf16* const (&w)[NW], const bf16* xs, int d, float (&out)[NW][R],
                                         bool rest = true) {  // rest: rows 1.. are real (else not loaded)
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < NW; ++n)
#pragma unroll
    for (int r = 0; r < R; ++r) out[n][r] = 0.0f;
  constexpr int U = 8 / NW;  // 16-byte loads in flight per lane and row (8 in all: registers)
  for (int base = 0; base < d; base += 256 * U) {
    uint4 wv[NW][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * 256 + lane * 8;
#pragma unroll
      for (int n = 0; n < NW; ++n) wv[n][u] = c < d && (n == 0 || rest) ? ld_stream(w[n] + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * 256 + lane * 8;
      if (c >= d) break;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + r * d + c);
        const float x0 = bf_lo(xv.x), x1 = bf_hi(xv.x), x2 = bf_lo(xv.y), x3 = bf_hi(xv.y), x4 = bf_lo(xv.z),
                    x5 = bf_hi(xv.z), x6 = bf_lo(xv.w), x7 = bf_hi(xv.w);
#pragma unroll
        for (int n = 0; n < NW; ++n) {
          const uint4 a = wv[n][u];
          float s = out[n][r];
          s = fmaf(bf_lo(a.x), x0, s);
          s = fmaf(bf_hi(a.x), x1, s);
          s = fmaf(bf_lo(a.y), x2, s);
          s = fmaf(bf_hi(a.y), x3, s);
          s = fmaf(bf_lo(a.z), x4, s);
          s = fmaf(bf_hi(a.z), x5, s);
          s = fmaf(bf_lo(a.w), x6, s);
          s = fmaf(bf_hi(a.w), x7, s);
          out[n][r] = s;
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < NW; ++n)
#pragma unroll
    for (int r = 0; r < R; ++r) out[n][r] = warp_sum(out[n][r]);
}

// ---------------------------------------------------------------------------------------------------------
// Shared memory: xs [kMaxRows, d] bf16, then a scratch area the stages share.

struct Smem {
  bf16* xs;
  float* red;       // kWarps x kMaxRows floats
  unsigned* scr;    // kWarps words (scans)
  unsigned char* area;
};
// The stages' shared scratch: the down stage's partial sums (kWarps x kMaxRows x kSlice floats) and its
// sources' list lengths (at most kMaxSources), or the threshold search's 49 KiB, whichever is larger.
constexpr int kMaxSources = 1024;
constexpr std::size_t kScratchBytes =
    std::max<std::size_t>(64 << 10, static_cast<std::size_t>(kWarps) * kMaxRows * kSlice * 4 + kMaxSources * 4);
__host__ __device__ constexpr std::size_t smem_bytes(int d) {
  return static_cast<std::size_t>(kMaxRows) * d * 2 + 512 + kScratchBytes;
}

// ---------------------------------------------------------------------------------------------------------
// Stages

// q, k, v projections: the block's range of the [q | k | v] output rows.
template <int R>
__device__ void stage_qkv(const Params& P, const LayerPtrs& L, const Smem& S) {
  const Problem& p = P.p;
  const int d = p.d, hq = p.heads * p.head_dim, hk = p.kv_heads * p.head_dim, rows = hq + 2 * hk;
  norm_rows<R>(P.xres, static_cast<const bf16*>(L.attn_norm), d, p.eps, S.xs, S.red);
  int r0, r1;
  block_range(rows, 1, blockIdx.x, P.nb, r0, r1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  auto row_of = [&](int q) {
    return q < hq ? static_cast<const bf16*>(L.wq) + static_cast<long long>(q) * d
           : q < hq + hk ? static_cast<const bf16*>(L.wk) + static_cast<long long>(q - hq) * d
                         : static_cast<const bf16*>(L.wv) + static_cast<long long>(q - hq - hk) * d;
  };
  for (int q = r0 + warp; q < r1; q += 2 * kWarps) {  // two rows per warp in flight
    const int q2 = q + kWarps;
    const bool two = q2 < r1;
    const bf16* const ws[2] = {row_of(q), row_of(two ? q2 : q)};
    float o[2][R];
    warp_dot<R, 2>(ws, S.xs, d, o, two);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r) {  // the kernel path keeps q/k/v in bf16
        P.qkv[static_cast<long long>(r) * rows + q] = round_bf16(o[0][r]);
        if (two) P.qkv[static_cast<long long>(r) * rows + q2] = round_bf16(o[1][r]);
      }
  }
}
template <int R>
__device__ void prefetch_qkv(const Params& P, const LayerPtrs& L) {
  const Problem& p = P.p;
  const int hq = p.heads * p.head_dim, hk = p.kv_heads * p.head_dim, rows = hq + 2 * hk;
  int r0, r1;
  block_range(rows, 1, blockIdx.x, P.nb, r0, r1);
  prefetch_rows(L.wq, max(r0, 0), min(r1, hq), p.d);
  prefetch_rows(L.wk, max(r0 - hq, 0), min(r1 - hq, hk), p.d);
  prefetch_rows(L.wv, max(r0 - hq - hk, 0), min(r1 - hq - hk, hk), p.d);
}

// RoPE of one head vector v[hd] in shared memory at position pos (the CPU twin's formula: double angles).
__device__ void rope_smem(float* v, int hd, int pos, float theta) {
  const int half = hd / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const double ang = pos * pow(static_cast<double>(theta), -2.0 * i / hd);
    const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
    const float a = v[i], b = v[i + half];
    v[i] = round_bf16(a * c - b * s);
    v[i + half] = round_bf16(b * c + a * s);
  }
}

// Attention of one (row, head) per block item over cache positions 0..pos; the new k/v come from the
// qkv stage (RoPE applied here) and are written to the cache by the first head of each kv group.
template <int R>
__device__ void stage_attn(const Params& P, const LayerPtrs& L, const Smem& S) {
  const Problem& p = P.p;
  const int h = p.heads, kvh = p.kv_heads, hd = p.head_dim, T = p.max_seq, grp = h / kvh;
  const int rows = (h + 2 * kvh) * hd;
  float* q = reinterpret_cast<float*>(S.area);
  float* kn = q + hd;
  float* vn = kn + hd;
  float* sc = vn + hd;          // [kThreads] probabilities of a chunk of positions
  float* vred = sc + kThreads;  // [kThreads * 8]
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int t = threadIdx.x;
  for (int item = blockIdx.x; item < R * h; item += P.nb) {
    const int r = item / h, hh = item % h, kh = hh / grp;
    const int pos = p.pos[r];
    const int len = min(pos + 1, T);
    const float* src = P.qkv + static_cast<long long>(r) * rows;
    for (int i = t; i < hd; i += kThreads) {
      q[i] = __ldcg(src + hh * hd + i);
      kn[i] = __ldcg(src + h * hd + kh * hd + i);
      vn[i] = __ldcg(src + h * hd + kvh * hd + kh * hd + i);
    }
    __syncthreads();
    rope_smem(q, hd, pos, p.theta);
    rope_smem(kn, hd, pos, p.theta);
    __syncthreads();
    const long long cache_row = (static_cast<long long>(r) * kvh + kh) * T;
    const bf16* kc = static_cast<const bf16*>(L.k_cache) + cache_row * hd;
    const bf16* vc = static_cast<const bf16*>(L.v_cache) + cache_row * hd;
    if (hh % grp == 0 && pos >= 0 && pos < T)
      for (int i = t; i < hd; i += kThreads) {
        static_cast<bf16*>(L.k_cache)[(cache_row + pos) * hd + i] = __float2bfloat16_rn(kn[i]);
        static_cast<bf16*>(L.v_cache)[(cache_row + pos) * hd + i] = __float2bfloat16_rn(vn[i]);
      }
    // Scores: one position per thread, its k row read with every load issued before the first use. Values:
    // hd/8 threads per position (8 dims each), G2 positions at a time.
    const int parts = hd / 8, part = t % parts, g2 = t / parts, G2 = kThreads / parts;
    float m = -INFINITY, l = 0.0f, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int c0 = 0; c0 < len; c0 += kThreads) {
      const int j = c0 + t;
      float s = -INFINITY;
      if (j < len) {
        const float* kv = kn;
        float dot = 0;
        if (j == pos) {
          for (int i = 0; i < hd; ++i) dot = fmaf(q[i], kv[i], dot);
        } else {
          const bf16* kr = kc + static_cast<long long>(j) * hd;
          for (int base = 0; base < hd; base += 64) {  // 8 loads in flight per pass
          uint4 a[8];
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (base + i * 8 < hd) a[i] = ld_stream(kr + base + i * 8);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (base + i * 8 < hd) {
              const float* qi = q + base + i * 8;
              dot = fmaf(bf_lo(a[i].x), qi[0], dot);
              dot = fmaf(bf_hi(a[i].x), qi[1], dot);
              dot = fmaf(bf_lo(a[i].y), qi[2], dot);
              dot = fmaf(bf_hi(a[i].y), qi[3], dot);
              dot = fmaf(bf_lo(a[i].z), qi[4], dot);
              dot = fmaf(bf_hi(a[i].z), qi[5], dot);
              dot = fmaf(bf_lo(a[i].w), qi[6], dot);
              dot = fmaf(bf_hi(a[i].w), qi[7], dot);
            }
          }
        }
        s = dot * scale;
      }
      const float mn = fmaxf(m, block_max(s, S.red));
      const float pj = j < len ? expf(s - mn) : 0.0f;
      const float corr = expf(m - mn);  // 0 on the first chunk (m = -inf)
      l = l * corr + block_sum(pj, S.red);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] *= corr;
      sc[t] = pj;
      __syncthreads();
      const int n = min(kThreads, len - c0);
#pragma unroll 8
      for (int jj = g2; jj < n; jj += G2) {
        const int jp = c0 + jj;
        const float pw = sc[jj];
        if (jp == pos) {
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = fmaf(pw, vn[part * 8 + i], acc[i]);
        } else {
          const uint4 v = ld_stream(vc + static_cast<long long>(jp) * hd + part * 8);
          acc[0] = fmaf(pw, bf_lo(v.x), acc[0]);
          acc[1] = fmaf(pw, bf_hi(v.x), acc[1]);
          acc[2] = fmaf(pw, bf_lo(v.y), acc[2]);
          acc[3] = fmaf(pw, bf_hi(v.y), acc[3]);
          acc[4] = fmaf(pw, bf_lo(v.z), acc[4]);
          acc[5] = fmaf(pw, bf_hi(v.z), acc[5]);
          acc[6] = fmaf(pw, bf_lo(v.w), acc[6]);
          acc[7] = fmaf(pw, bf_hi(v.w), acc[7]);
        }
      }
      m = mn;
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) vred[g2 * hd + part * 8 + i] = acc[i];  // [G2][hd] = kThreads * 8 floats
    __syncthreads();
    if (t < hd) {
      float s = 0;
      for (int gg = 0; gg < G2; ++gg) s += vred[gg * hd + t];
      P.attn[static_cast<long long>(r) * h * hd + hh * hd + t] = round_bf16(s / l);
    }
    __syncthreads();
  }
}

// o projection: x[r, c] += attn[r, :] . W_o[c, :] for the block's range of c.
template <int R>
__device__ void stage_o(const Params& P, const LayerPtrs& L, const Smem& S) {
  const Problem& p = P.p;
  const int d = p.d, w = p.heads * p.head_dim;
  for (int i = threadIdx.x; i < R * w; i += kThreads) S.xs[i] = __float2bfloat16_rn(__ldcg(P.attn + i));
  __syncthreads();
  int c0, c1;
  block_range(d, 1, blockIdx.x, P.nb, c0, c1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int c = c0 + warp; c < c1; c += 2 * kWarps) {
    const int c2 = c + kWarps;
    const bool two = c2 < c1;
    const bf16* const ws[2] = {static_cast<const bf16*>(L.wo) + static_cast<long long>(c) * w,
                               static_cast<const bf16*>(L.wo) + static_cast<long long>(two ? c2 : c) * w};
    float o[2][R];
    warp_dot<R, 2>(ws, S.xs, w, o, two);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r) {
        float* px = P.xres + static_cast<long long>(r) * d + c;
        *px = __ldcg(px) + o[0][r];
        if (two) px[kWarps] = __ldcg(px + kWarps) + o[1][r];
      }
  }
}

__device__ __forceinline__ int ffn_align(const Problem& p, bool forced) {
  return p.sel == Sel::grouped && !forced ? p.group_b : 1;
}

// The gate values a block ranks: its own channel range copied to shared memory when it fits (one batch of
// loads), else G itself. row[r][j] is row r's value of channel j.
struct GateView {
  const float* row[kMaxRows];
  bool shared;
  __device__ __forceinline__ float at(int r, int j) const { return shared ? row[r][j] : __ldcg(row[r] + j); }
};

// Channel j kept by row r of an a:b selection: its rank in its group (larger key first, ties to the lower
// channel) is below a.
__device__ __forceinline__ bool group_kept(const Params& P, const GateView& v, int r, int j) {
  const Problem& p = P.p;
  const int g0 = j - j % p.group_b, g1 = min(p.d_ffn, g0 + p.group_b);
  const unsigned kj = sel_key(v.at(r, j), p.rule);
  int rank = 0;
  for (int i = g0; i < g1; ++i) {
    if (i == j) continue;
    const unsigned ki = sel_key(v.at(r, i), p.rule);
    rank += (ki > kj || (ki == kj && i < j)) ? 1 : 0;
  }
  return rank < p.group_a;
}

// The row r selection of channel j under the layer's mode (after the gate stage, and for top-K after the
// thresholds (tk, tj) are published).
__device__ __forceinline__ bool kept(const Params& P, const GateView& v, const unsigned* tk, const int* tj, int r,
                                     int j, bool forced) {
  const Problem& p = P.p;
  if (forced) return __ldcg(P.mask + static_cast<long long>(r) * p.d_ffn + j) != 0;
  if (p.sel == Sel::grouped) return group_kept(P, v, r, j);
  const unsigned key = sel_key(v.at(r, j), p.rule);
  return key > tk[r] || (key == tk[r] && j <= tj[r]);
}

// A view of G over the whole rows (the threshold block's idx_out pass).
__device__ __forceinline__ GateView global_view(const Params& P) {
  GateView v;
  v.shared = false;
  for (int r = 0; r < kMaxRows; ++r) v.row[r] = P.G + static_cast<long long>(r) * P.p.d_ffn;
  return v;
}

// FFN gate: g of the block's channels ([rows, d_ffn] f32); dense also u and z = SiLU(g) u straight into the
// block's list segment. Top-K adds each key's top bits to the layer's histogram.
template <int R>
__device__ void stage_gate(const Params& P, const LayerPtrs& L, int layer, bool forced, const Smem& S) {
  const Problem& p = P.p;
  const int d = p.d, F = p.d_ffn;
  int c0, c1;
  block_range(F, ffn_align(p, forced), blockIdx.x, P.nb, c0, c1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bf16* wg = static_cast<const bf16*>(L.wg);
  const bf16* wu = static_cast<const bf16*>(L.wu);
  if (p.sel == Sel::dense) {
    for (int j = c0 + warp; j < c1; j += kWarps) {
      const bf16* const ws[2] = {wg + static_cast<long long>(j) * d, wu + static_cast<long long>(j) * d};
      float o[2][R];
      warp_dot<R, 2>(ws, S.xs, d, o);
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (lane == r) P.Z[static_cast<long long>(j) * R + r] = silu_f(o[0][r]) * o[1][r];
      if (lane == 0) P.list[j] = static_cast<unsigned>(j) | (((1u << R) - 1) << 16);
    }
    if (threadIdx.x == 0) P.cnt[blockIdx.x] = static_cast<unsigned>(c1 - c0);
    prefetch_rows(L.wd, c0, c1, d);  // for the down stage, while the block waits at the barrier
    return;
  }
  unsigned* hist = P.hist + static_cast<long long>(layer & 1) * R * kBins;
  const bool topk = p.sel == Sel::topk && !forced;
  for (int j = c0 + warp; j < c1; j += 2 * kWarps) {
    const int j2 = j + kWarps;
    const bool two = j2 < c1;
    const bf16* const ws[2] = {wg + static_cast<long long>(j) * d, wg + static_cast<long long>(two ? j2 : j) * d};
    float o[2][R];
    warp_dot<R, 2>(ws, S.xs, d, o, two);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r) {
        P.G[static_cast<long long>(r) * F + j] = o[0][r];
        if (topk) atomicAdd(hist + r * kBins + (sel_key(o[0][r], p.rule) >> 21), 1u);
        if (two) {
          P.G[static_cast<long long>(r) * F + j2] = o[1][r];
          if (topk) atomicAdd(hist + r * kBins + (sel_key(o[1][r], p.rule) >> 21), 1u);
        }
      }
  }
}

// Bin of a descending walk over n bins (count(bin) from cnt_at) where the `need`-th largest falls: returns
// the bin and leaves in `need` the rank wanted inside it (1-based). Every thread calls it.
template <class CountAt>
__device__ void find_bin(CountAt cnt_at, int n, unsigned& need, int& bin, const Smem& S) {
  const int per = (n + kThreads - 1) / kThreads;
  const int hi = n - 1 - threadIdx.x * per;  // this thread's bins: hi, hi-1, ..., hi-per+1 (descending)
  unsigned local = 0;
  for (int i = 0; i < per; ++i)
    if (hi - i >= 0) local += cnt_at(hi - i);
  unsigned total;
  unsigned above = block_scan(local, S.scr, total);
  int* out = reinterpret_cast<int*>(S.scr);
  __syncthreads();
  for (int i = 0; i < per; ++i) {
    const int b = hi - i;
    if (b < 0) break;
    const unsigned c = cnt_at(b);
    if (above < need && above + c >= need) {
      out[0] = b;
      out[1] = static_cast<int>(need - above);
    }
    above += c;
  }
  __syncthreads();
  bin = out[0];
  need = static_cast<unsigned>(out[1]);
  __syncthreads();
}

// Row r's exact top-K threshold (key, channel) from the layer's histogram (the top 11 key bits) and G: the
// row's keys go to shared memory (re-read from G for rows wider than kKeyCache), two radix passes over the
// remaining bits of the threshold bin find the key, and the channel is the need-th lowest with that key.
template <int R>
__device__ void find_threshold(const Params& P, int layer, int r, const Smem& S, unsigned& bk, int& bj) {
  const Problem& p = P.p;
  const int F = p.d_ffn;
  const float* g = P.G + static_cast<long long>(r) * F;
  const unsigned* hist = P.hist + (static_cast<long long>(layer & 1) * R + r) * kBins;
  unsigned need = static_cast<unsigned>(p.k);
  unsigned* h1 = reinterpret_cast<unsigned*>(S.area);  // [kBins] the layer's histogram of this row
  unsigned* h2 = h1 + kBins;                            // [kBins] the next passes' histograms
  unsigned* eq = h2 + kBins;                            // [kThreads] channels with the final key
  unsigned* neq = eq + kThreads;
  unsigned* keys = neq + 1;                             // [F] the row's keys, when F <= kKeyCache
  const bool cached = F <= kKeyCache;
  // One batch of loads: the histogram and (when it fits) the row's keys; every pass then works in shared memory.
#pragma unroll
  for (int i = 0; i < kBins / kThreads; ++i) h1[i * kThreads + threadIdx.x] = __ldcg(hist + i * kThreads + threadIdx.x);
  if (cached) {
#pragma unroll 16
    for (int i = 0; i < kKeyCache / kThreads; ++i) {
      const int j = i * kThreads + threadIdx.x;
      if (j < F) keys[j] = sel_key(__ldcg(g + j), p.rule);
    }
  }
  __syncthreads();
  int b1;
  find_bin([&](int b) { return h1[b]; }, kBins, need, b1, S);
  // for_each(fn(key, j)) over the row's channels whose key starts with `prefix` (top `bits` bits), by thread.
  auto for_each = [&](unsigned prefix, int bits, auto fn) {
    if (cached) {
      for (int j = threadIdx.x; j < F; j += kThreads)
        if ((keys[j] >> (32 - bits)) == prefix) fn(keys[j], static_cast<unsigned>(j));
    } else {
      for (int j = threadIdx.x; j < F; j += kThreads) {
        const unsigned key = sel_key(__ldcg(g + j), p.rule);
        if ((key >> (32 - bits)) == prefix) fn(key, static_cast<unsigned>(j));
      }
    }
  };
  // Second pass: bits 20..10; third: bits 9..0.
  unsigned prefix = static_cast<unsigned>(b1);
  int bits = 11;
  for (int pass = 0; pass < 2; ++pass) {
    const int nb_bits = pass == 0 ? 11 : 10;
    const int nbins = 1 << nb_bits;
    for (int i = threadIdx.x; i < nbins; i += kThreads) h2[i] = 0;
    __syncthreads();
    const int shift = 32 - bits - nb_bits;
    for_each(prefix, bits, [&](unsigned key, unsigned) { atomicAdd(h2 + ((key >> shift) & (nbins - 1)), 1u); });
    __syncthreads();
    int b;
    find_bin([&](int i) { return h2[i]; }, nbins, need, b, S);
    prefix = (prefix << nb_bits) | static_cast<unsigned>(b);
    bits += nb_bits;
  }
  bk = prefix;
  // The need-th lowest channel with key bk.
  if (threadIdx.x == 0) *neq = 0;
  __syncthreads();
  for_each(bk, 32, [&](unsigned, unsigned j) {
    const unsigned s = atomicAdd(neq, 1u);
    if (s < static_cast<unsigned>(kThreads)) eq[s] = j;
  });
  __syncthreads();
  const unsigned n_eq = *neq;
  int* out = reinterpret_cast<int*>(S.scr);
  if (n_eq <= static_cast<unsigned>(kThreads)) {
    if (threadIdx.x < n_eq) {
      const unsigned j = eq[threadIdx.x];
      unsigned rank = 0;
      for (unsigned i = 0; i < n_eq; ++i) rank += eq[i] < j ? 1u : 0u;
      if (rank + 1 == need) out[2] = static_cast<int>(j);
    }
  } else {  // many equal keys: an ascending scan
    unsigned seen = 0;
    for (int c0 = 0; c0 < F; c0 += kThreads) {
      const int j = c0 + threadIdx.x;
      const unsigned f = j < F && sel_key(__ldcg(g + j), p.rule) == bk ? 1u : 0u;
      unsigned total;
      const unsigned before = block_scan(f, S.scr + 4, total);
      if (f && seen + before + 1 == need) out[2] = j;
      seen += total;
      if (seen >= need) break;
    }
  }
  __syncthreads();
  bj = out[2];
  __syncthreads();
}

// idx_out row r of a top-K or forced selection (ascending), by one block.
template <int R>
__device__ void write_idx_row(const Params& P, const LayerPtrs& L, int r, bool forced, const Smem& S) {
  const Problem& p = P.p;
  const int F = p.d_ffn, kept_n = P.kept_n;
  std::uint16_t* dst = L.idx_out + static_cast<long long>(r) * kept_n;
  const GateView v = global_view(P);
  unsigned tk[kMaxRows] = {};
  int tj[kMaxRows] = {};
  tk[r] = __ldcg(P.thr + 2 * r);
  tj[r] = static_cast<int>(__ldcg(P.thr + 2 * r + 1));
  unsigned base = 0;
  for (int c0 = 0; c0 < F; c0 += kThreads) {
    const int j = c0 + threadIdx.x;
    const unsigned f = j < F && kept(P, v, tk, tj, r, j, forced) ? 1u : 0u;
    unsigned total;
    const unsigned at = block_scan(f, S.scr, total);
    if (f && base + at < static_cast<unsigned>(kept_n)) dst[base + at] = static_cast<std::uint16_t>(j);
    base += total;
  }
}

template <int R>
__device__ void prefetch_ffn(const Params& P, const LayerPtrs& L, bool forced) {
  const Problem& p = P.p;
  int c0, c1;
  block_range(p.d_ffn, ffn_align(p, forced), blockIdx.x, P.nb, c0, c1);
  prefetch_rows(L.wg, c0, c1, p.d);
  if (p.sel == Sel::dense) prefetch_rows(L.wu, c0, c1, p.d);
}

// What a block asks L2 for at the end of a layer: the next layer's first weights, or the LM head.
template <int R>
__device__ void prefetch_next(const Params& P, const LayerPtrs* next) {
  const Problem& p = P.p;
  if (next) {
    if (p.ffn_only) prefetch_ffn<R>(P, *next, p.sel != Sel::dense && next->force != nullptr);
    else prefetch_qkv<R>(P, *next);
  } else if (!p.ffn_only) {
    int v0, v1;
    block_range(p.vocab, 1, blockIdx.x, P.nb, v0, v1);
    prefetch_rows(p.lm_head, v0, v1, p.d);
  }
}

// Top-K / forced selection: block r < rows publishes row r's threshold (or forced mask); every block waits
// for all rows' flags while it asks L2 for the next dense stage's weights.
template <int R>
__device__ void publish_and_wait(const Params& P, const LayerPtrs& L, const LayerPtrs* next, int layer, bool forced,
                                 const Smem& S) {
  const Problem& p = P.p;
  const int F = p.d_ffn;
  const int r = blockIdx.x;
  if (r < R) {
    if (forced) {
      unsigned char* m = P.mask + static_cast<long long>(r) * F;
      for (int j = threadIdx.x; j < F; j += kThreads) m[j] = 0;
      __syncthreads();
      const int kn = P.kept_n;
      for (int i = threadIdx.x; i < kn; i += kThreads) m[L.force[static_cast<long long>(r) * kn + i]] = 1;
      if (L.idx_out)
        for (int i = threadIdx.x; i < kn; i += kThreads)
          L.idx_out[static_cast<long long>(r) * kn + i] = L.force[static_cast<long long>(r) * kn + i];
    } else {
      unsigned bk;
      int bj;
      find_threshold<R>(P, layer, r, S, bk, bj);
      if (threadIdx.x == 0) {
        P.thr[2 * r] = bk;
        P.thr[2 * r + 1] = static_cast<unsigned>(bj);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) st_release(P.flag + r, static_cast<unsigned>(layer + 1));
    if (!forced && L.idx_out) write_idx_row<R>(P, L, r, false, S);
  }
  prefetch_next<R>(P, next);
  if (threadIdx.x < R)
    while (ld_acquire(P.flag + threadIdx.x) < static_cast<unsigned>(layer + 1)) {
    }
  __syncthreads();
}

// The kept channels of the block's range (the union over rows, with a row mask) into its list segment, then
// u and z = SiLU(g) u of those channels; their W_up / W_down rows are asked for L2 first. a:b also writes
// idx_out (positions are local to each group).
template <int R>
__device__ void stage_up(const Params& P, const LayerPtrs& L, bool forced, const Smem& S) {
  const Problem& p = P.p;
  const int d = p.d, F = p.d_ffn;
  int c0, c1;
  block_range(F, ffn_align(p, forced), blockIdx.x, P.nb, c0, c1);
  const bool local_idx = p.sel == Sel::grouped && !forced && L.idx_out;
  // The block's gate values and the thresholds, each read in one batch of loads.
  const int span = c1 - c0;
  GateView v;
  v.shared = R * span <= 8192;
  float* gs = reinterpret_cast<float*>(S.area);
  if (v.shared) {
#pragma unroll 4
    for (int i = threadIdx.x; i < R * span; i += kThreads)
      gs[i] = __ldcg(P.G + static_cast<long long>(i / span) * F + c0 + i % span);
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) v.row[r] = v.shared ? gs + r * span - c0 : P.G + static_cast<long long>(r) * F;
  unsigned tk[kMaxRows] = {};
  int tj[kMaxRows] = {};
  if (p.sel == Sel::topk && !forced)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      tk[r] = __ldcg(P.thr + 2 * r);
      tj[r] = static_cast<int>(__ldcg(P.thr + 2 * r + 1));
    }
  __syncthreads();
  unsigned n = 0;
  for (int b = c0; b < c1; b += kThreads) {
    const int j = b + threadIdx.x;
    unsigned m = 0;
    if (j < c1)
      for (int r = 0; r < R; ++r)
        if (kept(P, v, tk, tj, r, j, forced)) {
          m |= 1u << r;
          if (local_idx) {  // position: a per whole group before, plus the kept channels before j in its group
            int before = 0;
            for (int i = j - j % p.group_b; i < j; ++i) before += group_kept(P, v, r, i) ? 1 : 0;
            L.idx_out[static_cast<long long>(r) * P.kept_n + (j / p.group_b) * p.group_a + before] =
                static_cast<std::uint16_t>(j);
          }
        }
    unsigned total;
    const unsigned at = block_scan(m ? 1u : 0u, S.scr, total);
    if (m) {
      P.list[c0 + n + at] = static_cast<unsigned>(j) | (m << 16);
      prefetch_l2(static_cast<const bf16*>(L.wu) + static_cast<long long>(j) * d, static_cast<unsigned>(d * 2));
      prefetch_l2(static_cast<const bf16*>(L.wd) + static_cast<long long>(j) * d, static_cast<unsigned>(d * 2));
    }
    n += total;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (unsigned e = warp; e < n; e += kWarps) {
    const unsigned ent = __ldcg(P.list + c0 + e);
    const int j = static_cast<int>(ent & 0xffffu);
    const bf16* const ws[1] = {static_cast<const bf16*>(L.wu) + static_cast<long long>(j) * d};
    float o[1][R];
    warp_dot<R, 1>(ws, S.xs, d, o);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r) {
        const float gv = v.at(r, j);
        P.Z[static_cast<long long>(c0 + e) * R + r] = (ent >> (16 + r)) & 1u ? silu_f(gv) * o[0][r] : 0.0f;
      }
  }
  if (threadIdx.x == 0) P.cnt[blockIdx.x] = n;
}

// Down projection: dst[r, slice] += sum over listed channels z[r] W_down[j, slice]; items are (column slice,
// group of source blocks' lists). Also zeroes the histogram the layer used (its thresholds are published).
template <int R>
__device__ void stage_down(const Params& P, const LayerPtrs& L, int layer, int align, const Smem& S) {
  const Problem& p = P.p;
  const int d = p.d, F = p.d_ffn;
  const int nct = (d + kSlice - 1) / kSlice;
  const int ng = max(1, P.nb / nct);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bf16* wd = static_cast<const bf16*>(L.wd);
  float* red = reinterpret_cast<float*>(S.area);  // [kWarps][R][kSlice]
  {
    unsigned* h = P.hist + static_cast<long long>(layer & 1) * R * kBins;
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < R * kBins; i += P.nb * kThreads) h[i] = 0;
  }
  for (int item = blockIdx.x; item < nct * ng; item += P.nb) {
    const int ct = item % nct, gi = item / nct;
    const int s0 = static_cast<int>(static_cast<long long>(gi) * P.nb / ng);
    const int s1 = static_cast<int>(static_cast<long long>(gi + 1) * P.nb / ng);
    const int col = ct * kSlice + lane * 8;
    float acc[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r][i] = 0.0f;
    unsigned* cnts = reinterpret_cast<unsigned*>(red + kWarps * R * kSlice);  // the sources' list lengths
    for (int s = s0 + threadIdx.x; s < s1; s += kThreads) cnts[s - s0] = __ldcg(P.cnt + s);
    __syncthreads();
    unsigned e = warp;  // this warp's next entry: the lists are walked as one sequence, warp w taking w mod kWarps
    for (int s = s0; s < s1; ++s) {
      int c0, c1;
      block_range(F, align, s, P.nb, c0, c1);
      const unsigned n = cnts[s - s0];
      constexpr int U = R <= 2 ? 8 : 4;  // W_down rows in flight per warp (registers)
      const unsigned e0 = e;
      for (; e < n; e += kWarps * U) {
        uint4 w[U];
        float z[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const unsigned ei = e + u * kWarps;
          if (ei < n) {
            const unsigned ent = __ldcg(P.list + c0 + ei);
            const int j = static_cast<int>(ent & 0xffffu);
            w[u] = col < d ? ld_stream(wd + static_cast<long long>(j) * d + col) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int r = 0; r < R; ++r) z[u][r] = __ldcg(P.Z + static_cast<long long>(c0 + ei) * R + r);
          } else {
            w[u] = make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int r = 0; r < R; ++r) z[u][r] = 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float wv[8] = {bf_lo(w[u].x), bf_hi(w[u].x), bf_lo(w[u].y), bf_hi(w[u].y),
                               bf_lo(w[u].z), bf_hi(w[u].z), bf_lo(w[u].w), bf_hi(w[u].w)};
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(z[u][r], wv[i], acc[r][i]);
        }
      }
      e = e0 >= n ? e0 - n : e0 + (n - e0 + kWarps - 1) / kWarps * kWarps - n;
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < 8; ++i) red[(warp * R + r) * kSlice + lane * 8 + i] = acc[r][i];
    __syncthreads();
    float* dst = P.xres;
    for (int i = threadIdx.x * 4; i < R * kSlice; i += kThreads * 4) {
      const int r = i / kSlice, c = i % kSlice, gc = ct * kSlice + c;
      if (gc >= d) continue;
      float4 s = make_float4(0, 0, 0, 0);
      for (int w2 = 0; w2 < kWarps; ++w2) {
        const float4 v = *reinterpret_cast<const float4*>(red + (w2 * R + r) * kSlice + c);
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      float* px = dst + static_cast<long long>(r) * d + gc;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float4*>(px), s);
#else
      atomicAdd(px, s.x);
      atomicAdd(px + 1, s.y);
      atomicAdd(px + 2, s.z);
      atomicAdd(px + 3, s.w);
#endif
    }
    __syncthreads();
  }
}

// LM head: logits[r, v] = xf[r, :] . W[v, :] for the block's range of v.
template <int R>
__device__ void stage_head(const Params& P, const Smem& S) {
  const Problem& p = P.p;
  norm_rows<R>(P.xres, static_cast<const bf16*>(p.final_norm), p.d, p.eps, S.xs, S.red);
  int v0, v1;
  block_range(p.vocab, 1, blockIdx.x, P.nb, v0, v1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int v = v0 + warp; v < v1; v += 2 * kWarps) {
    const int v2 = v + kWarps;
    const bool two = v2 < v1;
    const bf16* const ws[2] = {static_cast<const bf16*>(p.lm_head) + static_cast<long long>(v) * p.d,
                               static_cast<const bf16*>(p.lm_head) + static_cast<long long>(two ? v2 : v) * p.d};
    float o[2][R];
    warp_dot<R, 2>(ws, S.xs, p.d, o, two);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == r) {
        p.logits[static_cast<long long>(r) * p.vocab + v] = o[0][r];
        if (two) p.logits[static_cast<long long>(r) * p.vocab + v2] = o[1][r];
      }
  }
}

template <int R>
__global__ void __launch_bounds__(kThreads, 1) k_step(const __grid_constant__ Params P) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Problem& p = P.p;
  Smem S;
  S.xs = reinterpret_cast<bf16*>(smem_raw);
  unsigned char* rest = smem_raw + static_cast<std::size_t>(kMaxRows) * p.d * 2;
  S.red = reinterpret_cast<float*>(rest);
  S.scr = reinterpret_cast<unsigned*>(rest + 256);  // 32 words
  S.area = rest + 512;
  unsigned gen = 0;
  Stamper st;
  stamp_start(P.stamps, P.nb, st, StampKernel::k_step, p.ffn_only ? StageId::output : StageId::head);
  const int d = p.d;
  // Start: the residual stream (embedding rows, or zero for ffn_only) and both histograms.
  for (long long i = blockIdx.x * kThreads + threadIdx.x; i < static_cast<long long>(R) * d; i += P.nb * kThreads) {
    const int r = static_cast<int>(i / d), c = static_cast<int>(i % d);
    P.xres[i] = p.ffn_only ? 0.0f
                           : __bfloat162float(static_cast<const bf16*>(p.embed)[static_cast<long long>(p.tokens[r]) * d + c]);
  }
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < 2 * R * kBins; i += P.nb * kThreads) P.hist[i] = 0;
  if (p.ffn_only) {
    for (int i = threadIdx.x; i < R * d; i += kThreads) S.xs[i] = static_cast<const bf16*>(p.x)[i];
    prefetch_ffn<R>(P, p.layer[0], p.layer[0].force != nullptr);
  } else {
    prefetch_qkv<R>(P, p.layer[0]);
  }
  grid_barrier(P, gen, st, StageId::start, -1);
  for (int l = 0; l < p.layers; ++l) {
    const LayerPtrs& L = p.layer[l];
    const LayerPtrs* next = l + 1 < p.layers ? &p.layer[l + 1] : nullptr;
    const bool forced = p.sel != Sel::dense && L.force != nullptr;
    if (!p.ffn_only) {
      stage_qkv<R>(P, L, S);
      {
        int c0, c1;
        block_range(d, 1, blockIdx.x, P.nb, c0, c1);
        prefetch_rows(L.wo, c0, c1, p.heads * p.head_dim);
      }
      grid_barrier(P, gen, st, StageId::qkv, l);
      stage_attn<R>(P, L, S);
      prefetch_ffn<R>(P, L, forced);
      grid_barrier(P, gen, st, StageId::attn, l);
      stage_o<R>(P, L, S);
      grid_barrier(P, gen, st, StageId::o, l);
      norm_rows<R>(P.xres, static_cast<const bf16*>(L.ffn_norm), d, p.eps, S.xs, S.red);
    }
    stage_gate<R>(P, L, l, forced, S);
    if (p.sel != Sel::dense) {
      if (p.sel == Sel::topk || forced) {
        grid_barrier(P, gen, st, StageId::gate, l);
        publish_and_wait<R>(P, L, next, l, forced, S);
        stamp_mark(st, StageId::topk, l);
      } else {
        stamp_mark(st, StageId::gate, l);  // (syncs the block) a:b: the block's own gate values are all it needs
      }
      stage_up<R>(P, L, forced, S);
    }
    grid_barrier(P, gen, st, p.sel == Sel::dense ? StageId::gate_up : StageId::up, l);
    stage_down<R>(P, L, l, ffn_align(p, forced), S);
    prefetch_next<R>(P, next);
    grid_barrier(P, gen, st, StageId::down, l);
  }
  if (p.ffn_only) {
    bf16* out = static_cast<bf16*>(p.out);
    for (long long i = blockIdx.x * kThreads + threadIdx.x; i < static_cast<long long>(R) * d; i += P.nb * kThreads)
      out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + __ldcg(P.xres + i));
  } else {
    stage_head<R>(P, S);
  }
  stamp_end(P.stamps, P.nb, st);
}

// ---------------------------------------------------------------------------------------------------------
// Host side

std::size_t align256(std::size_t n) { return (n + 255) & ~std::size_t(255); }

struct Layout {
  std::size_t ctrl, thr, hist, xres, qkv, attn, G, mask, Z, list, cnt, total;
};
Layout layout_of(const Problem& p, int nb) {
  Layout o{};
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at += align256(bytes);
    return here;
  };
  const std::size_t R = static_cast<std::size_t>(p.rows), F = static_cast<std::size_t>(p.d_ffn);
  o.ctrl = take(256);
  o.thr = take(kMaxRows * 2 * 4);
  o.hist = take(2 * R * kBins * 4);
  o.xres = take(R * p.d * 4);
  o.qkv = take(R * static_cast<std::size_t>(p.heads + 2 * p.kv_heads) * p.head_dim * 4);
  o.attn = take(R * static_cast<std::size_t>(p.heads) * p.head_dim * 4);
  o.G = take(R * F * 4);
  o.mask = take(R * F);
  o.Z = take(F * R * 4);
  o.list = take(F * 4);
  o.cnt = take(static_cast<std::size_t>(nb) * 4);
  o.total = at;
  return o;
}

template <int R>
void launch_rows(const Params& P, cudaStream_t stream) {
  const std::size_t smem = smem_bytes(P.p.d);
  allow_smem(k_step<R>, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(P.nb));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  MOC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, k_step<R>, P));
}

}  // namespace

int Problem::kept() const {
  if (sel == Sel::dense) return d_ffn;
  MocSelect s;
  s.k = k;
  s.group_a = sel == Sel::grouped ? group_a : 0;
  s.group_b = sel == Sel::grouped ? group_b : 0;
  return s.kept(d_ffn);
}

std::string unsupported(const Problem& p) {
  if (p.rows < 1 || p.rows > kMaxRows) return "rows outside 1.." + std::to_string(kMaxRows);
  if (p.layers < 1 || p.layers > kMaxLayers) return "layers outside 1.." + std::to_string(kMaxLayers);
  if (p.d % 8 != 0 || p.d > 8192) return "d must be a multiple of 8 up to 8192";
  if (p.d_ffn < 1 || p.d_ffn > 65535) return "d_ffn outside 1..65535";
  if (!p.ffn_only) {
    if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads != 0) return "heads must be a multiple of kv heads";
    if (p.head_dim < 8 || p.head_dim > 256 || kThreads % p.head_dim != 0) return "head_dim must divide 512 (8..256)";
    if (p.heads * p.head_dim > p.d) return "attention width heads x head_dim above d";
    if (p.vocab < 1) return "empty vocabulary";
  }
  if (p.sel == Sel::topk && (p.k < 1 || p.k > p.d_ffn)) return "k outside 1..d_ffn";
  if (p.sel == Sel::grouped && (p.group_a < 1 || p.group_a > p.group_b)) return "a:b needs 0 < a <= b";
  return {};
}

std::size_t workspace_bytes(const Problem& p, int blocks) { return layout_of(p, blocks).total; }

int grid_blocks() {
  static std::mutex mu;
  static int cached[64] = {};
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (dev < 64 && cached[dev]) return cached[dev];
  int sms = 0;
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  sms = std::min(sms, kMaxSources);  // the down stage keeps one list length per source block
  if (dev < 64) cached[dev] = sms;
  return sms;
}

void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream) {
  const std::string why = unsupported(p);
  if (!why.empty()) throw std::invalid_argument("cuda decode_step: " + why);
  Params P;
  P.p = p;
  P.nb = grid_blocks();
  P.kept_n = p.kept();
  const Layout lo = layout_of(p, P.nb);
  if (workspace_size < lo.total) throw std::invalid_argument("cuda decode_step: workspace too small");
  auto* base = static_cast<unsigned char*>(workspace);
  P.bar = reinterpret_cast<unsigned*>(base + lo.ctrl);
  P.flag = P.bar + 32;
  P.thr = reinterpret_cast<unsigned*>(base + lo.thr);
  P.hist = reinterpret_cast<unsigned*>(base + lo.hist);
  P.xres = reinterpret_cast<float*>(base + lo.xres);
  P.qkv = reinterpret_cast<float*>(base + lo.qkv);
  P.attn = reinterpret_cast<float*>(base + lo.attn);
  P.G = reinterpret_cast<float*>(base + lo.G);
  P.mask = base + lo.mask;
  P.Z = reinterpret_cast<float*>(base + lo.Z);
  P.list = reinterpret_cast<unsigned*>(base + lo.list);
  P.cnt = reinterpret_cast<unsigned*>(base + lo.cnt);
  P.stamps = stamp_buffer();
  MOC_CUDA_CHECK(cudaMemsetAsync(base + lo.ctrl, 0, 256, stream));
  switch (p.rows) {
    case 1: launch_rows<1>(P, stream); break;
    case 2: launch_rows<2>(P, stream); break;
    case 3: launch_rows<3>(P, stream); break;
    default: launch_rows<4>(P, stream); break;
  }
}

}  // namespace moc::cuda::step

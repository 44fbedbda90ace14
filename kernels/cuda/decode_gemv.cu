// Decode-time GEMVs over weights stored [out, in] (one output = one contiguous row of d values) for 1-8 rows
// of bf16 activations: the projections of the kernel path's decode step (issue #26).
//
// - gemv_rows: C[m, n] = alpha x[m, :] W^T + beta C for m <= 8 (C bf16 or f32): the o projection with its
//   residual add (beta 1) and the LM head (f32 logits). CudaOps::gemm sends such calls here, not to cuBLASLt.
// - gemv_rows_argmax: greedy decoding's LM head (Ops::lm_head_argmax): gemv_rows' f32 logits, and each block's
//   best (value, lowest column) per row folded into a zeroed 64-bit word per row with one red.max; a one-block
//   kernel then writes next and zeroes the words. Replaces the logits' second read by argmax_vec_kernel (one
//   kernel, 128 KB a row at 32k vocabulary): decode -0.4 / 0.0 / -0.8% a token at batch 1 and -0.4 / -0.6 /
//   -0.4% at batch 4 (dense / MoC / 2:8, H200, bench/micro/NOTES.md thirty-sixth session).
// - decode_qkv: RMSNorm in the prologue, q | k | v = xn [Wq; Wk; Wv]^T as one GEMV over the three matrices,
//   RoPE and the K/V-cache write in the epilogue (Ops::decode_qkv): one kernel where the composed ops take
//   seven (a norm, three GEMVs, two RoPEs, a cache write).
//
// Floor: the weight rows, read once (a 2048 x 6144 QKV: 25.2 MB, 8.4 us at 3 TB/s); everything else is a few
// KB. At one row of x (batch 1) a warp owns one output row (FMAs, 8 words per lane in flight); at 2-8 rows
// the weights go through the tensor cores (mma.sync m16n8k16, so the cost per weight byte does not grow with
// the rows), a block of 8 warps splitting d per tile and a balanced range of tiles per block (3 blocks per SM):
// the QKV on the decode FFN's gate kernel's tiles of 16 weight rows (x's rows as the N dimension; a tile is 8
// rows of a head and their RoPE partners hd/2 further, so one lane's registers hold both), the plain GEMV and
// the LM head on tiles of 8 weight rows (x's rows as the M dimension: a warp's whole slice of a 2048-wide tile
// in its registers at once). PDL: a weights-tagged W is streamed before the wait for the previous kernel (the
// first tile's loads), as is the QKV's norm weight (into shared memory); x and pos after it; QKV stages x
// normalized (rounded to bf16 as rmsnorm_forward writes it) in shared memory.
// Sums are fp32; each output is rounded once, as the CPU twin's GEMM output is, and RoPE rotates the rounded
// q and k (as rope() does after the GEMM) in double-precision angles from the host's frequency table,
// without fused multiply-adds. Measured history: bench/RESULTS.md (issue #26).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/select_key.cuh"

namespace moc::cuda {
namespace gemv {
namespace {

using namespace moc::cuda::dev;  // bf16, ld_stream, bf_lo / bf_hi

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 16;       // weight rows of one mma tile (its M)
constexpr int kTile = 32;        // columns one warp covers per mma step (4 lanes x 8 bf16)
constexpr int kU = 4;            // 32-column steps in flight per warp (two 16-byte loads per lane each)
constexpr int kWU = 8;           // one-row kernels: 16-byte words per lane in flight (a 2048-wide row at once)
constexpr int kMaxRows = 8;      // rows of x (the N of one mma tile)
constexpr int kBlocksPerSm = 3;
constexpr int kRopeTable = 64;   // head_dim <= 128
constexpr std::size_t kMaxSmem = 200 * 1024;

enum Epi : int { kStore = 0, kQkv = 1, kArgmax = 2 };  // kArgmax: kStore (f32, alpha 1, beta 0) and each row's argmax
// The kernels' names in a profile, by epilogue: one row of x, and 2-8 rows on mma tiles.
constexpr const char* kRowNames[] = {"k_gemv_row", "k_qkv_row", "k_head_row"};
constexpr const char* kMmaNames[] = {"k_gemv_mma", "k_qkv_mma", "k_head_mma"};

struct RopeTable {
  double f[kRopeTable];  // theta^(-2i/hd), computed as CpuOps::rope does
};

struct Args {
  const bf16* x;     // [R, d]
  const bf16* norm;  // [d] RMSNorm weight (kQkv)
  float eps;
  const bf16* w0;  // rows [0, n0)
  const bf16* w1;  // rows [n0, n0 + n1)
  const bf16* w2;  // the rest
  int n0, n1, n;   // n: all rows
  int R, d, tiles;  // the mma kernels' tiles: 16 rows (QKV), 8 (gemv8_body)
  int units;        // the one-row kernels: rows (kStore) or RoPE row pairs (kQkv)
  int early;        // W may be streamed before the wait (a weights tensor)
  int norm_early;   // kQkv: the norm weight is a weights tensor, staged in shared memory before the wait: 1 after
                    // x [R, d]; 2 (one row, d <= kNormInPlaceMaxD) in x's place, x then normalized over it
  // kStore
  void* out;  // [R, n]
  int out_f32;
  float alpha, beta;
  // kArgmax: per row of x, the largest argmax_key of its outputs (red.max; zero on entry)
  unsigned long long* best;
  // kQkv
  bf16* q;   // [R, h, hd]
  bf16* kc;  // [R, kvh, max_seq, hd]
  bf16* vc;
  const std::int32_t* pos;  // [R]
  int h, kvh, hd, max_seq;
  RopeTable rope;
};

__device__ __forceinline__ const bf16* row_ptr(const Args& a, int r) {
  if (r < a.n0) return a.w0 + static_cast<std::size_t>(r) * a.d;
  if (r < a.n0 + a.n1) return a.w1 + static_cast<std::size_t>(r - a.n0) * a.d;
  return a.w2 + static_cast<std::size_t>(r - a.n0 - a.n1) * a.d;
}

// The QKV's weight row of slot s (0..15) of tile t: slots s and s + 8 are rows i and i + hd/2 of one head (the pair
// RoPE rotates; one lane's mma registers hold both).
__device__ __forceinline__ int slot_row(const Args& a, int t, int s) {
  const int half = a.hd / 2, tph = half / 8, head = t / tph, i0 = (t - head * tph) * 8;
  return head * a.hd + i0 + (s & 7) + (s >> 3) * half;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// x [R, d] RMSNorm'd into shared memory, rounded to bf16 exactly as rmsnorm_vec_kernel writes it (R <= MR).
// Every thread calls it (two barriers).
// nws: the norm weight already in shared memory (stage_norm_w before the wait; this function's first barrier makes
// it visible), or null to read it from global memory here.
template <int MR>
__device__ void stage_x_norm(const Args& a, bf16* xs, float* red, const bf16* nws) {
  const int nv = a.d / 8, total = a.R * nv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint4* xg = reinterpret_cast<const uint4*>(a.x);
  uint4* xw = reinterpret_cast<uint4*>(xs);
  float ss[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) ss[r] = 0.0f;
#pragma unroll 4
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const uint4 v = __ldg(xg + e);
    xw[e] = v;
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) sq += bf_lo(u[k]) * bf_lo(u[k]) + bf_hi(u[k]) * bf_hi(u[k]);
    const int r = e / nv;
#pragma unroll
    for (int k = 0; k < MR; ++k) ss[k] += k == r ? sq : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    ss[r] = warp_sum(ss[r]);
    if (lane == 0) red[warp * MR + r] = ss[r];
  }
  __syncthreads();
  float rs[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += red[w * MR + r];
    rs[r] = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(a.d) + a.eps));
  }
  const uint4* wg = reinterpret_cast<const uint4*>(a.norm);
  const uint4* ws = reinterpret_cast<const uint4*>(nws);
#pragma unroll 4
  for (int e = threadIdx.x; e < total; e += kThreads) {  // the words this thread staged
    const int r = e / nv;
    float rr = rs[0];
#pragma unroll
    for (int k = 1; k < MR; ++k) rr = k == r ? rs[k] : rr;
    const uint4 v = xw[e], w = ws ? ws[e - r * nv] : __ldg(wg + (e - r * nv));
    const bf16* xe = reinterpret_cast<const bf16*>(&v);
    const bf16* we = reinterpret_cast<const bf16*>(&w);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = __float2bfloat16_rn(__bfloat162float(xe[k]) * rr * __bfloat162float(we[k]));
    xw[e] = o;
  }
  __syncthreads();
}

// The QKV's norm weight [d] into shared memory: a weights tensor does not depend on the previous kernel, so this
// runs before the PDL wait and takes one L2 round trip off the chain after it (measured alone as exp52's knob, H200:
// decode batch 1 -2.1% dense, -0.4% 2:8, MoC flat; bench/micro/NOTES.md thirty-seventh session).
__device__ __forceinline__ void stage_norm_w(const Args& a, bf16* nws) {
  const uint4* wg = reinterpret_cast<const uint4*>(a.norm);
  for (int e = threadIdx.x; e < a.d / 8; e += kThreads) reinterpret_cast<uint4*>(nws)[e] = __ldg(wg + e);
}

// One row of x RMSNorm'd over the norm weight that stage_norm_w put at xs before the wait (norm_early 2): each
// thread's word of x (d <= kNormInPlaceMaxD: one word a thread) in registers across the sum of squares, then
// xs[e] = x[e] rstd w[e] in place -- the word read and written by the thread that staged it, so no barrier before.
// The same arithmetic in the same order as stage_x_norm<1> (by reading; the tests compare with the CPU twin within
// bf16 rounding). The block needs 2 d bytes of shared memory fewer (2 d instead of 4 d), so the batch-1 QKV block
// fits beside a top-K ring block again (ffn_decode_ring_plan.h kRingTopkLeave). H200, decode batch 1 against the
// separate buffer (2 rounds interleaved, ms per token): dense 0.9710 -> 0.9588, MoC 0.9549 -> 0.9464, 2:8 0.8764 ->
// 0.8626 (bench/RESULTS.md part 37). One word a thread (the 1b model's d 2048): more would hold x's words beside the
// weight registers the kernel keeps across its prologue (a dispatch up to 4 words: 80 bytes of stack instead of 40);
// wider rows keep the separate buffer.
constexpr int kNormInPlaceMaxD = 8 * kThreads;
__device__ void stage_x_norm_over_w(const Args& a, bf16* xs, float* red) {
  const int nv = a.d / 8, e = threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;  // word e of x
  const uint4* xg = reinterpret_cast<const uint4*>(a.x);
  uint4* xw = reinterpret_cast<uint4*>(xs);
  uint4 v;  // assigned apart from its declaration: as measured (a const initializer puts the load in a branch)
  v = e < nv ? __ldg(xg + e) : make_uint4(0u, 0u, 0u, 0u);
  float ss = 0.0f;
  if (e < nv) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) sq += bf_lo(u[k]) * bf_lo(u[k]) + bf_hi(u[k]) * bf_hi(u[k]);
    ss += sq;
  }
  ss = warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  float t = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  const float rr = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(a.d) + a.eps));
  if (e < nv) {
    const uint4 w = xw[e];
    const bf16* xe = reinterpret_cast<const bf16*>(&v);
    const bf16* we = reinterpret_cast<const bf16*>(&w);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = __float2bfloat16_rn(__bfloat162float(xe[k]) * rr * __bfloat162float(we[k]));
    xw[e] = o;
  }
  __syncthreads();
}

// RoPE of the pair (x0, x1) = (row i, row i + hd/2) of one head at position p, as rope_kernel computes it.
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

// out[o] = alpha v + beta out[o] (out not read when beta is 0: it may be poisoned), rounded once to out's dtype.
__device__ __forceinline__ void store_out(const Args& a, std::size_t o, float v) {
  if (a.out_f32) {
    float* out = static_cast<float*>(a.out);
    out[o] = a.beta != 0.0f ? a.alpha * v + a.beta * out[o] : a.alpha * v;
  } else {
    bf16* out = static_cast<bf16*>(a.out);
    out[o] = __float2bfloat16_rn(a.beta != 0.0f ? a.alpha * v + a.beta * __bfloat162float(out[o]) : a.alpha * v);
  }
}

// Sequence r's rows i and i + hd/2 of head `head` (of q | k | v), rounded: RoPE on q and k, q stored, k and v
// written to cache row pos[r].
// p: pos[r], read right after the PDL wait (beside x's staging) rather than here at the end of the chain.
__device__ __forceinline__ void qkv_store(const Args& a, int r, int p, int head, int i, float x0, float x1) {
  const int half = a.hd / 2;
  if (head < a.h) {
    rotate(a, i, p, x0, x1);
    bf16* qo = a.q + (static_cast<std::size_t>(r) * a.h + head) * a.hd;
    qo[i] = __float2bfloat16_rn(x0);
    qo[i + half] = __float2bfloat16_rn(x1);
    return;
  }
  const bool is_k = head < a.h + a.kvh;
  const int kh = head - a.h - (is_k ? 0 : a.kvh);
  if (is_k) rotate(a, i, p, x0, x1);
  if (p >= 0 && p < a.max_seq) {  // rows past the cache are not written (as kv_cache_write)
    bf16* cp = (is_k ? a.kc : a.vc) +
               ((static_cast<std::size_t>(r) * a.kvh + kh) * a.max_seq + p) * static_cast<std::size_t>(a.hd);
    cp[i] = __float2bfloat16_rn(x0);
    cp[i + half] = __float2bfloat16_rn(x1);
  }
}

// An output's argmax key: the value's order in the high word (select_key.cuh's key_of; a NaN 0, below every number,
// -0 as +0) and the complement of its column in the low one, so that the largest key is the first maximum (sample's
// rule).
__device__ __forceinline__ unsigned long long argmax_key(float v, int col) {
  const unsigned k = v != v ? 0u : key_of(v == 0.0f ? 0.0f : v);
  return (static_cast<unsigned long long>(k) << 32) | (0xFFFFFFFFu - static_cast<unsigned>(col));
}
__device__ __forceinline__ void red_max(unsigned long long* p, unsigned long long v) {
  asm volatile("red.relaxed.gpu.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long shfl_xor_u64(unsigned long long v, int o) {
  return __shfl_xor_sync(0xffffffffu, v, o);
}

// One row of x (batch 1): one output row per warp, kWU words per lane in flight, FMAs on the CUDA cores -- at
// one row this reaches the floor sooner than the mma tiles, whose 16-row tiles leave too few warps (H100).
// kQkv: warps 2w and 2w + 1 own rows i and i + hd/2 of one head and meet in shared memory.
template <int EPI>
__device__ __forceinline__ void row_body(const Args& a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [1, d] (kQkv: normalized)
  __shared__ float nred[kWarps * kMaxRows];
  __shared__ float res[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
  constexpr int kCols = kWU * 32 * 8;
  uint4 A[kWU];
  auto load = [&](int bt) {
#pragma unroll
    for (int u = 0; u < kWU; ++u) {
      const int col = bt * kCols + (u * 32 + lane) * 8;
      A[u] = col < a.d && active ? ld_stream(pw + col) : zero;
    }
  };
  // the norm weight: after x [1, d] (norm_early 1), or in x's place (2)
  bf16* nws = EPI == kQkv && a.norm_early ? (a.norm_early == 2 ? xs : xs + a.d) : nullptr;
  pdl_trigger();
  if (a.early) load(0);
  if (nws) stage_norm_w(a, nws);
  pdl_wait();
  if (!a.early) load(0);
  int p0 = 0;
  if constexpr (EPI == kQkv) {
    p0 = a.pos[0];
    if (a.norm_early == 2) {
      stage_x_norm_over_w(a, xs, nred);
    } else {
      stage_x_norm<1>(a, xs, nred, nws);
    }
  } else {  // x staged in shared memory as well: one 16-byte read per word in the loop (measured faster than L1)
    const uint4* xg = reinterpret_cast<const uint4*>(a.x);
    for (int e = threadIdx.x; e < a.d / 8; e += kThreads) reinterpret_cast<uint4*>(xs)[e] = __ldg(xg + e);
    __syncthreads();
  }
  float acc = 0.0f;
  const int nbatch = (a.d + kCols - 1) / kCols;
  for (int bt = 0; bt < nbatch; ++bt) {
    if (bt > 0) load(bt);
#pragma unroll
    for (int u = 0; u < kWU; ++u) {
      const int col = bt * kCols + (u * 32 + lane) * 8;
      if (col < a.d) {
        fma8(acc, A[u], *reinterpret_cast<const uint4*>(xs + col));
      }
    }
  }
  acc = warp_sum(acc);
  if constexpr (EPI == kStore) {
    if (!active || lane != 0) return;
    store_out(a, static_cast<std::size_t>(row), acc);
  } else if constexpr (EPI == kArgmax) {  // logits written as kStore's (alpha 1, beta 0: f32 acc), one red per block
    __shared__ unsigned long long wbest[kWarps];
    if (lane == 0) {
      if (active) static_cast<float*>(a.out)[row] = acc;
      wbest[warp] = active ? argmax_key(acc, row) : 0ull;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long m = wbest[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) m = max(m, wbest[w]);
      if (m) red_max(a.best, m);
    }
  } else {
    if (lane == 0) res[warp] = round_bf16(acc);
    __syncthreads();
    if (!active || (warp & 1) || lane != 0) return;  // the pair's first warp finishes it
    const int half = a.hd / 2, head = unit / half;
    qkv_store(a, 0, p0, head, unit - head * half, res[warp], res[warp + 1]);
  }
}

// The mma kernels' share of the work: this block's balanced range of tiles [t_first, t_last) and this warp's range
// of 32-column steps [s_beg, s_end) of every tile (the 8 warps split d).
struct Split {
  int t_first, t_last, s_beg, s_end;
};
__device__ __forceinline__ Split split(const Args& a, int warp) {
  const long long nb = gridDim.x, b = blockIdx.x;
  const int nt = (a.d + kTile - 1) / kTile;
  return {static_cast<int>(b * a.tiles / nb), static_cast<int>((b + 1) * a.tiles / nb), warp * nt / kWarps,
          (warp + 1) * nt / kWarps};
}

// The QKV at 2-8 rows of x. Block b takes a balanced range of tiles (kQkv: 8 rows of a head and their RoPE
// partners); in a tile, lane (g, q) streams 8 columns of rows g and g + 8 per 32-column step, the 8 warps split
// d, and the partial 16 x 8 blocks of dot products meet in shared memory. (8-row tiles as gemv8_body's measured
// slower here: the 1b QKV's 6144 rows make 768 of them, two a block at 3 blocks per SM, the second asked for
// after the first's sums -- bench/micro/NOTES.md thirty-seventh session.)
__device__ __forceinline__ void qkv_body(const Args& a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [R, d], normalized; then the norm weight [d] if norm_early
  bf16* nws = a.norm_early ? xs + static_cast<std::size_t>(a.R) * a.d : nullptr;
  __shared__ float4 red[kWarps * 32];
  __shared__ float nred[kWarps * kMaxRows];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const Split sp = split(a, warp);
  const int t_first = sp.t_first, t_last = sp.t_last, s_beg = sp.s_beg, s_end = sp.s_end;
  const bool xrow = g < a.R;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 A[kU], B[kU];
  auto load = [&](int t, int s0) {
    const int ra = slot_row(a, t, g), rb = slot_row(a, t, g + 8);
    const bf16* pa = row_ptr(a, ra < 0 ? 0 : ra);
    const bf16* pb = row_ptr(a, rb < 0 ? 0 : rb);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int col = (s0 + u) * kTile + q * 8;
      const bool ok = s0 + u < s_end && col < a.d;
      A[u] = ok && ra >= 0 ? ld_stream(pa + col) : zero;
      B[u] = ok && rb >= 0 ? ld_stream(pb + col) : zero;
    }
  };
  pdl_trigger();
  if (a.early && t_first < t_last) load(t_first, s_beg);
  if (nws) stage_norm_w(a, nws);
  pdl_wait();
  if (!a.early && t_first < t_last) load(t_first, s_beg);
  const int pr = tid < 8 * 8 && (tid & 7) < a.R ? a.pos[tid & 7] : 0;  // the epilogue's sequence tid & 7
  stage_x_norm<kMaxRows>(a, xs, nred, nws);
  const bf16* px = xs + static_cast<std::size_t>(xrow ? g : 0) * a.d;
  for (int t = t_first; t < t_last; ++t) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = s_beg; s0 < s_end; s0 += kU) {
      if (t != t_first || s0 != s_beg) load(t, s0);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int col = (s0 + u) * kTile + q * 8;
        const bool ok = s0 + u < s_end && col < a.d && xrow;
        uint4 X = zero;
        if (ok) X = *reinterpret_cast<const uint4*>(px + col);
        mma_tile(c, A[u], B[u], X);
      }
    }
    red[warp * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
    __syncthreads();
    const float* rf = reinterpret_cast<const float*>(red);
    auto slot_sum = [&](int s, int r) {
      const int ln = c_lane(s, r), rg = c_reg(s, r);
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += rf[(w * 32 + ln) * 4 + rg];
      return v;
    };
    if (tid < 8 * 8) {  // (slot s < 8, row r): the pair (s, s + 8) of sequence r
      const int s = tid >> 3, r = tid & 7;
      if (r < a.R) {
        const int row = slot_row(a, t, s), head = row / a.hd;
        qkv_store(a, r, pr, head, row - head * a.hd, round_bf16(slot_sum(s, r)), round_bf16(slot_sum(s + 8, r)));
      }
    }
    __syncthreads();  // red is reused by the next tile
  }
}

// The plain GEMV and the LM head at 2-8 rows of x, on tiles of 8 weight rows: x is the mma's A (its rows 0..R-1
// of 16, the rest zero) and the 8 weight rows its B, so lane (g, q) streams 8 columns of weight row g per
// 32-column step and a warp's kWU steps (256 columns: a 2048-wide row over the 8 warps) sit in its registers at
// once, as in the one-row kernel -- a block's whole first tile is asked for before the PDL wait, the next tile's
// first steps before the block's sums meet. Lane (g, q) ends with (x row g; weight slots 2q, 2q + 1) in c[0], c[1].
// Against 16-row tiles (two 16-byte loads per lane per step, half a tile before the wait), H200: the 1b O
// projection at batch 4 4.9 -> 3.7 us a layer, the LM head 38.1 -> 32.7 us (94% of its floor; exclusive times of
// one profiled step); with the QKV's norm staging, decode per token at batch 1 / 2 / 4 -0.7 / -2.6 / -1.5% dense,
// -0.6 / -3.2 / -2.2% MoC, -2.5 / -3.0 / -1.2% 2:8 (bench/micro/NOTES.md thirty-seventh session).
__device__ __forceinline__ int slot_row8(const Args& a, int t, int s) {
  const int r = t * 8 + s;
  return r < a.n ? r : -1;
}

template <int EPI>
__device__ __forceinline__ void gemv8_body(const Args& a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [R, d]
  __shared__ float2 red[kWarps * 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const Split sp = split(a, warp);
  const int t_first = sp.t_first, t_last = sp.t_last, s_beg = sp.s_beg, s_end = sp.s_end;
  const bool xrow = g < a.R;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 W[kWU];
  auto load = [&](int t, int s0) {
    const int rw = slot_row8(a, t, g);
    const bf16* pw = row_ptr(a, rw < 0 ? 0 : rw);
#pragma unroll
    for (int u = 0; u < kWU; ++u) {
      const int col = (s0 + u) * kTile + q * 8;
      W[u] = s0 + u < s_end && col < a.d && rw >= 0 ? ld_stream(pw + col) : zero;
    }
  };
  pdl_trigger();
  if (a.early && t_first < t_last) load(t_first, s_beg);
  pdl_wait();
  if (!a.early && t_first < t_last) load(t_first, s_beg);
  const uint4* xg = reinterpret_cast<const uint4*>(a.x);
  for (int e = tid; e < a.R * (a.d / 8); e += kThreads) reinterpret_cast<uint4*>(xs)[e] = __ldg(xg + e);
  __syncthreads();
  const bf16* px = xs + static_cast<std::size_t>(xrow ? g : 0) * a.d;
  unsigned long long kbest = 0ull;  // kArgmax: lanes 0-7 of warps 0-1, row `lane`
  bool loaded = true;               // W holds tile t's first steps
  for (int t = t_first; t < t_last; ++t) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // two chains of mma
    for (int s0 = s_beg; s0 < s_end; s0 += kWU) {
      if (!loaded) load(t, s0);
      loaded = false;
#pragma unroll
      for (int u = 0; u < kWU; ++u) {
        const int col = (s0 + u) * kTile + q * 8;
        uint4 X = zero;
        if (xrow && s0 + u < s_end && col < a.d) X = *reinterpret_cast<const uint4*>(px + col);
        mma16816(c, X.x, 0u, X.y, 0u, W[u].x, W[u].y);
        mma16816(e, X.z, 0u, X.w, 0u, W[u].z, W[u].w);
      }
    }
    if (t + 1 < t_last) {  // the next tile's first steps, in flight while this one's sums meet
      load(t + 1, s_beg);
      loaded = true;
    }
    red[warp * 32 + lane] = make_float2(c[0] + e[0], c[1] + e[1]);
    __syncthreads();
    auto slot_sum = [&](int s, int r) {
      const float* rf = reinterpret_cast<const float*>(red);
      const int ln = r * 4 + (s >> 1), k = s & 1;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += rf[(w * 32 + ln) * 2 + k];
      return v;
    };
    if (tid < 8 * 8) {  // (slot s, row r) = (tid / 8, tid % 8)
      const int s = tid >> 3, r = tid & 7, row = slot_row8(a, t, s);
      if constexpr (EPI == kStore) {
        if (r < a.R && row >= 0) store_out(a, static_cast<std::size_t>(r) * a.n + row, slot_sum(s, r));
      } else {  // kArgmax: the logits as kStore's (f32, alpha 1, beta 0) and the block's best per row
        unsigned long long key = 0ull;
        if (r < a.R && row >= 0) {
          const float v = slot_sum(s, r);
          static_cast<float*>(a.out)[static_cast<std::size_t>(r) * a.n + row] = v;
          key = argmax_key(v, row);
        }
        key = max(key, shfl_xor_u64(key, 8));  // the warp's 4 slots of row r
        key = max(key, shfl_xor_u64(key, 16));
        if (lane < 8) kbest = max(kbest, key);
      }
    }
    __syncthreads();  // red is reused by the next tile
  }
  if constexpr (EPI == kArgmax) {
    if (tid < 8 * 8 && lane < a.R && kbest) red_max(a.best + lane, kbest);
  }
}
// Six kernels (six names in a profile): the plain GEMV, the fused QKV and the LM head with its argmax, each for one
// row and on mma tiles.
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) k_gemv_mma(const Args a) { gemv8_body<kStore>(a); }
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) k_qkv_mma(const Args a) { qkv_body(a); }
__global__ void __launch_bounds__(kThreads) k_gemv_row(const Args a) { row_body<kStore>(a); }
// The LM head with each row's argmax kept (Ops::lm_head_argmax), then k_argmax_finish.
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) k_head_mma(const Args a) { gemv8_body<kArgmax>(a); }
__global__ void __launch_bounds__(kThreads) k_head_row(const Args a) { row_body<kArgmax>(a); }
// next[r] from row r's word (0 where nothing was kept, as the argmax kernels), which is zeroed for the next call.
__global__ void k_argmax_finish(unsigned long long* best, int R, std::int32_t* next) {
  pdl_trigger();
  pdl_wait();
  const int r = threadIdx.x;
  if (r >= R) return;
  const unsigned long long w = best[r];
  next[r] = w ? static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<unsigned>(w)) : 0;
  best[r] = 0ull;
}
// The batch-1 QKV at 4 blocks per SM (ptxas: 64 registers, 4 bytes spilled) instead of the 3 its 69 registers allowed:
// up to 528 of its 768 blocks (1b) resident at once, more of its weights streamed before the wait; decode batch 1
// -0.5 / -1.5 / -0.7% per token (dense / MoC / 2:8, one H100 call, bench/micro/NOTES.md fifteenth session).
constexpr int kQkvRowBlocksPerSm = 4;
__global__ void __launch_bounds__(kThreads, kQkvRowBlocksPerSm) k_qkv_row(const Args a) { row_body<kQkv>(a); }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether `dyn` bytes of dynamic shared memory (x's rows, the QKV's norm weight) fit a block of these kernels on the
// current device: its opt-in limit (227 KB on H100 / H200, 163 KB on A100, 99 KB on many others) less a bound on
// their static shared memory (ptxas: 1.0-5.3 KB), and at most kMaxSmem. What does not fit stays with the composed
// ops (cuBLASLt), rather than failing at launch.
constexpr std::size_t kStaticSmemBound = 8 * 1024;
bool smem_fits(std::size_t dyn) { return dyn <= kMaxSmem && dyn + kStaticSmemBound <= device_limits().smem_optin; }

// Shared memory: x [R, d] (kQkv: normalized), then kQkv's norm weight [d] where it is staged before the wait beside x
// (norm_early 1; 2: in x's place).
template <int EPI>
void launch(cudaStream_t st, const Args& a) {
  const std::size_t smem =
      static_cast<std::size_t>(a.R + (EPI == kQkv && a.norm_early == 1 ? 1 : 0)) * a.d * sizeof(bf16);
  if (a.R == 1) {
    const dim3 grid(static_cast<unsigned>(ceil_div(a.units, EPI == kQkv ? kWarps / 2 : kWarps)));
    auto kernel = EPI == kQkv ? k_qkv_row : EPI == kArgmax ? k_head_row : k_gemv_row;
    allow_smem(kernel, smem);
    launch_pdl(kRowNames[EPI], kernel, grid, dim3(kThreads), smem, st, a);
    return;
  }
  const dim3 grid(static_cast<unsigned>(std::max(1, std::min(a.tiles, kBlocksPerSm * device_limits().sms))));
  auto kernel = EPI == kQkv ? k_qkv_mma : EPI == kArgmax ? k_head_mma : k_gemv_mma;
  allow_smem(kernel, smem);
  launch_pdl(kMmaNames[EPI], kernel, grid, dim3(kThreads), smem, st, a);
}

// The plain GEMV's arguments (gemv_rows; the LM head's adds its argmax words): out = alpha x W^T + beta out.
Args plain_args(const Tensor& x, const Tensor& w, Tensor& out, float alpha, float beta) {
  Args g{};
  g.x = x.data<bf16>();
  g.w0 = g.w1 = g.w2 = w.data<bf16>();
  g.n = g.n0 = static_cast<int>(w.rows());
  g.n1 = 0;
  g.R = static_cast<int>(x.rows());
  g.d = static_cast<int>(x.cols());
  g.tiles = (g.n + 7) / 8;  // gemv8_body's tiles of 8 weight rows
  g.units = g.n;
  g.early = w.tag().category == MemCategory::weights ? 1 : 0;
  g.out = out.raw();
  g.out_f32 = out.dtype() == DType::f32 ? 1 : 0;
  g.alpha = alpha;
  g.beta = beta;
  return g;
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
  if (n > (std::int64_t(1) << 30) || !gemv::smem_fits(static_cast<std::size_t>(m * k) * sizeof(__nv_bfloat16)))
    return false;
  return gemv::aligned16(a.raw()) && gemv::aligned16(b.raw());
}

void gemv_rows(cudaStream_t st, const Tensor& a, const Tensor& b, Tensor& c, float alpha, float beta) {
  gemv::launch<gemv::kStore>(st, gemv::plain_args(a, b, c, alpha, beta));
}

bool gemv_rows_argmax(cudaStream_t st, const Tensor& x, const Tensor& w, Tensor& logits, Tensor& next, void* best) {
  if (logits.dtype() != DType::f32 || logits.rank() != 2 || !gemv_rows_fits(x, false, w, true, logits)) return false;
  if (logits.rows() != x.rows() || logits.cols() != w.rows()) return false;
  if (next.dtype() != DType::i32 || next.numel() != x.rows() || !best) return false;
  if (w.rows() > (std::int64_t(1) << 31) - 1) return false;  // a column's complement in 32 bits
  gemv::Args g = gemv::plain_args(x, w, logits, 1.0f, 0.0f);
  g.best = static_cast<unsigned long long*>(best);
  gemv::launch<gemv::kArgmax>(st, g);
  launch_pdl("k_argmax_finish", gemv::k_argmax_finish, dim3(1), dim3(32), 0, st, g.best, g.R,
             next.data<std::int32_t>());
  return true;
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
  // hd % 16: a tile pairs 8 rows of a head with their RoPE partners hd/2 further.
  if (b < 1 || b > gemv::kMaxRows || d % 8 != 0 || hd % 16 != 0 || hd / 2 > gemv::kRopeTable) return false;
  if (!gemv::smem_fits(static_cast<std::size_t>((b + 1) * d) * sizeof(__nv_bfloat16))) return false;  // x, norm w
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
  g.R = static_cast<int>(b);
  g.d = static_cast<int>(d);
  g.tiles = g.n / gemv::kGroup;
  g.units = g.n / 2;
  g.norm_early = norm_w.tag().category == MemCategory::weights ? 1 : 0;
  // One row of x: the norm weight in x's place, x normalized over it from registers (half the shared memory).
  if (g.norm_early && b == 1 && d <= gemv::kNormInPlaceMaxD) g.norm_early = 2;
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
  gemv::launch<gemv::kQkv>(st, g);
  return true;
}

}  // namespace moc::cuda

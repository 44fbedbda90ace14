// Decode-time FFN kernels (Ops::ffn_decode): dense GEMVs and the MoC pipeline (gate GEMV fused with the
// row top-K or a:b selection, then the up/down projection over the union of the rows' kept channels).
// The design is described in ffn_decode.cuh. Weights are [d_ffn, d] (channel j = one contiguous row).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace ffn {
namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;  // every kernel here runs 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 16;     // channels per block: the M of one mma tile
constexpr int kMaxRows = 8;    // rows per chunk: the N of one mma tile
constexpr int kTile = 32;      // columns one warp covers per mma step (4 lanes x 8 bf16)
constexpr int kCluster = 8;    // blocks whose partial outputs are reduced in distributed shared memory
constexpr int kDownCols = kThreads * 8;  // columns of one pass of the down projection (8 per thread)

// Workspace counters, one 128-byte line each (same-address atomics serialize in L2, so arrivals are spread
// over sub-counters): line 0 the gate kernel's final counter, lines 1..32 its sub-counters, lines 40..47 the
// up/down kernel's column-slice counters.
constexpr int kLine = 32;  // u32 per line
constexpr int kSubCounters = 32;
constexpr int kBins = 2048;  // first-level histogram of block_topk_hist11 (the keys' top 11 bits)
constexpr int kSliceLine = 40;
constexpr std::size_t kCtrlBytes = 48 * kLine * 4;

enum GateMode : int { kGateOnly = 0, kGateTopK = 1, kGateGroupLocal = 2, kGateGroupLast = 3 };
enum ChannelMode : int { kAllChannels = 0, kListChannels = 1, kMaskChannels = 2 };

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t(15); }
inline std::size_t align256(std::size_t n) { return (n + 255) & ~std::size_t(255); }

// ---------------------------------------------------------------------------------------------------------
// Device helpers

// Weights are read once per call: no L1 allocation, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
// x is small and read by every block: cached.
__device__ __forceinline__ uint4 ld_x(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// D = A(16x16, row) * B(16x8, col) + D, bf16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// One 32-column tile: lane (g = lane/4, q = lane%4) holds 8 consecutive columns [8q, 8q+8) of channel g (a),
// of channel g+8 (b) and of x row g (x). The reduction order over k does not matter, so the same
// column-to-k assignment in A and B makes two m16n8k16 steps compute the 16 x 8 block of dot products:
// c[0], c[1] = (channel g, rows 2q, 2q+1), c[2], c[3] = (channel g+8, rows 2q, 2q+1).
__device__ __forceinline__ void mma_tile(float (&c)[4], const uint4& a, const uint4& b, const uint4& x) {
  mma16816(c, a.x, b.x, a.y, b.y, x.x, x.y);
  mma16816(c, a.z, b.z, a.w, b.w, x.z, x.w);
}
// Where the dot product of (slot s, row r) sits after mma_tile: lane and register.
__device__ __forceinline__ int c_lane(int s, int r) { return (s & 7) * 4 + (r >> 1); }
__device__ __forceinline__ int c_reg(int s, int r) { return ((s >> 3) << 1) | (r & 1); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Programmatic dependent launch: wait for the previous kernel's results / let the next kernel start.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// Same formula and rounding as the CPU twin's silu.
__device__ __forceinline__ float silu_f(float g) { return g * (1.0f / (1.0f + expf(-g))); }

__device__ __forceinline__ unsigned warp_incl_scan(unsigned v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}
// Inclusive suffix sum over lanes: lane l gets sum over lanes >= l.
__device__ __forceinline__ unsigned warp_suffix_scan(unsigned v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned t = __shfl_down_sync(0xffffffffu, v, o);
    if (lane + o < 32) v += t;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Block-wide selection (one block of kThreads): used by the gate kernel's last block and by the one-block
// kernels of the generic path. Works on the fp32 gate values G [R, Fp] (row stride Fp, a multiple of 128).
//
// Row top-K without global atomics (block_topk, Options::select 1 and 2; the default is block_topk_hist11
// below): (1) the finite range of each row's ranking values, (2) a histogram of kLinBins linear buckets
// over that range (monotone, so whole buckets are above or below the K-th value; a Gaussian-like row puts
// ~0.1% of its channels in the fullest bucket, so the shared-memory atomics hardly collide), (3) channels of
// buckets above the threshold bucket are kept, those of the threshold bucket are candidates, (4) candidates
// are ranked directly when few (ties to the lower channel), else by radix passes over their 32-bit keys.

constexpr int kLinBins = 1024;
constexpr int kRankMax = 256;  // candidates ranked pairwise; more go through the radix passes
constexpr unsigned kKeyNegInf = 0x007fffffu, kKeyPosInf = 0xff800000u;

struct RowInfo {
  unsigned kmin, kmax;  // finite key range
  float vmin, scale;    // linear buckets: b = clamp((v - vmin) * scale, 0, kLinBins - 1)
  unsigned tb;          // threshold bucket (bin of the top 11 key bits in block_topk_hist11)
  unsigned need;        // channels still to take (of the threshold bucket, then of the radix prefix)
  unsigned cnt;         // channels in the threshold bucket (block_topk_hist11)
  unsigned all;         // 1: every channel of the threshold bucket is kept
  unsigned ncand;       // channels in the threshold bucket (candidates)
  unsigned P, known;    // radix fallback: known bits of the K-th key and their mask
  unsigned cntT;        // radix fallback: channels whose key equals the K-th key
  unsigned radix;       // 1: this row resolves its candidates by radix passes
};

struct SelScratch {
  unsigned* sel;          // [R, Wp] kept-channel bits
  unsigned* tie;          // [R, Wp] channels whose key equals the threshold key (radix fallback)
  unsigned* ckey;         // [R, cap] candidate keys
  unsigned short* cidx;   // [R, cap] candidate channels
  unsigned* rhist;        // [R, kLinBins] histogram
  RowInfo* info;          // [kMaxRows]
  unsigned* scan;         // [kWarps, 16] scan scratch
};

__host__ __device__ inline std::size_t sel_scratch_bytes(int R, int Wp, int cap) {
  const auto r = static_cast<std::size_t>(R);
  return 2 * align16(r * static_cast<std::size_t>(Wp) * 4) + align16(r * static_cast<std::size_t>(cap) * 4) +
         align16(r * static_cast<std::size_t>(cap) * 2) + align16(r * kLinBins * 4) +
         align16(kMaxRows * sizeof(RowInfo)) + align16(kWarps * 16 * 4);
}

__device__ SelScratch carve(unsigned char* p, int R, int Wp, int cap) {
  SelScratch s;
  const auto r = static_cast<std::size_t>(R);
  s.sel = reinterpret_cast<unsigned*>(p);
  p += align16(r * Wp * 4);
  s.tie = reinterpret_cast<unsigned*>(p);
  p += align16(r * Wp * 4);
  s.ckey = reinterpret_cast<unsigned*>(p);
  p += align16(r * cap * 4);
  s.cidx = reinterpret_cast<unsigned short*>(p);
  p += align16(r * cap * 2);
  s.rhist = reinterpret_cast<unsigned*>(p);
  p += align16(r * kLinBins * 4);
  s.info = reinterpret_cast<RowInfo*>(p);
  p += align16(kMaxRows * sizeof(RowInfo));
  s.scan = reinterpret_cast<unsigned*>(p);
  return s;
}

// The value a channel is ranked by, NaN as -inf and -0 as +0, and its order-preserving key.
__device__ __forceinline__ float rank_value(float g, int rule) {
  float v = g;
  if (rule == static_cast<int>(SelectRule::silu)) v = silu_f(g);
  if (rule == static_cast<int>(SelectRule::abs_silu)) v = fabsf(silu_f(g));
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  return v;
}
__device__ __forceinline__ unsigned key_of(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float value_of(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
__device__ __forceinline__ unsigned sel_key(float g, int rule) { return key_of(rank_value(g, rule)); }
__device__ __forceinline__ int lin_bucket(float v, float vmin, float scale) {
  const float t = fminf(fmaxf((v - vmin) * scale, 0.0f), static_cast<float>(kLinBins - 1));  // NaN -> 0
  return static_cast<int>(t);
}

// Calls fn(r, cc, values) for every 128-channel chunk of every row (lane l holds channels 4l..4l+3 of the
// chunk), eight chunks of loads in flight per warp. fn runs warp-uniformly.
template <class Fn>
__device__ __forceinline__ void for_row_chunks(const float* G, int Fp, int R, Fn&& fn) {
  constexpr int kUnroll = 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per_row = Fp / 128, total = R * per_row;
  for (int c0 = warp; c0 < total; c0 += kWarps * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c < total) {
        const int r = c / per_row, cc = c - r * per_row;
        v[u] = __ldcg(reinterpret_cast<const float4*>(G + static_cast<std::size_t>(r) * Fp + cc * 128) + lane);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < total) {
        const int r = c / per_row, cc = c - r * per_row;
        const float vals[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        fn(r, cc, vals);
      }
    }
  }
}

// From the per-row kept bits: idx_out rows (ascending), and the union list (channel | row mask << 16,
// ascending) with its length in *ucount. Ends with a barrier.
__device__ void block_emit(const SelScratch& s, int R, int Wp, std::uint16_t* idx_out, int kept, unsigned* list,
                           unsigned* ucount) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wpt = (Wp + kThreads - 1) / kThreads;
  const int w0 = min(Wp, tid * wpt), w1 = min(Wp, w0 + wpt);
  unsigned cnt[kMaxRows + 1];
#pragma unroll
  for (int r = 0; r <= kMaxRows; ++r) cnt[r] = 0;
  for (int w = w0; w < w1; ++w) {
    unsigned u = 0;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) {
        const unsigned v = s.sel[r * Wp + w];
        cnt[r] += __popc(v);
        u |= v;
      }
    cnt[kMaxRows] += __popc(u);
  }
  unsigned excl[kMaxRows + 1];
#pragma unroll
  for (int r = 0; r <= kMaxRows; ++r) {
    const unsigned incl = warp_incl_scan(cnt[r], lane);
    if (lane == 31) s.scan[warp * 16 + r] = incl;
    excl[r] = incl - cnt[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r <= kMaxRows; ++r)
    for (int w = 0; w < warp; ++w) excl[r] += s.scan[w * 16 + r];
  if (tid == kThreads - 1 && ucount) *ucount = excl[kMaxRows] + cnt[kMaxRows];
  if (idx_out) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= R) break;
      unsigned pos = excl[r];
      for (int w = w0; w < w1; ++w) {
        unsigned v = s.sel[r * Wp + w];
        while (v) {
          const int b = __ffs(v) - 1;
          v &= v - 1;
          if (pos < static_cast<unsigned>(kept))
            idx_out[static_cast<std::size_t>(r) * kept + pos] = static_cast<std::uint16_t>(w * 32 + b);
          ++pos;
        }
      }
    }
  }
  if (list) {
    unsigned pos = excl[kMaxRows];
    for (int w = w0; w < w1; ++w) {
      unsigned rows[kMaxRows];
      unsigned u = 0;
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        rows[r] = r < R ? s.sel[r * Wp + w] : 0u;
        u |= rows[r];
      }
      while (u) {
        const int b = __ffs(u) - 1;
        u &= u - 1;
        unsigned m = 0;
#pragma unroll
        for (int r = 0; r < kMaxRows; ++r) m |= ((rows[r] >> b) & 1u) << r;
        list[pos++] = static_cast<unsigned>(w * 32 + b) | (m << 16);
      }
    }
  }
  __syncthreads();
}

// Row top-K of every row of G: the kept bits go to s.sel (ties at the K-th value to the lower channels).
// plain_hist: bucket counts with one shared atomic per channel (lanes of a warp that share lane 0's bucket add
// once) instead of __match_any_sync aggregation (the default, measured; see bench/micro/NOTES.md).
__device__ void block_topk(const float* G, int Fp, int R, int F, int K, int rule, const SelScratch& s, int Wp,
                           int cap, bool plain_hist) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < R * kLinBins; i += kThreads) s.rhist[i] = 0;
  for (int i = tid; i < R * Wp; i += kThreads) s.tie[i] = 0;
  if (tid < kMaxRows) {
    RowInfo& in = s.info[tid];
    in.kmin = 0xffffffffu;
    in.kmax = 0u;
    in.ncand = 0;
    in.radix = 0;
  }
  __syncthreads();
  // 1. Finite range of each row.
  for_row_chunks(G, Fp, R, [&](int r, int cc, const float (&v)[4]) {
    unsigned kmn = 0xffffffffu, kmx = 0u;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned key = key_of(rank_value(v[e], rule));
      if (cc * 128 + lane * 4 + e < F && key > kKeyNegInf && key < kKeyPosInf) {
        kmn = min(kmn, key);
        kmx = max(kmx, key);
      }
    }
    kmn = __reduce_min_sync(0xffffffffu, kmn);
    kmx = __reduce_max_sync(0xffffffffu, kmx);
    if (lane == 0) {
      atomicMin(&s.info[r].kmin, kmn);
      atomicMax(&s.info[r].kmax, kmx);
    }
  });
  __syncthreads();
  if (tid < R) {
    RowInfo& in = s.info[tid];
    float vmin = 0.f, vmax = 0.f;
    if (in.kmin <= in.kmax) {
      vmin = value_of(in.kmin);
      vmax = value_of(in.kmax);
    }
    const float range = vmax - vmin;
    in.vmin = vmin;
    in.scale = range > 0.f ? static_cast<float>(kLinBins) / range : 0.f;
  }
  __syncthreads();
  // 2. Bucket histogram (lanes of a warp that fall in one bucket add once).
  for_row_chunks(G, Fp, R, [&](int r, int cc, const float (&v)[4]) {
    const float vmin = s.info[r].vmin, scale = s.info[r].scale;
    unsigned* h = s.rhist + r * kLinBins;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool valid = cc * 128 + lane * 4 + e < F;
      const int b = valid ? lin_bucket(rank_value(v[e], rule), vmin, scale) : -1 - lane;
      if (plain_hist) {
        const int b0 = __shfl_sync(0xffffffffu, b, 0);
        const unsigned same = __ballot_sync(0xffffffffu, valid && b == b0);
        if (valid) {
          if (b != b0) atomicAdd(&h[b], 1u);
          else if (lane == __ffs(same) - 1) atomicAdd(&h[b0], static_cast<unsigned>(__popc(same)));
        }
      } else {
        const unsigned peers = __match_any_sync(0xffffffffu, b);
        if (valid && lane == __ffs(peers) - 1) atomicAdd(&h[b], static_cast<unsigned>(__popc(peers)));
      }
    }
  });
  __syncthreads();
  // 3. Threshold bucket per row: warp r scans row r's histogram from the top (lane l: buckets [32l, 32l+32)).
  if (warp < R) {
    const unsigned* h = s.rhist + warp * kLinBins;
    unsigned sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint4 q = reinterpret_cast<const uint4*>(h + lane * 32)[i];
      sum += q.x + q.y + q.z + q.w;
    }
    const unsigned suf = warp_suffix_scan(sum, lane);
    const int L = 31 - __clz(__ballot_sync(0xffffffffu, suf >= static_cast<unsigned>(K)));
    const unsigned above_lane = __shfl_sync(0xffffffffu, suf - sum, L);
    const unsigned c = h[L * 32 + lane];
    const unsigned suf2 = warp_suffix_scan(c, lane) + above_lane;
    const int b = 31 - __clz(__ballot_sync(0xffffffffu, suf2 >= static_cast<unsigned>(K)));
    if (lane == b) {
      RowInfo& in = s.info[warp];
      in.tb = static_cast<unsigned>(L * 32 + b);
      in.need = static_cast<unsigned>(K) - (suf2 - c);
      in.all = c == in.need ? 1u : 0u;
    }
  }
  __syncthreads();
  // 4. Channels above the threshold bucket are kept (bits built with shuffles); its own channels become
  //    candidates (slots taken once per warp and element).
  for_row_chunks(G, Fp, R, [&](int r, int cc, const float (&v)[4]) {
    const float vmin = s.info[r].vmin, scale = s.info[r].scale;
    const int tb = static_cast<int>(s.info[r].tb);
    const bool all = s.info[r].all != 0;
    unsigned nib = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = cc * 128 + lane * 4 + e;
      const float val = rank_value(v[e], rule);
      const int b = j < F ? lin_bucket(val, vmin, scale) : -1;
      if (b > tb || (b == tb && all)) nib |= 1u << e;
      const bool cand = b == tb && !all;
      const unsigned m = __ballot_sync(0xffffffffu, cand);
      if (m) {
        const int leader = __ffs(m) - 1;
        unsigned base = 0;
        if (lane == leader) base = atomicAdd(&s.info[r].ncand, static_cast<unsigned>(__popc(m)));
        base = __shfl_sync(0xffffffffu, base, leader);
        const unsigned slot = base + __popc(m & ((1u << lane) - 1u));
        if (cand && slot < static_cast<unsigned>(cap)) {
          s.ckey[r * cap + slot] = key_of(val);
          s.cidx[r * cap + slot] = static_cast<unsigned short>(j);
        }
      }
    }
    unsigned word = nib << (4 * (lane & 7));
    word |= __shfl_xor_sync(0xffffffffu, word, 1);
    word |= __shfl_xor_sync(0xffffffffu, word, 2);
    word |= __shfl_xor_sync(0xffffffffu, word, 4);
    if ((lane & 7) == 0) s.sel[r * Wp + cc * 4 + (lane >> 3)] = word;
  });
  __syncthreads();
  // 5. Few candidates: rank each directly against the others (larger key first, then the lower channel).
  bool any_radix = false;
  for (int r = 0; r < R; ++r) {
    const RowInfo in = s.info[r];
    if (in.all) continue;
    if (in.ncand > static_cast<unsigned>(kRankMax)) {
      any_radix = true;
      continue;
    }
    const unsigned* ck = s.ckey + r * cap;
    const unsigned short* ci = s.cidx + r * cap;
    for (int i = tid; i < static_cast<int>(in.ncand); i += kThreads) {
      const unsigned key = ck[i];
      const int j = ci[i];
      unsigned rank = 0;
      for (int m = 0; m < static_cast<int>(in.ncand); ++m) {
        const unsigned km = ck[m];
        rank += (km > key || (km == key && ci[m] < j)) ? 1u : 0u;
      }
      if (rank < in.need) atomicOr(&s.sel[r * Wp + (j >> 5)], 1u << (j & 31));
    }
  }
  if (any_radix) {
    // Many candidates (near-constant rows): radix passes over their keys, 8 bits at a time, from the list
    // or, when it overflowed, from the whole row.
    __syncthreads();
    if (tid < R) {
      RowInfo& in = s.info[tid];
      in.radix = (!in.all && in.ncand > static_cast<unsigned>(kRankMax)) ? 1u : 0u;
      in.P = 0;
      in.known = 0;
    }
    __syncthreads();
    auto for_cands = [&](int r, const RowInfo& in, auto&& fn) {
      if (in.ncand <= static_cast<unsigned>(cap)) {
        for (int i = tid; i < static_cast<int>(in.ncand); i += kThreads) fn(s.ckey[r * cap + i], static_cast<int>(s.cidx[r * cap + i]));
      } else {
        for (int j = tid; j < F; j += kThreads) {
          const float val = rank_value(__ldcg(G + static_cast<std::size_t>(r) * Fp + j), rule);
          if (lin_bucket(val, in.vmin, in.scale) == static_cast<int>(in.tb)) fn(key_of(val), j);
        }
      }
    };
#pragma unroll 1
    for (int pass = 0; pass < 4; ++pass) {
      const int shift = 24 - 8 * pass;
      for (int i = tid; i < R * 256; i += kThreads) s.rhist[i] = 0;
      __syncthreads();
      for (int r = 0; r < R; ++r) {
        const RowInfo in = s.info[r];
        if (!in.radix) continue;
        unsigned* rh = s.rhist + r * 256;
        for_cands(r, in, [&](unsigned key, int) {
          if ((key & in.known) == in.P) atomicAdd(&rh[(key >> shift) & 0xffu], 1u);
        });
      }
      __syncthreads();
      if (warp < R && s.info[warp].radix) {
        const unsigned* rh = s.rhist + warp * 256 + lane * 8;
        unsigned h[8], sum = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          h[e] = rh[e];
          sum += h[e];
        }
        const unsigned need = s.info[warp].need;
        const unsigned suf = warp_suffix_scan(sum, lane);
        const int L = 31 - __clz(__ballot_sync(0xffffffffu, suf >= need));
        const unsigned above = __shfl_sync(0xffffffffu, suf - sum, L);
        if (lane == L) {
          unsigned run = above, dig = 0, nneed = need, cnt = 0;
          bool found = false;
#pragma unroll
          for (int e = 7; e >= 0; --e)
            if (!found) {
              if (run + h[e] >= need) {
                found = true;
                dig = static_cast<unsigned>(L * 8 + e);
                nneed = need - run;
                cnt = h[e];
              } else {
                run += h[e];
              }
            }
          RowInfo& in = s.info[warp];
          in.P |= dig << shift;
          in.known |= 0xffu << shift;
          in.need = nneed;
          in.cntT = cnt;
        }
      }
      __syncthreads();
    }
    // Keys above the K-th key are kept; those equal to it are ties.
    for (int r = 0; r < R; ++r) {
      const RowInfo in = s.info[r];
      if (!in.radix) continue;
      unsigned* sel = s.sel + r * Wp;
      unsigned* tie = s.tie + r * Wp;
      for_cands(r, in, [&](unsigned key, int j) {
        if (key > in.P) atomicOr(&sel[j >> 5], 1u << (j & 31));
        else if (key == in.P) atomicOr(&tie[j >> 5], 1u << (j & 31));
      });
    }
    __syncthreads();
    // Ties: the `need` lowest channels among those equal to the K-th key.
    if (warp < R && s.info[warp].radix) {
      const unsigned need = s.info[warp].need, cntT = s.info[warp].cntT;
      unsigned* sel = s.sel + warp * Wp;
      const unsigned* tie = s.tie + warp * Wp;
      if (cntT == need) {
        for (int w = lane; w < Wp; w += 32) sel[w] |= tie[w];
      } else {
        unsigned base = 0;
        for (int w0 = 0; w0 < Wp; w0 += 32) {
          const int w = w0 + lane;
          const unsigned t = w < Wp ? tie[w] : 0u;
          const unsigned c = __popc(t);
          const unsigned incl = warp_incl_scan(c, lane);
          const unsigned before = base + incl - c;
          if (t && before < need) {
            const unsigned take = min(c, need - before);
            unsigned keep = 0, tt = t;
            for (unsigned n = 0; n < take; ++n) {
              const unsigned low = tt & (0u - tt);
              keep |= low;
              tt ^= low;
            }
            sel[w] |= keep;
          }
          base += __shfl_sync(0xffffffffu, incl, 31);
        }
      }
    }
  }
  __syncthreads();
}

// Row top-K, the default of the fast path: from the first-level histogram `hist` [R, kBins] of the keys' top
// 11 bits (built with global atomics by the gate epilogue): threshold bin, candidates of that bin, radix
// passes over their remaining 21 bits. Writes the kept bits into s.sel (ties at the K-th key to the lower
// channels). Measured faster than block_topk (linear buckets) on the H100 (bench/micro/NOTES.md).
__device__ void block_topk_hist11(const float* G, int Fp, const unsigned* hist, int R, int F, int K, int rule,
                                  const SelScratch& s, int Wp, int cap) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < R * Wp; i += kThreads) s.tie[i] = 0;
  // 1. Threshold bin per row (warp r scans row r's histogram from the top).
  if (warp < R) {
    const unsigned* h = hist + static_cast<std::size_t>(warp) * kBins + lane * 64;
    unsigned sum = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint4 v = __ldcg(reinterpret_cast<const uint4*>(h) + i);
      sum += v.x + v.y + v.z + v.w;
    }
    const unsigned suf = warp_suffix_scan(sum, lane);
    const unsigned ball = __ballot_sync(0xffffffffu, suf >= static_cast<unsigned>(K));
    const int L = 31 - __clz(ball);
    const unsigned above = __shfl_sync(0xffffffffu, suf - sum, L);
    if (lane == L) {
      unsigned run = above, tb = 0, need = 0, cnt = 0;
      bool found = false;
      for (int i = 15; i >= 0; --i) {
        const uint4 v = __ldcg(reinterpret_cast<const uint4*>(h) + i);
        const unsigned c[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 3; e >= 0; --e)
          if (!found) {
            if (run + c[e] >= static_cast<unsigned>(K)) {
              found = true;
              tb = static_cast<unsigned>(L * 64 + i * 4 + e);
              need = static_cast<unsigned>(K) - run;
              cnt = c[e];
            } else {
              run += c[e];
            }
          }
      }
      RowInfo& in = s.info[warp];
      in.tb = tb;
      in.need = need;
      in.cnt = cnt;
      in.all = cnt == need ? 1u : 0u;
      in.ncand = 0;
      in.P = tb << 21;
      in.known = 0xffe00000u;
      in.cntT = cnt;
    }
  }
  __syncthreads();
  // 2. One pass over G: channels above the threshold bin are kept (bits built with shuffles), those in it
  //    become candidates.
  {
    constexpr int kUnroll = 8;
    const int per_row = Fp / 128, total = R * per_row;
    for (int c0 = warp; c0 < total; c0 += kWarps * kUnroll) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarps;
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < total) {
          const int r = c / per_row, cc = c - r * per_row;
          v[u] = __ldcg(reinterpret_cast<const float4*>(G + static_cast<std::size_t>(r) * Fp + cc * 128) + lane);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarps;
        if (c < total) {
          const int r = c / per_row, cc = c - r * per_row;
          const unsigned tb = s.info[r].tb;
          const bool all = s.info[r].all != 0;
          const float gv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
          unsigned nib = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = cc * 128 + lane * 4 + e;
            if (j < F) {
              const unsigned key = sel_key(gv[e], rule);
              const unsigned bin = key >> 21;
              if (bin > tb || (bin == tb && all)) {
                nib |= 1u << e;
              } else if (bin == tb) {
                const unsigned slot = atomicAdd(&s.info[r].ncand, 1u);
                if (slot < static_cast<unsigned>(cap)) {
                  s.ckey[r * cap + slot] = key;
                  s.cidx[r * cap + slot] = static_cast<unsigned short>(j);
                }
              }
            }
          }
          unsigned word = nib << (4 * (lane & 7));
          word |= __shfl_xor_sync(0xffffffffu, word, 1);
          word |= __shfl_xor_sync(0xffffffffu, word, 2);
          word |= __shfl_xor_sync(0xffffffffu, word, 4);
          if ((lane & 7) == 0) s.sel[r * Wp + cc * 4 + (lane >> 3)] = word;
        }
      }
    }
  }
  __syncthreads();
  // 3. Radix passes over the remaining 21 key bits of the candidates (from G when they overflowed).
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    for (int i = tid; i < R * 256; i += kThreads) s.rhist[i] = 0;
    __syncthreads();
    const int shift = pass == 0 ? 13 : pass == 1 ? 5 : 0;
    const unsigned wmask = pass == 2 ? 0x1fu : 0xffu;
    for (int r = 0; r < R; ++r) {
      const RowInfo in = s.info[r];
      if (in.all) continue;
      unsigned* rh = s.rhist + r * 256;
      if (in.ncand <= static_cast<unsigned>(cap)) {
        for (int i = tid; i < static_cast<int>(in.ncand); i += kThreads) {
          const unsigned key = s.ckey[r * cap + i];
          if ((key & in.known) == in.P) atomicAdd(&rh[(key >> shift) & wmask], 1u);
        }
      } else {
        for (int j = tid; j < F; j += kThreads) {
          const unsigned key = sel_key(__ldcg(G + static_cast<std::size_t>(r) * Fp + j), rule);
          if ((key & in.known) == in.P) atomicAdd(&rh[(key >> shift) & wmask], 1u);
        }
      }
    }
    __syncthreads();
    if (warp < R && !s.info[warp].all) {
      const unsigned* rh = s.rhist + warp * 256 + lane * 8;
      unsigned h[8], sum = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        h[e] = rh[e];
        sum += h[e];
      }
      const unsigned need = s.info[warp].need;
      const unsigned suf = warp_suffix_scan(sum, lane);
      const unsigned ball = __ballot_sync(0xffffffffu, suf >= need);
      const int L = 31 - __clz(ball);
      const unsigned above = __shfl_sync(0xffffffffu, suf - sum, L);
      if (lane == L) {
        unsigned run = above, dig = 0, nneed = need, cnt = 0;
        bool found = false;
#pragma unroll
        for (int e = 7; e >= 0; --e)
          if (!found) {
            if (run + h[e] >= need) {
              found = true;
              dig = static_cast<unsigned>(L * 8 + e);
              nneed = need - run;
              cnt = h[e];
            } else {
              run += h[e];
            }
          }
        RowInfo& in = s.info[warp];
        in.P |= dig << shift;
        in.known |= wmask << shift;
        in.need = nneed;
        in.cntT = cnt;
      }
    }
    __syncthreads();
  }
  // 4. Candidates above the K-th key are kept; those equal to it are ties.
  for (int r = 0; r < R; ++r) {
    const RowInfo in = s.info[r];
    if (in.all) continue;
    const unsigned T = in.P;
    unsigned* sel = s.sel + r * Wp;
    unsigned* tie = s.tie + r * Wp;
    if (in.ncand <= static_cast<unsigned>(cap)) {
      for (int i = tid; i < static_cast<int>(in.ncand); i += kThreads) {
        const unsigned key = s.ckey[r * cap + i];
        const int j = s.cidx[r * cap + i];
        if (key > T) atomicOr(&sel[j >> 5], 1u << (j & 31));
        else if (key == T) atomicOr(&tie[j >> 5], 1u << (j & 31));
      }
    } else {
      for (int j = tid; j < F; j += kThreads) {
        const unsigned key = sel_key(__ldcg(G + static_cast<std::size_t>(r) * Fp + j), rule);
        if (key > T) atomicOr(&sel[j >> 5], 1u << (j & 31));
        else if (key == T) atomicOr(&tie[j >> 5], 1u << (j & 31));
      }
    }
  }
  __syncthreads();
  // 5. Ties: the `need` lowest channels among those equal to the K-th key.
  if (warp < R && !s.info[warp].all) {
    const unsigned need = s.info[warp].need, cntT = s.info[warp].cntT;
    unsigned* sel = s.sel + warp * Wp;
    const unsigned* tie = s.tie + warp * Wp;
    if (cntT == need) {
      for (int w = lane; w < Wp; w += 32) sel[w] |= tie[w];
    } else {
      unsigned base = 0;
      for (int w0 = 0; w0 < Wp; w0 += 32) {
        const int w = w0 + lane;
        const unsigned t = w < Wp ? tie[w] : 0u;
        const unsigned c = __popc(t);
        const unsigned incl = warp_incl_scan(c, lane);
        const unsigned before = base + incl - c;
        if (t && before < need) {
          const unsigned take = min(c, need - before);
          unsigned keep = 0, tt = t;
          for (unsigned n = 0; n < take; ++n) {
            const unsigned low = tt & (0u - tt);
            keep |= low;
            tt ^= low;
          }
          sel[w] |= keep;
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
  }
  __syncthreads();
}

// Best `take` of len keys (larger key first, ties to the lower channel): returns the take-th best as
// (key, channel); a channel is kept iff (key > bk) || (key == bk && j <= bj).
template <class KeyAt>
__device__ void group_threshold(KeyAt key_at, int j0, int len, int take, unsigned& bk, int& bj) {
  bool have = false;
  bk = 0;
  bj = -1;
  for (int n = 0; n < take; ++n) {
    unsigned ck = 0;
    int cj = -1;
    for (int j = j0; j < j0 + len; ++j) {
      const unsigned key = key_at(j);
      const bool after_prev = !have || key < bk || (key == bk && j > bj);
      if (after_prev && (cj < 0 || key > ck)) {
        ck = key;
        cj = j;
      }
    }
    bk = ck;
    bj = cj;
    have = true;
  }
}

// a of every b channels per row, from G (any b); kept bits into s.sel.
__device__ void block_grouped(const float* G, int Fp, int R, int F, int a, int b, int rule, const SelScratch& s,
                              int Wp) {
  const int tid = threadIdx.x;
  for (int i = tid; i < R * Wp; i += kThreads) s.sel[i] = 0;
  __syncthreads();
  const int ngroups = (F + b - 1) / b;
  for (int p = tid; p < ngroups * R; p += kThreads) {
    const int r = p / ngroups, gi = p - r * ngroups;
    const int j0 = gi * b, len = min(b, F - j0), take = min(a, len);
    const float* row = G + static_cast<std::size_t>(r) * Fp;
    auto key_at = [&](int j) { return sel_key(__ldcg(row + j), rule); };
    unsigned bk;
    int bj;
    group_threshold(key_at, j0, len, take, bk, bj);
    for (int j = j0; j < j0 + len; ++j) {
      const unsigned key = key_at(j);
      if (key > bk || (key == bk && j <= bj)) atomicOr(&s.sel[r * Wp + (j >> 5)], 1u << (j & 31));
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------
// Fast path kernel 1: gate GEMV over 16 channels per block (8 warps split d), epilogue per mode.

struct GateArgs {
  const bf16* x;
  const bf16* wg;
  float* G;             // [R, Fp]
  unsigned* hist;       // [R, kBins], zeroed (top-K with Options::select 0)
  unsigned* ctrl;       // counters (last-block modes)
  unsigned* ucount;     // union length (last-block modes)
  unsigned char* mask;  // [F] row masks (a:b in the epilogue)
  unsigned* list;       // union list (last-block modes)
  std::uint16_t* idx_out;
  int R, d, F, Fp, Wp, kept, mode, k, ga, gb, rule, cap, select;
};

constexpr std::size_t kGateHeadBytes = align16(kWarps * 32 * 4 * 4 + kGroup * 8 * 4 + kGroup * 8 + 16);

// Called by one thread per block after a fence: true in the block that arrives last. Blocks arrive on 32
// sub-counters; the last arrival of each sub-counter arrives on the final one.
__device__ bool arrive_last(unsigned* ctrl) {
  const unsigned nsub = min(static_cast<unsigned>(kSubCounters), gridDim.x);
  const unsigned sub = blockIdx.x % nsub;
  const unsigned members = (gridDim.x - sub + nsub - 1) / nsub;
  if (atomicAdd(&ctrl[kLine * (1 + sub)], 1u) != members - 1) return false;
  __threadfence();
  return atomicAdd(&ctrl[0], 1u) == nsub - 1;
}

template <int U>
__global__ void __launch_bounds__(kThreads, 3) k_gate(GateArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);  // [warp][lane][4]
  float* gvs = red + kWarps * 32 * 4;           // [slot][row 8]
  unsigned char* on = reinterpret_cast<unsigned char*>(gvs + kGroup * 8);  // [slot][row 8] kept (a:b)
  int* flag = reinterpret_cast<int*>(on + kGroup * 8);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int base = blockIdx.x * kGroup;
  const int g = lane >> 2, q = lane & 3;
  const int chA = base + g, chB = base + g + 8;
  const bool okA = chA < a.F, okB = chB < a.F, xrow = g < a.R;
  const bf16* pa = a.wg + static_cast<std::size_t>(okA ? chA : 0) * a.d;
  const bf16* pb = a.wg + static_cast<std::size_t>(okB ? chB : 0) * a.d;
  const bf16* px = a.x + static_cast<std::size_t>(xrow ? g : 0) * a.d;
  const int nt = (a.d + kTile - 1) / kTile;
  const int t_beg = warp * nt / kWarps, t_end = (warp + 1) * nt / kWarps;
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int t0 = t_beg; t0 < t_end; t0 += U) {
    uint4 A[U], B[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = (t0 + u) * kTile + q * 8;
      const bool ok = t0 + u < t_end && col < a.d;
      A[u] = ok && okA ? ld_stream(pa + col) : zero;
      B[u] = ok && okB ? ld_stream(pb + col) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = (t0 + u) * kTile + q * 8;
      const bool ok = t0 + u < t_end && col < a.d;
      const uint4 X = ok && xrow ? ld_x(px + col) : zero;
      mma_tile(c, A[u], B[u], X);
    }
  }
  reinterpret_cast<float4*>(red)[warp * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
  __syncthreads();
  if (tid < kGroup * 8) {
    const int s = tid >> 3, r = tid & 7;
    const int ln = c_lane(s, r), rg = c_reg(s, r);
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[(w * 32 + ln) * 4 + rg];
    gvs[s * 8 + r] = v;
    const int ch = base + s;
    if (ch < a.F && r < a.R) {
      a.G[static_cast<std::size_t>(r) * a.Fp + ch] = v;
      if (a.mode == kGateTopK && a.select == 0) atomicAdd(&a.hist[r * kBins + (sel_key(v, a.rule) >> 21)], 1u);
    }
  }
  if (a.mode == kGateGroupLocal) {
    // a:b with b | 16: this block holds whole groups; thread (s, r) ranks channel s within its group.
    __syncthreads();
    const int s = tid >> 3, r = tid & 7, j = base + s;
    bool keep = false;
    int g0 = 0;
    if (tid < kGroup * 8 && r < a.R && j < a.F) {
      g0 = s / a.gb * a.gb;
      const int len = min(a.gb, a.F - (base + g0)), take = min(a.ga, len);
      const unsigned key = sel_key(gvs[s * 8 + r], a.rule);
      int rank = 0;
      for (int m = g0; m < g0 + len; ++m) {
        const unsigned km = sel_key(gvs[m * 8 + r], a.rule);
        rank += (km > key || (km == key && m < s)) ? 1 : 0;
      }
      keep = rank < take;
    }
    if (tid < kGroup * 8) on[tid] = keep ? 1 : 0;
    __syncthreads();
    if (keep && a.idx_out) {
      int pos = (base + g0) / a.gb * a.ga;
      for (int m = g0; m < s; ++m) pos += on[m * 8 + r];
      a.idx_out[static_cast<std::size_t>(r) * a.kept + pos] = static_cast<std::uint16_t>(j);
    }
    if (tid < kGroup && base + tid < a.F) {
      unsigned m = 0;
#pragma unroll
      for (int rr = 0; rr < 8; ++rr) m |= static_cast<unsigned>(on[tid * 8 + rr]) << rr;
      a.mask[base + tid] = static_cast<unsigned char>(m);
    }
    griddep_launch();
    return;
  }
  griddep_launch();  // the up/down kernel may start while the last block selects
  if (a.mode == kGateOnly) return;
  // Last block to finish runs the selection over every row.
  __threadfence();
  __syncthreads();
  if (tid == 0) flag[0] = arrive_last(a.ctrl) ? 1 : 0;
  __syncthreads();
  if (!flag[0]) return;
  __threadfence();
  SelScratch s = carve(smem + kGateHeadBytes, a.R, a.Wp, a.cap);
  if (a.mode == kGateTopK && a.select == 0) block_topk_hist11(a.G, a.Fp, a.hist, a.R, a.F, a.k, a.rule, s, a.Wp, a.cap);
  else if (a.mode == kGateTopK) block_topk(a.G, a.Fp, a.R, a.F, a.k, a.rule, s, a.Wp, a.cap, a.select == 2);
  else block_grouped(a.G, a.Fp, a.R, a.F, a.ga, a.gb, a.rule, s, a.Wp);
  block_emit(s, a.R, a.Wp, a.idx_out, a.kept, a.list, a.ucount);
}

// ---------------------------------------------------------------------------------------------------------
// Fast path kernel 2: up (and gate when FG) GEMV of 16 channels per block, z = SiLU(g) * u on the rows that
// kept the channel, down projection of those channels from shared memory (rows staged with cp.async while
// the up GEMV runs), partial outputs reduced over a cluster of 8 blocks, fp32 atomics into `acc`, and the
// last cluster of each column slice adds `acc` into out.

struct UpDownArgs {
  const bf16* x;
  const bf16* wg;
  const bf16* wu;
  const bf16* wd;
  bf16* out;
  const float* G;
  const unsigned char* mask;
  const unsigned* list;
  const unsigned* ucount;
  float* acc;          // [R, d] fp32, zeroed
  unsigned* slice_done;  // kCluster counters kLine apart, zeroed
  int R, d, F, Fp;
};

__host__ __device__ inline std::size_t updown_red_floats(bool fg) { return kWarps * 32 * (fg ? 8 : 4); }
__host__ __device__ inline std::size_t updown_smem_bytes(int d, int rp, bool fg) {
  const std::size_t stage = static_cast<std::size_t>(kGroup) * d * 2;
  const std::size_t part = d <= kDownCols ? 0 : static_cast<std::size_t>(rp) * d * 4;
  return align16(stage) + align16(part) + updown_red_floats(fg) * 4 + kGroup * 8 * 4 + kGroup * 4 * 2 + 16;
}

// Tiles of 32 columns in flight per warp in the up GEMV, and blocks per SM: the list mode (MoC top-K) has at
// most ~2 blocks per SM of work, so it keeps a whole 2048-wide row slice of each channel in flight.
constexpr int updown_unroll(bool fg, int mode) { return fg ? 2 : mode == kListChannels ? 8 : 4; }
constexpr int updown_min_blocks(int rp, bool fg, int mode) { return (rp >= 8 || (!fg && mode == kListChannels)) ? 2 : 3; }

template <int RP, bool FG, int MODE>
__global__ void __launch_bounds__(kThreads, updown_min_blocks(RP, FG, MODE)) k_updown(UpDownArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int d = a.d;
  bf16* stage = reinterpret_cast<bf16*>(smem);
  unsigned char* p = smem + align16(static_cast<std::size_t>(kGroup) * d * 2);
  const bool alias = d <= kDownCols;
  float* part = alias ? reinterpret_cast<float*>(smem) : reinterpret_cast<float*>(p);
  if (!alias) p += align16(static_cast<std::size_t>(RP) * d * 4);
  float* red = reinterpret_cast<float*>(p);
  float* zs = red + updown_red_floats(FG);
  int* sch = reinterpret_cast<int*>(zs + kGroup * 8);
  unsigned* smask = reinterpret_cast<unsigned*>(sch + kGroup);
  int* flag = reinterpret_cast<int*>(smask + kGroup);

  griddep_wait();  // the gate kernel's values and selection
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = blockIdx.x;
  unsigned nlist = 0;
  if constexpr (MODE == kListChannels) nlist = __ldcg(a.ucount);
  bool valid = false;
  if (tid < kGroup) {
    int ch = -1;
    unsigned m = 0;
    if constexpr (MODE == kAllChannels) {
      const int j = grp * kGroup + tid;
      if (j < a.F) {
        ch = j;
        m = (1u << a.R) - 1u;
      }
    } else if constexpr (MODE == kListChannels) {
      const unsigned i = static_cast<unsigned>(grp * kGroup + tid);
      if (i < nlist) {
        const unsigned e = __ldcg(a.list + i);
        ch = static_cast<int>(e & 0xffffu);
        m = e >> 16;
      }
    } else {
      const int j = grp * kGroup + tid;
      if (j < a.F) {
        m = __ldcg(a.mask + j);
        if (m) ch = j;
      }
    }
    sch[tid] = ch;
    smask[tid] = m;
    valid = ch >= 0;
  }
  const bool any = __syncthreads_or(valid) != 0;

  // Stage the W_down rows of this block's channels.
  if (any) {
    const int per_row = d / 8;
    for (int i = tid; i < kGroup * per_row; i += kThreads) {
      const int s = i / per_row, c8 = i - s * per_row;
      const int ch = sch[s];
      if (ch >= 0) cp_async16(stage + static_cast<std::size_t>(s) * d + c8 * 8, a.wd + static_cast<std::size_t>(ch) * d + c8 * 8);
    }
  }
  cp_async_commit();
  float gval = 0.f;
  if (!FG && tid < kGroup * 8) {
    const int s = tid >> 3, r = tid & 7;
    if (sch[s] >= 0 && r < a.R) gval = __ldcg(a.G + static_cast<std::size_t>(r) * a.Fp + sch[s]);
  }

  // Up (and gate) GEMV with mma.sync.
  const int g = lane >> 2, q = lane & 3;
  const int chA = sch[g], chB = sch[g + 8];
  const bool okA = chA >= 0, okB = chB >= 0, xrow = g < a.R;
  float cu[4] = {0.f, 0.f, 0.f, 0.f}, cgt[4] = {0.f, 0.f, 0.f, 0.f};
  if (any) {
    const std::size_t offA = static_cast<std::size_t>(okA ? chA : 0) * d, offB = static_cast<std::size_t>(okB ? chB : 0) * d;
    const bf16* px = a.x + static_cast<std::size_t>(xrow ? g : 0) * d;
    const int nt = (d + kTile - 1) / kTile;
    const int t_beg = warp * nt / kWarps, t_end = (warp + 1) * nt / kWarps;
    constexpr int U = updown_unroll(FG, MODE);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int t0 = t_beg; t0 < t_end; t0 += U) {
      uint4 A[U], B[U], GA[FG ? U : 1], GB[FG ? U : 1];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < d;
        A[u] = ok && okA ? ld_stream(a.wu + offA + col) : zero;
        B[u] = ok && okB ? ld_stream(a.wu + offB + col) : zero;
        if constexpr (FG) {
          GA[u] = ok && okA ? ld_stream(a.wg + offA + col) : zero;
          GB[u] = ok && okB ? ld_stream(a.wg + offB + col) : zero;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < d;
        const uint4 X = ok && xrow ? ld_x(px + col) : zero;
        mma_tile(cu, A[u], B[u], X);
        if constexpr (FG) mma_tile(cgt, GA[u], GB[u], X);
      }
    }
  }
  {
    float4* rv = reinterpret_cast<float4*>(red) + (warp * 32 + lane) * (FG ? 2 : 1);
    rv[0] = make_float4(cu[0], cu[1], cu[2], cu[3]);
    if constexpr (FG) rv[1] = make_float4(cgt[0], cgt[1], cgt[2], cgt[3]);
  }
  __syncthreads();
  if (tid < kGroup * 8) {
    const int s = tid >> 3, r = tid & 7;
    const int ln = c_lane(s, r), rg = c_reg(s, r);
    constexpr int kStride = FG ? 8 : 4;
    float u = 0.f, gv = gval;
    if constexpr (FG) gv = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      u += red[(w * 32 + ln) * kStride + rg];
      if constexpr (FG) gv += red[(w * 32 + ln) * kStride + 4 + rg];
    }
    const bool on = sch[s] >= 0 && r < a.R && ((smask[s] >> r) & 1u);
    zs[s * 8 + r] = on ? silu_f(gv) * u : 0.f;
  }
  cp_async_wait_all();
  __syncthreads();

  // Down projection of the staged rows: thread t owns columns [8t, 8t + 8) of each 2048-column pass.
  const int npass = (d + kDownCols - 1) / kDownCols;
  for (int ps = 0; ps < npass; ++ps) {
    const int c = ps * kDownCols + tid * 8;
    float acc[RP][8];
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    if (any && c < d) {
#pragma unroll
      for (int s = 0; s < kGroup; ++s) {
        if (sch[s] < 0) continue;
        const uint4 w = *reinterpret_cast<const uint4*>(stage + static_cast<std::size_t>(s) * d + c);
        const float wf[8] = {bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y), bf_lo(w.z), bf_hi(w.z), bf_lo(w.w), bf_hi(w.w)};
#pragma unroll
        for (int r = 0; r < RP; ++r) {
          const float z = zs[s * 8 + r];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(z, wf[e], acc[r][e]);
        }
      }
    }
    if (alias) __syncthreads();
    if (c < d) {
#pragma unroll
      for (int r = 0; r < RP; ++r)
        if (r < a.R) {
          float4* dst = reinterpret_cast<float4*>(part + static_cast<std::size_t>(r) * d + c);
          dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
          dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        }
    }
  }

  // Cluster reduction: block `rank` sums column slice `rank` over the 8 blocks' partials.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cs = d / kCluster, c0 = rank * cs;
  bool work = true;
  if constexpr (MODE == kListChannels)
    work = static_cast<unsigned>((blockIdx.x / kCluster) * kCluster * kGroup) < nlist;
  if (work) {
    const float* parts[kCluster];
#pragma unroll
    for (int k = 0; k < kCluster; ++k) parts[k] = cluster.map_shared_rank(part, k);
    if (cs % 4 == 0) {
      const int n4 = cs / 4;
      for (int i = tid; i < a.R * n4; i += kThreads) {
        const int r = i / n4, cc = c0 + (i - r * n4) * 4;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < kCluster; ++k) {
          const float4 v = *reinterpret_cast<const float4*>(parts[k] + static_cast<std::size_t>(r) * d + cc);
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        atomicAdd(reinterpret_cast<float4*>(a.acc + static_cast<std::size_t>(r) * d + cc), sum);
      }
    } else {
      for (int i = tid; i < a.R * cs; i += kThreads) {
        const int r = i / cs, cc = c0 + (i - r * cs);
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < kCluster; ++k) sum += parts[k][static_cast<std::size_t>(r) * d + cc];
        atomicAdd(a.acc + static_cast<std::size_t>(r) * d + cc, sum);
      }
    }
  }
  cluster.sync();  // remote shared memory stays alive until every block has read it
  __threadfence();
  __syncthreads();
  if (tid == 0) flag[0] = atomicAdd(a.slice_done + rank * kLine, 1u) == gridDim.x / kCluster - 1 ? 1 : 0;
  __syncthreads();
  if (!flag[0]) return;
  __threadfence();
  for (int i = tid; i < a.R * cs; i += kThreads) {
    const int r = i / cs, cc = c0 + (i - r * cs);
    const std::size_t o = static_cast<std::size_t>(r) * d + cc;
    a.out[o] = __float2bfloat16_rn(__bfloat162float(a.out[o]) + __ldcg(a.acc + o));
  }
}

// ---------------------------------------------------------------------------------------------------------
// One-block kernels: the union list from force_idx, and the selection of the generic path.

__global__ void __launch_bounds__(kThreads) k_force_list(const std::uint16_t* force, int R, int F, int kept, int Wp,
                                                         unsigned* list, unsigned* ucount) {
  extern __shared__ __align__(16) unsigned char smem[];
  griddep_launch();
  SelScratch s = carve(smem, R, Wp, 0);
  for (int i = threadIdx.x; i < R * Wp; i += kThreads) s.sel[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < R * kept; i += kThreads) {
    const int r = i / kept, j = force[i];
    if (j < F) atomicOr(&s.sel[r * Wp + (j >> 5)], 1u << (j & 31));
  }
  __syncthreads();
  block_emit(s, R, Wp, nullptr, kept, list, ucount);
}

__global__ void __launch_bounds__(kThreads) k_select(GateArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  SelScratch s = carve(smem, a.R, a.Wp, a.cap);
  if (a.mode == kGateTopK) block_topk(a.G, a.Fp, a.R, a.F, a.k, a.rule, s, a.Wp, a.cap, false);
  else block_grouped(a.G, a.Fp, a.R, a.F, a.ga, a.gb, a.rule, s, a.Wp);
  block_emit(s, a.R, a.Wp, a.idx_out, a.kept, a.list, a.ucount);
}

// ---------------------------------------------------------------------------------------------------------
// Generic path (f32 tensors, d % 8 != 0, unaligned views, very wide d): simple and correct.

template <class T>
__device__ __forceinline__ void warp_dots(const T* x, const T* w, int R, int d, float (&acc)[kMaxRows]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = 0.f;
  for (int c = lane; c < d; c += 32) {
    const float wv = to_f32(w[c]);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) acc[r] = fmaf(to_f32(x[static_cast<std::size_t>(r) * d + c]), wv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
}

template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_gate(const T* x, const T* wg, float* G, int R, int d, int F,
                                                       int Fp) {
  const int j = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (j >= F) return;
  float acc[kMaxRows];
  warp_dots(x, wg + static_cast<std::size_t>(j) * d, R, d, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) G[static_cast<std::size_t>(r) * Fp + j] = acc[r];
  }
}

// z[slot, row] = SiLU(g) * u on the rows that kept the slot's channel. mode: 0 all channels (gate computed),
// 1 list (gate computed), 2 list (gate from G).
template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_z(const T* x, const T* wg, const T* wu, const float* G,
                                                    const unsigned* list, const unsigned* ucount, float* z, int R,
                                                    int d, int F, int Fp, int mode) {
  const int s = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int n = mode == 0 ? F : static_cast<int>(*ucount);
  if (s >= n) return;
  int j = s;
  unsigned m = (1u << R) - 1u;
  if (mode != 0) {
    const unsigned e = list[s];
    j = static_cast<int>(e & 0xffffu);
    m = e >> 16;
  }
  float u[kMaxRows], g[kMaxRows] = {};
  warp_dots(x, wu + static_cast<std::size_t>(j) * d, R, d, u);
  if (mode != 2) warp_dots(x, wg + static_cast<std::size_t>(j) * d, R, d, g);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      float v = 0.f;
      if (r < R && ((m >> r) & 1u)) {
        const float gv = mode == 2 ? G[static_cast<std::size_t>(r) * Fp + j] : g[r];
        v = silu_f(gv) * u[r];
      }
      z[static_cast<std::size_t>(s) * kMaxRows + r] = v;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_down(const T* wd, T* out, const float* z, const unsigned* list,
                                                       const unsigned* ucount, int R, int d, int F, int all) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= R * d) return;
  const int r = i / d, c = i - r * d;
  const int n = all ? F : static_cast<int>(*ucount);
  float acc = 0.f;
  for (int s = 0; s < n; ++s) {
    const int j = all ? s : static_cast<int>(list[s] & 0xffffu);
    acc = fmaf(z[static_cast<std::size_t>(s) * kMaxRows + r], to_f32(wd[static_cast<std::size_t>(j) * d + c]), acc);
  }
  out[i] = from_f32<T>(to_f32(out[i]) + acc);
}

// ---------------------------------------------------------------------------------------------------------
// Host side

struct Layout {
  int R = 1, Fp = 128, Wp = 4, umax = 1;
  std::size_t ctrl = 0, acc = 0, zero_small = 0, hist = 0, zero_all = 0, g = 0, mask = 0, list = 0, info = 0, z = 0,
              total = 0;
};

int rows_pad(int R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8; }
int cand_cap(int R) { return std::max(kRankMax, 2048 / R); }

Layout make_layout(const Problem& p) {
  Layout L;
  L.R = std::max(1, std::min(p.rows, kMaxRows));
  L.Fp = (p.d_ffn + 127) / 128 * 128;
  L.Wp = L.Fp / 32;
  const int kept = p.kept();
  L.umax = std::max(1, p.kind == SelKind::dense ? p.d_ffn : std::min(p.d_ffn, L.R * kept));
  const auto R = static_cast<std::size_t>(L.R);
  std::size_t off = 0;
  L.ctrl = off;
  off += kCtrlBytes;
  L.acc = off;
  off += align256(R * static_cast<std::size_t>(p.d) * 4);
  L.zero_small = off;  // [0, zero_small) is cleared by one cudaMemsetAsync per call that needs counters,
  L.hist = off;        // [0, zero_all) when the gate epilogue builds the top-K histogram
  off += align256(R * kBins * 4);
  L.zero_all = off;
  L.g = off;
  off += align256(R * static_cast<std::size_t>(L.Fp) * 4);
  L.mask = off;
  off += align256(static_cast<std::size_t>(L.Fp));
  L.list = off;
  off += align256(static_cast<std::size_t>(L.umax) * 4);
  L.info = off;
  off += 256;  // [0] union length
  L.z = off;
  off += align256(static_cast<std::size_t>(L.umax) * kMaxRows * 4);
  L.total = off;
  return L;
}

struct DeviceLimits {
  int sms = 0;
  std::size_t smem_optin = 0;
};
DeviceLimits device_limits() {
  static std::mutex mu;
  static std::map<int, DeviceLimits> cache;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceLimits lim;
  int v = 0;
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev));
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  lim.smem_optin = static_cast<std::size_t>(v);
  cache[dev] = lim;
  return lim;
}

// Raises a kernel's dynamic shared memory limit once per device (it is a per-function attribute).
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<std::pair<int, std::uintptr_t>, std::size_t> done;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto& cur = done[{dev, reinterpret_cast<std::uintptr_t>(kernel)}];
  if (cur >= bytes) return;
  MOC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  cur = bytes;
}

template <class Kernel, class... Args>
void launch_ex(Kernel kernel, unsigned grid, std::size_t smem, cudaStream_t stream, bool cluster, bool pdl,
               Args... args) {
  allow_smem(kernel, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cluster) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = kCluster;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  MOC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <class Fn>
void with_rows(int R, Fn&& fn) {
  switch (rows_pad(R)) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    default: fn(std::integral_constant<int, 8>{}); break;
  }
}

std::size_t gate_smem_bytes(const Layout& L, int mode) {
  std::size_t b = kGateHeadBytes;
  if (mode == kGateTopK || mode == kGateGroupLast) b += sel_scratch_bytes(L.R, L.Wp, cand_cap(L.R));
  return b;
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

struct Buffers {
  unsigned* ctrl;
  float* acc;
  unsigned* hist;
  float* G;
  unsigned char* mask;
  unsigned* list;
  unsigned* ucount;
  float* z;
};
Buffers buffers(const Layout& L, void* ws) {
  auto* b = static_cast<unsigned char*>(ws);
  return {reinterpret_cast<unsigned*>(b + L.ctrl), reinterpret_cast<float*>(b + L.acc),
          reinterpret_cast<unsigned*>(b + L.hist), reinterpret_cast<float*>(b + L.g),
          b + L.mask, reinterpret_cast<unsigned*>(b + L.list),
          reinterpret_cast<unsigned*>(b + L.info), reinterpret_cast<float*>(b + L.z)};
}

void launch_gate(const Problem& p, const Layout& L, const Buffers& B, int mode, cudaStream_t st, const Options& opt) {
  GateArgs a{};
  a.x = static_cast<const bf16*>(p.x);
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.G = B.G;
  a.hist = B.hist;
  a.ctrl = B.ctrl;
  a.ucount = B.ucount;
  a.mask = B.mask;
  a.list = B.list;
  a.idx_out = p.idx_out;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.Wp = L.Wp;
  a.kept = p.kept();
  a.mode = mode;
  a.k = p.k;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.cap = cand_cap(L.R);
  a.select = opt.select;
  const auto grid = static_cast<unsigned>((p.d_ffn + kGroup - 1) / kGroup);
  const std::size_t smem = gate_smem_bytes(L, mode);
  if (opt.gate_unroll >= 8) launch_ex(k_gate<8>, grid, smem, st, false, false, a);
  else launch_ex(k_gate<4>, grid, smem, st, false, false, a);
  MOC_CUDA_LAUNCHED("k_gate");
}

void launch_updown(const Problem& p, const Layout& L, const Buffers& B, bool fused_gate, int cmode, cudaStream_t st,
                   bool pdl) {
  UpDownArgs a{};
  a.x = static_cast<const bf16*>(p.x);
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.wu = static_cast<const bf16*>(p.w_up_t);
  a.wd = static_cast<const bf16*>(p.w_down);
  a.out = static_cast<bf16*>(p.out);
  a.G = B.G;
  a.mask = B.mask;
  a.list = B.list;
  a.ucount = B.ucount;
  a.acc = B.acc;
  a.slice_done = B.ctrl + kSliceLine * kLine;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  const int slots = cmode == kListChannels ? L.umax : p.d_ffn;
  const int groups = (slots + kGroup - 1) / kGroup;
  const auto grid = static_cast<unsigned>((groups + kCluster - 1) / kCluster * kCluster);
  with_rows(p.rows, [&](auto rp) {
    constexpr int RP = decltype(rp)::value;
    const std::size_t smem = updown_smem_bytes(p.d, RP, fused_gate);
    if (fused_gate && cmode == kAllChannels)
      launch_ex(k_updown<RP, true, kAllChannels>, grid, smem, st, true, pdl, a);
    else if (fused_gate)
      launch_ex(k_updown<RP, true, kListChannels>, grid, smem, st, true, pdl, a);
    else if (cmode == kMaskChannels)
      launch_ex(k_updown<RP, false, kMaskChannels>, grid, smem, st, true, pdl, a);
    else
      launch_ex(k_updown<RP, false, kListChannels>, grid, smem, st, true, pdl, a);
  });
  MOC_CUDA_LAUNCHED("k_updown");
}

void launch_force_list(const Problem& p, const Layout& L, const Buffers& B, cudaStream_t st) {
  const std::size_t smem = sel_scratch_bytes(L.R, L.Wp, 0);
  launch_ex(k_force_list, 1, smem, st, false, false, p.force_idx, p.rows, p.d_ffn, p.kept(), L.Wp, B.list, B.ucount);
  MOC_CUDA_LAUNCHED("k_force_list");
}

// The generic path for one chunk.
template <class T>
void run_generic(const Problem& p, const Layout& L, const Buffers& B, cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* wg = static_cast<const T*>(p.w_gate_t);
  const T* wu = static_cast<const T*>(p.w_up_t);
  const T* wd = static_cast<const T*>(p.w_down);
  T* out = static_cast<T*>(p.out);
  const int R = p.rows, d = p.d, F = p.d_ffn, kept = p.kept();
  const int rule = static_cast<int>(p.rule);
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  const auto warps_grid = [](int n) { return static_cast<unsigned>((n + kWarps - 1) / kWarps); };
  auto z_and_down = [&](int zmode) {
    const int slots = zmode == 0 ? F : L.umax;
    k_gen_z<T><<<warps_grid(slots), kThreads, 0, st>>>(x, wg, wu, B.G, B.list, B.ucount, B.z, R, d, F, L.Fp, zmode);
    MOC_CUDA_LAUNCHED("k_gen_z");
    k_gen_down<T><<<ceil_div(static_cast<long long>(R) * d, kThreads), kThreads, 0, st>>>(
        wd, out, B.z, B.list, B.ucount, R, d, F, zmode == 0 ? 1 : 0);
    MOC_CUDA_LAUNCHED("k_gen_down");
  };
  auto gate_only = [&]() {
    k_gen_gate<T><<<warps_grid(F), kThreads, 0, st>>>(x, wg, B.G, R, d, F, L.Fp);
    MOC_CUDA_LAUNCHED("k_gen_gate");
  };
  if (!moc) {
    if (updown) z_and_down(0);
    else if (gate) gate_only();
    return;
  }
  if (p.force_idx) {
    if (updown) {
      launch_force_list(p, L, B, st);
      z_and_down(1);
    } else if (gate) {
      gate_only();
    }
    return;
  }
  if (!select) {
    if (gate) gate_only();
    return;
  }
  const bool topk = p.kind == SelKind::topk;
  gate_only();
  GateArgs a{};
  a.G = B.G;
  a.ucount = B.ucount;
  a.list = B.list;
  a.idx_out = p.idx_out;
  a.R = R;
  a.F = F;
  a.Fp = L.Fp;
  a.Wp = L.Wp;
  a.kept = kept;
  a.mode = topk ? kGateTopK : kGateGroupLast;
  a.k = p.k;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = rule;
  a.cap = cand_cap(L.R);
  launch_ex(k_select, 1, sel_scratch_bytes(L.R, L.Wp, a.cap), st, false, false, a);
  MOC_CUDA_LAUNCHED("k_select");
  if (updown) z_and_down(2);
}

bool fast_chunk(const Problem& p, const Options& opt) {
  if (!opt.allow_fast || p.dtype != DType::bf16 || p.d % 8 != 0) return false;
  if (!aligned16(p.x) || !aligned16(p.w_gate_t) || !aligned16(p.w_up_t) || !aligned16(p.w_down) || !aligned16(p.out))
    return false;
  const DeviceLimits lim = device_limits();
  const Layout L = make_layout(p);
  if (updown_smem_bytes(p.d, rows_pad(L.R), true) > lim.smem_optin) return false;
  return gate_smem_bytes(L, kGateTopK) <= lim.smem_optin;
}

// One chunk of at most kMaxRows rows.
void run_chunk(const Problem& p, void* ws, cudaStream_t st, const Options& opt) {
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, ws);
  if (!fast_chunk(p, opt)) {
    if (p.dtype == DType::bf16) run_generic<bf16>(p, L, B, st);
    else run_generic<float>(p, L, B, st);
    return;
  }
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  auto zero_head = [&](bool with_hist = false) {
    MOC_CUDA_CHECK(cudaMemsetAsync(ws, 0, with_hist ? L.zero_all : L.zero_small, st));
  };
  if (!moc) {
    if (updown) {
      zero_head();
      launch_updown(p, L, B, true, kAllChannels, st, false);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, st, opt);
    }
    return;
  }
  if (p.force_idx) {
    if (updown) {
      zero_head();
      launch_force_list(p, L, B, st);
      launch_updown(p, L, B, true, kListChannels, st, opt.pdl);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, st, opt);
    }
    return;
  }
  if (!select) {
    if (gate) launch_gate(p, L, B, kGateOnly, st, opt);
    return;
  }
  int mode = kGateTopK;
  if (p.kind == SelKind::grouped) mode = kGroup % p.group_b == 0 ? kGateGroupLocal : kGateGroupLast;
  if (mode != kGateGroupLocal || updown) zero_head(mode == kGateTopK && opt.select == 0);
  launch_gate(p, L, B, mode, st, opt);
  if (updown) launch_updown(p, L, B, false, mode == kGateGroupLocal ? kMaskChannels : kListChannels, st, opt.pdl);
}

void validate(const Problem& p, const void* ws, std::size_t ws_size) {
  const char* op = "ffn_decode";
  require(p.rows >= 0 && p.d > 0 && p.d_ffn > 0, op, "rows, d and d_ffn must be positive");
  require(p.d_ffn <= 65536, op, "d_ffn above 65536 does not fit i16 channel indices");
  require(p.dtype == DType::f32 || p.dtype == DType::bf16, op, "x, weights and out must be f32 or bf16");
  require(p.x && p.w_gate_t && p.w_up_t && p.w_down && p.out, op, "null tensor pointer");
  const bool moc = p.kind != SelKind::dense;
  if (p.kind == SelKind::topk) require(p.k >= 1 && p.k <= p.d_ffn, op, "k must be in [1, d_ffn]");
  if (p.kind == SelKind::grouped)
    require(p.group_a > 0 && p.group_a <= p.group_b, op, "a:b selection needs 0 < a <= b");
  require(moc || (!p.force_idx && !p.idx_out), op, "force_idx and idx_out need a MoC selection");
  if (moc && (p.parts & kFfnUpDown) && !(p.parts & kFfnSelect))
    require(p.force_idx != nullptr, op, "up/down without selection needs force_idx");
  require(ws != nullptr && ws_size >= workspace_bytes(p), op, "workspace too small");
}

}  // namespace

int Problem::kept() const {
  if (kind == SelKind::dense) return d_ffn;
  MocSelect s;
  s.k = kind == SelKind::topk ? k : 0;
  s.group_a = kind == SelKind::grouped ? group_a : 0;
  s.group_b = kind == SelKind::grouped ? group_b : 0;
  return s.kept(d_ffn);
}

std::size_t workspace_bytes(const Problem& p) { return make_layout(p).total; }

bool fast_path(const Problem& p, const Options& opt) {
  Problem c = p;
  c.rows = std::max(1, std::min(p.rows, kMaxRows));
  return fast_chunk(c, opt);
}

void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream, const Options& opt) {
  validate(p, workspace, workspace_size);
  const std::size_t es = dtype_bytes(p.dtype);
  const int kept = p.kept();
  for (int r0 = 0; r0 < p.rows; r0 += kMaxRows) {
    Problem c = p;
    c.rows = std::min(kMaxRows, p.rows - r0);
    const std::size_t xoff = static_cast<std::size_t>(r0) * p.d * es;
    c.x = static_cast<const unsigned char*>(p.x) + xoff;
    c.out = static_cast<unsigned char*>(p.out) + xoff;
    if (p.force_idx) c.force_idx = p.force_idx + static_cast<std::size_t>(r0) * kept;
    if (p.idx_out) c.idx_out = p.idx_out + static_cast<std::size_t>(r0) * kept;
    if (c.force_idx && c.idx_out)
      MOC_CUDA_CHECK(cudaMemcpyAsync(c.idx_out, c.force_idx, static_cast<std::size_t>(c.rows) * kept * 2,
                                     cudaMemcpyDeviceToDevice, stream));
    run_chunk(c, workspace, stream, opt);
  }
}

void launch_updown_only(const Problem& p, void* workspace, cudaStream_t stream, const Options& opt) {
  require(p.rows >= 1 && p.rows <= kMaxRows && p.kind != SelKind::dense && !p.force_idx && fast_path(p, opt),
          "ffn_decode", "launch_updown_only needs the fast path, 1..8 rows and a MoC selection");
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, workspace);
  MOC_CUDA_CHECK(cudaMemsetAsync(workspace, 0, L.zero_small, stream));
  const bool local = p.kind == SelKind::grouped && kGroup % p.group_b == 0;
  launch_updown(p, L, B, false, local ? kMaskChannels : kListChannels, stream, false);
}

}  // namespace ffn

// ---- Ops entry point

void ffn_decode(Ops& ops, const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                const Tensor* force_idx, Tensor* idx_out, unsigned parts) {
  const char* op = "ffn_decode";
  require(w.w_gate_t && w.w_up_t && w.w_down, op, "all three weights are needed");
  const Tensor& wg = *w.w_gate_t;
  const Tensor& wu = *w.w_up_t;
  const Tensor& wd = *w.w_down;
  const std::int64_t n = x.rows(), d = x.cols(), F = wg.rows();
  require(wg.cols() == d && wu.rows() == F && wu.cols() == d && wd.rows() == F && wd.cols() == d, op,
          "weights must be [d_ffn, d] with d = " + std::to_string(d));
  require(out.rows() == n && out.cols() == d, op, "out must be [rows, d]");
  require(x.device() == DeviceKind::cuda && wg.device() == DeviceKind::cuda && wu.device() == DeviceKind::cuda &&
              wd.device() == DeviceKind::cuda && out.device() == DeviceKind::cuda,
          op, "tensors must live on the GPU");
  const DType dt = x.dtype();
  require(is_float(dt) && wg.dtype() == dt && wu.dtype() == dt && wd.dtype() == dt && out.dtype() == dt, op,
          "x, the weights and out must share one float dtype (f32 or bf16)");
  require(F <= 65536, op, "d_ffn above 65536 does not fit i16 channel indices");
  if (sel) {
    if (sel->grouped()) require(sel->group_a > 0 && sel->group_a <= sel->group_b, op, "a:b selection needs 0 < a <= b");
    else require(sel->k >= 1 && sel->k <= F, op, "k must be in [1, d_ffn]");
  }
  const int kept = sel ? sel->kept(static_cast<int>(F)) : static_cast<int>(F);
  if (force_idx)
    require(sel && force_idx->dtype() == DType::i16 && force_idx->rows() == n && force_idx->cols() == kept &&
                force_idx->device() == DeviceKind::cuda,
            op, "force_idx must be i16 [rows, kept] on the GPU");
  if (idx_out)
    require(sel && idx_out->dtype() == DType::i16 && idx_out->rows() == n && idx_out->cols() == kept &&
                idx_out->device() == DeviceKind::cuda,
            op, "idx_out must be i16 [rows, kept] on the GPU");
  if (sel && (parts & kFfnUpDown) && !(parts & kFfnSelect))
    require(force_idx != nullptr, op, "up/down without selection needs force_idx");
  if (n == 0) return;

  ffn::Problem p;
  p.rows = static_cast<int>(n);
  p.d = static_cast<int>(d);
  p.d_ffn = static_cast<int>(F);
  p.dtype = dt;
  p.x = x.raw();
  p.w_gate_t = wg.raw();
  p.w_up_t = wu.raw();
  p.w_down = wd.raw();
  p.out = out.raw();
  if (sel) {
    p.kind = sel->grouped() ? ffn::SelKind::grouped : ffn::SelKind::topk;
    p.k = sel->k;
    p.group_a = sel->group_a;
    p.group_b = sel->group_b;
    p.rule = sel->rule;
  }
  p.force_idx = force_idx ? force_idx->data<std::uint16_t>() : nullptr;
  p.idx_out = idx_out ? idx_out->data<std::uint16_t>() : nullptr;
  p.parts = parts;
  const std::size_t bytes = ffn::workspace_bytes(p);
  Tensor ws = ops.empty({static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32, workspace_tag());
  ffn::launch(p, ws.raw(), bytes, stream_of(ops));
}

}  // namespace moc::cuda

// Decode-time FFN kernels (Ops::ffn_decode): dense GEMVs and the MoC pipeline (gate GEMV, row top-K or a:b
// selection, then the up/down projection over the union of the rows' kept channels). The design is
// described in ffn_decode.cuh; measurements in bench/micro/NOTES.md. Weights are [d_ffn, d] (channel j = one
// contiguous row of d values).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/cuda/ffn_topk.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/stage_stamps.cuh"
#include "kernels/op_cost.h"

namespace moc::cuda {
namespace ffn {
namespace {

namespace cg = cooperative_groups;
using namespace moc::cuda::dev;  // ld_stream, prefetch_l2, bf_lo/hi, silu_f (decode_device.cuh); sel_key (select_key.cuh)

constexpr int kThreads = 256;  // gate, up/down and prep kernels: 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 16;     // channels of one mma tile (its M)
constexpr int kMaxRows = 8;    // rows per chunk (the N of one mma tile)
constexpr int kTile = 32;      // columns one warp covers per mma step (4 lanes x 8 bf16)
constexpr int kDownCols = kThreads * 8;  // columns of one pass of the down projection (8 per thread)
constexpr int kMaxCluster = 8;
constexpr int kGateBlocksPerSm = 3;
constexpr int kDefaultUpdownCluster = 2;  // Options::updown_cluster 0

// Selection kernel: one block of kSelThreads per row (a cluster over the rows of a chunk).
constexpr int kSelThreads = 512;
using topk::kHBins;  // ffn_topk.cuh: the row top-K inside one block
using topk::kHShift;
using topk::kRankMax;
constexpr int kKeyCache = 8192;        // rows of at most this many channels keep their keys in shared memory

// Workspace counters: one 128-byte line per column slice of the up/down reduction.
constexpr int kLine = 32;  // u32 per line
constexpr std::size_t kCtrlBytes = kMaxCluster * kLine * 4;

enum GateMode : int { kGateOnly = 0, kGateGroupLocal = 1 };
enum ChannelMode : int { kAllChannels = 0, kListChannels = 1, kMaskChannels = 2 };
enum SelMode : int { kSelTopK = 0, kSelGroup = 1, kSelForce = 2 };

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t(15); }
inline std::size_t align256(std::size_t n) { return (n + 255) & ~std::size_t(255); }

// ---------------------------------------------------------------------------------------------------------
// Device helpers

// x is small and read by every block: cached.
__device__ __forceinline__ uint4 ld_x(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Programmatic dependent launch: wait for the previous kernel's results (a no-op without PDL) / let the next
// kernel be scheduled. Nothing a previous kernel writes is read, and nothing is written, before the wait.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// The W_up and W_down rows of channel j (row_bytes each) into L2, for the up/down kernel that follows.
__device__ __forceinline__ void prefetch_rows(const void* wu, const void* wd, unsigned row_bytes, int j) {
  const std::size_t o = static_cast<std::size_t>(j) * row_bytes;
  prefetch_l2(static_cast<const unsigned char*>(wu) + o, row_bytes);
  prefetch_l2(static_cast<const unsigned char*>(wd) + o, row_bytes);
}



// Zeroes part `part` of `nparts` of the n16 16-byte words at p.
__device__ __forceinline__ void zero_part(uint4* p, unsigned n16, unsigned part, unsigned nparts, int nthreads) {
  const unsigned per = (n16 + nparts - 1) / nparts;
  const unsigned b = per * part, e = min(n16, b + per);
  for (unsigned i = b + threadIdx.x; i < e; i += static_cast<unsigned>(nthreads)) p[i] = make_uint4(0, 0, 0, 0);
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

// ---------------------------------------------------------------------------------------------------------
// Prep kernel (dense path): zeroes the up/down kernel's accumulator and counters after the previous kernel
// in the stream is done, and lets the up/down kernel start streaming its weights at once.

__global__ void __launch_bounds__(kThreads) k_prep(uint4* p, unsigned n16) {
  griddep_launch();
  griddep_wait();
  zero_part(p, n16, blockIdx.x, gridDim.x, kThreads);
}

// ---------------------------------------------------------------------------------------------------------
// Gate GEMV: block b owns a balanced range of channels (whole a:b groups in kGateGroupLocal), 16 channels per
// mma tile, its 8 warps split d. The first loads are issued before the wait for the previous kernel.
// Epilogue: G [R, Fp] fp32; in kGateGroupLocal (b | 16) also the a:b selection: idx_out and a row mask per
// channel for the up/down kernel.

struct GateArgs {
  const bf16* x;
  const bf16* wg;
  float* G;             // [R, Fp]
  unsigned char* mask;  // [F] row masks (kGateGroupLocal)
  std::uint16_t* idx_out;
  uint4* zero;          // region the next kernel needs zeroed (or null), zero_n16 16-byte words
  unsigned zero_n16;
  const void* pf_up;    // kGateGroupLocal: W_up and W_down rows of kept channels are prefetched into L2
  const void* pf_down;  // (null: no prefetch)
  step::StampBuf* stamps;  // device-side stamps while profiling (stage_stamps.cuh)
  int R, d, F, Fp, kept, mode, ga, gb, rule, unit, nunits;
};

// GM: the gate mode fixed at compile time (-1: a.mode), so that the top-K gate kernel has no a:b epilogue.
template <int U, int GM = -1>
__global__ void __launch_bounds__(kThreads, kGateBlocksPerSm) k_gate(GateArgs a) {
  const int gmode = GM >= 0 ? GM : a.mode;
  __shared__ float4 red[kWarps * 32];
  __shared__ float gvs[kGroup * 8];
  __shared__ unsigned char on[kGroup * 8];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const long long nb = gridDim.x, b = blockIdx.x;
  const int c0 = min(a.F, static_cast<int>(b * a.nunits / nb) * a.unit);
  const int c1 = min(a.F, static_cast<int>((b + 1) * a.nunits / nb) * a.unit);
  const bool xrow = g < a.R;
  const bf16* px = a.x + static_cast<std::size_t>(xrow ? g : 0) * a.d;
  const int nt = (a.d + kTile - 1) / kTile;
  const int t_beg = warp * nt / kWarps, t_end = (warp + 1) * nt / kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  step::StampScope stamp(a.stamps);  // the gate stage: from the first block past its wait to the last block's end
  griddep_launch();
  bool waited = false;  // warp-uniform
  for (int base = c0; base < c1; base += kGroup) {
    const int chA = base + g, chB = base + g + 8;
    const bool okA = chA < c1, okB = chB < c1;
    const bf16* pa = a.wg + static_cast<std::size_t>(okA ? chA : 0) * a.d;
    const bf16* pb = a.wg + static_cast<std::size_t>(okB ? chB : 0) * a.d;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int t0 = t_beg; t0 < t_end; t0 += U) {
      uint4 A[U], B[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < a.d;
        A[u] = ok && okA ? ld_stream(pa + col) : zero;
        B[u] = ok && okB ? ld_stream(pb + col) : zero;
      }
      if (!waited) {
        griddep_wait();
        waited = true;
        stamp.start(step::StampKernel::k_gate, step::StageId::gate);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < a.d;
        const uint4 X = ok && xrow ? ld_x(px + col) : zero;
        mma_tile(c, A[u], B[u], X);
      }
    }
    red[warp * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
    if (!waited) {
      griddep_wait();
      waited = true;
      stamp.start(step::StampKernel::k_gate, step::StageId::gate);
    }
    __syncthreads();
    if (tid < kGroup * 8) {
      const int s = tid >> 3, r = tid & 7;
      const int ln = c_lane(s, r), rg = c_reg(s, r);
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += reinterpret_cast<const float*>(red)[(w * 32 + ln) * 4 + rg];
      gvs[s * 8 + r] = v;
      const int ch = base + s;
      if (ch < c1 && r < a.R) a.G[static_cast<std::size_t>(r) * a.Fp + ch] = v;
    }
    if (gmode == kGateGroupLocal) {
      // a:b with b | 16 and base % b == 0: this tile holds whole groups; thread (s, r) ranks channel s
      // within its group.
      __syncthreads();
      const int s = tid >> 3, r = tid & 7, j = base + s;
      bool keep = false;
      int g0 = 0;
      if (tid < kGroup * 8 && r < a.R && j < c1) {
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
      if (tid < kGroup && base + tid < c1) {
        unsigned m = 0;
#pragma unroll
        for (int rr = 0; rr < 8; ++rr) m |= static_cast<unsigned>(on[tid * 8 + rr]) << rr;
        a.mask[base + tid] = static_cast<unsigned char>(m);
        if (m && a.pf_up) prefetch_rows(a.pf_up, a.pf_down, static_cast<unsigned>(a.d) * 2u, base + tid);
      }
    }
    __syncthreads();  // red, gvs and on are reused by the next tile
  }
  if (!waited) {
    griddep_wait();
    stamp.start(step::StampKernel::k_gate, step::StageId::gate);
  }
  if (a.zero) zero_part(a.zero, a.zero_n16, blockIdx.x, gridDim.x, kThreads);
}

// ---------------------------------------------------------------------------------------------------------
// Selection kernel: block r of a cluster of C = rows_pad(R) blocks selects row r of G (top-K, a:b, or the
// channels of force_idx) into kept bits in shared memory, writes idx_out row r (ascending), and the blocks
// together write the union list (channel | row mask << 16, ascending) and its length.
//
// Row top-K: a shared-memory histogram of the top 13 bits of the keys (1/16 octave per bin) gives the
// threshold bin; channels above it are kept; the candidates of the bin (about 90 of 5461 on a Gaussian row)
// are ranked pairwise (larger key first, then the lower channel); a bin of more than kRankMax candidates
// (near-constant rows) is resolved by radix passes over the remaining 19 bits, ties to the lower channels.

struct SelArgs {
  const float* G;  // [R, Fp]
  const std::uint16_t* force;
  std::uint16_t* idx_out;
  unsigned* list;    // union list (or null)
  unsigned* ucount;  // its length
  uint4* zero;       // region the next kernel needs zeroed (or null)
  unsigned zero_n16;
  const void* pf_up;    // top-K: W_up and W_down rows of the channels at or above the threshold bin are
  const void* pf_down;  // prefetched into L2 (null: no prefetch), by H clusters, each a share of them
  unsigned row_bytes;
  step::StampBuf* stamps;
  int R, C, H, F, Fp, Wp, kept, mode, k, ga, gb, rule, cache;
};

__host__ __device__ inline std::size_t sel_smem_bytes(int mode, int Fp, int Wp, bool cache) {
  return 4 * (static_cast<std::size_t>(mode == kSelTopK ? kHBins : 0) + (cache ? Fp : 0) + 2 * static_cast<std::size_t>(Wp) +
              kRankMax + 64) +
         2 * kRankMax;
}

// NT threads per block; CACHE: the row's keys are kept in shared memory (a.cache), else re-read from G.
// MODE and RULE: the selection mode and ranking rule fixed at compile time (-1: read from a), so that a
// kernel holds only the code its mode and rule run.
// ONE: one row (a.C == 1), without the cluster's union-list code.
template <int NT, bool CACHE, int MODE = -1, int RULE = -1, bool ONE = false>
__global__ void __launch_bounds__(NT, 1) k_select(SelArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int mode = MODE >= 0 ? MODE : a.mode;
  const int rule = RULE >= 0 ? RULE : a.rule;
  const bool is_topk = mode == kSelTopK;
  unsigned* hist = reinterpret_cast<unsigned*>(smem);  // [kHBins] (top-K)
  unsigned* keys = hist + (is_topk ? kHBins : 0);       // [Fp] when cached
  unsigned* sel = keys + (CACHE ? a.Fp : 0);            // [Wp] kept bits of this block's row
  unsigned* aux = sel + a.Wp;                           // [Wp] threshold-bin candidates, then ties
  unsigned* ck = aux + a.Wp;                            // [kRankMax] candidate keys (ascending channel)
  unsigned* scratch = ck + kRankMax;                    // [32]
  unsigned* info = scratch + 32;                        // [32]
  unsigned short* ci = reinterpret_cast<unsigned short*>(info + 32);  // [kRankMax] candidate channels

  const int tid = threadIdx.x;
  const int r = static_cast<int>(blockIdx.x) % a.C;  // row (rank in the cluster)
  const int h = static_cast<int>(blockIdx.x) / a.C;  // cluster 0 selects; clusters 1..H-1 only prefetch
  const bool row = r < a.R;  // block-uniform
  const int F = a.F, Wp = a.Wp;
  if (is_topk)
    for (int i = tid; i < kHBins / 4; i += NT) reinterpret_cast<uint4*>(hist)[i] = make_uint4(0, 0, 0, 0);
  for (int w = tid; w < Wp; w += NT) sel[w] = 0;
  step::StampScope stamp(a.stamps);  // the top-K stage; every return below is block-uniform
  griddep_launch();
  griddep_wait();
  stamp.start(step::StampKernel::k_select, step::StageId::topk);
  // The histogram and the kept bits are zeroed (above) before any thread counts into them. Without this
  // barrier a warp could add to a bin another warp had not zeroed yet: normally hidden by the long wait for
  // the gate kernel, it lost counts under compute-sanitizer's scheduling (racecheck does not flag a store
  // racing an atomic) and the selection came out wrong.
  __syncthreads();
  if (a.zero && h == 0) zero_part(a.zero, a.zero_n16, r, a.C, NT);
  const float* Gr = a.G + static_cast<std::size_t>(row ? r : 0) * a.Fp;
  auto key_at = [&](int j) -> unsigned {
    if constexpr (CACHE) return keys[j];
    else return sel_key(__ldcg(Gr + j), rule);
  };
  // Words of the kept bits owned by this thread (consecutive, so that thread order is channel order).
  const int wpt = (Wp + NT - 1) / NT;
  const int w0 = min(Wp, tid * wpt), w1 = min(Wp, w0 + wpt);

  // 1. Keys into shared memory and the histogram.
  if (row && mode != kSelForce && (CACHE || is_topk)) {
    const int n4 = a.Fp / 4;
    for (int i0 = tid; i0 < n4; i0 += 4 * NT) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * NT;
        v[u] = i < n4 ? __ldcg(reinterpret_cast<const float4*>(Gr) + i) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * NT;
        if (i < n4) {
          const float gv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
          unsigned kk[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = 4 * i + e;
            kk[e] = j < F ? sel_key(gv[e], rule) : 0u;
            if (is_topk && j < F) atomicAdd(&hist[kk[e] >> kHShift], 1u);
          }
          if (CACHE) reinterpret_cast<uint4*>(keys)[i] = make_uint4(kk[0], kk[1], kk[2], kk[3]);
        }
      }
    }
  }
  __syncthreads();
  if (h > 0 && !(row && is_topk)) return;

  if (row && is_topk) {
    const unsigned K = static_cast<unsigned>(a.k);
    // 2-4. The threshold bin, then the kept bits (ffn_topk.cuh).
    const topk::Smem tm{hist, sel, aux, ck, ci, scratch, info};
    unsigned tb, need, cnt;
    topk::threshold_bin<NT>(tm, K, tb, need, cnt);
    if (a.pf_up) {
      // This cluster's share of the channels at or above the threshold bin: their rows into L2 while the
      // selection finishes (a superset of the kept channels by the bin's candidates).
      const int j0 = static_cast<int>(static_cast<long long>(h) * F / a.H);
      const int j1 = static_cast<int>(static_cast<long long>(h + 1) * F / a.H);
      for (int j = j0 + tid; j < j1; j += NT)
        if ((key_at(j) >> kHShift) >= tb) prefetch_rows(a.pf_up, a.pf_down, a.row_bytes, j);
    }
    if (h > 0) return;
    topk::keep_bits<NT>(tm, key_at, F, Wp, tb, need, cnt);
  } else if (row && mode == kSelGroup) {
    const int ngroups = (F + a.gb - 1) / a.gb;
    for (int gi = tid; gi < ngroups; gi += NT) {
      const int j0 = gi * a.gb, len = min(a.gb, F - j0), take = min(a.ga, len);
      unsigned bk;
      int bj;
      group_threshold(key_at, j0, len, take, bk, bj);
      for (int j = j0; j < j0 + len; ++j) {
        const unsigned key = key_at(j);
        if (key > bk || (key == bk && j <= bj)) atomicOr(&sel[j >> 5], 1u << (j & 31));
      }
    }
    __syncthreads();
  } else if (row && mode == kSelForce) {
    for (int i = tid; i < a.kept; i += NT) {
      const int j = a.force[static_cast<std::size_t>(r) * a.kept + i];
      if (j < F) atomicOr(&sel[j >> 5], 1u << (j & 31));
    }
    __syncthreads();
  }

  // 5. idx_out row r (ascending) and the union list.
  const bool emit_idx = row && a.idx_out && mode != kSelForce;
  std::uint16_t* idx = emit_idx ? a.idx_out + static_cast<std::size_t>(r) * a.kept : nullptr;
  const unsigned kept = static_cast<unsigned>(a.kept);
  if (ONE || a.C == 1) {
    // One row: idx_out and the list share positions.
    unsigned c = 0;
    for (int w = w0; w < w1; ++w) c += __popc(sel[w]);
    unsigned tot;
    unsigned pos = block_excl_scan<NT>(c, scratch, tot);
    for (int w = w0; w < w1; ++w) {
      unsigned m = sel[w];
      while (m) {
        const int bit = __ffs(m) - 1;
        m &= m - 1;
        const int j = 32 * w + bit;
        if (emit_idx && pos < kept) idx[pos] = static_cast<std::uint16_t>(j);
        if (a.list) a.list[pos] = static_cast<unsigned>(j) | (1u << 16);
        ++pos;
      }
    }
    if (a.list && tid == 0) *a.ucount = tot;
    return;
  }
  if constexpr (!ONE) {  // more than one row: idx_out per row, then the cluster's union list
    if (emit_idx) {
      unsigned c = 0;
      for (int w = w0; w < w1; ++w) c += __popc(sel[w]);
      unsigned tot;
      unsigned pos = block_excl_scan<NT>(c, scratch, tot);
      for (int w = w0; w < w1; ++w) {
        unsigned m = sel[w];
        while (m) {
          const int bit = __ffs(m) - 1;
          m &= m - 1;
          if (pos < kept) idx[pos] = static_cast<std::uint16_t>(32 * w + bit);
          ++pos;
        }
      }
    }
    if (!a.list) return;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const unsigned* rs[kMaxRows];
  #pragma unroll
    for (int rr = 0; rr < kMaxRows; ++rr) rs[rr] = rr < a.R ? cl.map_shared_rank(sel, rr) : sel;
    // This block's share of the words, split over its threads in order.
    const int W0 = r * Wp / a.C, W1 = (r + 1) * Wp / a.C, wn = W1 - W0;
    const int upt = (wn + NT - 1) / NT;
    const int u0 = W0 + min(wn, tid * upt), u1 = W0 + min(wn, tid * upt + upt);
    unsigned c = 0;
    for (int w = u0; w < u1; ++w) {
      unsigned u = 0;
  #pragma unroll
      for (int rr = 0; rr < kMaxRows; ++rr)
        if (rr < a.R) u |= rs[rr][w];
      c += __popc(u);
    }
    unsigned tot;
    unsigned pos = block_excl_scan<NT>(c, scratch, tot);
    if (tid == 0) info[8] = tot;
    cl.sync();
    unsigned base = 0;
    for (int rr = 0; rr < r; ++rr) base += cl.map_shared_rank(info, rr)[8];
    pos += base;
    for (int w = u0; w < u1; ++w) {
      unsigned rows[kMaxRows], u = 0;
  #pragma unroll
      for (int rr = 0; rr < kMaxRows; ++rr) {
        rows[rr] = rr < a.R ? rs[rr][w] : 0u;
        u |= rows[rr];
      }
      while (u) {
        const int bit = __ffs(u) - 1;
        u &= u - 1;
        unsigned m = 0;
  #pragma unroll
        for (int rr = 0; rr < kMaxRows; ++rr) m |= ((rows[rr] >> bit) & 1u) << rr;
        a.list[pos++] = static_cast<unsigned>(32 * w + bit) | (m << 16);
      }
    }
    if (r == a.C - 1 && tid == 0) *a.ucount = base + tot;
    cl.sync();  // remote shared memory stays alive until every block has read it
  }
}

// ---------------------------------------------------------------------------------------------------------
// Up/down kernel: block b owns a balanced set of channels (all: a channel range; mask: the kept channels of a
// range; list: union-list slots b, b + nb, ...), at most smax. It stages their W_down rows in shared memory
// with cp.async while it runs the up (and, with FG, gate) GEMV of the same channels with mma.sync, forms
// z = SiLU(g) * u on the rows that kept the channel, and multiplies the staged rows by z. The [R, d] partial
// outputs are reduced over a cluster of C blocks in distributed shared memory (C > 1) and added with fp32
// atomics into `acc`; the last block of each column slice adds acc into out (one bf16 rounding) and zeroes
// acc and its counter again. Shared memory is padded so that one block runs per SM.

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
  float* acc;      // [R, d] fp32, zero on entry and on exit
  unsigned* ctrl;  // column-slice counters kLine apart, zero on entry and on exit
  step::StampBuf* stamps;
  int R, d, F, Fp, smax, C;
  int nslots;      // list mode: entries the list can hold
  int prefetch;    // all-channels mode: the first 16 channels' W_gate and W_up rows into L2 before the wait
};

__host__ __device__ inline std::size_t updown_stage_bytes(int smax, int d) {
  return align16(static_cast<std::size_t>(smax) * d * 2);
}
// The partial outputs alias the staged rows when one pass covers d and they fit.
__host__ __device__ inline bool updown_alias(int smax, int d, int rp) {
  return d <= kDownCols && updown_stage_bytes(smax, d) >= static_cast<std::size_t>(rp) * d * 4;
}
__host__ __device__ inline std::size_t updown_smem_bytes(int smax, int d, int rp, bool fg, int C) {
  const int nct = (smax + kGroup - 1) / kGroup;
  std::size_t b = updown_stage_bytes(smax, d);
  if (C > 1 && !updown_alias(smax, d, rp)) b += align16(static_cast<std::size_t>(rp) * d * 4);
  b += static_cast<std::size_t>(nct) * kWarps * 32 * 16 * (fg ? 2 : 1);  // red
  b += align16(static_cast<std::size_t>(smax) * 8 * 4);                   // zs
  b += align16(static_cast<std::size_t>(smax) * 8);                       // sch, smask
  b += 64;
  return b;
}

// 32-column tiles in flight per warp in the up GEMV: 8 (A, B) or 4 (A, B and gate A, B); FG with 8 measured
// ~1.2 us slower on the dense layer (bench/micro/NOTES.md, run 5).
constexpr int updown_unroll(bool fg) { return fg ? 4 : 8; }

// CL: the cluster size fixed at compile time (0: a.C), so that the kernel holds one reduction's code.
template <int RP, bool FG, int MODE, int CL = 0>
__global__ void __launch_bounds__(kThreads, 1) k_updown(UpDownArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int d = a.d, smax = a.smax, C = CL > 0 ? CL : a.C;
  const int nct_max = (smax + kGroup - 1) / kGroup;
  bf16* stage = reinterpret_cast<bf16*>(smem);
  unsigned char* p = smem + updown_stage_bytes(smax, d);
  const bool alias = updown_alias(smax, d, RP);
  float* part = reinterpret_cast<float*>(smem);
  if (C > 1 && !alias) {
    part = reinterpret_cast<float*>(p);
    p += align16(static_cast<std::size_t>(RP) * d * 4);
  }
  float4* red = reinterpret_cast<float4*>(p);
  p += static_cast<std::size_t>(nct_max) * kWarps * 32 * 16 * (FG ? 2 : 1);
  float* zs = reinterpret_cast<float*>(p);
  p += align16(static_cast<std::size_t>(smax) * 8 * 4);
  int* sch = reinterpret_cast<int*>(p);
  unsigned* smask = reinterpret_cast<unsigned*>(sch + smax);
  p += align16(static_cast<std::size_t>(smax) * 8);
  int* misc = reinterpret_cast<int*>(p);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long nb = gridDim.x, b = blockIdx.x;
  const int per_row = d / 8;
  // Stages: up (or gate & up) until every block has its z, then down; the last blocks' return is uniform.
  step::StampScope stamp(a.stamps);
  auto stage_rows = [&](int n) {
    for (int s = 0; s < n; ++s) {
      const bf16* src = a.wd + static_cast<std::size_t>(sch[s]) * d;
      bf16* dst = stage + static_cast<std::size_t>(s) * d;
      for (int c8 = tid; c8 < per_row; c8 += kThreads) cp_async16(dst + c8 * 8, src + c8 * 8);
    }
    cp_async_commit();
  };

  // 1. This block's channels (weights of a fixed range are staged before the wait for the previous kernel).
  int n = 0;
  if constexpr (MODE == kAllChannels) {
    const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
    n = c1 - c0;
    for (int i = tid; i < n; i += kThreads) {
      sch[i] = c0 + i;
      smask[i] = (1u << a.R) - 1u;
    }
    if (a.prefetch && tid < 2 * min(n, kGroup)) {
      const bf16* w = (tid & 1) ? a.wu : a.wg;
      prefetch_l2(w + static_cast<std::size_t>(c0 + (tid >> 1)) * d, static_cast<unsigned>(d) * 2u);
    }
    __syncthreads();
    stage_rows(n);
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
  } else if constexpr (MODE == kListChannels) {
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    // The list length and this block's slots are loaded together (slots past the length are dropped).
    const unsigned U = __ldcg(a.ucount);
    for (int i = tid; i < smax; i += kThreads) {
      const long long li = b + static_cast<long long>(i) * nb;
      const unsigned e = li < a.nslots ? __ldcg(a.list + li) : 0u;
      sch[i] = static_cast<int>(e & 0xffffu);
      smask[i] = e >> 16;
    }
    n = b < U ? static_cast<int>((U - 1 - b) / nb + 1) : 0;
    n = min(n, smax);
    __syncthreads();
    stage_rows(n);
  } else {
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
    int base = 0;
    for (int i0 = 0; i0 < c1 - c0; i0 += kThreads) {
      const int i = i0 + tid;
      const unsigned m = i < c1 - c0 ? static_cast<unsigned>(__ldcg(a.mask + c0 + i)) : 0u;
      const unsigned bal = __ballot_sync(0xffffffffu, m != 0);
      if (lane == 0) misc[warp] = __popc(bal);
      __syncthreads();
      int off = base, tot = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        off += w < warp ? misc[w] : 0;
        tot += misc[w];
      }
      if (m) {
        const int pos = off + __popc(bal & ((1u << lane) - 1u));
        sch[pos] = c0 + i;
        smask[pos] = m;
      }
      base += tot;
      __syncthreads();
    }
    n = base;
    stage_rows(n);
  }
  if constexpr (!FG) {
    // Gate values of the kept (channel, row) pairs, from the gate kernel.
    for (int i = tid; i < n * 8; i += kThreads) {
      const int s = i >> 3, r = i & 7;
      zs[i] = r < a.R ? __ldcg(a.G + static_cast<std::size_t>(r) * a.Fp + sch[s]) : 0.f;
    }
  }

  // 2. Up (and gate) GEMV, 16 channels per mma tile, the 8 warps splitting d.
  const int g = lane >> 2, q = lane & 3;
  const bool xrow = g < a.R;
  const bf16* px = a.x + static_cast<std::size_t>(xrow ? g : 0) * d;
  const int nt = (d + kTile - 1) / kTile;
  const int t_beg = warp * nt / kWarps, t_end = (warp + 1) * nt / kWarps;
  constexpr int U = updown_unroll(FG);
  constexpr int K = FG ? 2 : 1;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int nct = (n + kGroup - 1) / kGroup;
  for (int ct = 0; ct < nct; ++ct) {
    const int sA = ct * kGroup + g, sB = sA + 8;
    const bool okA = sA < n, okB = sB < n;
    const std::size_t offA = static_cast<std::size_t>(okA ? sch[sA] : 0) * d;
    const std::size_t offB = static_cast<std::size_t>(okB ? sch[sB] : 0) * d;
    float cu[4] = {0.f, 0.f, 0.f, 0.f}, cgt[4] = {0.f, 0.f, 0.f, 0.f};
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
    float4* rv = red + ((ct * kWarps + warp) * 32 + lane) * K;
    rv[0] = make_float4(cu[0], cu[1], cu[2], cu[3]);
    if constexpr (FG) rv[1] = make_float4(cgt[0], cgt[1], cgt[2], cgt[3]);
  }
  __syncthreads();
  // 3. z = SiLU(g) * u on the rows that kept the channel.
  for (int i = tid; i < n * 8; i += kThreads) {
    const int s = i >> 3, r = i & 7, ct = s >> 4, sl = s & 15;
    const int ln = c_lane(sl, r), rg = c_reg(sl, r);
    const float* rf = reinterpret_cast<const float*>(red);
    float u = 0.f, gv = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const std::size_t o = static_cast<std::size_t>((ct * kWarps + w) * 32 + ln) * K * 4;
      u += rf[o + rg];
      if constexpr (FG) gv += rf[o + 4 + rg];
    }
    if constexpr (!FG) gv = zs[i];
    const bool on = r < a.R && ((smask[s] >> r) & 1u);
    zs[i] = on ? silu_f(gv) * u : 0.f;
  }
  cp_async_wait_all();
  __syncthreads();
  stamp.mark(FG ? step::StageId::gate_up : step::StageId::up);

  // 4. Down projection of the staged rows: thread t owns columns [8t, 8t + 8) of each 2048-column pass.
  const int npass = (d + kDownCols - 1) / kDownCols;
  for (int ps = 0; ps < npass; ++ps) {
    const int c = ps * kDownCols + tid * 8;
    float acc[RP][8];
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    if (c < d) {
#pragma unroll 4
      for (int s = 0; s < n; ++s) {
        const uint4 w = *reinterpret_cast<const uint4*>(stage + static_cast<std::size_t>(s) * d + c);
        const float wf[8] = {bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y), bf_lo(w.z), bf_hi(w.z), bf_lo(w.w), bf_hi(w.w)};
        const float4 z0 = *reinterpret_cast<const float4*>(zs + s * 8);
        const float4 z1 = *reinterpret_cast<const float4*>(zs + s * 8 + 4);
        const float zr[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
#pragma unroll
        for (int r = 0; r < RP; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(zr[r], wf[e], acc[r][e]);
      }
    }
    if (C == 1) {
      if (c < d && n > 0) {
#pragma unroll
        for (int r = 0; r < RP; ++r)
          if (r < a.R) {
            float4* dst = reinterpret_cast<float4*>(a.acc + static_cast<std::size_t>(r) * d + c);
            atomicAdd(dst, make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
            atomicAdd(dst + 1, make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]));
          }
      }
    } else {
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
  }

  // 5. Cluster reduction: block `rank` adds column slice `rank` of the C blocks' partials into acc.
  int slice = 0, cs = d, c0 = 0;
  if (C > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    slice = static_cast<int>(cluster.block_rank());
    cs = d / C;
    c0 = slice * cs;
    const float* parts[kMaxCluster];
#pragma unroll
    for (int k = 0; k < kMaxCluster; ++k) parts[k] = k < C ? cluster.map_shared_rank(part, k) : part;
    if (cs % 4 == 0) {
      const int n4 = cs / 4;
      for (int i = tid; i < a.R * n4; i += kThreads) {
        const int r = i / n4, cc = c0 + (i - r * n4) * 4;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < kMaxCluster; ++k)
          if (k < C) {
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
        for (int k = 0; k < kMaxCluster; ++k)
          if (k < C) sum += parts[k][static_cast<std::size_t>(r) * d + cc];
        atomicAdd(a.acc + static_cast<std::size_t>(r) * d + cc, sum);
      }
    }
    cluster.sync();  // remote shared memory stays alive until every block has read it
  }
  // 6. The last block of each column slice adds acc into out and zeroes acc and the counter.
  __threadfence();
  __syncthreads();
  if (tid == 0)
    misc[8] = atomicAdd(a.ctrl + slice * kLine, 1u) == static_cast<unsigned>(nb / C - 1) ? 1 : 0;
  __syncthreads();
  if (!misc[8]) return;
  __threadfence();
  if (cs % 8 == 0) {
    const int n8 = cs / 8;
    for (int i = tid; i < a.R * n8; i += kThreads) {
      const int r = i / n8, cc = c0 + (i - r * n8) * 8;
      const std::size_t o = static_cast<std::size_t>(r) * d + cc;
      float4* ap = reinterpret_cast<float4*>(a.acc + o);
      const float4 v0 = __ldcg(ap), v1 = __ldcg(ap + 1);
      __stcg(ap, make_float4(0.f, 0.f, 0.f, 0.f));
      __stcg(ap + 1, make_float4(0.f, 0.f, 0.f, 0.f));
      uint4 ov = *reinterpret_cast<const uint4*>(a.out + o);
      const float add[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      unsigned* ow = reinterpret_cast<unsigned*>(&ov);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lo = bf_lo(ow[e]) + add[2 * e], hi = bf_hi(ow[e]) + add[2 * e + 1];
        const __nv_bfloat162 h2 = __floats2bfloat162_rn(lo, hi);
        ow[e] = *reinterpret_cast<const unsigned*>(&h2);
      }
      *reinterpret_cast<uint4*>(a.out + o) = ov;
    }
  } else {
    for (int i = tid; i < a.R * cs; i += kThreads) {
      const int r = i / cs, cc = c0 + (i - r * cs);
      const std::size_t o = static_cast<std::size_t>(r) * d + cc;
      const float v = __ldcg(a.acc + o);
      __stcg(a.acc + o, 0.f);
      a.out[o] = __float2bfloat16_rn(__bfloat162float(a.out[o]) + v);
    }
  }
  if (tid == 0) a.ctrl[slice * kLine] = 0;
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
  std::size_t ctrl = 0, acc = 0, zero = 0, g = 0, mask = 0, list = 0, info = 0, z = 0, total = 0;
};

int rows_pad(int R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8; }

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
  L.zero = off;  // [0, zero): counters and accumulator, zeroed by the kernel before the up/down kernel
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
  int dev = 0, sms = 0;
  std::size_t smem_optin = 0, smem_sm = 0;
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
  lim.dev = dev;
  int v = 0;
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev));
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  lim.smem_optin = static_cast<std::size_t>(v);
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  lim.smem_sm = static_cast<std::size_t>(v);
  cache[dev] = lim;
  return lim;
}

// Clusters of C blocks (smem bytes each) that can be resident at once, cached per device and kernel.
template <class Kernel>
int max_active_clusters(Kernel kernel, std::size_t smem, int C) {
  static std::mutex mu;
  static std::map<std::tuple<int, std::uintptr_t, std::size_t, int>, int> done;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = done.find({dev, reinterpret_cast<std::uintptr_t>(kernel), smem, C});
    if (it != done.end()) return it->second;
  }
  allow_smem(kernel, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(C));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(C);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  MOC_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  std::lock_guard<std::mutex> lock(mu);
  done[{dev, reinterpret_cast<std::uintptr_t>(kernel), smem, C}] = n;
  return n;
}

template <class Kernel, class... Args>
void launch_ex(Kernel kernel, unsigned grid, unsigned block, std::size_t smem, cudaStream_t stream, int cluster,
               bool pdl, Args... args) {
  allow_smem(kernel, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
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

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

struct Buffers {
  unsigned* ctrl;
  float* acc;
  float* G;
  unsigned char* mask;
  unsigned* list;
  unsigned* ucount;
  float* z;
  uint4* zero;
  unsigned zero_n16;
};
Buffers buffers(const Layout& L, void* ws) {
  auto* b = static_cast<unsigned char*>(ws);
  return {reinterpret_cast<unsigned*>(b + L.ctrl), reinterpret_cast<float*>(b + L.acc),
          reinterpret_cast<float*>(b + L.g),       b + L.mask,
          reinterpret_cast<unsigned*>(b + L.list), reinterpret_cast<unsigned*>(b + L.info),
          reinterpret_cast<float*>(b + L.z),       reinterpret_cast<uint4*>(b),
          static_cast<unsigned>(L.zero / 16)};
}

// Sequential launches of one call: the first may overlap the stream's previous kernel (entry_pdl), the
// others their predecessor (pdl).
struct Chain {
  cudaStream_t st;
  bool pdl, entry_pdl, first = true;
  bool next() {
    const bool v = first ? entry_pdl : pdl;
    first = false;
    return v;
  }
};

// What each kernel of a chunk must move (kernels/op_cost.h): the chunk's shape.
cost::FfnDecodeShape cost_shape(const Problem& p) {
  cost::FfnDecodeShape s;
  s.rows = p.rows;
  s.d = p.d;
  s.d_ffn = p.d_ffn;
  s.kept = p.kept();
  s.elem = static_cast<std::int64_t>(dtype_bytes(p.dtype));
  s.moc = p.kind != SelKind::dense;
  return s;
}
OpCost named(OpCost c, const char* op) {
  c.op = op;
  return c;
}

void launch_prep(const Buffers& B, Chain& ch) {
  MOC_OP_COST((OpCost{"ffn_decode.prep", static_cast<std::int64_t>(B.zero_n16) * 16, 0}));
  launch_ex(k_prep, 1, kThreads, 0, ch.st, 1, ch.next(), B.zero, B.zero_n16);
  MOC_CUDA_LAUNCHED("k_prep");
}

void launch_gate(const Problem& p, const Layout& L, const Buffers& B, int mode, bool zero_next, Chain& ch,
                 const Options& opt) {
  // kGateGroupLocal also picks each group's channels (2:8): gate and selection in one kernel.
  MOC_OP_COST(mode == kGateGroupLocal ? named(cost::plus(cost::ffn_decode_gate(cost_shape(p)),
                                                          cost::ffn_decode_select(cost_shape(p))),
                                               "ffn_decode.gate_select")
                                      : cost::ffn_decode_gate(cost_shape(p)));
  GateArgs a{};
  a.stamps = step::stamp_buffer_if_made();
  a.x = static_cast<const bf16*>(p.x);
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.G = B.G;
  a.mask = B.mask;
  a.idx_out = p.idx_out;
  a.zero = zero_next ? B.zero : nullptr;
  a.zero_n16 = B.zero_n16;
  const bool pf = mode == kGateGroupLocal && zero_next && (opt.prefetch & 1);  // zero_next: up/down follows
  a.pf_up = pf ? p.w_up_t : nullptr;
  a.pf_down = pf ? p.w_down : nullptr;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.kept = p.kept();
  a.mode = mode;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.unit = mode == kGateGroupLocal ? p.group_b : 1;
  a.nunits = (p.d_ffn + a.unit - 1) / a.unit;
  const DeviceLimits lim = device_limits();
  const auto grid = static_cast<unsigned>(std::max(1, std::min(kGateBlocksPerSm * lim.sms, a.nunits)));
  if (opt.gate_unroll >= 8) launch_ex(k_gate<8>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  else if (opt.specialized && mode == kGateOnly)
    launch_ex(k_gate<4, kGateOnly>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  else launch_ex(k_gate<4>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  MOC_CUDA_LAUNCHED("k_gate");
}

// prefetch: top-K followed by the up/down kernel on the fast path (16-byte aligned bf16 rows).
int sel_threads(const Options& opt) { return opt.select_threads == 1024 ? 1024 : kSelThreads; }

void launch_select(const Problem& p, const Layout& L, const Buffers& B, int mode, bool want_list, bool zero_next,
                   Chain& ch, const Options& opt, bool prefetch = false) {
  MOC_OP_COST(cost::ffn_decode_select(cost_shape(p)));
  SelArgs a{};
  a.stamps = step::stamp_buffer_if_made();
  a.G = B.G;
  a.force = p.force_idx;
  a.idx_out = mode == kSelForce ? nullptr : p.idx_out;
  a.list = want_list ? B.list : nullptr;
  a.ucount = B.ucount;
  a.zero = zero_next ? B.zero : nullptr;
  a.zero_n16 = B.zero_n16;
  a.R = p.rows;
  a.C = rows_pad(p.rows);
  a.H = 1;
  if (prefetch && mode == kSelTopK) {
    a.pf_up = p.w_up_t;
    a.pf_down = p.w_down;
    a.row_bytes = static_cast<unsigned>(p.d) * 2u;
    a.H = std::max(1, device_limits().sms / a.C);
  }
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.Wp = L.Wp;
  a.kept = p.kept();
  a.mode = mode;
  a.k = p.k;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.cache = mode != kSelForce && L.Fp <= kKeyCache ? 1 : 0;
  const std::size_t smem = sel_smem_bytes(mode, L.Fp, L.Wp, a.cache != 0);
  const unsigned grid = static_cast<unsigned>(a.C * a.H);
  const bool pdl = ch.next();
  if (sel_threads(opt) == 1024) {
    if (a.cache) launch_ex(k_select<1024, true>, grid, 1024, smem, ch.st, a.C, pdl, a);
    else launch_ex(k_select<1024, false>, grid, 1024, smem, ch.st, a.C, pdl, a);
  } else if (opt.specialized && a.cache && mode == kSelTopK) {
    auto go = [&](auto kernel) { launch_ex(kernel, grid, kSelThreads, smem, ch.st, a.C, pdl, a); };
    const bool one = a.C == 1;
    switch (p.rule) {
      case SelectRule::gate:
        one ? go(k_select<kSelThreads, true, kSelTopK, 0, true>) : go(k_select<kSelThreads, true, kSelTopK, 0>);
        break;
      case SelectRule::silu:
        one ? go(k_select<kSelThreads, true, kSelTopK, 1, true>) : go(k_select<kSelThreads, true, kSelTopK, 1>);
        break;
      default:
        one ? go(k_select<kSelThreads, true, kSelTopK, 2, true>) : go(k_select<kSelThreads, true, kSelTopK, 2>);
        break;
    }
  } else {
    if (a.cache) launch_ex(k_select<kSelThreads, true>, grid, kSelThreads, smem, ch.st, a.C, pdl, a);
    else launch_ex(k_select<kSelThreads, false>, grid, kSelThreads, smem, ch.st, a.C, pdl, a);
  }
  MOC_CUDA_LAUNCHED("k_select");
}

// Grid, cluster and shared memory of one up/down launch.
struct UpDownPlan {
  unsigned grid = 1;
  int C = 1, smax = 1;
  std::size_t smem = 0, launch_smem = 0;
};

template <class Kernel>
UpDownPlan plan_updown(Kernel kernel, int slots, int d, int rp, bool fg, const Options& opt) {
  const DeviceLimits lim = device_limits();
  slots = std::max(1, slots);
  // One block per SM: more shared memory than half of the SM's.
  const std::size_t pad = std::min(lim.smem_optin, lim.smem_sm / 2 + 1024);
  auto smax_of = [&](int nb) { return (slots + nb - 1) / nb; };
  auto fits = [&](int nb, int C) { return updown_smem_bytes(smax_of(nb), d, rp, fg, C) <= lim.smem_optin; };
  int C = opt.updown_cluster > 0 ? opt.updown_cluster : kDefaultUpdownCluster;
  C = std::max(1, std::min(kMaxCluster, C));
  while (d % C != 0) C /= 2;
  int nb = std::min(lim.sms, slots);
  for (; C > 1; C /= 2) {
    int n = std::max(C, nb / C * C);
    if (!fits(n, C)) continue;
    const std::size_t smem = std::max(updown_smem_bytes(smax_of(n), d, rp, fg, C), pad);
    const int clusters = max_active_clusters(kernel, smem, C);
    if (clusters < 1) continue;
    if (n > clusters * C) n = clusters * C;
    if (!fits(n, C)) continue;
    nb = n;
    break;
  }
  if (C <= 1) {
    C = 1;
    while (!fits(nb, 1)) nb += lim.sms;  // more than one wave: very wide layers only
  }
  UpDownPlan pl;
  pl.C = C;
  pl.grid = static_cast<unsigned>(nb);
  pl.smax = smax_of(nb);
  pl.smem = updown_smem_bytes(pl.smax, d, rp, fg, C);
  pl.launch_smem = std::max(pl.smem, pad);
  return pl;
}

void launch_updown(const Problem& p, const Layout& L, const Buffers& B, bool fused_gate, int cmode, Chain& ch,
                   const Options& opt) {
  // Fused gate: the dense FFN in one kernel (all channels), or gate + up/down on forced channels.
  MOC_OP_COST(!fused_gate ? cost::ffn_decode_up_down(cost_shape(p))
              : cmode == kAllChannels
                  ? cost::ffn_decode_dense(cost_shape(p))
                  : named(cost::plus(cost::ffn_decode_gate(cost_shape(p)), cost::ffn_decode_up_down(cost_shape(p))),
                          "ffn_decode.gate_up_down"));
  UpDownArgs a{};
  a.stamps = step::stamp_buffer_if_made();
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
  a.ctrl = B.ctrl;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.nslots = L.umax;
  a.prefetch = (opt.prefetch & 2) ? 1 : 0;
  const int slots = cmode == kListChannels ? L.umax : p.d_ffn;
  const bool pdl = ch.next();
  with_rows(p.rows, [&](auto rp) {
    constexpr int RP = decltype(rp)::value;
    // The plan is made for the generic build (same shared memory and registers bound); a MoC plan of
    // cluster 1 or 2 then runs the build compiled for it. The dense (gate-fused) builds stay generic: the
    // cluster-2 build of the dense kernel measured 0.8 us slower at batch 3-4 (bench/micro/NOTES.md).
    auto go = [&](auto kernel, auto k1, auto k2) {
      const UpDownPlan pl = plan_updown(kernel, slots, p.d, RP, fused_gate, opt);
      a.smax = pl.smax;
      a.C = pl.C;
      if (opt.specialized && pl.C == 1) launch_ex(k1, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
      else if (opt.specialized && pl.C == 2) launch_ex(k2, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
      else launch_ex(kernel, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
    };
    if (fused_gate && cmode == kAllChannels)
      go(k_updown<RP, true, kAllChannels>, k_updown<RP, true, kAllChannels>, k_updown<RP, true, kAllChannels>);
    else if (fused_gate)
      go(k_updown<RP, true, kListChannels>, k_updown<RP, true, kListChannels>, k_updown<RP, true, kListChannels>);
    else if (cmode == kMaskChannels)
      go(k_updown<RP, false, kMaskChannels>, k_updown<RP, false, kMaskChannels, 1>,
         k_updown<RP, false, kMaskChannels, 2>);
    else
      go(k_updown<RP, false, kListChannels>, k_updown<RP, false, kListChannels, 1>,
         k_updown<RP, false, kListChannels, 2>);
  });
  MOC_CUDA_LAUNCHED("k_updown");
}

// The generic path for one chunk.
template <class T>
void run_generic(const Problem& p, const Layout& L, const Buffers& B, cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* wg = static_cast<const T*>(p.w_gate_t);
  const T* wu = static_cast<const T*>(p.w_up_t);
  const T* wd = static_cast<const T*>(p.w_down);
  T* out = static_cast<T*>(p.out);
  const int R = p.rows, d = p.d, F = p.d_ffn;
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  const auto warps_grid = [](int n) { return static_cast<unsigned>((n + kWarps - 1) / kWarps); };
  Chain ch{st, false, false};
  auto z_and_down = [&](int zmode) {
    MOC_OP_COST(zmode == 0 ? cost::ffn_decode_dense(cost_shape(p)) : cost::ffn_decode_up_down(cost_shape(p)));
    const int slots = zmode == 0 ? F : L.umax;
    k_gen_z<T><<<warps_grid(slots), kThreads, 0, st>>>(x, wg, wu, B.G, B.list, B.ucount, B.z, R, d, F, L.Fp, zmode);
    MOC_CUDA_LAUNCHED("k_gen_z");
    k_gen_down<T><<<ceil_div(static_cast<long long>(R) * d, kThreads), kThreads, 0, st>>>(
        wd, out, B.z, B.list, B.ucount, R, d, F, zmode == 0 ? 1 : 0);
    MOC_CUDA_LAUNCHED("k_gen_down");
  };
  auto gate_only = [&]() {
    MOC_OP_COST(cost::ffn_decode_gate(cost_shape(p)));
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
      launch_select(p, L, B, kSelForce, true, false, ch, Options{});
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
  gate_only();
  launch_select(p, L, B, p.kind == SelKind::topk ? kSelTopK : kSelGroup, updown, false, ch, Options{});
  if (updown) z_and_down(2);
}

bool fast_chunk(const Problem& p, const Options& opt) {
  if (!opt.allow_fast || p.dtype != DType::bf16 || p.d % 8 != 0) return false;
  if (!aligned16(p.x) || !aligned16(p.w_gate_t) || !aligned16(p.w_up_t) || !aligned16(p.w_down) || !aligned16(p.out))
    return false;
  const DeviceLimits lim = device_limits();
  const Layout L = make_layout(p);
  if (updown_smem_bytes(1, p.d, rows_pad(L.R), true, 1) > lim.smem_optin) return false;
  return sel_smem_bytes(kSelTopK, L.Fp, L.Wp, L.Fp <= kKeyCache) <= lim.smem_optin;
}

// One chunk of at most kMaxRows rows.
void run_chunk(const Problem& p, void* ws, cudaStream_t st, const Options& opt, bool entry_pdl) {
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, ws);
  if (!fast_chunk(p, opt)) {
    if (p.dtype == DType::bf16) run_generic<bf16>(p, L, B, st);
    else run_generic<float>(p, L, B, st);
    return;
  }
  Chain ch{st, opt.pdl, opt.pdl && opt.pdl_entry && entry_pdl};
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  if (!moc) {
    if (updown) {
      launch_prep(B, ch);
      launch_updown(p, L, B, true, kAllChannels, ch, opt);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, false, ch, opt);
    }
    return;
  }
  if (p.force_idx) {
    if (updown) {
      launch_select(p, L, B, kSelForce, true, true, ch, opt);
      launch_updown(p, L, B, true, kListChannels, ch, opt);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, false, ch, opt);
    }
    return;
  }
  if (!select) {
    if (gate) launch_gate(p, L, B, kGateOnly, false, ch, opt);
    return;
  }
  if (p.kind == SelKind::grouped && kGroup % p.group_b == 0) {
    launch_gate(p, L, B, kGateGroupLocal, updown, ch, opt);
    if (updown) launch_updown(p, L, B, false, kMaskChannels, ch, opt);
    return;
  }
  launch_gate(p, L, B, kGateOnly, false, ch, opt);
  launch_select(p, L, B, p.kind == SelKind::topk ? kSelTopK : kSelGroup, updown, updown, ch, opt,
                updown && (opt.prefetch & 1));
  if (updown) launch_updown(p, L, B, false, kListChannels, ch, opt);
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
    bool copied = false;
    if (c.force_idx && c.idx_out) {
      MOC_CUDA_CHECK(cudaMemcpyAsync(c.idx_out, c.force_idx, static_cast<std::size_t>(c.rows) * kept * 2,
                                     cudaMemcpyDeviceToDevice, stream));
      copied = true;
    }
    // The first kernel overlaps the stream's previous kernel only when it directly follows a kernel.
    run_chunk(c, workspace, stream, opt, !copied);
  }
}

void launch_updown_only(const Problem& p, void* workspace, cudaStream_t stream, const Options& opt) {
  require(p.rows >= 1 && p.rows <= kMaxRows && p.kind != SelKind::dense && !p.force_idx && fast_path(p, opt),
          "ffn_decode", "launch_updown_only needs the fast path, 1..8 rows and a MoC selection");
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, workspace);
  const bool local = p.kind == SelKind::grouped && kGroup % p.group_b == 0;
  Chain ch{stream, opt.pdl, opt.pdl && opt.pdl_entry};
  launch_updown(p, L, B, false, local ? kMaskChannels : kListChannels, ch, opt);
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

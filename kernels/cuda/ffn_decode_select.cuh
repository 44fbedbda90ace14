// The decode FFN's selection kernel (ffn_decode.cu launches it; design in ffn_decode.cuh).
#pragma once
#include "kernels/cuda/ffn_decode_device.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Selection kernel: block r of C blocks selects row r of G (top-K, a:b, or the channels of force_idx) into kept
// bits in shared memory and writes idx_out row r (ascending). Then either (mask) its row's mask bytes, or (list)
// the C = rows_pad(R) blocks of a cluster together write the union list (channel | row mask << 16, ascending)
// and its length.
//
// Row top-K: a shared-memory histogram of the top 13 bits of the keys (1/16 octave per bin) gives the
// threshold bin; channels above it are kept; the candidates of the bin (about 90 of 5461 on a Gaussian row)
// are ranked pairwise (larger key first, then the lower channel); a bin of more than kRankMax candidates
// (near-constant rows) is resolved by radix passes over the remaining 19 bits, ties to the lower channels.

struct SelArgs {
  const float* G;  // [R, Fp]
  const std::uint16_t* force;
  std::uint16_t* idx_out;
  unsigned char* mask;  // top-K: row r's kept channels as bytes 1 << r at [r * Fp + j] (or null)
  unsigned* list;    // union list (or null)
  unsigned* ucount;  // its length
  uint4* zero;       // region the next kernel needs zeroed (or null)
  unsigned zero_n16;
  const void* pf_up;    // top-K: W_up and W_down rows of the channels at or above the threshold bin are
  const void* pf_down;  // prefetched into L2 (null: no prefetch), by H clusters, each a share of them
  unsigned row_bytes;
  unsigned* spec;     // masks-only kernel, one row: the threshold-bin word for a speculating up/down kernel (or null)
  unsigned spec_tag;  // its tag (ffn_decode_device.cuh ld_acquire_gpu)
  int spec_shift;     // added to the published bin (0; for the tests of the fallback: 1, a wrong bin; -1, none)
  step::StampBuf* stamps;
  int R, C, H, F, Fp, Wp, kept, mode, k, ga, gb, rule, cache;
};

__host__ __device__ inline std::size_t sel_smem_bytes(int mode, int Fp, int Wp, bool cache) {
  const std::size_t words = static_cast<std::size_t>(mode == kSelTopK ? kHBins : 0) + (cache ? Fp : 0) +
                            2 * static_cast<std::size_t>(Wp) + 64;  // hist, keys, sel and aux, scratch and info
  return 4 * words + 8 * kRankMax;                                  // + cand
}

// The kernel's shared memory (sel_smem_bytes gives its size), carved by k_select into its own pointers first:
// the stage functions below take this struct, and the compiler keeps their accesses in the shared address
// space (measured: building it in a helper turned some into generic loads).
struct SelSmem {
  unsigned* hist;      // [kHBins] (top-K)
  unsigned* keys;      // [Fp] when cached
  unsigned* sel;       // [Wp] kept bits of this block's row
  unsigned* aux;       // [Wp] threshold-bin candidates, then ties
  unsigned long long* cand;  // [kRankMax] threshold-bin candidates (ffn_topk.cuh cand_word)
  unsigned* scratch;         // [32]
  unsigned* info;            // [32]
};

// Stage 1: the row's keys into shared memory (CACHE) and, for top-K, the histogram of their top bits.
template <int NT, bool CACHE, int RULE>
__device__ __forceinline__ void sel_keys(const SelSmem s, const float* Gr, int F, int Fp, int rule, bool is_topk) {
  const int tid = threadIdx.x;
  const int n4 = Fp / 4;
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
          kk[e] = j < F ? sel_key<RULE>(gv[e], rule) : 0u;
          if (is_topk && j < F) atomicAdd(&s.hist[kk[e] >> kHShift], 1u);
        }
        if (CACHE) reinterpret_cast<uint4*>(s.keys)[i] = make_uint4(kk[0], kk[1], kk[2], kk[3]);
      }
    }
  }
}

// Stages 2-4, top-K: the threshold bin, the L2 prefetch of this cluster's share of the channels at or above
// it (a superset of the kept channels by the bin's candidates), then the kept bits (ffn_topk.cuh) and, with
// a.mask, row r's mask bytes. Returns false in a prefetch-only cluster (h > 0), which is then done.
template <int NT, class KeyAt>
__device__ __forceinline__ bool sel_topk(const SelArgs& a, const topk::Smem& tm, KeyAt key_at, int h, int r) {
  const int F = a.F;
  unsigned tb, need, cnt;
  topk::threshold_bin<NT>(tm, static_cast<unsigned>(a.k), tb, need, cnt);
  if (a.pf_up) {
    const int j0 = static_cast<int>(static_cast<long long>(h) * F / a.H);
    const int j1 = static_cast<int>(static_cast<long long>(h + 1) * F / a.H);
    for (int j = j0 + static_cast<int>(threadIdx.x); j < j1; j += NT)
      if ((key_at(j) >> kHShift) >= tb) prefetch_rows(a.pf_up, a.pf_down, a.row_bytes, j);
  }
  if (h > 0) return false;
  if (a.mask)
    topk::keep_bits<NT, true>(tm, key_at, F, a.Wp, tb, need, cnt, a.mask + static_cast<std::size_t>(r) * a.Fp,
                              static_cast<unsigned char>(1u << r));
  else
    topk::keep_bits<NT, false>(tm, key_at, F, a.Wp, tb, need, cnt, nullptr, 0);
  return true;
}

// Stages 2-4, a:b: one thread per group keeps its best ga of gb channels.
template <int NT, class KeyAt>
__device__ __forceinline__ void sel_groups(const SelArgs& a, const SelSmem s, KeyAt key_at) {
  const int F = a.F, ngroups = (F + a.gb - 1) / a.gb;
  for (int gi = threadIdx.x; gi < ngroups; gi += NT) {
    const int j0 = gi * a.gb, len = min(a.gb, F - j0), take = min(a.ga, len);
    unsigned bk;
    int bj;
    group_threshold(key_at, j0, len, take, bk, bj);
    for (int j = j0; j < j0 + len; ++j) {
      const unsigned key = key_at(j);
      if (key > bk || (key == bk && j <= bj)) atomicOr(&s.sel[j >> 5], 1u << (j & 31));
    }
  }
  __syncthreads();
}

// Stages 2-4, forced: the channels of force row r.
template <int NT>
__device__ __forceinline__ void sel_force(const SelArgs& a, const SelSmem s, int r) {
  for (int i = threadIdx.x; i < a.kept; i += NT) {
    const int j = a.force[static_cast<std::size_t>(r) * a.kept + i];
    if (j < a.F) atomicOr(&s.sel[j >> 5], 1u << (j & 31));
  }
  __syncthreads();
}

// Visits this thread's kept channels (words [w0, w1) of s.sel, consecutive across threads) in ascending
// order with their position among the row's kept channels: emit(pos, j). Returns the row's count.
template <int NT, class Emit>
__device__ __forceinline__ unsigned sel_visit_kept(const SelSmem s, int w0, int w1, Emit emit) {
  unsigned c = 0;
  for (int w = w0; w < w1; ++w) c += __popc(s.sel[w]);
  unsigned tot;
  unsigned pos = block_excl_scan<NT>(c, s.scratch, tot);
  for (int w = w0; w < w1; ++w)
    for (unsigned m = s.sel[w]; m; m &= m - 1) emit(pos++, 32 * w + __ffs(m) - 1);
  return tot;
}

// Stage 5, more than one row: the cluster's union list (channel | row mask << 16, ascending) and its length
// from the C blocks' kept bits in distributed shared memory. Block r writes words [r Wp / C, (r+1) Wp / C).
template <int NT>
__device__ __forceinline__ void sel_union_list(const SelArgs& a, const SelSmem s, int r) {
  const int tid = threadIdx.x, Wp = a.Wp;
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  const unsigned* rs[kMaxRows];
#pragma unroll
  for (int rr = 0; rr < kMaxRows; ++rr) rs[rr] = rr < a.R ? cl.map_shared_rank(s.sel, rr) : s.sel;
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
  unsigned pos = block_excl_scan<NT>(c, s.scratch, tot);
  if (tid == 0) s.info[8] = tot;
  cl.sync();
  unsigned base = 0;
  for (int rr = 0; rr < r; ++rr) base += cl.map_shared_rank(s.info, rr)[8];
  pos += base;
  for (int w = u0; w < u1; ++w) {
    unsigned rows[kMaxRows], u = 0;
#pragma unroll
    for (int rr = 0; rr < kMaxRows; ++rr) {
      rows[rr] = rr < a.R ? rs[rr][w] : 0u;
      u |= rows[rr];
    }
    for (; u; u &= u - 1) {
      const int bit = __ffs(u) - 1;
      unsigned m = 0;
#pragma unroll
      for (int rr = 0; rr < kMaxRows; ++rr) m |= ((rows[rr] >> bit) & 1u) << rr;
      a.list[pos++] = static_cast<unsigned>(32 * w + bit) | (m << 16);
    }
  }
  if (r == a.C - 1 && tid == 0) *a.ucount = base + tot;
  cl.sync();  // remote shared memory stays alive until every block has read it
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
  // The fixed-size regions first, at constant offsets (their addresses need no arithmetic on a.Fp / a.Wp),
  // then the histogram, the keys and the kept bits; sel_smem_bytes is their sum.
  unsigned* scratch = reinterpret_cast<unsigned*>(smem);
  unsigned* info = scratch + 32;
  auto* cand = reinterpret_cast<unsigned long long*>(info + 32);
  unsigned* hist = reinterpret_cast<unsigned*>(cand + kRankMax);  // 16-byte aligned: 4352 bytes in
  unsigned* keys_ = hist + (is_topk ? kHBins : 0);
  unsigned* sel = keys_ + (CACHE ? a.Fp : 0);
  unsigned* aux = sel + a.Wp;
  const SelSmem s{hist, keys_, sel, aux, cand, scratch, info};

  const int tid = threadIdx.x;
  const int r = static_cast<int>(blockIdx.x) % a.C;  // row (rank in the cluster)
  const int h = static_cast<int>(blockIdx.x) / a.C;  // cluster 0 selects; clusters 1..H-1 only prefetch
  const bool row = r < a.R;  // block-uniform
  const int Wp = a.Wp;
  // key_at reads the kernel's own pointer (keys_), not a field of s: a shared-memory pointer reached through
  // a struct captured by reference loses its address space (generic loads and atomics instead of shared
  // ones: 3% on the 1b MoC layer, measured).
  const float* Gr = a.G + static_cast<std::size_t>(row ? r : 0) * a.Fp;
  auto key_at = [&](int j) -> unsigned {
    if constexpr (CACHE) return keys_[j];
    else return sel_key<RULE>(__ldcg(Gr + j), rule);
  };
  if (is_topk)
    for (int i = tid; i < kHBins / 4; i += NT) reinterpret_cast<uint4*>(s.hist)[i] = make_uint4(0, 0, 0, 0);
  for (int w = tid; w < Wp; w += NT) s.sel[w] = 0;
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

  // 1. Keys into shared memory and the histogram.
  if (row && mode != kSelForce && (CACHE || is_topk)) sel_keys<NT, CACHE, RULE>(s, Gr, a.F, a.Fp, rule, is_topk);
  __syncthreads();
  stamp.claim();  // the stamp flag's read has landed by now
  if (h > 0 && !(row && is_topk)) return;

  // 2-4. The kept bits of row r.
  if (row && is_topk) {
    const topk::Smem tm{hist, sel, aux, cand, scratch, info};
    if (!sel_topk<NT>(a, tm, key_at, h, r)) return;
  } else if (row && mode == kSelGroup) {
    sel_groups<NT>(a, s, key_at);
  } else if (row && mode == kSelForce) {
    sel_force<NT>(a, s, r);
  }

  // 5. idx_out row r (ascending) and the union list (the mask row, top-K, is written by then). Words of the
  // kept bits owned by this thread: consecutive, so that thread order is channel order.
  const bool emit_idx = row && a.idx_out && mode != kSelForce;
  if (!emit_idx && !a.list) return;
  const int wpt = (Wp + NT - 1) / NT;
  const int w0 = min(Wp, tid * wpt), w1 = min(Wp, w0 + wpt);
  std::uint16_t* idx = emit_idx ? a.idx_out + static_cast<std::size_t>(r) * a.kept : nullptr;
  const unsigned kept = static_cast<unsigned>(a.kept);
  if (ONE || a.C == 1) {  // one row: idx_out and the list share positions (sel_visit_kept's loop, inline)
    unsigned c = 0;
    for (int w = w0; w < w1; ++w) c += __popc(s.sel[w]);
    unsigned tot;
    unsigned pos = block_excl_scan<NT>(c, s.scratch, tot);
    for (int w = w0; w < w1; ++w)
      for (unsigned m = s.sel[w]; m; m &= m - 1) {
        const int j = 32 * w + __ffs(m) - 1;
        if (emit_idx && pos < kept) idx[pos] = static_cast<std::uint16_t>(j);
        if (a.list) a.list[pos] = static_cast<unsigned>(j) | (1u << 16);
        ++pos;
      }
    if (a.list && tid == 0) *a.ucount = tot;
    return;
  }
  if constexpr (!ONE) {  // more than one row: idx_out per row, then the cluster's union list
    if (emit_idx)
      sel_visit_kept<NT>(s, w0, w1, [idx, kept](unsigned pos, int j) {
        if (pos < kept) idx[pos] = static_cast<std::uint16_t>(j);
      });
    if (a.list) sel_union_list<NT>(a, s, r);
  }
}

// Row top-K handed over as mask bytes only (a.mask; no idx_out, union list, prefetch or other mode): the
// decode engine's MoC selection at every batch, one block per row and no cluster. It holds nothing but the
// code it runs -- the selection is bound by instruction fetch (one block runs it once per layer, its code
// evicted by the weight streams in between): the general build's extra code cost 1.3% of the batch-1 MoC decode
// step (H100, bench/micro/NOTES.md, ninth session). An overload of k_select (first template argument MasksOnly),
// so that the profiler's kernel name -- k_select, the top-K part -- is the same whichever one runs.
struct MasksOnly {};
template <class Tag, int NT, int RULE>
__global__ void __launch_bounds__(NT, 1) k_select(SelArgs a) {
  static_assert(std::is_same_v<Tag, MasksOnly>);
  extern __shared__ __align__(16) unsigned char smem[];
  // k_select's layout (sel_smem_bytes), keys cached.
  unsigned* scratch = reinterpret_cast<unsigned*>(smem);
  unsigned* info = scratch + 32;
  auto* cand = reinterpret_cast<unsigned long long*>(info + 32);
  unsigned* hist = reinterpret_cast<unsigned*>(cand + kRankMax);
  unsigned* keys_ = hist + kHBins;
  unsigned* sel = keys_ + a.Fp;
  unsigned* aux = sel + a.Wp;
  const SelSmem s{hist, keys_, sel, aux, cand, scratch, info};
  const int tid = threadIdx.x;
  const int r = static_cast<int>(blockIdx.x);  // row
  for (int i = tid; i < kHBins / 4; i += NT) reinterpret_cast<uint4*>(hist)[i] = make_uint4(0, 0, 0, 0);
  step::StampScope stamp(a.stamps);
  if (a.spec) {  // the word is cleared before the up/down kernel (launched after our trigger) can poll it
    if (tid == 0) {
      *reinterpret_cast<volatile unsigned*>(a.spec) = 0u;
      __threadfence();
    }
    __syncthreads();
  }
  griddep_launch();
  griddep_wait();
  stamp.start(step::StampKernel::k_select, step::StageId::topk);
  __syncthreads();  // the histogram is zeroed before any thread counts into it (k_select says why)
  if (a.zero) zero_part(a.zero, a.zero_n16, r, a.R, NT);
  sel_keys<NT, true, RULE>(s, a.G + static_cast<std::size_t>(r) * a.Fp, a.F, a.Fp, RULE, true);
  __syncthreads();
  stamp.claim();
  const topk::Smem tm{hist, sel, aux, cand, scratch, info};
  unsigned tb, need, cnt;
  topk::threshold_bin<NT>(tm, static_cast<unsigned>(a.k), tb, need, cnt);
  if (a.spec && a.spec_shift >= 0 && tid == 0) {  // channels above the bin are kept: the up/down blocks may start on them (and the bin's)
    __threadfence();
    st_release_gpu(a.spec, a.spec_tag << 16 | (tb + static_cast<unsigned>(a.spec_shift) + 1u));
  }
  topk::keep_bits<NT, true>(tm, [&](int j) -> unsigned { return keys_[j]; }, a.F, a.Wp, tb, need, cnt,
                            a.mask + static_cast<std::size_t>(r) * a.Fp, static_cast<unsigned char>(1u << r));
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

// Exact row top-K of the decode FFN's gate values inside one thread block (ffn_decode_select.cuh: the
// selection kernel). The caller has built a shared-memory histogram of the top kHistBits bits of every
// channel's order-preserving key (select_key.cuh sel_key); then:
//   threshold_bin  the bin that holds the K-th largest key (block scan of the bins from the top);
//   keep_bits      channels above that bin are kept; the bin's candidates (gathered in any order) are ranked
//                  pairwise (larger key first, then the lower channel), or -- a bin of more candidates than
//                  threads (near-constant rows) -- resolved by radix passes over the remaining bits, ties to the
//                  lower channels.
// The result is one bit per channel in `sel` (ascending channel order), exactly K bits set, and optionally the
// same as one byte per channel (a mask row: v where kept, 0 elsewhere, every byte up to 32 Wp written).
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/decode_device.cuh"

namespace moc::cuda::ffn::topk {

using moc::cuda::dev::block_excl_scan;

constexpr int kHistBits = 13;  // first-level histogram: the top 13 bits of the order-preserving key
constexpr int kHBins = 1 << kHistBits;
constexpr int kHShift = 32 - kHistBits;
constexpr int kRankMax = 512;  // candidate slots in shared memory (ranked pairwise: at most the block's threads)

// Shared memory of one selection: hist [kHBins], sel and aux [Wp] (Wp = channel words of 32), cand [kRankMax]
// (u64: a candidate's key << 32 | 0xFFFF - channel), scratch and info [32] each.
struct Smem {
  unsigned* hist;
  unsigned* sel;
  unsigned* aux;
  unsigned long long* cand;
  unsigned* scratch;
  unsigned* info;
};
// The bin of the K-th largest key (tb), how many channels to take from it (need) and how many it holds
// (cnt). All NT threads; hist complete (synchronized) on entry.
template <int NT>
__device__ __forceinline__ void threshold_bin(const Smem& m, unsigned K, unsigned& tb, unsigned& need, unsigned& cnt) {
  static_assert(kHBins % (4 * NT) == 0, "bins per thread: a multiple of 4");
  constexpr int BPT = kHBins / NT;  // thread t holds bins [BPT t, BPT t + BPT)
  const int tid = threadIdx.x;
  unsigned hb[BPT], s = 0;
#pragma unroll
  for (int i = 0; i < BPT / 4; ++i) {
    const uint4 v = reinterpret_cast<const uint4*>(m.hist + tid * BPT)[i];
    hb[4 * i] = v.x;
    hb[4 * i + 1] = v.y;
    hb[4 * i + 2] = v.z;
    hb[4 * i + 3] = v.w;
    s += v.x + v.y + v.z + v.w;
  }
  unsigned tot;
  const unsigned excl = block_excl_scan<NT>(s, m.scratch, tot);
  const unsigned above = tot - excl - s;  // keys in the bins of higher threads
  if (above < K && above + s >= K) {
    unsigned run = above;
    bool found = false;
#pragma unroll
    for (int e = BPT - 1; e >= 0; --e)
      if (!found) {
        if (run + hb[e] >= K) {
          found = true;
          m.info[0] = static_cast<unsigned>(tid * BPT + e);
          m.info[1] = K - run;  // channels to take from the bin
          m.info[2] = hb[e];    // channels in the bin
        } else {
          run += hb[e];
        }
      }
  }
  if (tid == 0) m.info[7] = 0;  // keep_bits' candidate counter
  __syncthreads();
  tb = m.info[0];
  need = m.info[1];
  cnt = m.info[2];
}

template <int NT, class KeyAt>
__device__ __noinline__ void radix_resolve(const Smem& m, KeyAt key_at, int Wp, unsigned tb, unsigned need,
                                           unsigned cnt);

// A candidate as one number that orders as the ranking does: the larger key first, then the lower channel
// (channels < 65536: the decode FFN's channel indices are u16).
__device__ __forceinline__ unsigned long long cand_word(unsigned key, int j) {
  return (static_cast<unsigned long long>(key) << 32) | (0xFFFFu - static_cast<unsigned>(j));
}

// The kept bits of a row into m.sel[0, Wp) (every word written). key_at(j): the key of channel j < F.
// MASK: also the row's mask bytes mask[0, 32 Wp), v where kept (mask not null); without it no mask code at all
// (the selection is bound by instruction fetch, so a kernel carries only what it runs).
template <int NT, bool MASK, class KeyAt>
__device__ void keep_bits(const Smem& m, KeyAt key_at, int F, int Wp, unsigned tb, unsigned need, unsigned cnt,
                          unsigned char* mask, unsigned char v) {
  constexpr int NW = NT / 32;
  constexpr int kRank = NT < kRankMax ? NT : kRankMax;  // candidates ranked pairwise (one per thread)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned* sel = m.sel;
  unsigned* aux = m.aux;
  const bool all = need == cnt;
  // Channels above the bin are kept; those in it are candidates (one warp per 32-channel word), appended to
  // cand in any order (the ranking below breaks ties by channel, not by slot).
  for (int w = warp; w < Wp; w += NW) {
    const int j = 32 * w + lane;
    const unsigned key = j < F ? key_at(j) : 0u;
    const unsigned bin = key >> kHShift;
    const bool up = j < F && bin > tb, in = j < F && bin == tb;
    const unsigned above = __ballot_sync(0xffffffffu, up);
    const unsigned cb = __ballot_sync(0xffffffffu, in);
    if (lane == 0) {
      sel[w] = above | (all ? cb : 0u);
      aux[w] = cb;
    }
    if constexpr (MASK) mask[j] = up || (all && in) ? v : 0;
    if (!all && cb) {
      unsigned base = 0;
      if (lane == 0) base = atomicAdd(&m.info[7], static_cast<unsigned>(__popc(cb)));
      base = __shfl_sync(0xffffffffu, base, 0);
      const unsigned pos = base + static_cast<unsigned>(__popc(cb & ((1u << lane) - 1u)));
      if (in && pos < static_cast<unsigned>(kRank)) m.cand[pos] = cand_word(key, j);
    }
  }
  __syncthreads();
  if (all) return;
  if (cnt <= static_cast<unsigned>(kRank)) {
    if (tid < static_cast<int>(cnt)) {
      // One 64-bit load and compare per rival: (key, then the lower channel) is one number (cand_word). The
      // earlier (key, channel) pair compare -- two shared loads and a branch per rival -- cost ~2 us per layer
      // of the batch-1 decode step (H100, bench/micro/NOTES.md, ninth session).
      const unsigned long long mine = m.cand[tid];
      unsigned rank = 0;
      for (int k = 0; k < static_cast<int>(cnt); ++k) rank += m.cand[k] > mine ? 1u : 0u;
      const unsigned cj = 0xFFFFu - static_cast<unsigned>(mine & 0xFFFFu);
      if (rank < need) {
        atomicOr(&sel[cj >> 5], 1u << (cj & 31));
        if constexpr (MASK) mask[cj] = v;
      }
    }
    __syncthreads();
    return;
  }
  radix_resolve<NT>(m, key_at, Wp, tb, need, cnt);
  if constexpr (MASK)  // the bytes of the bin's channels follow the kept bits radix_resolve settled
    for (int j = tid; j < 32 * Wp; j += NT) mask[j] = (sel[j >> 5] >> (j & 31)) & 1u ? v : 0;
}

// keep_bits' cold path (a threshold bin of more candidates than threads: near-constant rows), out of line
// so that the common path stays one short stretch of code (the selection is bound by instruction fetch).
template <int NT, class KeyAt>
__device__ __noinline__ void radix_resolve(const Smem& m, KeyAt key_at, int Wp, unsigned tb, unsigned need,
                                           unsigned cnt) {
  constexpr int NW = NT / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned* sel = m.sel;
  unsigned* aux = m.aux;
  const int wpt = (Wp + NT - 1) / NT;
  const int w0 = min(Wp, tid * wpt), w1 = min(Wp, w0 + wpt);
  // Radix passes over bits [11, 19), [3, 11), [0, 3) of the candidates' keys.
  unsigned P = tb << kHShift, known = ~0u << kHShift, rem = need, cntT = cnt;
  unsigned* rh = m.hist;  // 256 bins
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 11 : pass == 1 ? 3 : 0;
    const unsigned dmask = pass == 2 ? 7u : 255u;
    for (int i = tid; i < 256; i += NT) rh[i] = 0;
    __syncthreads();
    for (int w = warp; w < Wp; w += NW) {
      const int j = 32 * w + lane;
      const bool in = (aux[w] >> lane) & 1u;
      const unsigned key = in ? key_at(j) : 0u;
      const bool match = in && (key & known) == P;
      const unsigned dig = match ? (key >> shift) & dmask : 256u + static_cast<unsigned>(lane);
      const unsigned peers = __match_any_sync(0xffffffffu, dig);
      if (match && lane == __ffs(peers) - 1) atomicAdd(&rh[dig], static_cast<unsigned>(__popc(peers)));
    }
    __syncthreads();
    static_assert(NT >= 256, "one radix bin per thread");
    const unsigned v = tid < 256 ? rh[tid] : 0u;
    unsigned tot;
    const unsigned excl = block_excl_scan<NT>(v, m.scratch, tot);
    const unsigned above = tot - excl - v;
    if (tid < 256 && above < rem && above + v >= rem) {
      m.info[3] = static_cast<unsigned>(tid);
      m.info[4] = rem - above;
      m.info[5] = v;
    }
    __syncthreads();
    P |= m.info[3] << shift;
    known |= dmask << shift;
    rem = m.info[4];
    cntT = m.info[5];
  }
  // Candidates above the K-th key are kept; those equal to it are ties, the lowest channels first.
  for (int w = warp; w < Wp; w += NW) {
    const int j = 32 * w + lane;
    const bool in = (aux[w] >> lane) & 1u;
    const unsigned key = in ? key_at(j) : 0u;
    const unsigned gt = __ballot_sync(0xffffffffu, in && key > P);
    const unsigned eq = __ballot_sync(0xffffffffu, in && key == P);
    __syncwarp();  // every lane has read aux[w] before lane 0 replaces it
    if (lane == 0) {
      sel[w] |= gt;
      aux[w] = eq;
    }
  }
  __syncthreads();
  if (rem == cntT) {
    for (int w = w0; w < w1; ++w) sel[w] |= aux[w];
  } else {
    unsigned c = 0;
    for (int w = w0; w < w1; ++w) c += __popc(aux[w]);
    unsigned tot;
    unsigned before = block_excl_scan<NT>(c, m.scratch, tot);
    for (int w = w0; w < w1; ++w) {
      unsigned t = aux[w], keep = 0;
      while (t && before < rem) {
        const unsigned low = t & (0u - t);
        keep |= low;
        t ^= low;
        ++before;
      }
      before += __popc(t);
      sel[w] |= keep;
    }
  }
  __syncthreads();
}

}  // namespace moc::cuda::ffn::topk

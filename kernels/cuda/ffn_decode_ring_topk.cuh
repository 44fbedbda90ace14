// MoC row top-K at decode (one row) as one kernel (ffn_decode.cu launches it; measurements in bench/micro/NOTES.md).
#pragma once
#include "kernels/cuda/ffn_decode_ring.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Top-K ring kernel (one row, d <= kDownCols; named k_updown for the profile, as every kernel of the decode FFN
// that ends with the down projection). Row top-K needs every channel's gate value before any channel is known to be
// kept, so unlike the a:b kernel (ffn_decode_ring_ab.cuh) the blocks hand their keys over through the grid: the
// grid is one block per SM (or per SM of a resident cluster), all resident at once, and meets once on a counter in
// global memory (twice when idx_out is asked):
//   1. gate: block b owns channels [b F / nb, (b + 1) F / nb) and streams their W_gate rows through the dense ring's
//      shared-memory ring (a producer warp's bulk copies, items of cpg rows, the first S before the PDL wait); the
//      consumers' dot products give its gate values, whose keys (select_key.cuh sel_key: the rule, NaN as -inf, -0
//      as +0) it writes into a grid-wide key array [F] and adds into a grid-wide histogram of their top kTrBits bits;
//      then it arrives on the counter and waits for the grid (while the producer warp asks L2 for the W_up / W_down
//      rows of the block's likely kept channels: Options::topk_ring_prefetch).
//   2. top-K: every block reads, in one L2 round trip, the whole histogram (8 KB: thread t its bins [8t, 8t + 8)) and
//      the whole key array (into its idle ring), and finds the same threshold bin tb (the bin of the K-th largest
//      key), need (channels to take from it) and cnt (channels in it). Its channels above tb -- and those in tb when
//      need == cnt -- are kept; where need < cnt, each of its channels in tb is a candidate, ranked against every key
//      by all of the consumer threads (larger key first, then the lower channel: the selection kernel's rule,
//      ffn_topk.cuh) and kept below K. Meanwhile the producer warp, idle since its W_gate rows, copies the W_up and
//      W_down rows of the channels that may be kept (the kept ones and the candidates) into the kept area (a lane a
//      channel, one mbarrier per channel): by default its list of them is in channel order, every row asked for
//      once the channels are classified; with Options::topk_ring_spec the list is in key order and the rows of its
//      first entries, as many as the block keeps on average, are asked for as soon as the grid has met, the rest
//      after the classification; a candidate ranked out is skipped (its rows waited for, unused).
//   3. (only when idx_out is asked) each block publishes its kept count, meets the grid again on a second counter,
//      and writes its kept channels after those of the blocks below it (idx_out ascending, as the selection kernel).
// Then each kept channel's W_up row times x (a channel per warp), z = SiLU(g) u, the kept W_down rows times z into
// each thread's columns [8t, 8t + 8), and the dense ring kernel's way out (the partials pushed within the cluster,
// fp32 atomics, the last block of a column slice adds into out). A block keeps at most kcap channels' rows in its
// kept area and xcap more in the ring past the key array; kept channels past those (a block whose range holds
// unusually many of the largest keys) read their rows from global memory. The last block done with the grid's
// histogram, counters and keys (a ticket on a third counter) zeroes the histogram and counters again: they live in
// the zeroed scratch (or the workspace head the prep kernel zeroes).
// The steps after the meeting are each one short pass over shared memory by every consumer warp: the first forms
// (a grid-wide candidate list with a second meeting; a warp per candidate) left one warp's chain of dependent
// steps on the critical path, ~9 us a layer (bench/micro/NOTES.md, twenty-second session).

constexpr int kTrBits = 11;
constexpr int kTrBins = 1 << kTrBits;  // 8 bins per consumer thread
constexpr int kTrShift = 32 - kTrBits;
// Counters after the histogram, one 128-byte line each.
enum TrCounter : int { kTrHist = 0, kTrCounts = 1, kTrDone = 2, kTrCounters = 3 };
constexpr std::size_t kTrZeroBytes = static_cast<std::size_t>(kTrBins) * 4 + static_cast<std::size_t>(kTrCounters) * kLine * 4;
static_assert(kTrBins == 8 * kRingConsumers, "threshold_scan: 8 bins per consumer thread");

struct RingTopkArgs : RingIo {
  std::uint16_t* idx_out;    // [1, k] or null
  unsigned* hist;            // [kTrBins] then the counters (kTrCounters lines of kLine): zero on entry and exit
  unsigned* keys;            // [F rounded up to 4]: every channel's key
  unsigned* counts;          // [gridDim.x]: kept channels per block (idx_out)
  int k, rule;
  int cpg;   // W_gate rows of one gate item
  int S;     // ring slots
  int nmax;  // most channels of one block
  int kcap;  // kept channels whose rows a block holds in its kept area
  int xcap;  // and then in the ring, after the key array (idle once the gate items are consumed)
  int xoff;  // bytes: where in the ring (16-aligned, past the key array)
  int prefetch;  // Options::topk_ring_prefetch
  int spec;      // Options::topk_ring_spec: 0, the kept list in channel order (tr_list_rows); s > 0, in key order
                 // with the rows of its first mpf + s - 1 entries asked for once the grid has met (tr_spec_rows)
};

// Ring slots of the top-K kernel (Options::topk_ring_slots). At the 1b layer a block's 41-42 W_gate rows are 6 items
// of 8 (32 KB slots: cpg = kRingSlotBytes / (2 d)), so 3 slots hold half of them before the PDL wait and the rest
// are asked for as slots free up. (This said "3 items of 16, all in flight" from the kernel's first commit; the
// slots were never swept. Each more slot takes 4 kept-area rows and gives 4 idle-ring rows back -- kcap + xcap stays
// 23 from 3 to 6 slots -- so 6 would put all of them in flight: bench/micro/NOTES.md, twenty-eighth session, exp31.)
constexpr int kRingTopkSlots = 3;

// (Shared memory: ffn_decode_ring_plan.h ring_topk_smem.)

// Consumers (the caller's barrier passed): this block arrives on the grid counter and waits until all nb have.
// Thread 0's fence orders the block's earlier global writes and atomics (ordered before it by that barrier) before
// its arrival; readers afterwards use L2 loads (__ldcg), never an L1 line left by an earlier call.
// The launch makes every block resident at once (one per SM, whole clusters only as many as fit), and within the
// engine nothing else holds SMs for long. Where something does -- a GPU shared through MPS with fewer SMs than the
// device reports, another such kernel on a second stream -- the meeting would never complete: after
// kTrMeetTimeoutNs the block says so and traps (the launch fails with an error instead of hanging). A cooperative
// launch would have the runtime check residency instead, but cost 2% of a MoC decode step (H200,
// bench/micro/NOTES.md twenty-third session).
constexpr unsigned long long kTrMeetTimeoutNs = 10ull * 1000 * 1000 * 1000;
__device__ __forceinline__ void tr_grid_meet(unsigned* ctr, unsigned nb) {
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, 1u);
    const unsigned long long t0 = step::globaltimer();
    unsigned polls = 0;
    while (*reinterpret_cast<volatile unsigned*>(ctr) < nb) {
      if ((++polls & 1023u) == 0 && step::globaltimer() - t0 > kTrMeetTimeoutNs) {
        printf("mocbench k_updown (MoC top-K at batch 1): block %u waited 10 s for the grid's %u blocks to meet; they "
               "are not all resident (a GPU shared through MPS?). Aborting the kernel.\n",
               blockIdx.x, nb);
        __trap();
      }
    }
    __threadfence();
  }
  consumers_sync<kRingConsumers>();
}

// Named barriers of the consumers' hand-over to the producer warp (1 is consumers_sync).
constexpr int kTrClassified = 2, kTrListed = 3, kTrKeys = 4, kTrMet = 5;
// channel state bytes
constexpr unsigned char kTrOut = 0, kTrKept = 1, kTrCandidate = 2, kTrKeptCandidate = 3;

// The kernel's stages, in its order (each run by the threads the kernel calls it on; d = a.d).

// Channel j's place in the block's key order: how many of its n channels come before it (a larger key, or the same
// key and a lower channel).
__device__ __forceinline__ int tr_local_rank(const unsigned* ks, int n, int j) {
  const unsigned kj = ks[j];
  int r = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned ki = ks[i];
    r += (ki > kj || (ki == kj && i < j)) ? 1 : 0;
  }
  return r;
}

// Producer warp (Options::topk_ring_prefetch): once the consumers have the block's keys ks [n] (barrier kTrKeys), the
// W_up / W_down rows of its mpf channels of largest key -- as many as it keeps on average -- into L2, so that most kept
// rows come from L2 once the selection is known.
__device__ __forceinline__ void tr_prefetch_likely(const RingTopkArgs& a, const unsigned* ks, int c0, int n, int lane,
                                                   unsigned row_bytes) {
  const int d = a.d;
  named_sync<kTrKeys, kRingThreads>();
  const int mpf = static_cast<int>((static_cast<long long>(n) * a.k + a.F - 1) / a.F);
  for (int j = lane; j < n; j += 32) {
    if (tr_local_rank(ks, n, j) < mpf) {
      prefetch_l2(a.wu + static_cast<std::size_t>(c0 + j) * d, row_bytes);
      prefetch_l2(a.wd + static_cast<std::size_t>(c0 + j) * d, row_bytes);
    }
  }
  __syncwarp();
}

// Producer warp (Options::topk_ring_spec): once the consumers have the block's keys (barrier kTrKeys), the block's
// channels in key order (the larger key first, then the lower channel) into list [n] -- whatever the threshold, the
// channels that may be kept are its first entries (a key above or in the threshold bin is above or in it for every
// larger key) -- and, with Options::topk_ring_prefetch, the rows of its first mpf (the block's expected kept count)
// asked of L2 as tr_prefetch_likely does; then, once the grid has met (barrier kTrMet: every block's W_gate stream is
// done), the rows of its first ns = mpf + spec - 1 entries copied into kept_row(e) without waiting for the threshold.
// Returns ns (also in info[8]: the consumers wait for those copies even where fewer channels may be kept). H200, MoC
// decode at batch 1 against the channel-ordered list (ms per token, 3 rounds interleaved, two calls): ns = mpf 0.9515
// -> 0.9442 and 0.9526 -> 0.9452 (-0.8%), mpf - 1 0.9441, mpf + 1 0.9476, mpf + 2 0.9501; the same mpf rows copied
// before the meeting instead were slower (+3.6%: they compete with the other blocks' W_gate streams) --
// bench/micro/NOTES.md thirty-ninth session.
template <class KeptRow>
__device__ __forceinline__ int tr_spec_rows(const RingTopkArgs& a, const unsigned* ks, int* list, int* info,
                                            unsigned long long* kfull, const KeptRow& kept_row, int c0, int n,
                                            int lane, unsigned row_bytes) {
  const int d = a.d;
  named_sync<kTrKeys, kRingThreads>();
  const int mpf = static_cast<int>((static_cast<long long>(n) * a.k + a.F - 1) / a.F);
  const int ns = max(0, min(min(mpf + a.spec - 1, n), a.kcap));
  const unsigned long long pol = l2_stream_policy();
  for (int j = lane; j < n; j += 32) {
    const int r = tr_local_rank(ks, n, j);
    list[r] = j;
    if (a.prefetch && r < mpf) {
      prefetch_l2(a.wu + static_cast<std::size_t>(c0 + j) * d, row_bytes);
      prefetch_l2(a.wd + static_cast<std::size_t>(c0 + j) * d, row_bytes);
    }
  }
  if (lane == 0) info[8] = ns;
  __syncwarp();
  named_sync<kTrMet, kRingThreads>();
  for (int e = lane; e < ns; e += 32) {
    const int ch = c0 + list[e];
    bf16* dst = kept_row(e);
    mbar_expect_tx(kfull + e, 2u * row_bytes);
    bulk_copy(dst, a.wu + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
    bulk_copy(dst + d, a.wd + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
  }
  return ns;
}

// Producer warp after tr_spec_rows, the channels classified (barrier kTrClassified): how many may be kept (state not
// kTrOut: the key-ordered list's first entries), and the rows of entries [ns, min(that, kall)) asked for. Returns
// that count.
template <class KeptRow>
__device__ __forceinline__ int tr_spec_rest(const RingTopkArgs& a, const unsigned char* state, const int* list,
                                            unsigned long long* kfull, const KeptRow& kept_row, int kall, int ns,
                                            int c0, int n, int lane, unsigned row_bytes) {
  const int d = a.d;
  int known = 0;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    known += __popc(__ballot_sync(0xffffffffu, j < n && state[j] != kTrOut));
  }
  const unsigned long long pol = l2_stream_policy();
  for (int e = ns + lane; e < min(known, kall); e += 32) {
    const int ch = c0 + list[e];
    bf16* dst = kept_row(e);
    mbar_expect_tx(kfull + e, 2u * row_bytes);
    bulk_copy(dst, a.wu + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
    bulk_copy(dst + d, a.wd + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
  }
  return known;
}

// Producer warp, the channels classified (barrier kTrClassified): the block's channels that may be kept (state not
// kTrOut) listed in channel order, a lane a channel, and the rows of list entry e < kall asked for into kept_row(e)
// (completing on kfull[e]). Returns the list's length.
template <class KeptRow>
__device__ __forceinline__ int tr_list_rows(const RingTopkArgs& a, const unsigned char* state, int* list,
                                            unsigned long long* kfull, const KeptRow& kept_row, int kall, int c0, int n,
                                            int lane, unsigned row_bytes) {
  const int d = a.d;
  const unsigned long long pol = l2_stream_policy();
  int e0 = 0;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const bool k = j < n && state[j] != kTrOut;
    const unsigned m = __ballot_sync(0xffffffffu, k);
    if (k) {
      const int e = e0 + __popc(m & ((1u << lane) - 1u));
      list[e] = j;
      if (e < kall) {
        const int ch = c0 + j;
        bf16* dst = kept_row(e);
        mbar_expect_tx(kfull + e, 2u * row_bytes);
        bulk_copy(dst, a.wu + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
        bulk_copy(dst + d, a.wd + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
      }
    }
    e0 += __popc(m);
  }
  return e0;
}

// Consumers, the grid met: every load of the grid's state at once, one L2 round trip -- thread t's histogram bins
// [8t, 8t + 8) and, into sk (the idle ring), its share of the key array (needed where this block holds channels of a
// threshold bin that must be split; read regardless, so that no second round trip follows) -- then the scan for the
// bin of the K-th largest key: info[0] the bin, info[1] the channels to take from it, info[2] the channels in it.
__device__ __forceinline__ void tr_threshold_bin(const RingTopkArgs& a, unsigned* sk, int* info, unsigned* wtot, int tid,
                                                 int lane, int warp) {
  const int n4 = (a.F + 3) / 4;
  const uint4 h0 = __ldcg(reinterpret_cast<const uint4*>(a.hist) + 2 * tid);
  const uint4 h1 = __ldcg(reinterpret_cast<const uint4*>(a.hist) + 2 * tid + 1);
  {
    constexpr int kBatch = 8;  // uint4 loads in flight per thread
#pragma unroll 1
    for (int i0 = 0; i0 < n4; i0 += kBatch * kRingConsumers) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kRingConsumers + tid;
        if (i < n4) v[u] = __ldcg(reinterpret_cast<const uint4*>(a.keys) + i);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kRingConsumers + tid;
        if (i < n4) reinterpret_cast<uint4*>(sk)[i] = v[u];
      }
    }
  }
  {
    const unsigned hb[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    unsigned sum = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += hb[e];
    const unsigned incl = warp_incl_scan(sum, lane);
    if (lane == 31) wtot[warp] = incl;
    consumers_sync<kRingConsumers>();
    unsigned tot = 0, before = 0;
#pragma unroll
    for (int w = 0; w < kRingConsumers / 32; ++w) {
      tot += wtot[w];
      before += w < warp ? wtot[w] : 0u;
    }
    const unsigned above = tot - (before + incl);  // keys in the bins of higher threads
    const unsigned K = static_cast<unsigned>(a.k);
    if (above < K && above + sum >= K) {
      unsigned run = above;
      bool found = false;
#pragma unroll
      for (int e = 7; e >= 0; --e)
        if (!found) {
          if (run + hb[e] >= K) {
            found = true;
            info[0] = 8 * tid + e;
            info[1] = static_cast<int>(K - run);  // channels to take from the bin
            info[2] = static_cast<int>(hb[e]);    // channels in it
          } else {
            run += hb[e];
          }
        }
    }
    consumers_sync<kRingConsumers>();
  }
}

// Consumers: the block's channels kept (above the threshold bin tb, or in it when the whole bin is taken), out, or to
// rank (in it when it must be split: cand [info[6]], counted from zero).
__device__ __forceinline__ void tr_classify(const unsigned* ks, unsigned char* state, int* cand, int* info, unsigned tb,
                                            bool partial, int n, int tid) {
  for (int j = tid; j < n; j += kRingConsumers) {
    const unsigned bin = ks[j] >> kTrShift;
    unsigned char st = bin > tb || (bin == tb && !partial) ? kTrKept : kTrOut;
    if (bin == tb && partial) {
      st = kTrCandidate;
      const int c = atomicAdd(info + 6, 1);
      cand[c] = j;
    }
    state[j] = st;
  }
}

// Consumers, nc > 0: each candidate's (cand [nc]) rank among all F keys sk (larger first, ties: the lower channel
// first), the block's threads over the key array in shared memory (four keys a load, four candidates at a time),
// summed per warp into rank [nc]: kept below K. (A warp per candidate measured ~9 us a layer: one warp's chain of
// dependent steps.)
__device__ __forceinline__ void tr_rank_candidates(const RingTopkArgs& a, const unsigned* sk, const unsigned* ks,
                                                   const int* cand, unsigned* rank, int nc, int c0, int tid, int lane) {
  const int n4 = (a.F + 3) / 4;
  for (int c = tid; c < nc; c += kRingConsumers) rank[c] = 0;
  consumers_sync<kRingConsumers>();
  const uint4* sk4 = reinterpret_cast<const uint4*>(sk);
  for (int cb = 0; cb < nc; cb += 4) {
    unsigned mine[4], r[4] = {0u, 0u, 0u, 0u};
    int me[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const bool ok = cb + u < nc;
      const int j = ok ? cand[cb + u] : 0;
      mine[u] = ok ? ks[j] : 0xffffffffu;  // (no key is above it, none ties before channel -1)
      me[u] = ok ? c0 + j : -1;
    }
    for (int i = tid; i < n4; i += kRingConsumers) {
      const uint4 v = sk4[i];
      const unsigned kv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = 4 * i + e;
        const unsigned valid = q < a.F ? 1u : 0u;
#pragma unroll
        for (int u = 0; u < 4; ++u)
          r[u] += valid & ((kv[e] > mine[u] ? 1u : 0u) | (kv[e] == mine[u] && q < me[u] ? 1u : 0u));
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned t = warp_sum(r[u]);
      if (lane == 0 && t && cb + u < nc) atomicAdd(rank + cb + u, t);
    }
  }
}

// Consumers, idx_out asked: the block publishes its kept count, meets the grid again and writes its kept channels
// after those of the blocks below it (idx_out ascending, as the selection kernel).
__device__ __forceinline__ void tr_publish_idx(const RingTopkArgs& a, const unsigned char* state, unsigned* ctr, int kept,
                                               int c0, int n, int tid, int lane, int warp) {
  const unsigned nb = gridDim.x, b = blockIdx.x;
  if (tid == 0) a.counts[b] = static_cast<unsigned>(kept);
  consumers_sync<kRingConsumers>();
  tr_grid_meet(ctr + kTrCounts * kLine, nb);
  if (warp == 0) {
    unsigned base = 0;
    for (unsigned q = lane; q < b; q += 32) base += __ldcg(a.counts + q);
    base = warp_sum(base);
    if (lane == 0)
      for (int j = 0; j < n; ++j)
        if (state[j] == kTrKept || state[j] == kTrKeptCandidate)
          a.idx_out[base++] = static_cast<std::uint16_t>(c0 + j);
  }
  consumers_sync<kRingConsumers>();
}

// (Tag: TopK, so that the name's other templates -- template <int RP, ...> -- stay unambiguous.)
struct TopK {};
template <class Tag, int RULE>
__global__ void __launch_bounds__(kRingThreads, 1) k_updown(RingTopkArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d, S = a.S;
  const int rule = RULE >= 0 ? RULE : a.rule;
  const auto m = ring_topk_smem(S, d, a.nmax, a.kcap, a.xcap);
  float* rx = reinterpret_cast<float*>(smem + m.rx);  // the way out's receive area (clusters of 2)
  auto* rxbar = reinterpret_cast<unsigned long long*>(smem + m.rxbar);
  const bool push = a.C > 1;
  bf16* ring = reinterpret_cast<bf16*>(smem);
  bf16* kept = reinterpret_cast<bf16*>(smem + m.kept);  // [kcap][2][d]: W_up row, W_down row
  bf16* xs = reinterpret_cast<bf16*>(smem + m.xs);
  float* gv = reinterpret_cast<float*>(smem + m.gv);        // [nmax] gate values
  float* zs = reinterpret_cast<float*>(smem + m.zs);        // [nmax] z of the kept list's entries
  unsigned* ks = reinterpret_cast<unsigned*>(smem + m.ks);  // [nmax] keys
  int* cand = reinterpret_cast<int*>(smem + m.cand);        // [nmax] this block's channels to rank within the threshold bin
  int* list = reinterpret_cast<int*>(smem + m.list);        // [nmax] kept channels (block-local index)
  const bf16** drow = reinterpret_cast<const bf16**>(smem + m.drow);  // [nmax] list entry e's W_down row, null: ranked out
  unsigned char* state = smem + m.state;  // [nmax] kTrOut / kTrKept / kTrCandidate / kTrKeptCandidate
  auto* full = reinterpret_cast<unsigned long long*>(smem + m.bars);
  unsigned long long* empty = full + kRingMaxSlots;
  unsigned long long* kfull = empty + kRingMaxSlots;  // [kcap + xcap]
  int* misc = reinterpret_cast<int*>(smem + m.misc);  // 16 ints: the way out
  int* info = reinterpret_cast<int*>(smem + m.info);  // 16 ints
  float* red = reinterpret_cast<float*>(smem + m.red);           // [8] the norm's warp sums
  unsigned* wtot = reinterpret_cast<unsigned*>(smem + m.wtot);   // [8] the scan's warp totals

  const unsigned nb = gridDim.x, b = blockIdx.x;
  const int c0 = static_cast<int>(static_cast<long long>(b) * a.F / nb);
  const int n = static_cast<int>(static_cast<long long>(b + 1) * a.F / nb) - c0;
  const int ngi = (n + a.cpg - 1) / a.cpg;
  const std::size_t slot_elems = kRingSlotBytes / 2;
  const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
  unsigned* ctr = a.hist + kTrBins;
  step::StampScope stamp(a.stamps);

  if (push && tid == 0) ring_rx_init(rxbar);
  if (tid == 0) ring_init_bars(full, empty, S, kfull, a.kcap + a.xcap);
  // Kept entry e's W_up row (its W_down row follows): the kept area, then the ring past the key array, else none.
  const int kall = a.kcap + a.xcap;
  auto kept_row = [&](int e) {
    return e < a.kcap ? kept + static_cast<std::size_t>(e) * 2 * d
                      : ring + a.xoff / 2 + static_cast<std::size_t>(e - a.kcap) * 2 * d;
  };
  __syncthreads();
  if (push) ring_rx_open(rxbar, a.R, d);

  if (warp == kRingConsumers / 32) {
    // Producer: the W_gate rows do not depend on the previous kernel, so no wait.
    if (lane == 0) ring_produce_rows(ring, full, empty, S, a.wg, c0, n, a.cpg, d);
    // Then the rows of every channel that may be kept -- above the threshold bin, or in it (a candidate the consumers
    // are ranking meanwhile) -- are asked for (a channel a lane): by default all of them once the consumers have
    // classified them (barrier kTrClassified), listed in channel order (tr_list_rows); with Options::topk_ring_spec
    // the block's channels in key order, the first ones once the grid has met (tr_spec_rows), the rest after the
    // classification (tr_spec_rest). The list goes back on barrier kTrListed. Asked for before the ranking, not
    // after: decode 1.0098 -> 0.9952 ms (H200, bench/micro/NOTES.md twenty-third session).
    // (bar.sync / bar.arrive are .aligned: the warp reaches them converged, lane 0 back from its copies.)
    __syncwarp();
    int ns = 0;
    if (a.spec) ns = tr_spec_rows(a, ks, list, info, kfull, kept_row, c0, n, lane, row_bytes);
    else if (a.prefetch) tr_prefetch_likely(a, ks, c0, n, lane, row_bytes);
    named_sync<kTrClassified, kRingThreads>();
    const int e0 = a.spec ? tr_spec_rest(a, state, list, kfull, kept_row, kall, ns, c0, n, lane, row_bytes)
                          : tr_list_rows(a, state, list, kfull, kept_row, kall, c0, n, lane, row_bytes);
    if (lane == 0) info[4] = e0;
    __syncwarp();
    named_arrive<kTrListed, kRingThreads>();
    // The next kernel's launch after these requests (its early loads would queue before them otherwise): decode 1.0031
    // -> 0.9942 ms against a launch right after the W_gate requests (H200, same session).
    griddep_launch();
  } else {
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    ring_stage_x<1>(a.x, a.norm, a.eps, a.R, d, xs, red);
    consumers_sync<kRingConsumers>();
    stamp.claim();
    for (int i = 0; i < ngi; ++i) {
      const int s = i % S, j0 = i * a.cpg, cnt = min(a.cpg, n - j0);
      mbar_wait(full + s, static_cast<unsigned>(i / S) & 1u);
      const bf16* slot = ring + s * slot_elems;
      for (int u = warp; u < cnt; u += kRingConsumers / 32) {
        float g[1];
        ring_row_dot<1>(slot + static_cast<std::size_t>(u) * d, xs, d, g);
        if (lane == 0) gv[j0 + u] = g[0];
      }
      mbar_arrive(empty + s);  // every consumer thread, after its own reads of the slot
    }
    consumers_sync<kRingConsumers>();
    // 1. The block's keys into the grid's histogram and key array.
    for (int j = tid; j < n; j += kRingConsumers) {
      const unsigned key = sel_key<RULE>(gv[j], rule);
      ks[j] = key;
      a.keys[c0 + j] = key;
      atomicAdd(a.hist + (key >> kTrShift), 1u);
    }
    if (tid == 0) info[6] = 0;  // below: this block's channels to rank within the threshold bin
    consumers_sync<kRingConsumers>();
    if (a.prefetch || a.spec) named_arrive<kTrKeys, kRingThreads>();  // the keys ks[] for the producer (above)
    stamp.mark_synced(step::StageId::gate);
    tr_grid_meet(ctr + kTrHist * kLine, nb);
    if (a.spec) named_arrive<kTrMet, kRingThreads>();  // the grid has met: the producer's copies (tr_spec_rows)
    // 2. The threshold bin from the grid's histogram and, into the idle ring, its keys (one L2 round trip); the
    // block's channels classified by it; the producer lists them and asks for their rows while the consumers rank
    // the candidates; 3. (idx_out asked) the kept channels published.
    unsigned* sk = reinterpret_cast<unsigned*>(smem);  // (the launch checks that the keys fit: ring_topk_ok)
    tr_threshold_bin(a, sk, info, wtot, tid, lane, warp);
    const unsigned tb = static_cast<unsigned>(info[0]);
    const int need = info[1], cnt = info[2];
    const bool partial = need < cnt;
    tr_classify(ks, state, cand, info, tb, partial, n, tid);
    consumers_sync<kRingConsumers>();
    named_arrive<kTrClassified, kRingThreads>();  // the producer warp lists and asks for the rows (above)
    const int nc = info[6];
    unsigned* rank = reinterpret_cast<unsigned*>(zs);  // [nc] (zs is written only by the up GEMV)
    if (nc > 0) tr_rank_candidates(a, sk, ks, cand, rank, nc, c0, tid, lane);
    if (tid == 0) info[7] = 0;
    named_sync<kTrListed, kRingThreads>();  // the list of channels whose rows were asked for (the producer warp)
    // The ranked candidates: kept below K; the others stay kTrCandidate and are skipped below (their rows, asked for
    // already, are waited for but unused).
    for (int c = tid; c < nc; c += kRingConsumers) {
      if (rank[c] < static_cast<unsigned>(a.k)) state[cand[c]] = kTrKeptCandidate;
      else atomicAdd(info + 7, 1);
    }
    consumers_sync<kRingConsumers>();
    const int known = info[4];  // listed: kept channels and ranked-out candidates
    if (a.idx_out) tr_publish_idx(a, state, ctr, known - info[7], c0, n, tid, lane, warp);
    stamp.mark_synced(step::StageId::topk);
    griddep_launch();
    // Done with the grid's histogram, counters and keys (every load above has returned): a ticket, whose answer thread
    // 0 needs only after the up GEMV; the last block zeroes the histogram and counters for the next call.
    unsigned ticket = 0;
    if (tid == 0) ticket = atomicAdd(ctr + kTrDone * kLine, 1u);
    // Up: a kept channel per warp. The warp of entry e waits for its rows even where e was ranked out (no copy may be
    // in flight past the block's end) and leaves the down loop its W_down row (null: ranked out), so that after the
    // barrier below every copy has landed and the down loop is loads and FMAs only. (One warp's wait suffices: the
    // mbarrier's phase completion makes the copy visible to the waiting warp, and the barrier after the loop orders
    // that for every consumer thread.)
    const int upto = a.spec ? max(known, info[8]) : known;  // tr_spec_rows' copies past `known` waited for too
    for (int e = warp; e < upto; e += kRingConsumers / 32) {
      const int j = list[e];
      const bool in_smem = e < kall;
      if (in_smem) mbar_wait(kfull + e, 0u);
      if (e >= known) continue;
      if (state[j] == kTrCandidate) {  // ranked out
        if (lane == 0) {
          zs[e] = 0.0f;
          drow[e] = nullptr;
        }
        continue;
      }
      const bf16* row = in_smem ? kept_row(e) : a.wu + static_cast<std::size_t>(c0 + j) * d;
      float uv[1];
      ring_row_dot<1>(row, xs, d, uv);
      if (lane == 0) {
        zs[e] = silu_f(gv[j]) * uv[0];
        drow[e] = in_smem ? row + d : a.wd + static_cast<std::size_t>(c0 + j) * d;
      }
    }
    if (tid == 0) info[5] = ticket == nb - 1 ? 1 : 0;
    consumers_sync<kRingConsumers>();
    stamp.mark_synced(step::StageId::up);
    if (info[5]) {  // every block has passed its last read of them
      for (int i = tid; i < kTrBins / 4; i += kRingConsumers)
        __stcg(reinterpret_cast<uint4*>(a.hist) + i, make_uint4(0, 0, 0, 0));
      if (tid < kTrCounters) ctr[tid * kLine] = 0;
    }
    // Down: thread t owns columns [8t, 8t + 8) (d <= kDownCols).
    float acc[1][8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[0][e] = 0.f;
    if (tid * 8 < d) {
      // Independent entries, four in flight. (The former loop read list[e], state[list[e]], waited on the entry's
      // mbarrier, then read the row: a chain of shared-memory accesses per entry, ~2.4 us a layer for the most loaded
      // block's entries; this loop: decode 1.0102 -> 0.9755 ms, H200, bench/micro/NOTES.md twenty-third session.)
      const int c = tid * 8;
#pragma unroll 4
      for (int e = 0; e < known; ++e) {
        const bf16* row = drow[e];
        if (row) ring_down_fma<1>(*reinterpret_cast<const uint4*>(row + c), zs, e, acc);
      }
    }
    consumers_sync<kRingConsumers>();  // every copy consumed: the ring is free and holds the partials
    if (push) ring_push_partials<1>(acc, a.acc, a.R, d, rx, rxbar);
    else ring_partials<1>(acc, a.acc, a.R, d);
  }
  ring_out(a.out, a.acc, a.ctrl, a.R, a.d, a.C, misc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

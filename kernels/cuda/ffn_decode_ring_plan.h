// The decode FFN's three ring kernels -- dense (ffn_decode_ring.cuh), MoC a:b (ffn_decode_ring_ab.cuh), MoC row
// top-K (ffn_decode_ring_topk.cuh) -- as plain C++: the one description of each kernel's shared memory (the kernel
// carves its dynamic shared memory at these offsets, the launch asks for their total) and the launch's plan (slots,
// kept areas, the grid) from the shape and the device's shared memory. No CUDA here: tests/test_ffn_ring_plan.cpp
// checks the plans on the CPU, at the shapes the engine launches and over a sweep of others.
#pragma once
#include <algorithm>
#include <cstddef>

#if defined(__CUDACC__)
#define MOC_RING_HD __host__ __device__
#else
#define MOC_RING_HD
#endif

namespace moc::cuda::ffn {

constexpr unsigned kRingSlotBytes = 32u * 1024u;  // one slot: 4 gate+up channels or 8 W_down rows at d 2048
constexpr int kRingMaxSlots = 8;                  // mbarriers reserved for the ring (the launch uses fewer slots)
constexpr int kRingConsumerWarps = 8;             // the consumers; a producer warp beside them
// Rows 1-2: in the H100 decode study the ring at 3-4 rows made the dense step 5-7% slower than the up/down kernel
// with its norm kernel (1.62 / 1.63 vs 1.515 / 1.556 ms per token; one layer alone: the same 34.1 / 34.8 us), while at
// 1-2 rows it is faster (1.25 / 1.41 vs 1.334 / 1.451): bench/RESULTS.md part 11.
constexpr int kRingMaxRows = 2;
constexpr int kRingAbMaxCpg = 16;  // W_gate rows of one a:b gate item, at the most
constexpr int kRingTopkMaxCpg = 16;
constexpr int kRingMaxGrid = 1024;  // the top-K kernel's grid at the most (the workspace's per-block kept counts)

// A block's dynamic shared memory carved front to back: take(bytes) gives the piece's offset; take16 rounds the
// piece up to 16 bytes (so that what follows it stays 16-aligned for vector loads and bulk copies).
struct RingCarve {
  std::size_t at = 0;
  MOC_RING_HD std::size_t take(std::size_t bytes) {
    const std::size_t o = at;
    at += bytes;
    return o;
  }
  MOC_RING_HD std::size_t take16(std::size_t bytes) { return take((bytes + 15) & ~std::size_t(15)); }
};

// ---- Shared memory. Each starts with the ring, S slots at offset 0; `bars` holds the ring's full and empty
// mbarriers (kRingMaxSlots each) and then those of the kept area's entries. `rx` is the receive area of the way out
// (clusters of 2): the other block's partial sums for this block's half of d, [rp][d / 2] fp32, pushed into it
// (st.async) and counted on the mbarrier at `rxbar` (ffn_decode_ring.cuh ring_push_partials).

MOC_RING_HD inline std::size_t ring_rx_bytes(int rp, int d) { return static_cast<std::size_t>(rp) * (d / 2) * 4; }

// Dense: x [rp, d] bf16; gu [nmax][2][rp] then z [nmax][rp] fp32; the receive area and its mbarrier; the mbarriers;
// misc (16 ints: the way out); the norm's per-warp sums [8 warps][kRingMaxRows].
struct RingDenseSmem {
  std::size_t xs, gu, rx, rxbar, bars, misc, red, total;
};
MOC_RING_HD inline RingDenseSmem ring_dense_smem(int S, int d, int rp, int nmax) {
  RingCarve c;
  c.take(static_cast<std::size_t>(S) * kRingSlotBytes);
  RingDenseSmem m{};
  m.xs = c.take16(static_cast<std::size_t>(rp) * d * 2);
  m.gu = c.take16(static_cast<std::size_t>(nmax) * rp * 3 * 4);
  m.rx = c.take16(ring_rx_bytes(rp, d));
  m.rxbar = c.take16(8);
  m.bars = c.take(static_cast<std::size_t>(2 * kRingMaxSlots) * 8);
  m.misc = c.take(64);
  m.red = c.take(static_cast<std::size_t>(kRingConsumerWarps) * kRingMaxRows * 4);
  m.total = c.at;
  return m;
}

// a:b: the kept area [kmax][2][d] bf16 (W_up row, W_down row); x [rp, d] bf16; gv [nmax][rp] and zs [kmax][rp] fp32;
// the kept list [kmax]; one gate item's kept flags [kRingAbMaxCpg][kRingMaxRows]; the receive area and its mbarrier;
// the mbarriers (+ kmax); misc; the norm's per-warp sums.
struct RingAbSmem {
  std::size_t kept, xs, gv, zs, list, on, rx, rxbar, bars, misc, red, total;
};
MOC_RING_HD inline RingAbSmem ring_ab_smem(int S, int d, int rp, int nmax, int kmax) {
  RingCarve c;
  c.take(static_cast<std::size_t>(S) * kRingSlotBytes);
  RingAbSmem m{};
  m.kept = c.take(static_cast<std::size_t>(kmax) * 2 * d * 2);
  m.xs = c.take16(static_cast<std::size_t>(rp) * d * 2);
  m.gv = c.take16(static_cast<std::size_t>(nmax) * rp * 4);
  m.zs = c.take16(static_cast<std::size_t>(kmax) * rp * 4);
  m.list = c.take16(static_cast<std::size_t>(kmax) * 4);
  m.on = c.take16(static_cast<std::size_t>(kRingAbMaxCpg) * kRingMaxRows);
  m.rx = c.take16(ring_rx_bytes(rp, d));
  m.rxbar = c.take16(8);
  m.bars = c.take(static_cast<std::size_t>(2 * kRingMaxSlots + kmax) * 8);
  m.misc = c.take(64);
  m.red = c.take(static_cast<std::size_t>(kRingConsumerWarps) * kRingMaxRows * 4);
  m.total = c.at;
  return m;
}

// Top-K (one row): the kept area [kcap][2][d] bf16; x [d] bf16; gv, zs, the keys, the candidates and the kept list
// [nmax] (4 bytes each); the down loop's W_down row pointers [nmax]; the channels' states [nmax] bytes; the
// receive area (one row) and its mbarrier; the mbarriers (+ kcap + xcap: the kept area's and the ring's kept rows);
// misc (16 ints: the way out); info (16 ints); red (16 floats: the norm's per-warp sums) and wtot (16: the scan's
// warp totals).
struct RingTopkSmem {
  std::size_t kept, xs, gv, zs, ks, cand, list, drow, state, rx, rxbar, bars, misc, info, red, wtot, total;
};
MOC_RING_HD inline RingTopkSmem ring_topk_smem(int S, int d, int nmax, int kcap, int xcap) {
  RingCarve c;
  c.take(static_cast<std::size_t>(S) * kRingSlotBytes);
  RingTopkSmem m{};
  const std::size_t n4 = static_cast<std::size_t>(nmax) * 4;
  m.kept = c.take(static_cast<std::size_t>(kcap) * 2 * d * 2);
  m.xs = c.take16(static_cast<std::size_t>(d) * 2);
  m.gv = c.take16(n4);
  m.zs = c.take16(n4);
  m.ks = c.take16(n4);
  m.cand = c.take16(n4);
  m.list = c.take16(n4);
  m.drow = c.take16(static_cast<std::size_t>(nmax) * 8);
  m.state = c.take16(static_cast<std::size_t>(nmax));
  m.rx = c.take16(ring_rx_bytes(1, d));
  m.rxbar = c.take16(8);
  m.bars = c.take(static_cast<std::size_t>(2 * kRingMaxSlots + kcap + xcap) * 8);
  m.misc = c.take(64);
  m.info = c.take(64);
  m.red = c.take(64);
  m.wtot = c.take(64);
  m.total = c.at;
  return m;
}

// ---- Plans. `optin`: the shared memory a block may have (cudaDevAttrMaxSharedMemoryPerBlockOptin); `nb`: the
// blocks asked for (every SM; fewer when whole clusters are fewer); `slots`: the ring's slots asked for.

// Slots that fit beside the fixed parts (`fixed` = the layout at 0 slots), at most `slots`; 0 where none fit.
inline int ring_slots_fitting(std::size_t fixed, std::size_t optin, int slots) {
  if (fixed >= optin) return 0;
  const std::size_t fit = (optin - fixed) / kRingSlotBytes;
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(0, slots)), fit));
}

// Dense: a block per channel range of ceil(F / nb), S slots (at least 2 to launch).
struct RingDensePlan {
  int nb = 1, nmax = 0, S = 0;
  std::size_t smem = 0;
  bool ok() const { return S >= 2; }
};
inline RingDensePlan ring_dense_plan(int d, int F, int rp, int nb, int slots, std::size_t optin) {
  RingDensePlan pl;
  pl.nb = std::max(1, std::min(nb, F));
  pl.nmax = (F + pl.nb - 1) / pl.nb;
  pl.S = ring_slots_fitting(ring_dense_smem(0, d, rp, pl.nmax).total, optin, slots);
  pl.smem = ring_dense_smem(pl.S, d, rp, pl.nmax).total;
  return pl;
}

// a:b (groups of b channels keeping a of them per row): a block per range of whole groups; gate items of cpg rows (a
// multiple of b, at most kRingAbMaxCpg, one slot); the kept area holds every channel a block's groups may keep over
// the rows (min(b, rows a) a group); S slots (at least min(2, slots) to launch).
struct RingAbPlan {
  int cpg = 0, nb = 1, nmax = 0, kmax = 0, S = 0, gb = 0, slots = 0;
  std::size_t smem = 0;
  bool ok() const { return cpg >= std::max(1, gb) && S >= std::min(2, slots); }
};
inline RingAbPlan ring_ab_plan(int d, int F, int rows, int ga, int gb, int rp, int nb, int slots, std::size_t optin) {
  RingAbPlan pl;
  pl.gb = gb;
  pl.slots = slots;
  const unsigned row = static_cast<unsigned>(d) * 2u;
  const int fit = static_cast<int>(std::min<unsigned>(kRingAbMaxCpg, kRingSlotBytes / row));
  pl.cpg = gb > 0 ? fit / gb * gb : 0;
  if (pl.cpg < std::max(1, gb)) return pl;
  const int groups = (F + gb - 1) / gb;
  pl.nb = std::max(1, std::min(nb, groups));
  const int gpb = (groups + pl.nb - 1) / pl.nb;
  pl.nmax = gpb * gb;
  pl.kmax = gpb * std::min(gb, rows * ga);
  pl.S = ring_slots_fitting(ring_ab_smem(0, d, rp, pl.nmax, pl.kmax).total, optin, slots);
  pl.smem = ring_ab_smem(pl.S, d, rp, pl.nmax, pl.kmax).total;
  return pl;
}

// Top-K (one row): a block per channel range of ceil(F / nb); gate items of cpg rows (at most kRingTopkMaxCpg, one
// slot), S slots (at most one per item). After the gate the ring holds the grid's key array (u32 keys, rounded up to
// 16 bytes: it must fit) and then, from xoff, xcap kept channels' rows; the kept area takes kcap more in the shared
// memory left (the ring's entries' mbarriers reserved before it is sized). Kept channels past kcap + xcap read their
// rows from global memory. At the 1b layer (d 2048, F 5461, 132 blocks, 227 KB) kcap 15 + xcap 9: a block keeps ~8
// channels on average, the most loaded of 132 some 15-16 (a binomial estimate, not counted on the device); putting
// the rows past kcap into the ring made decode 0.9919 -> 0.9781 ms (H200, bench/micro/NOTES.md twenty-third session).
// `leave`: bytes of the opt-in limit left unused where a kept slot still fits in the rest (kRingTopkLeave at the
// launch: kcap 14 at the 1b layer).
struct RingTopkPlan {
  int cpg = 0, nb = 1, nmax = 0, S = 0, kcap = -1, xcap = 0, xoff = 0;
  bool keys_fit = false;
  std::size_t smem = 0;
  bool ok() const { return cpg >= 1 && S >= 1 && kcap >= 0 && nb <= kRingMaxGrid && keys_fit; }
};
// The launch leaves room for one block of the next kernel of the decode step beside each top-K block (which otherwise
// takes the SM's whole shared memory): the batch-1 QKV GEMV's (1.3 KB static, 2 d bytes of x -- its norm weight,
// staged before the wait, in x's place --, the 1 KB the runtime reserves a block: 6.4 KB at d 2048; its 64 registers
// fit beside the top-K block's 288 x 122), so that it is resident and streams its weights before its wait while the
// top-K block still works. H200, MoC decode at batch 1, this build against the one without the room (the same
// kernels): 0.9714 -> 0.9602 ms a token, dense and 2:8 unchanged; 16 KB measured the same as 8 KB, 32 KB slower
// (bench/micro/NOTES.md, twenty-eighth session). While the QKV staged its norm weight beside x (10.5 KB, 8.2 free)
// 16 KB (kcap 13 instead of 14) measured slower still, 0.9377 -> 0.9396 ms: the kept slot is worth more than the
// early start -- and the QKV's norm weight moved into x's place instead (bench/micro/NOTES.md thirty-eighth session;
// a test checks the room at the 1b layer).
constexpr std::size_t kRingTopkLeave = 8u * 1024u;
inline RingTopkPlan ring_topk_plan(int d, int F, int nb, int slots, std::size_t optin, std::size_t leave = 0) {
  RingTopkPlan pl;
  const unsigned row = static_cast<unsigned>(d) * 2u;
  pl.cpg = static_cast<int>(std::min<unsigned>(kRingTopkMaxCpg, kRingSlotBytes / row));
  if (pl.cpg < 1) return pl;
  pl.nb = std::max(1, std::min(nb, F));
  pl.nmax = (F + pl.nb - 1) / pl.nb;
  const int items = (pl.nmax + pl.cpg - 1) / pl.cpg;
  pl.S = std::max(0, std::min(slots, items));
  const std::size_t keys = static_cast<std::size_t>((F + 3) / 4) * 16;  // u32 keys in whole 16-byte vectors
  const std::size_t ring_bytes = static_cast<std::size_t>(pl.S) * kRingSlotBytes;
  pl.keys_fit = keys <= ring_bytes;
  pl.xoff = static_cast<int>(keys);
  const std::size_t entry = static_cast<std::size_t>(d) * 4;  // a kept channel's W_up and W_down rows
  const int xmax = ring_bytes > keys ? static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(pl.nmax),
                                                                              (ring_bytes - keys) / entry))
                                     : 0;
  const std::size_t fixed = ring_topk_smem(pl.S, d, pl.nmax, 0, xmax).total;
  const std::size_t per = entry + 8;  // + its mbarrier
  const std::size_t nmax = static_cast<std::size_t>(pl.nmax);
  const std::size_t cap = leave < optin && fixed + per <= optin - leave ? optin - leave : optin;
  pl.kcap = fixed >= cap ? -1 : static_cast<int>(std::min<std::size_t>(nmax, (cap - fixed) / per));
  pl.xcap = pl.kcap >= 0 ? std::min(xmax, pl.nmax - pl.kcap) : 0;
  pl.smem = ring_topk_smem(pl.S, d, pl.nmax, std::max(0, pl.kcap), pl.xcap).total;
  return pl;
}

// The grid: clusters of 2 where the shape allows them (two blocks or more; d % 16 == 0, so that each block of a
// cluster takes an 8-aligned slice of d / 2 columns in the way out) and at least one fits at once -- `fit(smem)`:
// how many clusters of 2 the device holds at once at that much shared memory a block, the occupancy query -- then
// as many whole clusters as fit, all resident at once (the top-K kernel's blocks meet on a counter), re-planned for
// that grid; else, or where that plan is not usable, clusters of 1 on the first plan's grid (one block per SM).
// C: the cluster size chosen.
template <class Plan, class PlanFor, class Fit>
Plan ring_cluster_grid(const Plan& first, int d, PlanFor plan_for, Fit fit, int& C) {
  C = 1;
  if (first.nb < 2 || d % 16 != 0) return first;
  const int even = first.nb / 2 * 2;
  const int clusters = fit(plan_for(even).smem);
  if (clusters < 1) return first;
  const Plan two = plan_for(std::min(even, clusters * 2));
  if (two.nb < 2 || !two.ok()) return first;
  C = 2;
  return two;
}

}  // namespace moc::cuda::ffn

// Raw-pointer launch API of the decode-time FFN kernels (ffn_decode.cu), for CudaOps and for the
// standalone micro-benchmark (bench/micro). Semantics: Ops::ffn_decode (kernels/ops.h).
//
// Pipeline (bf16, d % 8 == 0, rows <= 8 per chunk; other cases take a simple generic path). Every kernel is
// launched with programmatic dependent launch (PDL): it is scheduled while its predecessor runs, streams
// weights that do not depend on it, and waits (griddepcontrol.wait) before it reads or writes anything else.
//   dense: the up/down kernel's accumulator and counters live in a region the caller keeps zero (launch's
//          `zeroed`: CudaOps' zeroed scratch), else a tiny prep kernel zeroes the workspace head first. At 1-2
//          rows and d <= 2048 the ring kernel (ffn_decode_ring.cuh) runs the whole FFN: a producer warp streams
//          each block's W_gate, W_up and W_down rows into shared-memory slots with bulk copies, the other warps
//          consume them; it can normalize x itself (Problem::norm). Otherwise the
//          up/down kernel (one block per SM, a balanced range of ~d_ffn/#SMs channels each) stages its W_down
//          rows in shared memory with cp.async (issued before the wait) while it streams W_gate and W_up
//          (mma.sync m16n8k16, fp32), forms z = SiLU(g) * u, multiplies the staged rows, reduces the [rows, d] partials over a cluster of C
//          blocks in distributed shared memory and adds them with fp32 atomics into the workspace; the
//          last block of each column slice adds that into out (one bf16 rounding) and zeroes it again.
//   MoC a:b at 1-2 rows, where a block's kept rows fit shared memory (2:8 at one row of the 1b layer): one kernel
//          (ffn_decode_ring_ab.cuh) -- each block owns whole groups, streams their W_gate rows through a ring of
//          shared-memory slots (a producer warp, bulk copies), ranks each group as its rows arrive and copies the
//          kept channels' W_up and W_down rows at once, then z, the down projection and the dense ring's way out;
//          it can normalize x itself and keeps its accumulator in `zeroed` like the dense path.
//   MoC row top-K at one row, d <= 2048 (the decode engine's batch 1): one kernel too (ffn_decode_ring_topk.cuh) --
//          the same W_gate stream; the blocks (all resident at once) write their keys into a grid-wide key array
//          and histogram, meet once on a counter, each finds the threshold bin and ranks its channels of that bin
//          against every key, then copies its kept channels' W_up and W_down rows, z, the down projection and the
//          dense ring's way out; it normalizes x itself and keeps its histogram and counters in `zeroed`. Otherwise:
//   MoC:   gate GEMV kernel (balanced channel ranges, 3 blocks per SM) writing the fp32 gate values [rows,
//          d_ffn]; a:b with b | 16 is selected in its epilogue (idx_out, a row mask per channel). Row top-K
//          (and other a:b, and force_idx) run in a selection kernel: one 512-thread block per row: a
//          shared-memory histogram of the top 13 key bits gives the threshold bin, its few candidates are
//          ranked exactly (ties to the lower index, NaN as -inf), and idx_out rows (when asked) are written
//          ascending. Top-K writes one mask byte per (row, channel) -- 1 << row where kept -- and the up/down
//          kernel's blocks each read the bytes of their own channel range (as 2:8's mask); other a:b and
//          force_idx build the union list (channel | row mask << 16, merged over a cluster of row blocks) whose
//          slots the blocks take in turn. The up/down kernel reads only the W_up and W_down rows of kept
//          channels, once per call. At one row (the gate rule) it speculates: the selection publishes its
//          threshold bin in a workspace word as soon as it knows it, the up/down blocks (resident early) poll it
//          and stage / multiply the channels at or above it before their wait, then settle them by the mask
//          bytes -- redoing a block's work where a kept channel is missing (Options::topk_speculate).
// Graph-capturable: no host synchronization, no memset node; the kernel before the up/down kernel zeroes its
// accumulator and counters (dense with `zeroed`: nobody needs to), and the up/down kernel leaves them zero.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ffn_decode_ring_plan.h"
#include "kernels/ops.h"

namespace moc::cuda::ffn {

enum class SelKind : int { dense = 0, topk = 1, grouped = 2 };

struct Problem {
  int rows = 1, d = 0, d_ffn = 0;
  DType dtype = DType::bf16;  // of x, the three weights and out (all the same)
  const void* x = nullptr;    // [rows, d]
  const void* w_gate_t = nullptr, *w_up_t = nullptr, *w_down = nullptr;  // [d_ffn, d]
  void* out = nullptr;        // [rows, d], accumulated
  SelKind kind = SelKind::dense;
  int k = 0, group_a = 0, group_b = 0;
  SelectRule rule = SelectRule::gate;
  const std::uint16_t* force_idx = nullptr;  // [rows, kept] or null
  std::uint16_t* idx_out = nullptr;          // [rows, kept] or null
  unsigned parts = kFfnAll;
  // The FFN's RMSNorm weight [d] (or null): x is then the residual stream, normalized inside the ring kernels
  // (norm_inside); out may be x.
  const void* norm = nullptr;
  float norm_eps = 0.0f;
  int kept() const;  // channels kept per row (d_ffn when dense)
};

struct Options {
  bool pdl = true;         // programmatic dependent launch between the kernels of a call
  bool pdl_entry = true;   // ... and of the call's first kernel after the stream's previous kernel
  bool allow_fast = true;  // false: always the generic path (tests of the fallback)
  int gate_unroll = 4;     // 32-column tiles in flight per warp in the gate GEMV (4 or 8)
  int updown_cluster = 0;  // blocks per cluster reducing the up/down partials (1, 2, 4, 8; 0: default 2)
  // L2 prefetch hints (cp.async.bulk.prefetch; no effect on results), all off by default. Bit 2: a:b with b | 16 --
  // the W_up/W_down rows of the kept channels, issued by the gate kernel in the epilogue of the tile that chose
  // them, so that they stream while it still reads W_gate: H100 decode 2:8 -1.6% / -0.6% / -0.8% per token at batch
  // 1 / 2 / 4 (one FFN layer alone: +0.2 us at batch 1, -0.8 / -0.5 / 0 us at batch 2-4), but with it the device
  // stage stamps cost 2.7-4.0% of a 2:8 decode step (1.2-2.0% without) and the profiled step exceeds its timed
  // median by 3.2-5.0% (SPEC: 2% and 3%), so off until the stamps cost less (bench/micro/NOTES.md, seventeenth
  // session). Bit 0: top-K's kept rows, by the selection kernel once the threshold bin is known (spread over one
  // block per SM): H100 decode MoC +1.8% at batch 1 -- the selection is on the layer's critical path and completes
  // only when its prefetches have landed. Bit 1, dense: each up/down block's first 16 W_gate / W_up rows before it
  // waits for the previous kernel (0.4-1.8 us slower when measured).
  int prefetch = 0;
  int select_threads = 0;  // threads of one selection block: 512 or 1024 (0: the default, 512)
  // Row top-K hands its selection to the up/down kernel as one mask byte per (row, channel), which each up/down
  // block reads for its own channel range; true: as the union list (channel | row mask << 16, ascending, built
  // by a prefix scan and, at batch 2-8, the cluster's merge) that the blocks take slots of -- the earlier
  // design, kept for A/B (bench/micro/NOTES.md).
  bool topk_list = false;
  // Row top-K: one SM left to the (one-block-per-row) selection kernel -- the gate kernel's grid is that of one
  // SM fewer and so is the up/down kernel's -- so that no block of either waits for the SM the selection holds
  // (the gate kernel's 3 blocks fill an SM's registers; an up/down block and a selection block do not fit one
  // SM together). false: every SM, for A/B.
  bool spare_sm = true;
  // Kernels compiled for the mode, rule, row count and cluster size they run (the top-K gate and selection
  // kernels, MoC's up/down kernel at clusters of 1 and 2), so that each holds only the code it executes: the
  // selection is bound by instruction fetch (bench/micro/NOTES.md). false: the generic builds, for A/B.
  bool specialized = true;
  // Dense, rows <= 2, d <= 2048: the FFN as one weight stream through a shared-memory ring that a producer warp
  // fills with bulk copies (ffn_decode_ring.cuh). false: the up/down kernel with the gate fused, for A/B.
  bool dense_ring = true;
  // Its W_gate / W_up items past the ring's slots that the producer asks L2 for before its first wait for a free slot
  // (ffn_decode_ring.cuh kRingL2Ahead). -1: by the device and the rows -- kRingL2Ahead (4) at one row where the peak
  // DRAM bandwidth (memory clock x bus width) is below 4 TB/s, as on the H100 SXM (3.35 TB/s: dense decode batch 1
  // -1.6% a token against 0, measured in one call), else 0: on the H200 (4.8 TB/s) 4 items cost +0.5% at batch 1 and
  // +3.0% at batch 2 in one call, and the H100's batch 2 read +1.0% in the study after they landed (another machine;
  // bench/RESULTS.md parts 19 and 30). A hint: no effect on results.
  int dense_ring_l2_ahead = -1;
  // Row top-K at one row, the gate rule, masks: the selection publishes its threshold bin as soon as it knows it
  // (before it classifies and ranks) and the up/down blocks start on the channels at or above it -- W_down rows
  // staged, the up GEMV -- then settle them by the selection's masks after their wait, redoing the block's work
  // where a kept channel was not among them (bench/micro/NOTES.md). 0: off (A/B); 2 and 3 are for the tests of
  // that fallback: a wrong bin published, none published (the blocks stop polling after 50 us).
  int topk_speculate = 1;
  // MoC a:b, rows <= 2, d <= 2048, where a block's kept rows fit shared memory beside two 32 KB slots (2:8 at one
  // row of the 1b layer): gate, selection, up and down in one kernel (ffn_decode_ring_ab.cuh: W_gate rows through the
  // dense ring's shared-memory ring, each kept channel's W_up and W_down rows copied as soon as it is chosen), which
  // can normalize x itself. false: the gate kernel (selecting in its epilogue) and the up/down kernel, for A/B.
  bool ab_ring = true;
  int ab_ring_slots = 0;  // its ring's slots for W_gate (0: kRingAbSlots, 2)
  // MoC row top-K at one row, d <= 2048: gate, selection, up and down in one kernel (ffn_decode_ring_topk.cuh: W_gate
  // rows through a shared-memory ring, the blocks meeting on a grid-wide histogram of their keys for the threshold
  // bin and, where the bin must be split, on a grid-wide list of its candidates; each kept channel's W_up and W_down
  // rows copied once it is known), which can normalize x itself. false: the gate, selection and up/down kernels.
  bool topk_ring = true;
  int topk_ring_slots = 0;  // its ring's slots for W_gate (0: kRingTopkSlots, 3)
  // Its producer warp, idle from its last W_gate copy until the grid has met, asks L2 for the W_up / W_down rows of the
  // block's ceil(n K / F) channels of largest key (n: the block's channels; K / F of them are kept on average), so
  // that most kept rows come from L2 once the selection is known (a hint: no effect on results). H200, MoC at batch
  // 1: decode 0.9730 -> 0.9685 ms a token, one layer 19.7 -> 19.4 us; 3 or 8 more channels a block were slower, 2 or
  // 4 fewer the same (bench/RESULTS.md part 25). false: off (A/B).
  bool topk_ring_prefetch = true;
  // true: its list of the channels that may be kept in key order (larger first), whose first ceil(n K / F) entries'
  // rows it copies into shared memory as soon as the grid has met, before the threshold is known (the others' once
  // the channels are classified); the order of the down projection's sum changes, not which channels are kept.
  // false (default): the list in channel order, every row asked for once the channels are classified. H200, MoC at
  // batch 1, true against false: decode -0.8% a token in two calls on one machine (bench/RESULTS.md part 38), +0.3%
  // and +0.7% in two calls on another, where one FFN layer alone took 19.6 us against 18.5 in both (part 39) -- off
  // until a GPU shows it paying in both modes.
  bool topk_ring_spec = false;
  // Bytes of shared memory its blocks leave free (where a kept slot still fits), so that a block of the next kernel
  // can be resident beside each (ffn_decode_ring_plan.h kRingTopkLeave). 0: the whole SM (A/B).
  int topk_ring_leave = static_cast<int>(kRingTopkLeave);
};

// Bytes of device workspace one launch needs (any rows: chunks of 8 rows reuse it in stream order).
std::size_t workspace_bytes(const Problem& p);
// Bytes of the region `zeroed` (launch) covers: the up/down kernel's counters and accumulator.
std::size_t zeroed_bytes(const Problem& p);
// Checks the problem (std::invalid_argument naming ffn_decode) and issues the kernels on `stream`.
// zeroed (optional, zeroed_bytes(p)): a device region that is zero on entry and that nothing else uses between
// calls; the dense path and the a:b one-kernel FFN (uses_zeroed) keep their accumulator and counters there and need
// no prep kernel to zero them (their last kernel leaves them zero). Null: the prep kernel zeroes them in `workspace`.
void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream,
            const Options& opt = {}, void* zeroed = nullptr);
// True when launch() takes the fast path for this problem (bf16, aligned, d % 8 == 0, fits shared memory).
bool fast_path(const Problem& p, const Options& opt = {});
// True when the problem runs as one of the ring kernels (dense, or MoC a:b), which take the FFN's RMSNorm
// (Problem::norm) inside.
bool norm_inside(const Problem& p, const Options& opt = {});
// True when launch() keeps the up/down accumulator and counters in `zeroed` if given (dense, and the a:b ring).
bool uses_zeroed(const Problem& p, const Options& opt = {});

// Benchmark helper (fast path, MoC top-K or a:b, rows <= 8): re-issues only the up/down kernel on a workspace
// left by a previous full launch of the same problem (gate values and selection still there, accumulator and
// counters zero again; not after the a:b ring kernel, which keeps its selection in shared memory: launch both with
// Options::ab_ring = false). Adds to out.
void launch_updown_only(const Problem& p, void* workspace, cudaStream_t stream, const Options& opt = {});

}  // namespace moc::cuda::ffn

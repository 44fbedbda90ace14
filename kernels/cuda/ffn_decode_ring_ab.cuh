// MoC a:b (2:8) at decode as one weight stream (ffn_decode.cu launches it; measurements in bench/micro/NOTES.md).
#pragma once
#include "kernels/cuda/ffn_decode_ring.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// a:b ring kernel (rows <= kRingMaxRows, d <= kDownCols, b rows of W_gate fit one slot; named k_updown for the
// profile, as every kernel of the decode FFN that ends with the down projection). An a:b selection is local to its
// group of b channels, so a block that owns whole groups knows which of its channels are kept as soon as it has
// their gate values: the whole FFN -- gate GEMV, the selection, the kept channels' up GEMV and down projection --
// runs in one kernel. Block b owns the groups [b G / nb, (b + 1) G / nb) (G = ceil(d_ffn / b)), channels [c0, c1).
// Two streams of bulk copies (cp.async.bulk, completing on mbarriers):
//   W_gate rows through the dense ring kernel's shared-memory ring (ffn_decode_ring.cuh): a producer warp's thread
//   issues gate item i -- the rows of channels [c0 + i cpg, + cpg), cpg a multiple of b: whole groups -- into slot
//   i % S as soon as the slot is free (the first S before the PDL wait);
//   the kept channels' W_up and W_down rows, each kept channel's two rows into its own place in shared memory
//   (the kept area, [kmax][2][d], one mbarrier per kept channel), issued by consumer thread 0 as soon as the gate
//   item that holds the channel is ranked -- while the later gate rows still stream, and never waiting for a slot.
// Consumers (8 warps): per gate item, its rows times x (a row per warp) into gv, then each (channel, row)'s rank in
// its group (the gate kernel's rule: larger key first, ties to the lower channel), the kept channels appended to
// the kept list (channel | row mask << 16) with their copies issued, and idx_out when asked. After the last gate
// item: each kept channel's W_up row times x (a channel per warp), z = SiLU(g) u for the rows that keep it (0 for
// the others); then every thread adds the kept W_down rows times z into its columns [8t, 8t + 8). The partial
// [R, d] outputs take the dense ring kernel's way out.
// Two other forms were measured slower in the H100 decode step (bench/micro/NOTES.md): the kept rows as items of the
// ring that the producer issued once their channels were published (each waited a DRAM latency for its slot), and
// every W_gate row of a block copied before the wait with the kept rows into the places those rows held (the kept
// rows then queued behind all of the layer's W_gate bytes). Fewer W_gate bytes in flight let the kept rows come
// sooner: 2 slots measured faster than 3.

struct RingAbArgs : RingIo {
  std::uint16_t* idx_out;  // [R, kept] or null
  int ga, gb, rule, kept, groups;
  int cpg;   // W_gate rows of one gate item (a multiple of gb)
  int S;     // ring slots
  int nmax;  // most channels of one block
  int kmax;  // most kept channels of one block (the kept area's entries)
};

// Ring slots of the a:b kernel (Options::ab_ring_slots): 2 measured faster than 3 in the H100 decode step (1.067 vs
// 1.082 ms per token, 2:8 batch 1).
constexpr int kRingAbSlots = 2;

// (Shared memory: ffn_decode_ring_plan.h ring_ab_smem.)

template <int RP, int RULE>
__global__ void __launch_bounds__(kRingThreads, 1) k_updown(RingAbArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d, S = a.S;
  const int rule = RULE >= 0 ? RULE : a.rule;
  const auto m = ring_ab_smem(S, d, RP, a.nmax, a.kmax);
  float* rx = reinterpret_cast<float*>(smem + m.rx);  // the way out's receive area (clusters of 2)
  auto* rxbar = reinterpret_cast<unsigned long long*>(smem + m.rxbar);
  const bool push = a.C > 1;
  bf16* ring = reinterpret_cast<bf16*>(smem);
  bf16* kept = reinterpret_cast<bf16*>(smem + m.kept);  // [kmax][2][d]: W_up row, W_down row
  bf16* xs = reinterpret_cast<bf16*>(smem + m.xs);
  float* gv = reinterpret_cast<float*>(smem + m.gv);        // [nmax][RP] gate values
  float* zs = reinterpret_cast<float*>(smem + m.zs);        // [kmax][RP] z of the kept list's entries
  unsigned* list = reinterpret_cast<unsigned*>(smem + m.list);  // [kmax] kept channel | row mask << 16
  unsigned char* on = smem + m.on;                          // [cpg][RP] kept flags of one gate item
  auto* full = reinterpret_cast<unsigned long long*>(smem + m.bars);
  unsigned long long* empty = full + kRingMaxSlots;
  unsigned long long* kfull = empty + kRingMaxSlots;  // [kmax]
  int* misc = reinterpret_cast<int*>(smem + m.misc);  // 16 ints: the way out
  float* red = reinterpret_cast<float*>(smem + m.red);  // [8 warps][RP]

  const long long nb = gridDim.x, b = blockIdx.x;
  const int gb = a.gb;
  const int c0 = static_cast<int>(b * a.groups / nb) * gb;
  const int c1 = min(a.F, static_cast<int>((b + 1) * a.groups / nb) * gb), n = max(0, c1 - c0);
  const int ngi = (n + a.cpg - 1) / a.cpg;
  const std::size_t slot_elems = kRingSlotBytes / 2;
  const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
  step::StampScope stamp(a.stamps);

  if (push && tid == 0) ring_rx_init(rxbar);
  if (tid == 0) ring_init_bars(full, empty, S, kfull, a.kmax);
  __syncthreads();
  if (push) ring_rx_open(rxbar, a.R, d);

  if (warp == kRingConsumers / 32) {
    // Producer: the W_gate rows do not depend on the previous kernel, so no wait.
    if (lane == 0) ring_produce_rows(ring, full, empty, S, a.wg, c0, n, a.cpg, d);
    __syncwarp();
    // The next kernel (the next layer's QKV, whose blocks load their weights before their wait) may launch once
    // every block has asked for its last W_gate rows -- not at this kernel's start: its loads then come after the
    // layer's W_gate stream instead of competing with it. H100, 2:8 decode batch 1, three rounds: 1.0711 -> 1.0607
    // ms per token (bench/micro/NOTES.md, nineteenth session; the same for the dense ring measured no gain). The
    // one-layer 2:8 point, which chains this kernel to itself, measured 20.5 -> 21.2 us a call with it.
    griddep_launch();
  } else {
    // Consumers. x (the previous kernel's output) after the wait.
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    ring_stage_x<RP>(a.x, a.norm, a.eps, a.R, d, xs, red);
    consumers_sync<kRingConsumers>();
    stamp.claim();
    const unsigned long long pol = l2_stream_policy();
    int known = 0;  // kept channels so far (uniform over the consumer threads)
    for (int i = 0; i < ngi; ++i) {
      const int s = i % S, j0 = i * a.cpg, cnt = min(a.cpg, n - j0);
      mbar_wait(full + s, static_cast<unsigned>(i / S) & 1u);
      const bf16* slot = ring + s * slot_elems;
      for (int u = warp; u < cnt; u += kRingConsumers / 32) {
        float g[RP];
        ring_row_dot<RP>(slot + static_cast<std::size_t>(u) * d, xs, d, g);
        if (lane == 0) {
#pragma unroll
          for (int r = 0; r < RP; ++r) gv[(j0 + u) * RP + r] = g[r];
        }
      }
      mbar_arrive(empty + s);  // every consumer thread, after its own reads of the slot
      consumers_sync<kRingConsumers>();
      // Each (channel, row)'s rank in its group (the item holds whole groups).
      for (int t = tid; t < cnt * RP; t += kRingConsumers) {
        const int sl = t / RP, r = t - sl * RP;
        bool keep = false;
        if (r < a.R) {
          const int g0 = sl / gb * gb, len = min(gb, n - (j0 + g0)), take = min(a.ga, len);
          const unsigned key = sel_key<RULE>(gv[(j0 + sl) * RP + r], rule);
          int rank = 0;
          for (int m = g0; m < g0 + len; ++m) {
            const unsigned km = sel_key<RULE>(gv[(j0 + m) * RP + r], rule);
            rank += (km > key || (km == key && m < sl)) ? 1 : 0;
          }
          keep = rank < take;
        }
        on[t] = keep ? 1 : 0;
      }
      consumers_sync<kRingConsumers>();
      // The kept channels, in channel order: thread 0 lists them and asks for their W_up and W_down rows.
      int add = 0;
      for (int sl = 0; sl < cnt; ++sl) {
        unsigned m = 0;
#pragma unroll
        for (int r = 0; r < RP; ++r) m |= static_cast<unsigned>(on[sl * RP + r]) << r;
        if (m) {
          if (tid == 0) {
            const int e = known + add, ch = c0 + j0 + sl;
            list[e] = static_cast<unsigned>(ch) | m << 16;
            bf16* dst = kept + static_cast<std::size_t>(e) * 2 * d;
            mbar_expect_tx(kfull + e, 2u * row_bytes);
            bulk_copy(dst, a.wu + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
            bulk_copy(dst + d, a.wd + static_cast<std::size_t>(ch) * d, row_bytes, kfull + e, pol);
          }
          ++add;
        }
      }
      known += add;
      if (a.idx_out)
        for (int t = tid; t < cnt * RP; t += kRingConsumers)
          if (on[t]) {
            const int sl = t / RP, r = t - sl * RP, g0 = sl / gb * gb;
            int pos = (c0 + j0 + g0) / gb * a.ga;
            for (int m = g0; m < sl; ++m) pos += on[m * RP + r];
            a.idx_out[static_cast<std::size_t>(r) * a.kept + pos] = static_cast<std::uint16_t>(c0 + j0 + sl);
          }
    }
    griddep_launch();  // (either call releases this block's share of the launch; the producer's comes first)
    consumers_sync<kRingConsumers>();  // thread 0's list
    // Up: a kept channel per warp.
    for (int e = warp; e < known; e += kRingConsumers / 32) {
      mbar_wait(kfull + e, 0u);
      float uv[RP];
      ring_row_dot<RP>(kept + static_cast<std::size_t>(e) * 2 * d, xs, d, uv);
      if (lane == 0) {
        const unsigned le = list[e];
        const int j = static_cast<int>(le & 0xffffu) - c0;
#pragma unroll
        for (int r = 0; r < RP; ++r) zs[e * RP + r] = (le >> (16 + r)) & 1u ? silu_f(gv[j * RP + r]) * uv[r] : 0.f;
      }
    }
    consumers_sync<kRingConsumers>();
    stamp.mark_synced(step::StageId::gate_up);
    // Down: thread t owns columns [8t, 8t + 8) (d <= kDownCols).
    float acc[RP][8];
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    if (tid * 8 < d) {
      // Every entry's copy landed before the barrier above (its up warp waited on the entry's mbarrier): loads and
      // FMAs only, four entries in flight. (The former loop waited on each entry's mbarrier before its row, a chain
      // per entry; this loop: 2:8 decode at batch 1 0.9220 -> 0.9037 ms, H200, bench/micro/NOTES.md twenty-fifth
      // session -- the top-K ring's down loop, twenty-third session.)
      const int c = tid * 8;
#pragma unroll 4
      for (int e = 0; e < known; ++e) {
        const bf16* row = kept + static_cast<std::size_t>(e) * 2 * d + d;  // entry e's W_down row
        ring_down_fma<RP>(*reinterpret_cast<const uint4*>(row + c), zs, e * RP, acc);
      }
    }
    consumers_sync<kRingConsumers>();  // every copy consumed: the ring is free and holds the partials
    if (push) ring_push_partials<RP>(acc, a.acc, a.R, d, rx, rxbar);
    else ring_partials<RP>(acc, a.acc, a.R, d);
  }
  ring_out(a.out, a.acc, a.ctrl, a.R, a.d, a.C, misc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

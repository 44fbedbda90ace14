// MoC a:b (2:8) at decode as one weight stream (ffn_decode.cu launches it; measurements in bench/micro/NOTES.md).
#pragma once
#include "kernels/cuda/ffn_decode_ring.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// a:b ring kernel (rows <= kRingMaxRows, d <= kDownCols, b rows of W_gate fit one slot). An a:b selection is local
// to its group of b channels, so a block that owns whole groups knows which of its channels are kept as soon as it
// has their gate values: the whole FFN -- gate GEMV, the selection, the kept channels' up GEMV and down projection
// -- runs in one kernel, through the dense ring kernel's shared-memory ring (ffn_decode_ring.cuh) and its way out.
// Block b owns the groups [b G / nb, (b + 1) G / nb) (G = ceil(d_ffn / b)), channels [c0, c1).
// The producer warp's thread streams three kinds of item, each one slot, in the order it issues them:
//   gate item i: the W_gate rows of channels [c0 + i cpg, + cpg) (cpg a multiple of b: whole groups);
//   up item k:   the W_up rows of the block's kept channels [k cu, + cu) (the kept list, ascending);
//   down item k: their W_down rows, issued right after up item k.
// Gate items need nothing but a free slot (the first S go before the PDL wait); up item k waits until the consumers
// have published kept channel k cu + cu - 1 (or the last one), so the kept rows are requested while the later gate
// rows still stream. The kind, index and row count of each slot's item are in tag[s] (written before the slot's
// mbarrier is armed, read after it completes).
// Consumers (8 warps), item by item in ring order: a gate item's rows times x (a row per warp) into gv, then for
// each (channel, row) its rank in its group (the gate kernel's rule: larger key first, ties to the lower channel),
// the kept channels appended to the list (channel | row mask << 16; thread 0, then published to the producer) and,
// when asked, written to idx_out; an up item's rows times x, z = SiLU(g) u for the rows that keep the channel (0 for
// the others); a down item's rows times z into per-thread accumulators (thread t: columns [8t, 8t + 8)). The partial
// [R, d] outputs then take the dense ring kernel's way out.

struct RingAbArgs {
  const bf16* x;     // [R, d]: the FFN's input, or with norm the residual stream it normalizes (out may be x)
  const bf16* norm;  // [d] RMSNorm weight, or null
  float eps;
  const bf16* wg;
  const bf16* wu;
  const bf16* wd;
  bf16* out;
  float* acc;      // [R, d] fp32, zero on entry and on exit
  unsigned* ctrl;  // column-slice counters kLine apart, zero on entry and on exit
  std::uint16_t* idx_out;  // [R, kept] or null
  step::StampBuf* stamps;
  int R, d, F, C;
  int ga, gb, rule, kept, groups;
  int cpg;   // W_gate rows of one gate item (a multiple of gb)
  int cu;    // kept channels of one up (and down) item
  int S;     // ring slots
  int nmax;  // most channels of one block
};

enum : int { kAbGate = 0, kAbUp = 1, kAbDown = 2 };

// Shared memory: the ring, then x [RP, d] bf16, gv [nmax][RP] and zs [nmax][RP] fp32, the kept list [nmax], the
// group ranks' flags [kRingAbMaxCpg][RP], the 2 S mbarriers, the slot tags, misc (16 ints for the way out, 4 for
// the kept count published to the producer), the norm's per-warp sums.
constexpr int kRingAbMaxCpg = 16;
// Kept channels per up (down) item (Options::ab_ring_rows): a smaller item is asked for sooner.
constexpr int kRingAbRows = 4;
__host__ __device__ inline std::size_t ring_ab_smem_bytes(int S, int d, int rp, int nmax) {
  std::size_t b = static_cast<std::size_t>(S) * kRingSlotBytes;
  b += align16(static_cast<std::size_t>(rp) * d * 2);
  b += align16(static_cast<std::size_t>(nmax) * rp * 2 * 4);
  b += align16(static_cast<std::size_t>(nmax) * 4);
  b += align16(static_cast<std::size_t>(kRingAbMaxCpg) * kRingMaxRows);
  b += static_cast<std::size_t>(2 * kRingMaxSlots) * 8;
  b += static_cast<std::size_t>(kRingMaxSlots) * 8;
  b += 64 + 16;
  b += static_cast<std::size_t>(kRingConsumers / 32) * kRingMaxRows * 4;
  return b;
}

__device__ __forceinline__ int ld_vol(const int* p) { return *reinterpret_cast<const volatile int*>(p); }
__device__ __forceinline__ void st_vol(int* p, int v) { *reinterpret_cast<volatile int*>(p) = v; }

template <int RP, int RULE = -1>
__global__ void __launch_bounds__(kRingThreads, 1) k_ring_ab(RingAbArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d, S = a.S;
  const int rule = RULE >= 0 ? RULE : a.rule;
  bf16* ring = reinterpret_cast<bf16*>(smem);
  unsigned char* p = smem + static_cast<std::size_t>(S) * kRingSlotBytes;
  bf16* xs = reinterpret_cast<bf16*>(p);
  p += align16(static_cast<std::size_t>(RP) * d * 2);
  float* gv = reinterpret_cast<float*>(p);                          // [nmax][RP] gate values
  float* zs = gv + static_cast<std::size_t>(a.nmax) * RP;          // [nmax][RP] z of the kept list's entries
  p += align16(static_cast<std::size_t>(a.nmax) * RP * 2 * 4);
  unsigned* list = reinterpret_cast<unsigned*>(p);                 // [nmax] kept channel | row mask << 16
  p += align16(static_cast<std::size_t>(a.nmax) * 4);
  unsigned char* on = p;                                           // [cpg][RP] kept flags of one gate item
  p += align16(static_cast<std::size_t>(kRingAbMaxCpg) * kRingMaxRows);
  auto* full = reinterpret_cast<unsigned long long*>(p);
  unsigned long long* empty = full + kRingMaxSlots;
  int2* tag = reinterpret_cast<int2*>(empty + kRingMaxSlots);      // [slot]: kind | index << 2, rows
  int* misc = reinterpret_cast<int*>(tag + kRingMaxSlots);          // 16 ints: the way out
  int* pub = misc + 16;                                             // [0] kept channels known, [1] all known
  float* red = reinterpret_cast<float*>(pub + 4);                  // [8 warps][RP]

  const long long nb = gridDim.x, b = blockIdx.x;
  const int gb = a.gb;
  const int c0 = static_cast<int>(b * a.groups / nb) * gb;
  const int c1 = min(a.F, static_cast<int>((b + 1) * a.groups / nb) * gb), n = max(0, c1 - c0);
  const int ngi = (n + a.cpg - 1) / a.cpg, cu = a.cu;
  const std::size_t slot_elems = kRingSlotBytes / 2;
  const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
  step::StampScope stamp(a.stamps);

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, kRingConsumers);
    }
    pub[0] = 0;
    pub[1] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  griddep_launch();

  if (warp == kRingConsumers / 32) {
    // Producer: weights do not depend on the previous kernel, so no wait.
    if (lane == 0) {
      const unsigned long long pol = l2_stream_policy();
      int gi = 0, uk = 0, dk = 0, known = 0;
      bool fin = ngi == 0;
      for (int i = 0;; ++i) {
        const int s = i % S;
        if (i >= S) mbar_wait(empty + s, static_cast<unsigned>((i / S) - 1) & 1u);
        int kind = -1;
        for (;;) {
          if (!fin) {
            fin = ld_vol(pub + 1) != 0;  // read before the count: the consumers publish the count first
            __threadfence_block();
            known = ld_vol(pub);
            __threadfence_block();
          }
          const int ready = fin ? (known + cu - 1) / cu : known / cu;
          if (dk < uk) kind = kAbDown;
          else if (uk < ready) kind = kAbUp;
          else if (gi < ngi) kind = kAbGate;
          else if (fin) break;
          if (kind >= 0) break;
        }
        if (kind < 0) break;  // every item issued
        bf16* dst = ring + s * slot_elems;
        if (kind == kAbGate) {
          const int j0 = gi * a.cpg, cnt = min(a.cpg, n - j0);
          tag[s] = make_int2(kAbGate | gi << 2, cnt);
          mbar_expect_tx(full + s, static_cast<unsigned>(cnt) * row_bytes);
          bulk_copy(dst, a.wg + static_cast<std::size_t>(c0 + j0) * d, static_cast<unsigned>(cnt) * row_bytes, full + s,
                    pol);
          ++gi;
        } else {
          const int k = kind == kAbUp ? uk : dk, e0 = k * cu, cnt = min(cu, known - e0);
          const bf16* w = kind == kAbUp ? a.wu : a.wd;
          tag[s] = make_int2(kind | k << 2, cnt);
          mbar_expect_tx(full + s, static_cast<unsigned>(cnt) * row_bytes);
          for (int j = 0; j < cnt; ++j)
            bulk_copy(dst + static_cast<std::size_t>(j) * d, w + static_cast<std::size_t>(list[e0 + j] & 0xffffu) * d,
                      row_bytes, full + s, pol);
          if (kind == kAbUp) ++uk;
          else ++dk;
        }
      }
    }
    __syncwarp();
  } else {
    // Consumers. x (the previous kernel's output) after the wait.
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    ring_stage_x<RP>(a.x, a.norm, a.eps, a.R, d, xs, red);
    consumers_sync<kRingConsumers>();
    stamp.claim();
    float acc[RP][8];
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    int known = 0, gdone = 0;  // uniform over the consumer threads
    bool marked = false;
    for (int i = 0;; ++i) {
      if (gdone == ngi && i == ngi + 2 * ((known + cu - 1) / cu)) break;
      const int s = i % S;
      mbar_wait(full + s, static_cast<unsigned>(i / S) & 1u);
      const int2 tg = tag[s];
      const int kind = tg.x & 3, k = tg.x >> 2, cnt = tg.y;
      const bf16* slot = ring + s * slot_elems;
      if (kind == kAbGate) {
        const int j0 = k * a.cpg;
        for (int u = warp; u < cnt; u += kRingConsumers / 32) {
          float g[RP];
          ring_row_dot<RP>(slot + static_cast<std::size_t>(u) * d, xs, d, g);
          if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RP; ++r) gv[(j0 + u) * RP + r] = g[r];
          }
        }
        mbar_arrive(empty + s);
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
        if (a.idx_out)
          for (int t = tid; t < cnt * RP; t += kRingConsumers)
            if (on[t]) {
              const int sl = t / RP, r = t - sl * RP, g0 = sl / gb * gb;
              int pos = (c0 + j0 + g0) / gb * a.ga;
              for (int m = g0; m < sl; ++m) pos += on[m * RP + r];
              a.idx_out[static_cast<std::size_t>(r) * a.kept + pos] = static_cast<std::uint16_t>(c0 + j0 + sl);
            }
        int add = 0;
        for (int sl = 0; sl < cnt; ++sl) {
          unsigned m = 0;
#pragma unroll
          for (int r = 0; r < RP; ++r) m |= static_cast<unsigned>(on[sl * RP + r]) << r;
          if (m) {
            if (tid == 0) list[known + add] = static_cast<unsigned>(c0 + j0 + sl) | m << 16;
            ++add;
          }
        }
        known += add;
        ++gdone;
        if (tid == 0) {  // the list entries, then the count, then (the last gate item) that the count is final
          __threadfence_block();
          st_vol(pub, known);
          if (gdone == ngi) {
            __threadfence_block();
            st_vol(pub + 1, 1);
          }
        }
      } else if (kind == kAbUp) {
        consumers_sync<kRingConsumers>();  // thread 0's list entries and every warp's gv
        const int e0 = k * cu;
        for (int u = warp; u < cnt; u += kRingConsumers / 32) {
          float uv[RP];
          ring_row_dot<RP>(slot + static_cast<std::size_t>(u) * d, xs, d, uv);
          if (lane == 0) {
            const unsigned e = list[e0 + u];
            const int j = static_cast<int>(e & 0xffffu) - c0;
#pragma unroll
            for (int r = 0; r < RP; ++r)
              zs[(e0 + u) * RP + r] = (e >> (16 + r)) & 1u ? silu_f(gv[j * RP + r]) * uv[r] : 0.f;
          }
        }
        mbar_arrive(empty + s);
      } else {
        consumers_sync<kRingConsumers>();  // the up item's z
        if (!marked && gdone == ngi && k == (known + cu - 1) / cu - 1) {  // every z known: the last down item
          stamp.mark_synced(step::StageId::gate_up);
          marked = true;
        }
        ring_down_rows<RP>(slot, zs + static_cast<std::size_t>(k * cu) * RP, cnt, d, acc);
        mbar_arrive(empty + s);
      }
    }
    consumers_sync<kRingConsumers>();  // every item consumed: the ring is free (no copy is in flight) and holds the partials
    if (!marked) stamp.mark_synced(step::StageId::gate_up);
    ring_partials<RP>(acc, reinterpret_cast<float*>(smem), a.acc, a.R, d, a.C);
  }
  ring_out(a.out, a.acc, a.ctrl, a.R, a.d, a.C, smem, misc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

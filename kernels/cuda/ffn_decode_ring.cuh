// The dense decode FFN as one weight stream (ffn_decode.cu launches it; measurements in bench/micro/NOTES.md).
#pragma once
#include "kernels/cuda/bulk_ring.cuh"
#include "kernels/cuda/ffn_decode_ring_plan.h"
#include "kernels/cuda/ffn_decode_updown.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Ring kernel (dense, rows <= kRingMaxRows, d <= kDownCols): block b owns the channel range [c0, c1) as the up/down kernel
// does, but every weight byte it reads -- its channels' W_gate and W_up rows, then their W_down rows -- arrives
// through one ring of shared-memory slots that a producer warp fills with bulk copies (cp.async.bulk, completing
// on an mbarrier per slot) in the order the consumers use them. The producer starts before the PDL wait and
// never waits for anything but a free slot, so the SM keeps up to the whole ring (kRingSlots x 32 KB) of requests in
// flight across the kernel's two phases and its one block barrier; the up/down kernel instead issues its loads
// in dependent batches from registers (the gate/up stream measured ~73% of the copy rate).
// Item i of a block's stream (one bulk copy each): i < ngu: channels [(i / 2) cps, +cps) of the range, their W_gate
// rows (i even) or their W_up rows (i odd); else channels [(i - ngu) cpd, +cpd), their W_down rows. Slot i % S, phase
// i / S. compute-sanitizer's racecheck reports hazards between the bulk copies and the gate/up items' reads (not the
// down items'), with the results right in every test; not explained yet (bench/micro/NOTES.md). (They were there too
// when an item held gate and up rows together, two copies on one mbarrier.)
// Consumers (8 warps): a gate or up item's dot products against x in shared memory, a row per warp, into gu; after every gate/up item, z = SiLU(g) u; a down item's rows times z into per-thread accumulators
// (thread t: columns [8t, 8t + 8)). The partial [R, d] outputs then leave as the up/down kernel's do, except the
// cluster's reduction: in a cluster of 2 each block pushes the other block's half of d into its shared memory
// (ring_push_partials), fp32 atomics, the last block of a column slice adds into out.

// (kRingSlotBytes, kRingMaxSlots, kRingMaxRows and the shared-memory layouts: ffn_decode_ring_plan.h)
constexpr int kRingConsumers = kThreads;             // 8 consumer warps
constexpr int kRingThreads = kThreads + 32;          // + the producer warp
static_assert(kRingConsumers == kRingConsumerWarps * 32);
// Slots the launch uses (fewer where shared memory is short): on the H100's decode step 4 (128 KB) measured faster
// than 6 (the most that fit), 3 or 2 (1.281 vs 1.302 / 1.307 / 1.312 ms per token, dense batch 1, bench/RESULTS.md).
constexpr int kRingSlots = 4;
// Items past the ring's first kRingSlots that the producer warms into L2 (cp.async.bulk.prefetch.L2) right after the
// ring's first copies, before its first wait for a free slot -- slots free up only once the consumers, who wait for
// the previous kernel (PDL), read them -- where Options::dense_ring_l2_ahead leaves it to the device (see there).
// The attention / O window before the FFN runs the step's DRAM at about half its peak (bench/RESULTS.md part 18's
// timeline), so a little more of the FFN's stream is read there. H100, dense decode batch 1, interleaved rounds in
// two calls: 0 / 2 / 4 / 6 / 8 items 1.2268-1.2277 / 1.2084 / 1.2082-1.2101 / 1.2317 / 1.2327 ms per token
// (bench/micro/NOTES.md, twentieth session; the a:b kernel measured no gain from it, and on the H200 neither it nor
// the top-K ring does: bench/RESULTS.md part 30).
constexpr int kRingL2Ahead = 4;

// What both ring kernels (this one and the a:b kernel, ffn_decode_ring_ab.cuh) take: the FFN's input, weights, output,
// the way out's zeroed accumulator and counters, the stamps, the shape and the cluster size.
struct RingIo {
  const bf16* x;     // [R, d]: the FFN's input, or with norm the residual stream it normalizes (out may be x)
  const bf16* norm;  // [d] RMSNorm weight, or null
  float eps;
  const bf16* wg;
  const bf16* wu;
  const bf16* wd;
  bf16* out;
  float* acc;      // [R, d] fp32, zero on entry and on exit
  unsigned* ctrl;  // column-slice counters kLine apart, zero on entry and on exit
  step::StampBuf* stamps;
  int R, d, F, C;
};

struct RingArgs : RingIo {
  int cps, cpd;    // channels per gate (or up) item, per down item (rows of one slot: the same at one slot size)
  int S;           // ring slots
  int nmax;        // most channels of one block
  int l2_ahead;    // items past the slots warmed into L2 before the first slot wait (Options::dense_ring_l2_ahead)
};

// Consumers, after the PDL wait: x [R, d] (the previous kernel's output) into xs [RP, d] (rows past R zero), and
// with norm the FFN's RMSNorm applied in place, as rmsnorm_forward computes it (rounded to bf16): each block for
// itself, x is 4 KB a row. red: [8 warps][RP] floats. Ends before the consumers' next barrier (the caller's).
template <int RP>
__device__ __forceinline__ void ring_stage_x(const bf16* x, const bf16* norm, float eps, int R, int d, bf16* xs,
                                             float* red) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nv = d / 8;
  float ss[RP];
#pragma unroll
  for (int r = 0; r < RP; ++r) ss[r] = 0.f;
  for (int i = tid; i < RP * nv; i += kRingConsumers) {
    const int r = i / nv;
    const uint4 v = r < R ? ld_x(x + static_cast<std::size_t>(i) * 8) : make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(xs)[i] = v;
    const float sq = dot8(v, v);
#pragma unroll
    for (int k = 0; k < RP; ++k) ss[k] += k == r ? sq : 0.f;
  }
  if (norm) {
    // The FFN's RMSNorm, as rmsnorm_forward computes it (rounded to bf16), each block for itself: x is 4 KB a row.
#pragma unroll
    for (int r = 0; r < RP; ++r) {
      ss[r] = warp_sum(ss[r]);
      if (lane == 0) red[warp * RP + r] = ss[r];
    }
    consumers_sync<kRingConsumers>();
    float rs[RP];
#pragma unroll
    for (int r = 0; r < RP; ++r) {
      float t = 0.f;
#pragma unroll
      for (int w = 0; w < kRingConsumers / 32; ++w) t += red[w * RP + r];
      rs[r] = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(d) + eps));
    }
    for (int i = tid; i < R * nv; i += kRingConsumers) {  // the words this thread staged
      const int r = i / nv;
      float rr = rs[0];
#pragma unroll
      for (int k = 1; k < RP; ++k) rr = k == r ? rs[k] : rr;
      uint4 v = reinterpret_cast<const uint4*>(xs)[i];
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(norm) + (i - r * nv));
      unsigned* vw = reinterpret_cast<unsigned*>(&v);
      const unsigned ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const __nv_bfloat162 h2 =
            __floats2bfloat162_rn(bf_lo(vw[e]) * rr * bf_lo(ww[e]), bf_hi(vw[e]) * rr * bf_hi(ww[e]));
        vw[e] = *reinterpret_cast<const unsigned*>(&h2);
      }
      reinterpret_cast<uint4*>(xs)[i] = v;
    }
  }
}

// Thread 0 of a ring kernel: the ring's S full / empty mbarriers, nk more with one arrival each (the a:b and top-K
// kernels' kept rows; kfull may be null when nk is 0), and the fence that publishes them (the caller's block barrier
// follows).
__device__ __forceinline__ void ring_init_bars(unsigned long long* full, unsigned long long* empty, int S,
                                               unsigned long long* kfull, int nk) {
  for (int s = 0; s < S; ++s) {
    mbar_init(full + s, 1);
    mbar_init(empty + s, kRingConsumers);
  }
  for (int e = 0; e < nk; ++e) mbar_init(kfull + e, 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The producer lane of the a:b and top-K kernels: rows [c0, c0 + n) of w (d columns), items of cpg rows, item i into
// slot i % S as soon as the consumers have freed it (the first S at once).
__device__ __forceinline__ void ring_produce_rows(bf16* ring, unsigned long long* full, unsigned long long* empty, int S,
                                                  const bf16* w, int c0, int n, int cpg, int d) {
  const unsigned long long pol = l2_stream_policy();
  const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
  const int items = (n + cpg - 1) / cpg;
  for (int i = 0; i < items; ++i) {
    const int s = i % S, j0 = i * cpg, cnt = min(cpg, n - j0);
    if (i >= S) mbar_wait(empty + s, static_cast<unsigned>((i / S) - 1) & 1u);
    mbar_expect_tx(full + s, static_cast<unsigned>(cnt) * row_bytes);
    bulk_copy(ring + static_cast<std::size_t>(s) * (kRingSlotBytes / 2), w + static_cast<std::size_t>(c0 + j0) * d,
              static_cast<unsigned>(cnt) * row_bytes, full + s, pol);
  }
}

// One warp: a weight row in shared memory times each of the RP rows of xs, summed over the warp (every lane).
template <int RP>
__device__ __forceinline__ void ring_row_dot(const bf16* row, const bf16* xs, int d, float (&acc)[RP]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < RP; ++r) acc[r] = 0.f;
#pragma unroll 4
  for (int col = lane * 8; col < d; col += 256) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + col);
#pragma unroll
    for (int r = 0; r < RP; ++r)
      acc[r] += dot8(w, *reinterpret_cast<const uint4*>(xs + static_cast<std::size_t>(r) * d + col));
  }
#pragma unroll
  for (int r = 0; r < RP; ++r) acc[r] = warp_sum(acc[r]);
}

// One W_down row's 8 columns w (bf16) times the row's z of each of RP rows (z[zi .. zi + RP)) added into acc.
template <int RP>
__device__ __forceinline__ void ring_down_fma(const uint4 w, const float* z, int zi, float (&acc)[RP][8]) {
  const float wf[8] = {bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y), bf_lo(w.z), bf_hi(w.z), bf_lo(w.w), bf_hi(w.w)};
#pragma unroll
  for (int r = 0; r < RP; ++r) {
    const float zr = z[zi + r];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(zr, wf[e], acc[r][e]);
  }
}

// Consumer thread t: cnt W_down rows of a slot times their z (z [cnt][RP]) added into its columns [8t, 8t + 8).
template <int RP>
__device__ __forceinline__ void ring_down_rows(const bf16* slot, const float* z, int cnt, int d, float (&acc)[RP][8]) {
  const int c = threadIdx.x * 8;
  if (c >= d) return;
  for (int jj = 0; jj < cnt; ++jj)
    ring_down_fma<RP>(*reinterpret_cast<const uint4*>(slot + static_cast<std::size_t>(jj) * d + c), z, jj * RP, acc);
}

// Clusters of 1 (consumers, after their barrier: every item consumed): each thread's partial outputs of columns
// [8t, 8t + 8) of each row added into acc (fp32 atomics).
template <int RP>
__device__ __forceinline__ void ring_partials(const float (&acc)[RP][8], float* gacc, int R, int d) {
  const int c = threadIdx.x * 8;
  if (c >= d) return;
#pragma unroll
  for (int r = 0; r < RP; ++r)
    if (r < R) {
      float4* g = reinterpret_cast<float4*>(gacc + static_cast<std::size_t>(r) * d + c);
      atomicAdd(g, make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
      atomicAdd(g + 1, make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]));
    }
}

// Clusters of 2 (d % 16 == 0, ffn_decode_ring_plan.h ring_cluster_grid): each block owns one half of d. Before the
// work, thread 0 initializes the receive area's mbarrier (before ring_init_bars, whose fence publishes it); after
// the block barrier that follows, ring_rx_open: thread 0 arms it for the other block's R rows of d / 2 fp32 and every
// thread arrives on the cluster barrier (release: the mbarrier is ready). (Armed after the block barrier, not right
// after its initialization: compute-sanitizer racecheck reports the latter as a warp-level hazard in the a:b kernel.)
__device__ __forceinline__ void ring_rx_init(unsigned long long* rxbar) { mbar_init(rxbar, 1); }
__device__ __forceinline__ void ring_rx_open(unsigned long long* rxbar, int R, int d) {
  if (threadIdx.x == 0) mbar_expect_tx(rxbar, static_cast<unsigned>(R) * static_cast<unsigned>(d / 2) * 4u);
  cluster_arrive_release_any();
}
// After the work, every consumer thread waits on that cluster barrier (long since complete: the other block's
// mbarrier is armed); a thread whose columns lie in the other block's half stores them into its receive area
// (st.async, completing bytes on its mbarrier); one in this block's half waits on this block's mbarrier (every byte
// of the other block's half pushed) and adds both blocks' partials into acc (fp32 atomics). No cluster barrier on
// the way out's critical path, no DSMEM read: the block waits for the other block's bytes alone. (The producer warp
// waits on the cluster barrier in ring_out: every thread arrives and waits once.) H200, decode at batch 1, against
// the cluster barrier and DSMEM reads of ud_cluster_reduce: MoC -0.6%, 2:8 -0.6%, dense flat; batch 4 flat
// (bench/micro/NOTES.md, thirty-fourth session).
template <int RP>
__device__ __forceinline__ void ring_push_partials(const float (&acc)[RP][8], float* gacc, int R, int d, float* rx,
                                                   unsigned long long* rxbar) {
  const int c = threadIdx.x * 8, cs = d / 2;
  const unsigned rank = cg::this_cluster().block_rank();
  cluster_wait_any();  // the other block's mbarrier is initialized and armed
  if (c >= d) return;
  const unsigned owner = static_cast<unsigned>(c / cs);
  const int cc = c - static_cast<int>(owner) * cs;
  if (owner != rank) {
    const unsigned rbar = mapa_u32(rxbar, owner);
#pragma unroll
    for (int r = 0; r < RP; ++r)
      if (r < R) {
        const unsigned dst = mapa_u32(rx + static_cast<std::size_t>(r) * cs + cc, owner);
        st_async_f4(dst, acc[r][0], acc[r][1], acc[r][2], acc[r][3], rbar);
        st_async_f4(dst + 16, acc[r][4], acc[r][5], acc[r][6], acc[r][7], rbar);
      }
    return;
  }
  mbar_wait(rxbar, 0);
#pragma unroll
  for (int r = 0; r < RP; ++r)
    if (r < R) {
      const float4* src = reinterpret_cast<const float4*>(rx + static_cast<std::size_t>(r) * cs + cc);
      const float4 p0 = src[0], p1 = src[1];
      float4* g = reinterpret_cast<float4*>(gacc + static_cast<std::size_t>(r) * d + c);
      atomicAdd(g, make_float4(acc[r][0] + p0.x, acc[r][1] + p0.y, acc[r][2] + p0.z, acc[r][3] + p0.w));
      atomicAdd(g + 1, make_float4(acc[r][4] + p1.x, acc[r][5] + p1.y, acc[r][6] + p1.z, acc[r][7] + p1.w));
    }
}

// Every thread (the producer warp too): the last blocks' pass into out, as in the up/down kernel (their loops run on
// the first kThreads threads), over this block's half of d where the partials were pushed (C == 2). misc: 16 ints.
__device__ __forceinline__ void ring_out(bf16* out, float* acc, unsigned* ctrl, int R, int d, int C, int* misc) {
  UpDownArgs u{};
  u.pushed = C > 1 ? 1 : 0;
  u.out = out;
  u.acc = acc;
  u.ctrl = ctrl;
  u.R = R;
  u.d = d;
  UdSmem us{};
  us.misc = misc;
  UdSlice sl{0, d, 0};
  if (C > 1) {
    // (the consumers waited in ring_push_partials; the producer warp's wait pairs with its ring_rx_open)
    if (threadIdx.x >= kRingConsumers) cluster_wait_any();
    sl.slice = static_cast<int>(cg::this_cluster().block_rank());
    sl.cs = d / 2;
    sl.c0 = sl.slice * sl.cs;
  }
  ud_finish(u, us, sl, C);
}

template <int RP>
__global__ void __launch_bounds__(kRingThreads, 1) k_updown(RingArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d, S = a.S;
  const auto m = ring_dense_smem(S, d, RP, a.nmax);
  float* rx = reinterpret_cast<float*>(smem + m.rx);
  auto* rxbar = reinterpret_cast<unsigned long long*>(smem + m.rxbar);
  const bool push = a.C > 1;
  bf16* ring = reinterpret_cast<bf16*>(smem);
  bf16* xs = reinterpret_cast<bf16*>(smem + m.xs);
  float* gu = reinterpret_cast<float*>(smem + m.gu);  // [nmax][2][RP]
  float* zs = gu + static_cast<std::size_t>(a.nmax) * 2 * RP;  // [nmax][RP]
  auto* full = reinterpret_cast<unsigned long long*>(smem + m.bars);
  unsigned long long* empty = full + kRingMaxSlots;
  int* misc = reinterpret_cast<int*>(smem + m.misc);
  float* red = reinterpret_cast<float*>(smem + m.red);  // [8 warps][RP]

  const long long nb = gridDim.x, b = blockIdx.x;
  const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb), n = c1 - c0;
  const int ngu = 2 * ((n + a.cps - 1) / a.cps), ndn = (n + a.cpd - 1) / a.cpd, T = ngu + ndn;
  const std::size_t slot_elems = kRingSlotBytes / 2;
  step::StampScope stamp(a.stamps);

  if (push && tid == 0) ring_rx_init(rxbar);
  if (tid == 0) ring_init_bars(full, empty, S, nullptr, 0);
  __syncthreads();
  if (push) ring_rx_open(rxbar, a.R, d);
  griddep_launch();

  if (warp == kRingConsumers / 32) {
    // Producer: weights do not depend on the previous kernel, so no wait.
    if (lane == 0) {
      const unsigned long long pol = l2_stream_policy();  // read once per step: evicted from L2 first
      // Item i's source and bytes (the header's item order).
      auto item = [&](int i, unsigned& bytes) {
        const bool gate_up = i < ngu;
        const int j0 = gate_up ? (i >> 1) * a.cps : (i - ngu) * a.cpd;
        bytes = static_cast<unsigned>(min(gate_up ? a.cps : a.cpd, n - j0)) * d * 2u;
        return (gate_up ? ((i & 1) ? a.wu : a.wg) : a.wd) + static_cast<std::size_t>(c0 + j0) * d;
      };
      for (int i = 0; i < T; ++i) {
        const int s = i % S;
        unsigned bytes = 0;
        if (i == S)  // the ring is full: the next items into L2 while the slots wait for the consumers
          for (int j = S; j < min(T, S + a.l2_ahead); ++j) {
            const bf16* src = item(j, bytes);
            prefetch_l2(src, bytes);
          }
        if (i >= S) mbar_wait(empty + s, static_cast<unsigned>((i / S) - 1) & 1u);
        const bf16* src = item(i, bytes);
        mbar_expect_tx(full + s, bytes);
        bulk_copy(ring + s * slot_elems, src, bytes, full + s, pol);
      }
    }
    __syncwarp();
  } else {
    // Consumers. x (the previous kernel's output) after the wait.
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    ring_stage_x<RP>(a.x, a.norm, a.eps, a.R, d, xs, red);
    consumers_sync<kRingConsumers>();
    // Gate/up items.
    for (int i = 0; i < ngu; ++i) {
      const int s = i % S, j0 = (i >> 1) * a.cps, cnt = min(a.cps, n - j0), m = i & 1;
      mbar_wait(full + s, static_cast<unsigned>(i / S) & 1u);
      const bf16* slot = ring + s * slot_elems;
      for (int u = warp; u < cnt; u += kRingConsumers / 32) {
        float acc[RP];
        ring_row_dot<RP>(slot + static_cast<std::size_t>(u) * d, xs, d, acc);
        if (lane == 0) {
#pragma unroll
          for (int r = 0; r < RP; ++r) gu[((j0 + u) * 2 + m) * RP + r] = acc[r];
        }
      }
      mbar_arrive(empty + s);  // every consumer thread, after its own reads of the slot
    }
    consumers_sync<kRingConsumers>();
    stamp.claim();
    for (int i = tid; i < n * RP; i += kRingConsumers) {
      const int j = i / RP, r = i - j * RP;
      zs[i] = r < a.R ? silu_f(gu[(j * 2) * RP + r]) * gu[(j * 2 + 1) * RP + r] : 0.f;
    }
    consumers_sync<kRingConsumers>();
    stamp.mark_synced(step::StageId::gate_up);
    // Down items: thread t owns columns [8t, 8t + 8) (d <= kDownCols).
    float acc[RP][8];
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    for (int i = ngu; i < T; ++i) {
      const int s = i % S, j0 = (i - ngu) * a.cpd, cnt = min(a.cpd, n - j0);
      mbar_wait(full + s, static_cast<unsigned>(i / S) & 1u);
      const bf16* slot = ring + s * slot_elems;
      ring_down_rows<RP>(slot, zs + static_cast<std::size_t>(j0) * RP, cnt, d, acc);
      mbar_arrive(empty + s);  // every consumer thread, after its own reads of the slot
    }
    consumers_sync<kRingConsumers>();  // every item consumed: the ring is free (no copy is in flight) and holds the partials
    if (push) ring_push_partials<RP>(acc, a.acc, a.R, d, rx, rxbar);
    else ring_partials<RP>(acc, a.acc, a.R, d);
  }
  ring_out(a.out, a.acc, a.ctrl, a.R, a.d, a.C, misc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

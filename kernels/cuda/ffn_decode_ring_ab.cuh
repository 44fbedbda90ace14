// MoC a:b (2:8) at decode as one weight stream (ffn_decode.cu launches it; measurements in bench/micro/NOTES.md).
#pragma once
#include "kernels/cuda/ffn_decode_ring.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// a:b kernel (rows <= kRingMaxRows, d <= kDownCols; named k_updown for the profile, as every kernel of the decode
// FFN that ends with the down projection). An a:b selection is local to its group of b channels, so a block that
// owns whole groups knows which of its channels are kept as soon as it has their gate values: the whole FFN --
// gate GEMV, the selection, the kept channels' up GEMV and down projection -- runs in one kernel. Block b owns
// the groups [b G / nb, (b + 1) G / nb) (G = ceil(d_ffn / b)), channels [c0, c1), and holds all of its W_gate rows
// in shared memory at once: gate item i, the rows of channels [c0 + i cpg, + cpg) (cpg a multiple of b: whole
// groups), is one bulk copy (cp.async.bulk) into slot i, completing on its mbarrier gfull[i]; thread 0 issues them
// all at the start, before the PDL wait (the weights do not depend on the previous kernel). Once item i is ranked,
// its kept channels' W_up and W_down rows are copied into the same slot (2 rows per kept channel: where a group
// keeps at most half its channels over the rows, 2 min(b, R a) <= b, they fit the slot the item's W_gate rows
// held), completing on kfull[i] -- while the later items are ranked.
// All 8 warps, after the wait: x (and the norm) into shared memory; per item, its W_gate rows times x (a row per
// warp) into gv, then each (channel, row)'s rank in its group (the gate kernel's rule: larger key first, ties to
// the lower channel), the kept channels appended to the kept list (channel | row mask << 16) by thread 0, which asks
// for their rows, and idx_out when asked. Then each kept channel's W_up row times x (a channel per warp), z =
// SiLU(g) u for the rows that keep it (0 for the others); then every thread adds the kept W_down rows times z into
// its columns [8t, 8t + 8). The partial [R, d] outputs take the dense ring kernel's way out.
// (Measured before, bench/micro/NOTES.md: the kept rows as items of the dense ring's producer were 5% slower than the
// gate + up/down kernels in the H100 decode step, and a ring of W_gate slots that the producer refills beside a
// separate area for the kept rows 1-3% faster: each refill waited a DRAM latency after its slot was freed.)

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
  int cpg;   // W_gate rows of one item (a multiple of gb)
  int ni;    // items of the widest block (slots)
  int nmax;  // most channels of one block
  int kmax;  // most kept channels of one block
};

// Shared memory: the slots [ni][cpg][d] bf16, x [RP, d] bf16, gv [nmax][RP] and zs [kmax][RP] fp32, the kept list
// [kmax] and each kept channel's row in the slots [kmax], the group ranks' flags [kRingAbMaxCpg][RP], the 2 ni
// mbarriers, misc (16 ints for the way out), the norm's per-warp sums.
constexpr int kRingAbMaxCpg = 16;
__host__ __device__ inline std::size_t ring_ab_smem_bytes(int ni, int cpg, int d, int rp, int nmax, int kmax) {
  std::size_t b = static_cast<std::size_t>(ni) * cpg * d * 2;
  b += align16(static_cast<std::size_t>(rp) * d * 2);
  b += align16(static_cast<std::size_t>(nmax) * rp * 4);
  b += align16(static_cast<std::size_t>(kmax) * rp * 4);
  b += align16(static_cast<std::size_t>(kmax) * 4 * 2);
  b += align16(static_cast<std::size_t>(kRingAbMaxCpg) * kRingMaxRows);
  b += static_cast<std::size_t>(2 * ni) * 8;
  b += 64;
  b += static_cast<std::size_t>(kThreads / 32) * kRingMaxRows * 4;
  return b;
}

template <int RP, int RULE>
__global__ void __launch_bounds__(kThreads, 1) k_updown(RingAbArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d, cpg = a.cpg;
  const int rule = RULE >= 0 ? RULE : a.rule;
  bf16* slots = reinterpret_cast<bf16*>(smem);  // [ni][cpg][d]
  unsigned char* p = smem + static_cast<std::size_t>(a.ni) * cpg * d * 2;
  bf16* xs = reinterpret_cast<bf16*>(p);
  p += align16(static_cast<std::size_t>(RP) * d * 2);
  float* gv = reinterpret_cast<float*>(p);  // [nmax][RP] gate values
  p += align16(static_cast<std::size_t>(a.nmax) * RP * 4);
  float* zs = reinterpret_cast<float*>(p);  // [kmax][RP] z of the kept list's entries
  p += align16(static_cast<std::size_t>(a.kmax) * RP * 4);
  unsigned* list = reinterpret_cast<unsigned*>(p);  // [kmax] kept channel | row mask << 16
  int* erow = reinterpret_cast<int*>(list + a.kmax);  // [kmax] the entry's W_up row in the slots (W_down: the next)
  p += align16(static_cast<std::size_t>(a.kmax) * 4 * 2);
  unsigned char* on = p;  // [cpg][RP] kept flags of one item
  p += align16(static_cast<std::size_t>(kRingAbMaxCpg) * kRingMaxRows);
  auto* gfull = reinterpret_cast<unsigned long long*>(p);  // [ni]
  unsigned long long* kfull = gfull + a.ni;                // [ni]
  int* misc = reinterpret_cast<int*>(kfull + a.ni);        // 16 ints: the way out
  float* red = reinterpret_cast<float*>(misc + 16);        // [8 warps][RP]

  const long long nb = gridDim.x, b = blockIdx.x;
  const int gb = a.gb;
  const int c0 = static_cast<int>(b * a.groups / nb) * gb;
  const int c1 = min(a.F, static_cast<int>((b + 1) * a.groups / nb) * gb), n = max(0, c1 - c0);
  const int ni = (n + cpg - 1) / cpg;
  const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
  step::StampScope stamp(a.stamps);

  if (tid == 0) {
    for (int i = 0; i < ni; ++i) {
      mbar_init(gfull + i, 1);
      mbar_init(kfull + i, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const unsigned long long pol = l2_stream_policy();  // read once per step: evicted from L2 first
    for (int i = 0; i < ni; ++i) {
      const unsigned bytes = static_cast<unsigned>(min(cpg, n - i * cpg)) * row_bytes;
      mbar_expect_tx(gfull + i, bytes);
      bulk_copy(slots + static_cast<std::size_t>(i) * cpg * d, a.wg + static_cast<std::size_t>(c0 + i * cpg) * d, bytes,
                gfull + i, pol);
    }
  }
  griddep_launch();
  griddep_wait();  // x is the previous kernel's output
  stamp.start(step::StampKernel::k_updown, step::StageId::down);
  ring_stage_x<RP>(a.x, a.norm, a.eps, a.R, d, xs, red);
  __syncthreads();  // also: the mbarriers' initialization is visible
  stamp.claim();
  const unsigned long long pol = l2_stream_policy();
  int known = 0;  // kept channels so far (uniform over the block)
  for (int i = 0; i < ni; ++i) {
    const int j0 = i * cpg, cnt = min(cpg, n - j0);
    bf16* slot = slots + static_cast<std::size_t>(i) * cpg * d;
    mbar_wait(gfull + i, 0u);
    for (int u = warp; u < cnt; u += kThreads / 32) {
      float g[RP];
      ring_row_dot<RP>(slot + static_cast<std::size_t>(u) * d, xs, d, g);
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RP; ++r) gv[(j0 + u) * RP + r] = g[r];
      }
    }
    __syncthreads();  // gv; and every read of the slot's W_gate rows is done before the slot is written again
    // Each (channel, row)'s rank in its group (the item holds whole groups).
    for (int t = tid; t < cnt * RP; t += kThreads) {
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
    __syncthreads();
    // The kept channels, in channel order: thread 0 lists them and asks for their W_up and W_down rows, into the
    // slot (its W_gate rows were all read before the barrier above).
    int add = 0;
    for (int sl = 0; sl < cnt; ++sl) {
      unsigned m = 0;
#pragma unroll
      for (int r = 0; r < RP; ++r) m |= static_cast<unsigned>(on[sl * RP + r]) << r;
      if (m) ++add;
    }
    if (tid == 0 && add > 0) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's generic reads before the copies
      mbar_expect_tx(kfull + i, static_cast<unsigned>(add) * 2u * row_bytes);
      int q = 0;
      for (int sl = 0; sl < cnt; ++sl) {
        unsigned m = 0;
#pragma unroll
        for (int r = 0; r < RP; ++r) m |= static_cast<unsigned>(on[sl * RP + r]) << r;
        if (!m) continue;
        const int e = known + q, ch = c0 + j0 + sl;
        list[e] = static_cast<unsigned>(ch) | m << 16;
        erow[e] = i * cpg + 2 * q;
        bf16* dst = slot + static_cast<std::size_t>(2 * q) * d;
        bulk_copy(dst, a.wu + static_cast<std::size_t>(ch) * d, row_bytes, kfull + i, pol);
        bulk_copy(dst + d, a.wd + static_cast<std::size_t>(ch) * d, row_bytes, kfull + i, pol);
        ++q;
      }
    }
    known += add;
    if (a.idx_out)
      for (int t = tid; t < cnt * RP; t += kThreads)
        if (on[t]) {
          const int sl = t / RP, r = t - sl * RP, g0 = sl / gb * gb;
          int pos = (c0 + j0 + g0) / gb * a.ga;
          for (int m = g0; m < sl; ++m) pos += on[m * RP + r];
          a.idx_out[static_cast<std::size_t>(r) * a.kept + pos] = static_cast<std::uint16_t>(c0 + j0 + sl);
        }
  }
  __syncthreads();  // thread 0's list
  // Up: a kept channel per warp.
  for (int e = warp; e < known; e += kThreads / 32) {
    const int row = erow[e];
    mbar_wait(kfull + row / cpg, 0u);
    float uv[RP];
    ring_row_dot<RP>(slots + static_cast<std::size_t>(row) * d, xs, d, uv);
    if (lane == 0) {
      const unsigned le = list[e];
      const int j = static_cast<int>(le & 0xffffu) - c0;
#pragma unroll
      for (int r = 0; r < RP; ++r) zs[e * RP + r] = (le >> (16 + r)) & 1u ? silu_f(gv[j * RP + r]) * uv[r] : 0.f;
    }
  }
  __syncthreads();
  stamp.mark_synced(step::StageId::gate_up);
  // Down: thread t owns columns [8t, 8t + 8) (d <= kDownCols).
  float acc[RP][8];
#pragma unroll
  for (int r = 0; r < RP; ++r)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
  for (int e = 0; e < known; ++e) {
    const int row = erow[e];
    mbar_wait(kfull + row / cpg, 0u);  // (complete: its up warp waited; this thread's own view of the copy)
    ring_down_rows<RP>(slots + static_cast<std::size_t>(row + 1) * d, zs + e * RP, 1, d, acc);
  }
  __syncthreads();  // every copy consumed: the slots are free and hold the partials
  ring_partials<RP>(acc, reinterpret_cast<float*>(smem), a.acc, a.R, d, a.C);
  ring_out(a.out, a.acc, a.ctrl, a.R, a.d, a.C, smem, misc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

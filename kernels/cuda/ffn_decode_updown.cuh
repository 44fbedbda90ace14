// The decode FFN's up/down kernel (ffn_decode.cu launches it; design in ffn_decode.cuh).
#pragma once
#include "kernels/cuda/ffn_decode_device.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Up/down kernel: block b owns a balanced set of channels (all: a channel range; mask: the kept channels of a
// range, their row masks the OR of mrows mask bytes; list: union-list slots b, b + nb, ...), at most smax. It
// stages their W_down rows in shared memory with cp.async while it runs the up (and, with FG, gate) GEMV of the
// same channels with mma.sync, forms z = SiLU(g) * u on the rows that kept the channel, and multiplies the staged
// rows by z. The [R, d] partial outputs are reduced over a cluster of C blocks in distributed shared memory
// (C > 1) and added with fp32 atomics into `acc`; the last block of each column slice adds acc into out (one bf16
// rounding) and zeroes acc and its counter again. Shared memory is padded so that one block runs per SM.

struct UpDownArgs {
  const bf16* x;
  const bf16* wg;
  const bf16* wu;
  const bf16* wd;
  bf16* out;
  const float* G;
  const unsigned char* mask;  // [mrows, Fp] bytes: a channel's row mask is the OR of its mrows bytes
  const unsigned* list;
  const unsigned* ucount;
  float* acc;      // [R, d] fp32, zero on entry and on exit
  unsigned* ctrl;  // column-slice counters kLine apart, zero on entry and on exit
  step::StampBuf* stamps;
  int R, d, F, Fp, smax, C;
  int mrows;       // mask mode: 1 (2:8's gate kernel writes the row mask) or R (top-K: one row's bit per byte)
  int nslots;      // list mode: entries the list can hold
  int prefetch;    // all-channels mode: the first 16 channels' W_gate and W_up rows into L2 before the wait
  const unsigned* spec;  // kMaskSpec: the selection's threshold-bin word (ffn_decode_device.cuh ld_acquire_gpu)
  unsigned spec_tag;
  unsigned spec_wait_ns;  // how long a block polls it before it gives up speculating
  int pushed;  // the ring kernels' clusters of 2: partials pushed, not read by ud_cluster_reduce (no barrier to wait)
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

// The kernel's shared memory, carved once (updown_smem_bytes gives its size).
struct UdSmem {
  bf16* stage;      // [smax, d] staged W_down rows
  float* part;      // [RP, d] partial outputs (C > 1; aliases stage when updown_alias)
  float4* red;      // per-warp mma results of the up (and gate) GEMV
  float* zs;        // [smax, 8] gate values, then z
  int* sch;         // [smax] channels of this block's slots
  unsigned* smask;  // [smax] their row masks
  int* misc;        // warp counts
  bool alias;
};

template <int RP, bool FG>
__device__ __forceinline__ UdSmem ud_carve(unsigned char* smem, int smax, int d, int C) {
  UdSmem s;
  const int nct_max = (smax + kGroup - 1) / kGroup;
  s.stage = reinterpret_cast<bf16*>(smem);
  unsigned char* p = smem + updown_stage_bytes(smax, d);
  s.alias = updown_alias(smax, d, RP);
  s.part = reinterpret_cast<float*>(smem);
  if (C > 1 && !s.alias) {
    s.part = reinterpret_cast<float*>(p);
    p += align16(static_cast<std::size_t>(RP) * d * 4);
  }
  s.red = reinterpret_cast<float4*>(p);
  p += static_cast<std::size_t>(nct_max) * kWarps * 32 * 16 * (FG ? 2 : 1);
  s.zs = reinterpret_cast<float*>(p);
  p += align16(static_cast<std::size_t>(smax) * 8 * 4);
  s.sch = reinterpret_cast<int*>(p);
  s.smask = reinterpret_cast<unsigned*>(s.sch + smax);
  p += align16(static_cast<std::size_t>(smax) * 8);
  s.misc = reinterpret_cast<int*>(p);
  return s;
}

// The W_down rows of slots [0, n) into s.stage (cp.async, one commit group).
__device__ __forceinline__ void ud_stage_rows(const UpDownArgs& a, const UdSmem s, int n) {
  const int d = a.d, per_row = d / 8;
  for (int i = 0; i < n; ++i) {
    const bf16* src = a.wd + static_cast<std::size_t>(s.sch[i]) * d;
    bf16* dst = s.stage + static_cast<std::size_t>(i) * d;
    for (int c8 = threadIdx.x; c8 < per_row; c8 += kThreads) cp_async16(dst + c8 * 8, src + c8 * 8);
  }
  cp_async_commit();
}

// kMaskChannels' stage 1 after the wait: the kept channels of this block's range (a channel's row mask is the OR of
// its mrows mask bytes) into s.sch / s.smask in channel order, their gate values (the gate kernel's G) into s.zs;
// returns their number.
__device__ __forceinline__ int ud_mask_compact(const UpDownArgs& a, const UdSmem s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long nb = gridDim.x, b = blockIdx.x;
  const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
  int base = 0;
  for (int i0 = 0; i0 < c1 - c0; i0 += kThreads) {
    const int i = i0 + tid;
    // The channel's gate values are loaded with its mask bytes (one round trip, not two).
    unsigned m = 0;
    float gv[kMaxRows];
#pragma unroll
    for (int rr = 0; rr < kMaxRows; ++rr)
      gv[rr] = rr < a.R && i < c1 - c0 ? __ldcg(a.G + static_cast<std::size_t>(rr) * a.Fp + c0 + i) : 0.f;
    if (i < c1 - c0)
      for (int rr = 0; rr < a.mrows; ++rr)
        m |= static_cast<unsigned>(__ldcg(a.mask + static_cast<std::size_t>(rr) * a.Fp + c0 + i));
    const unsigned bal = __ballot_sync(0xffffffffu, m != 0);
    if (lane == 0) s.misc[warp] = __popc(bal);
    __syncthreads();
    int off = base, tot = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      off += w < warp ? s.misc[w] : 0;
      tot += s.misc[w];
    }
    if (m) {
      const int pos = off + __popc(bal & ((1u << lane) - 1u));
      s.sch[pos] = c0 + i;
      s.smask[pos] = m;
      float4* z = reinterpret_cast<float4*>(s.zs + pos * 8);
      z[0] = make_float4(gv[0], gv[1], gv[2], gv[3]);
      z[1] = make_float4(gv[4], gv[5], gv[6], gv[7]);
    }
    base += tot;
    __syncthreads();
  }
  return base;
}

// kMaskSpec's stage 1 before the wait (one row, the gate rule): the block polls the selection's threshold-bin word
// (published once the bin is known, while the selection still classifies and ranks; at most a.spec_wait_ns) and
// compacts the channels of its range whose key's bin is at or above it -- a superset of the row's kept channels
// by the bin's candidates -- as ud_mask_compact does, staging their W_down rows. Returns their number, 0 when the
// word did not come (then nothing was staged); s.misc[9] holds the word taken (0: none).
__device__ __forceinline__ int ud_spec_channels(const UpDownArgs& a, const UdSmem s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long nb = gridDim.x, b = blockIdx.x;
  if (tid == 0) {
    unsigned v = 0;
    const unsigned long long t0 = step::globaltimer();
    for (;;) {
      v = ld_acquire_gpu(a.spec);
      if ((v >> 16) == a.spec_tag && (v & 0xffffu) != 0) break;
      if (step::globaltimer() - t0 > a.spec_wait_ns) {
        v = 0;
        break;
      }
      __nanosleep(100);
    }
    s.misc[9] = static_cast<int>(v);
    s.misc[10] = 0;  // ud_spec_settle's counts
    s.misc[11] = 0;
  }
  __syncthreads();
  const unsigned v = static_cast<unsigned>(s.misc[9]);
  if (v == 0) return 0;
  const unsigned tb = (v & 0xffffu) - 1u;
  const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
  int base = 0;
  for (int i0 = 0; i0 < c1 - c0; i0 += kThreads) {
    const int i = i0 + tid;
    const float g = i < c1 - c0 ? __ldcg(a.G + c0 + i) : 0.f;
    const bool m = i < c1 - c0 && (sel_key<0>(g, 0) >> kHShift) >= tb;
    const unsigned bal = __ballot_sync(0xffffffffu, m);
    if (lane == 0) s.misc[warp] = __popc(bal);
    __syncthreads();
    int off = base, tot = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      off += w < warp ? s.misc[w] : 0;
      tot += s.misc[w];
    }
    if (m) {
      const int pos = off + __popc(bal & ((1u << lane) - 1u));
      s.sch[pos] = c0 + i;
      s.smask[pos] = 1u;
      float4* z = reinterpret_cast<float4*>(s.zs + pos * 8);
      z[0] = make_float4(g, 0.f, 0.f, 0.f);
      z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    base += tot;
    __syncthreads();
  }
  ud_stage_rows(a, s, base);
  return base;
}

// Stage 1: this block's channels into s.sch / s.smask and their W_down rows staged; returns their number.
// Waits for the previous kernel (after staging in kAllChannels, whose channels are known in advance).
// kMaskChannels also puts the kept channels' gate values (the gate kernel's G) into s.zs.
template <int MODE>
__device__ __forceinline__ int ud_channels(const UpDownArgs& a, const UdSmem s, step::StampScope& stamp) {
  const int tid = threadIdx.x;
  const long long nb = gridDim.x, b = blockIdx.x;
  int n = 0;
  if constexpr (MODE == kAllChannels) {
    const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
    n = c1 - c0;
    for (int i = tid; i < n; i += kThreads) {
      s.sch[i] = c0 + i;
      s.smask[i] = (1u << a.R) - 1u;
    }
    if (a.prefetch && tid < 2 * min(n, kGroup)) {
      const bf16* w = (tid & 1) ? a.wu : a.wg;
      prefetch_l2(w + static_cast<std::size_t>(c0 + (tid >> 1)) * a.d, static_cast<unsigned>(a.d) * 2u);
    }
    __syncthreads();
    ud_stage_rows(a, s, n);
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
  } else if constexpr (MODE == kListChannels) {
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    // The list length and this block's slots are loaded together (slots past the length are dropped).
    const unsigned U = __ldcg(a.ucount);
    for (int i = tid; i < a.smax; i += kThreads) {
      const long long li = b + static_cast<long long>(i) * nb;
      const unsigned e = li < a.nslots ? __ldcg(a.list + li) : 0u;
      s.sch[i] = static_cast<int>(e & 0xffffu);
      s.smask[i] = e >> 16;
    }
    n = b < U ? static_cast<int>((U - 1 - b) / nb + 1) : 0;
    n = min(n, a.smax);
    __syncthreads();
    ud_stage_rows(a, s, n);
  } else {  // kMaskChannels: the kept channels of this block's range, compacted in channel order
    griddep_launch();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    n = ud_mask_compact(a, s);
    ud_stage_rows(a, s, n);
  }
  return n;
}

// Stage 2: the up (and, FG, gate) GEMV of slots [0, n), 16 channels per mma tile, the 8 warps splitting d;
// each warp's tile results into s.red.
template <bool FG>
__device__ __forceinline__ void ud_up_gemv(const UpDownArgs& a, const UdSmem s, int n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d = a.d;
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
    const std::size_t offA = static_cast<std::size_t>(okA ? s.sch[sA] : 0) * d;
    const std::size_t offB = static_cast<std::size_t>(okB ? s.sch[sB] : 0) * d;
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
    float4* rv = s.red + ((ct * kWarps + warp) * 32 + lane) * K;
    rv[0] = make_float4(cu[0], cu[1], cu[2], cu[3]);
    if constexpr (FG) rv[1] = make_float4(cgt[0], cgt[1], cgt[2], cgt[3]);
  }
}

// kMaskSpec after the wait: the selection's mask bytes decide. The speculation holds when every kept channel of the
// range is among the n speculated ones (equal counts: those are a subset of the range); then each speculated
// channel's row mask (0: not kept, so its z is 0) and gate value are taken again from the selection's and the gate
// kernel's outputs, read after the wait. Otherwise (or without the word) the block redoes stage 1 and the up GEMV as
// kMaskChannels does. Returns the block's channel count.
__device__ __forceinline__ int ud_spec_settle(const UpDownArgs& a, const UdSmem s, int n) {
  const int tid = threadIdx.x;
  const long long nb = gridDim.x, b = blockIdx.x;
  const int c0 = static_cast<int>(b * a.F / nb), c1 = static_cast<int>((b + 1) * a.F / nb);
  int kr = 0, ks = 0;  // kept channels of the range, of the speculated ones
  for (int i = tid; i < c1 - c0; i += kThreads) kr += __ldcg(a.mask + c0 + i) != 0 ? 1 : 0;
  for (int p = tid; p < n; p += kThreads) {
    const int c = s.sch[p];
    const unsigned m = __ldcg(a.mask + c);
    const float g = __ldcg(a.G + c);
    ks += m != 0 ? 1 : 0;
    s.smask[p] = m;
    s.zs[p * 8] = g;
  }
  if (kr) atomicAdd(&s.misc[10], kr);
  if (ks) atomicAdd(&s.misc[11], ks);
  __syncthreads();
  if (s.misc[9] != 0 && s.misc[10] == s.misc[11]) return n;
  cp_async_wait_all();  // the speculative staging has landed before the buffer is refilled
  __syncthreads();
  const int n2 = ud_mask_compact(a, s);
  ud_stage_rows(a, s, n2);
  ud_up_gemv<false>(a, s, n2);
  return n2;
}

// Stage 3: z = SiLU(g) * u on the rows that kept the channel (g from the gate GEMV with FG, else from
// s.zs, where the gate kernel's values were loaded), into s.zs.
template <bool FG>
__device__ __forceinline__ void ud_form_z(const UpDownArgs& a, const UdSmem s, int n) {
  constexpr int K = FG ? 2 : 1;
  const float* rf = reinterpret_cast<const float*>(s.red);
  for (int i = threadIdx.x; i < n * 8; i += kThreads) {
    const int sl = i >> 3, r = i & 7, ct = sl >> 4, sg = sl & 15;
    const int ln = c_lane(sg, r), rg = c_reg(sg, r);
    float u = 0.f, gv = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const std::size_t o = static_cast<std::size_t>((ct * kWarps + w) * 32 + ln) * K * 4;
      u += rf[o + rg];
      if constexpr (FG) gv += rf[o + 4 + rg];
    }
    if constexpr (!FG) gv = s.zs[i];
    const bool on = r < a.R && ((s.smask[sl] >> r) & 1u);
    s.zs[i] = on ? silu_f(gv) * u : 0.f;
  }
}

// Stage 4: the down projection of the staged rows: thread t owns columns [8t, 8t + 8) of each
// 2048-column pass; C == 1 adds into a.acc, else writes the block's partials for the cluster reduction.
template <int RP>
__device__ __forceinline__ void ud_down(const UpDownArgs& a, const UdSmem s, int n, int C) {
  const int d = a.d, tid = threadIdx.x;
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
      for (int sl = 0; sl < n; ++sl) {
        const uint4 w = *reinterpret_cast<const uint4*>(s.stage + static_cast<std::size_t>(sl) * d + c);
        const float wf[8] = {bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y), bf_lo(w.z), bf_hi(w.z), bf_lo(w.w), bf_hi(w.w)};
        const float4 z0 = *reinterpret_cast<const float4*>(s.zs + sl * 8);
        const float4 z1 = *reinterpret_cast<const float4*>(s.zs + sl * 8 + 4);
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
      if (s.alias) __syncthreads();
      if (c < d) {
#pragma unroll
        for (int r = 0; r < RP; ++r)
          if (r < a.R) {
            float4* dst = reinterpret_cast<float4*>(s.part + static_cast<std::size_t>(r) * d + c);
            dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
          }
      }
    }
  }
}

// Column slice [c0, c0 + cs) of the output that one block of a cluster reduces (slice: its rank).
struct UdSlice {
  int slice = 0, cs = 0, c0 = 0;
};

// Stage 5 (C > 1): block `rank` adds column slice `rank` of the C blocks' partials into a.acc.
__device__ __forceinline__ UdSlice ud_cluster_reduce(const UpDownArgs& a, const UdSmem s, int C) {
  const int d = a.d, tid = threadIdx.x;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  UdSlice sl;
  sl.slice = static_cast<int>(cluster.block_rank());
  sl.cs = d / C;
  sl.c0 = sl.slice * sl.cs;
  const int cs = sl.cs, c0 = sl.c0;
  const float* parts[kMaxCluster];
#pragma unroll
  for (int k = 0; k < kMaxCluster; ++k) parts[k] = k < C ? cluster.map_shared_rank(s.part, k) : s.part;
  if (tid >= kThreads) {
    // a wider block's extra warp (the ring kernel's producer) only takes part in the cluster barriers
  } else if (cs % 4 == 0) {
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
  // This block's reads of the others' shared memory are done (their sums went into the atomics above); the others'
  // shared memory must stay alive until every block has read it, so each block waits for this arrive only when it
  // leaves (ud_finish) -- not here, where a full cluster.sync() put the slower block's reads and the barrier's round
  // trip before every block's fence and ticket (decode b1 0.4-1.0% slower on the H200: bench/RESULTS.md part 32).
  cluster_arrive_relaxed_any();
  return sl;
}

// Stage 6: the last block of each column slice adds a.acc into out (one bf16 rounding) and zeroes a.acc and
// the slice's counter again. With clusters (C > 1) every thread ends with the wait for ud_cluster_reduce's arrive
// (not where the partials were pushed: the ring kernels' ring_push_partials waited on that barrier already).
__device__ __forceinline__ void ud_finish(const UpDownArgs& a, const UdSmem s, const UdSlice& sl, int C) {
  const int d = a.d, tid = threadIdx.x, cs = sl.cs, c0 = sl.c0;
  const long long nb = gridDim.x;
  __threadfence();
  __syncthreads();
  // The ticket's answer reaches every thread through the barrier itself (no shared flag to write and read).
  int last = 0;
  if (tid == 0) last = atomicAdd(a.ctrl + sl.slice * kLine, 1u) == static_cast<unsigned>(nb / C - 1) ? 1 : 0;
  if (!__syncthreads_or(last) || tid >= kThreads) {  // (a wider block's extra warp: see ud_cluster_reduce)
    if (C > 1 && !a.pushed) cluster_wait_any();
    return;
  }
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
  if (tid == 0) a.ctrl[sl.slice * kLine] = 0;
  if (C > 1 && !a.pushed) cluster_wait_any();
}

// RP: rows padded (the down projection's accumulators); FG: the gate GEMV runs here too (dense; MoC's
// gate values come from the gate kernel); MODE: how the block finds its channels. CL: the cluster size
// fixed at compile time (0: a.C), so that the kernel holds one reduction's code.
template <int RP, bool FG, int MODE, int CL = 0>
__global__ void __launch_bounds__(kThreads, 1) k_updown(UpDownArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int C = CL > 0 ? CL : a.C;
  const UdSmem s = ud_carve<RP, FG>(smem, a.smax, a.d, C);
  // Stages: up (or gate & up) until every block has its z, then down; the last blocks' return is uniform.
  step::StampScope stamp(a.stamps);

  int n = 0;
  if constexpr (MODE == kMaskSpec) {
    // 1-2 before the wait for the selection, on the channels its threshold bin names; then settled by its masks.
    static_assert(RP == 1 && !FG, "speculation: one row, the gate values from the gate kernel");
    griddep_launch();
    n = ud_spec_channels(a, s);
    ud_up_gemv<false>(a, s, n);
    __syncthreads();
    griddep_wait();
    stamp.start(step::StampKernel::k_updown, step::StageId::down);
    n = ud_spec_settle(a, s, n);
  } else {
    // 1. This block's channels (weights of a fixed range are staged before the wait for the previous kernel).
    n = ud_channels<MODE>(a, s, stamp);
    if constexpr (!FG && MODE != kMaskChannels) {  // (mask mode loaded them with the masks)
      // Gate values of the kept (channel, row) pairs, from the gate kernel.
      for (int i = threadIdx.x; i < n * 8; i += kThreads) {
        const int sl = i >> 3, r = i & 7;
        s.zs[i] = r < a.R ? __ldcg(a.G + static_cast<std::size_t>(r) * a.Fp + s.sch[sl]) : 0.f;
      }
    }
    // 2. Up (and gate) GEMV.
    ud_up_gemv<FG>(a, s, n);
  }
  __syncthreads();
  stamp.claim();  // the stamp flag's read has landed by now; the mark below resolves
  // 3. z = SiLU(g) * u.
  ud_form_z<FG>(a, s, n);
  cp_async_wait_all();
  __syncthreads();
  stamp.mark(FG ? step::StageId::gate_up : step::StageId::up);
  // 4. Down projection.
  ud_down<RP>(a, s, n, C);
  // 5. Cluster reduction, 6. the last block of each column slice writes out.
  UdSlice sl{0, a.d, 0};
  if (C > 1) sl = ud_cluster_reduce(a, s, C);
  ud_finish(a, s, sl, C);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

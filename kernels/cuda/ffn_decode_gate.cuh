// The decode FFN's prep and gate kernels (ffn_decode.cu launches them; design in ffn_decode.cuh).
#pragma once
#include "kernels/cuda/ffn_decode_device.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Prep kernel (dense path): zeroes the up/down kernel's accumulator and counters after the previous kernel
// in the stream is done, and lets the up/down kernel start streaming its weights at once.

__global__ void __launch_bounds__(kThreads) k_prep(uint4* p, unsigned n16) {
  griddep_launch();
  griddep_wait();
  zero_part(p, n16, blockIdx.x, gridDim.x, kThreads);
}

// ---------------------------------------------------------------------------------------------------------
// Gate GEMV: block b owns a balanced range of channels (whole a:b groups in kGateGroupLocal), 16 channels per
// mma tile, its 8 warps split d. The first loads are issued before the wait for the previous kernel.
// Epilogue: G [R, Fp] fp32; in kGateGroupLocal (b | 16) also the a:b selection: idx_out and a row mask per
// channel for the up/down kernel.

struct GateArgs {
  const bf16* x;
  const bf16* wg;
  float* G;             // [R, Fp]
  unsigned char* mask;  // [F] row masks (kGateGroupLocal)
  std::uint16_t* idx_out;
  uint4* zero;          // region the next kernel needs zeroed (or null), zero_n16 16-byte words
  unsigned zero_n16;
  const void* pf_up;    // kGateGroupLocal: W_up and W_down rows of kept channels are prefetched into L2
  const void* pf_down;  // (null: no prefetch)
  step::StampBuf* stamps;  // device-side stamps while profiling (stage_stamps.cuh)
  int R, d, F, Fp, kept, mode, ga, gb, rule, unit, nunits;
};

// GM: the gate mode fixed at compile time (-1: a.mode), so that the top-K gate kernel has no a:b epilogue.
// RULE: the a:b epilogue's ranking rule fixed at compile time (-1: a.rule), so that the gate rule's kernel
// holds no exact-SiLU code (select_key.cuh's double-precision exp: 3% on the 2:8 gate kernel, measured).
template <int U, int GM = -1, int RULE = -1>
__global__ void __launch_bounds__(kThreads, kGateBlocksPerSm) k_gate(GateArgs a) {
  const int gmode = GM >= 0 ? GM : a.mode;
  const int rule = RULE >= 0 ? RULE : a.rule;
  __shared__ float4 red[kWarps * 32];
  __shared__ float gvs[kGroup * 8];
  __shared__ unsigned char on[kGroup * 8];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const long long nb = gridDim.x, b = blockIdx.x;
  const int c0 = min(a.F, static_cast<int>(b * a.nunits / nb) * a.unit);
  const int c1 = min(a.F, static_cast<int>((b + 1) * a.nunits / nb) * a.unit);
  const bool xrow = g < a.R;
  const bf16* px = a.x + static_cast<std::size_t>(xrow ? g : 0) * a.d;
  const int nt = (a.d + kTile - 1) / kTile;
  const int t_beg = warp * nt / kWarps, t_end = (warp + 1) * nt / kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  step::StampScope stamp(a.stamps);  // the gate stage: from the first block past its wait to the last block's end
  griddep_launch();
  bool waited = false;  // warp-uniform
  for (int base = c0; base < c1; base += kGroup) {
    const int chA = base + g, chB = base + g + 8;
    const bool okA = chA < c1, okB = chB < c1;
    const bf16* pa = a.wg + static_cast<std::size_t>(okA ? chA : 0) * a.d;
    const bf16* pb = a.wg + static_cast<std::size_t>(okB ? chB : 0) * a.d;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int t0 = t_beg; t0 < t_end; t0 += U) {
      uint4 A[U], B[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < a.d;
        A[u] = ok && okA ? ld_stream(pa + col) : zero;
        B[u] = ok && okB ? ld_stream(pb + col) : zero;
      }
      if (!waited) {
        griddep_wait();
        waited = true;
        stamp.start(step::StampKernel::k_gate, step::StageId::gate);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = (t0 + u) * kTile + q * 8;
        const bool ok = t0 + u < t_end && col < a.d;
        const uint4 X = ok && xrow ? ld_x(px + col) : zero;
        mma_tile(c, A[u], B[u], X);
      }
    }
    red[warp * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
    if (!waited) {
      griddep_wait();
      waited = true;
      stamp.start(step::StampKernel::k_gate, step::StageId::gate);
    }
    __syncthreads();
    if (tid < kGroup * 8) {
      const int s = tid >> 3, r = tid & 7;
      const int ln = c_lane(s, r), rg = c_reg(s, r);
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += reinterpret_cast<const float*>(red)[(w * 32 + ln) * 4 + rg];
      gvs[s * 8 + r] = v;
      const int ch = base + s;
      if (ch < c1 && r < a.R) a.G[static_cast<std::size_t>(r) * a.Fp + ch] = v;
    }
    if (gmode == kGateGroupLocal) {
      // a:b with b | 16 and base % b == 0: this tile holds whole groups; thread (s, r) ranks channel s
      // within its group.
      __syncthreads();
      const int s = tid >> 3, r = tid & 7, j = base + s;
      bool keep = false;
      int g0 = 0;
      if (tid < kGroup * 8 && r < a.R && j < c1) {
        g0 = s / a.gb * a.gb;
        const int len = min(a.gb, a.F - (base + g0)), take = min(a.ga, len);
        const unsigned key = sel_key<RULE>(gvs[s * 8 + r], rule);
        int rank = 0;
        for (int m = g0; m < g0 + len; ++m) {
          const unsigned km = sel_key<RULE>(gvs[m * 8 + r], rule);
          rank += (km > key || (km == key && m < s)) ? 1 : 0;
        }
        keep = rank < take;
      }
      if (tid < kGroup * 8) on[tid] = keep ? 1 : 0;
      __syncthreads();
      if (keep && a.idx_out) {
        int pos = (base + g0) / a.gb * a.ga;
        for (int m = g0; m < s; ++m) pos += on[m * 8 + r];
        a.idx_out[static_cast<std::size_t>(r) * a.kept + pos] = static_cast<std::uint16_t>(j);
      }
      if (tid < kGroup && base + tid < c1) {
        unsigned m = 0;
#pragma unroll
        for (int rr = 0; rr < 8; ++rr) m |= static_cast<unsigned>(on[tid * 8 + rr]) << rr;
        a.mask[base + tid] = static_cast<unsigned char>(m);
        if (m && a.pf_up) prefetch_rows(a.pf_up, a.pf_down, static_cast<unsigned>(a.d) * 2u, base + tid);
      }
    }
    __syncthreads();  // red, gvs and on are reused by the next tile
    stamp.claim();    // once, after the first tile (the stamp flag's read has landed)
  }
  if (!waited) {
    griddep_wait();
    stamp.start(step::StampKernel::k_gate, step::StageId::gate);
  }
  if (a.zero) zero_part(a.zero, a.zero_n16, blockIdx.x, gridDim.x, kThreads);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

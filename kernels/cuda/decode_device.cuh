// Device helpers shared by the decode kernels (ffn_decode.cu, decode_gemv.cu): streaming weight loads,
// L2 prefetch hints, bf16 unpacking, SiLU with the CPU twin's rounding, and the order-preserving keys the
// MoC selections rank channels by.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/reduce.cuh"  // warp/block reductions and scans (block_excl_scan: the decode FFN, ffn_topk.cuh)
#include "kernels/cuda/select_key.cuh"
#include "kernels/ops.h"

namespace moc::cuda::dev {

using bf16 = __nv_bfloat16;

// An L2 policy for bytes read once per step (weights): evict them first, so that what is read again (the KV
// cache, activations) stays. With it on these loads and on the dense ring's bulk copies, the H100 decode step at
// batch 1 ran 2.7% (dense) / 1.2% (MoC) / 1.6% (2:8) faster in one call (bench/RESULTS.md part 15).
__device__ __forceinline__ unsigned long long l2_stream_policy() {
  unsigned long long pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
// Weights are read once per call: no L1 allocation, 256-byte L2 prefetch, evicted from L2 first.
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(l2_stream_policy()));
  return v;
}

// Asks L2 for `bytes` (a multiple of 16) at a 16-byte aligned address (a hint: no effect on results).
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// The dot product of 8 bf16 pairs (two 16-byte words) accumulated into acc in column order, one fmaf each
// (the batch-1 GEMV, the dense FFN's ring kernel).
__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  acc = fmaf(bf_lo(w.x), bf_lo(x.x), acc);
  acc = fmaf(bf_hi(w.x), bf_hi(x.x), acc);
  acc = fmaf(bf_lo(w.y), bf_lo(x.y), acc);
  acc = fmaf(bf_hi(w.y), bf_hi(x.y), acc);
  acc = fmaf(bf_lo(w.z), bf_lo(x.z), acc);
  acc = fmaf(bf_hi(w.z), bf_hi(x.z), acc);
  acc = fmaf(bf_lo(w.w), bf_lo(x.w), acc);
  acc = fmaf(bf_hi(w.w), bf_hi(x.w), acc);
}
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  float s = 0.f;
  fma8(s, w, x);
  return s;
}

// SiLU for values (the decode FFN's z = SiLU(g) * u): the fast expf, within a few ulp of the CPU twin's, whose
// outputs the tests compare with a tolerance. Ranking uses select_key.cuh's silu_cpu, the CPU's rounding exactly.
__device__ __forceinline__ float silu_f(float g) { return g * (1.0f / (1.0f + expf(-g))); }

// ---- tensor-core GEMV tiles (the decode FFN's gate and up/down kernels, the decode GEMVs): 16 weight rows x up
// to 8 rows of x per mma.sync step.
// D = A(16x16, row) * B(16x8, col) + D, bf16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// One 32-column tile: lane (g = lane/4, q = lane%4) holds 8 consecutive columns [8q, 8q+8) of channel g (a),
// of channel g+8 (b) and of x row g (x). The reduction order over k does not matter, so the same
// column-to-k assignment in A and B makes two m16n8k16 steps compute the 16 x 8 block of dot products:
// c[0], c[1] = (channel g, rows 2q, 2q+1), c[2], c[3] = (channel g+8, rows 2q, 2q+1).
__device__ __forceinline__ void mma_tile(float (&c)[4], const uint4& a, const uint4& b, const uint4& x) {
  mma16816(c, a.x, b.x, a.y, b.y, x.x, x.y);
  mma16816(c, a.z, b.z, a.w, b.w, x.z, x.w);
}
// Where the dot product of (slot s, row r) sits after mma_tile: lane and register.
__device__ __forceinline__ int c_lane(int s, int r) { return (s & 7) * 4 + (r >> 1); }
__device__ __forceinline__ int c_reg(int s, int r) { return ((s >> 3) << 1) | (r & 1); }

}  // namespace moc::cuda::dev

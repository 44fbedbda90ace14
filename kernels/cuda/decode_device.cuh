// Device helpers shared by the decode kernels (ffn_decode.cu, decode_step.cu): streaming weight loads,
// L2 prefetch hints, bf16 unpacking, SiLU with the CPU twin's rounding, and the order-preserving keys the
// MoC selections rank channels by.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/ops.h"

namespace moc::cuda::dev {

using bf16 = __nv_bfloat16;

// Weights are read once per call: no L1 allocation, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Asks L2 for `bytes` (a multiple of 16) at a 16-byte aligned address (a hint: no effect on results).
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// Same formula and rounding as the CPU twin's silu.
__device__ __forceinline__ float silu_f(float g) { return g * (1.0f / (1.0f + expf(-g))); }

// The value a channel is ranked by (NaN as -inf, -0 as +0) and its order-preserving key: larger value,
// larger key; every real key is >= key(-inf) = 0x007fffff > 0.
__device__ __forceinline__ float rank_value(float g, int rule) {
  float v = g;
  if (rule == static_cast<int>(SelectRule::silu)) v = silu_f(g);
  if (rule == static_cast<int>(SelectRule::abs_silu)) v = fabsf(silu_f(g));
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  return v;
}
__device__ __forceinline__ unsigned key_of(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ unsigned sel_key(float g, int rule) { return key_of(rank_value(g, rule)); }

}  // namespace moc::cuda::dev

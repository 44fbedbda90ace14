// The MoC selection's ranking key, the one definition every GPU path uses: the training step's row top-K and a:b
// (moc_ops.cu, including the float keys RAFT's select_k ranks) and the decode FFN's gate and selection kernels
// (ffn_decode.cu, ffn_topk.cuh). The CPU twin (kernels/cpu, moc_select) ranks by the same values, so a GPU path
// and the CPU select the same channels on the same gate values (GpuMocSelect.EveryPathRanksByTheSameKey).
//   rule gate:     the gate value g (the paper's practical rule, before SiLU)
//   rule silu:     SiLU(g) = g * (1 / (1 + exp(-g))), rounded step by step as the CPU computes it: exp in double
//                  then rounded to float (the correctly rounded expf that glibc's expf matches), then the
//                  division, addition and product each rounded (no fused multiply-add)
//   rule abs_silu: |SiLU(g)|
// NaN ranks as -inf and -0 as +0 (equal floats give equal keys); ties go to the lower channel (the kernels).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace moc::cuda::dev {

// SiLU with the CPU twin's rounding (see above). Slower than a fused expf: for ranking, where one ulp decides
// a near-tie; the decode FFN's z = SiLU(g) * u values use the fast silu_f (decode_device.cuh).
__device__ __forceinline__ float silu_cpu(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return __fmul_rn(x, __fdiv_rn(1.0f, __fadd_rn(1.0f, e)));
}

// The value a channel is ranked by under `rule` (a SelectRule), NaN as -inf and -0 as +0.
__device__ __forceinline__ float rank_value(float g, int rule) {
  float v = g;
  if (rule == static_cast<int>(SelectRule::silu)) v = silu_cpu(g);
  if (rule == static_cast<int>(SelectRule::abs_silu)) v = fabsf(silu_cpu(g));
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  return v;
}

// Order-preserving key of a ranked value: larger value, larger key; every real key is >= key(-inf) = 0x007fffff.
__device__ __forceinline__ std::uint32_t key_of(float v) {
  const std::uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ std::uint32_t sel_key(float g, int rule) { return key_of(rank_value(g, rule)); }

}  // namespace moc::cuda::dev

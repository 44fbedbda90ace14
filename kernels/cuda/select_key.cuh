// The MoC selection's ranking key, the one definition every GPU path uses: the training step's row top-K and a:b
// (moc_select.cu, including the float keys RAFT's select_k ranks) and the decode FFN's gate and selection kernels
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

// The same, out of line: a kernel whose rule is known only at run time calls it rather than carrying the
// double-precision exp inline, so that its gate-rule path (the common one) keeps its registers (the decode
// FFN's generic kernels were 2-4% slower with it inline, measured on an H100).
__device__ __noinline__ inline float silu_cpu_call(float x) { return silu_cpu(x); }

// The value a channel is ranked by under `rule` (a SelectRule), NaN as -inf and -0 as +0. RULE: the rule when
// the kernel fixes it at compile time (then `rule` equals it), -1 when it is read at run time. kInline: the
// exact SiLU inline (default: when the rule is fixed; the training kernels, not remeasured, keep it inline).
template <int RULE = -1, bool kInline = (RULE >= 0)>
__device__ __forceinline__ float rank_value(float g, int rule) {
  if constexpr (RULE >= 0) rule = RULE;
  float v = g;
  if (rule == static_cast<int>(SelectRule::silu) || rule == static_cast<int>(SelectRule::abs_silu)) {
    if constexpr (kInline) v = silu_cpu(g);
    else v = silu_cpu_call(g);
    if (rule == static_cast<int>(SelectRule::abs_silu)) v = fabsf(v);
  }
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  return v;
}

// Order-preserving key of a ranked value: larger value, larger key; every real key is >= key(-inf) = 0x007fffff.
__device__ __forceinline__ std::uint32_t key_of(float v) {
  const std::uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <int RULE = -1, bool kInline = (RULE >= 0)>
__device__ __forceinline__ std::uint32_t sel_key(float g, int rule) {
  return key_of(rank_value<RULE, kInline>(g, rule));
}

}  // namespace moc::cuda::dev

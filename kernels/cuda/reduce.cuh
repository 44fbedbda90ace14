// Warp and block reductions and scans shared by every CUDA kernel file (one definition each; the kernels'
// own loops over shuffles were folded into these). All are called by every thread of the warp or block
// named; none allocates shared memory itself: the block-wide ones take a scratch array from the caller.
//
// Orders are fixed (a float sum's rounding depends on them): warp_sum / warp_max fold offsets Width/2 .. 1;
// lane_group_sum / lane_group_max fold offsets Lo, 2 Lo, .. Hi/2 (for layouts where a value is spread over
// lanes that differ in some bits only).
#pragma once
#include <cuda_runtime.h>

#include <cmath>

namespace moc::cuda::dev {

constexpr unsigned kFullMask = 0xffffffffu;

// Sum / max over aligned groups of Width lanes (Width a power of two <= 32); every lane gets its group's.
template <int Width = 32, class T>
__device__ __forceinline__ T warp_sum(T v) {
  static_assert(Width >= 1 && Width <= 32 && (Width & (Width - 1)) == 0, "Width: a power of two up to 32");
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <int Width = 32>
__device__ __forceinline__ float warp_max(float v) {
  static_assert(Width >= 1 && Width <= 32 && (Width & (Width - 1)) == 0, "Width: a power of two up to 32");
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum / max over the lanes that differ from this one only in the lane-index bits Lo .. Hi/2 (powers of two,
// Lo < Hi <= 32), folded in that (ascending) order.
template <int Lo, int Hi, class T>
__device__ __forceinline__ T lane_group_sum(T v) {
  static_assert(Lo >= 1 && Lo < Hi && Hi <= 32, "Lo < Hi <= 32");
#pragma unroll
  for (int o = Lo; o < Hi; o <<= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <int Lo, int Hi>
__device__ __forceinline__ float lane_group_max(float v) {
  static_assert(Lo >= 1 && Lo < Hi && Hi <= 32, "Lo < Hi <= 32");
#pragma unroll
  for (int o = Lo; o < Hi; o <<= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Inclusive prefix sum over the warp (lane 0 first) and inclusive suffix sum (this lane and all higher).
template <class T>
__device__ __forceinline__ T warp_incl_scan(T v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += t;
  }
  return v;
}
template <class T>
__device__ __forceinline__ T warp_suffix_sum(T v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_down_sync(kFullMask, v, o);
    if (lane + o < 32) v += t;
  }
  return v;
}

// Exclusive prefix sum of v over the block's threads in thread order, and the block total. NT: the block's
// threads at compile time (a multiple of 32), or 0 for blockDim.x (a multiple of 32). Every thread calls it;
// it holds two barriers (scratch: one T per warp, reusable as soon as it returns).
template <int NT, class T>
__device__ __forceinline__ T block_excl_scan(T v, T* scratch, T& total) {
  static_assert(NT % 32 == 0, "NT: a multiple of 32 (0: blockDim.x)");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = NT > 0 ? NT / 32 : static_cast<int>(blockDim.x >> 5);
  const T incl = warp_incl_scan(v, lane);
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  T off = 0, tot = 0;
#pragma unroll
  for (int w = 0; w < (NT > 0 ? NT / 32 : 32); ++w) {
    if (NT == 0 && w >= nwarps) break;
    const T s = scratch[w];
    off += w < warp ? s : T(0);
    tot += s;
  }
  __syncthreads();
  total = tot;
  return off + incl - v;
}

// Sum / max over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// smem: at least 32 values; the barrier on entry lets consecutive calls share it.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_sum(lane < nw ? smem[lane] : T(0));
}
__device__ __forceinline__ float block_max(float v, float* smem) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_max(lane < nw ? smem[lane] : -INFINITY);
}

}  // namespace moc::cuda::dev

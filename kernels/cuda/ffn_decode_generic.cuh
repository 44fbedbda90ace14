// The decode FFN's generic kernels (ffn_decode.cu launches them for f32, unaligned or very wide inputs).
#pragma once
#include "kernels/cuda/ffn_decode_device.cuh"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Generic path (f32 tensors, d % 8 != 0, unaligned views, very wide d): simple and correct.

template <class T>
__device__ __forceinline__ void warp_dots(const T* x, const T* w, int R, int d, float (&acc)[kMaxRows]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = 0.f;
  for (int c = lane; c < d; c += 32) {
    const float wv = to_f32(w[c]);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) acc[r] = fmaf(to_f32(x[static_cast<std::size_t>(r) * d + c]), wv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = warp_sum(acc[r]);
}

template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_gate(const T* x, const T* wg, float* G, int R, int d, int F,
                                                       int Fp) {
  const int j = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (j >= F) return;
  float acc[kMaxRows];
  warp_dots(x, wg + static_cast<std::size_t>(j) * d, R, d, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) G[static_cast<std::size_t>(r) * Fp + j] = acc[r];
  }
}

// z[slot, row] = SiLU(g) * u on the rows that kept the slot's channel. mode: 0 all channels (gate computed),
// 1 list (gate computed), 2 list (gate from G).
template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_z(const T* x, const T* wg, const T* wu, const float* G,
                                                    const unsigned* list, const unsigned* ucount, float* z, int R,
                                                    int d, int F, int Fp, int mode) {
  const int s = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int n = mode == 0 ? F : static_cast<int>(*ucount);
  if (s >= n) return;
  int j = s;
  unsigned m = (1u << R) - 1u;
  if (mode != 0) {
    const unsigned e = list[s];
    j = static_cast<int>(e & 0xffffu);
    m = e >> 16;
  }
  float u[kMaxRows], g[kMaxRows] = {};
  warp_dots(x, wu + static_cast<std::size_t>(j) * d, R, d, u);
  if (mode != 2) warp_dots(x, wg + static_cast<std::size_t>(j) * d, R, d, g);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      float v = 0.f;
      if (r < R && ((m >> r) & 1u)) {
        const float gv = mode == 2 ? G[static_cast<std::size_t>(r) * Fp + j] : g[r];
        v = silu_f(gv) * u[r];
      }
      z[static_cast<std::size_t>(s) * kMaxRows + r] = v;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) k_gen_down(const T* wd, T* out, const float* z, const unsigned* list,
                                                       const unsigned* ucount, int R, int d, int F, int all) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= R * d) return;
  const int r = i / d, c = i - r * d;
  const int n = all ? F : static_cast<int>(*ucount);
  float acc = 0.f;
  for (int s = 0; s < n; ++s) {
    const int j = all ? s : static_cast<int>(list[s] & 0xffffu);
    acc = fmaf(z[static_cast<std::size_t>(s) * kMaxRows + r], to_f32(wd[static_cast<std::size_t>(j) * d + c]), acc);
  }
  out[i] = from_f32<T>(to_f32(out[i]) + acc);
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

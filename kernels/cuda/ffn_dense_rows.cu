// The dense decode FFN at one row of x as two GEMVs (issue #26: "gate and up in one pass with the SiLU·mul
// epilogue, then down + residual"), the layout of the decode GEMVs (decode_gemv.cu: one weight row per warp,
// 8 x 16-byte words per lane in flight, the first batch of weight words loaded before the PDL wait):
//   k_gateup_row  warp j: channel j's W_gate and W_up rows against x (staged in shared memory), then
//                 z[j] = SiLU(g) * u in fp32 (the CPU twin's formula, no rounding); z = 0 past d_ffn.
//   k_down_row    warp c: row c of W_down^T ([d, ld], the columns past d_ffn zero) against z (staged in shared
//                 memory), out[c] += the dot product, rounded once to bf16.
// No cross-block reduction, no atomics, no counters: the one-kernel up/down (ffn_decode.cu) needs a cluster
// reduction and fp32 atomics because its blocks own channels, not outputs.
// Floor: 3 d d_ffn bf16 weights (67 MB for the 1b layer), z and x a few KB.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/op_cost.h"

namespace moc::cuda::ffn {
namespace {

using namespace moc::cuda::dev;  // bf16, ld_stream, bf_lo / bf_hi, silu_f

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWU = 8;                   // 16-byte words per lane in flight, per weight row
constexpr int kCols = kWU * 32 * 8;      // columns one warp covers per load batch

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

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

struct GateUpArgs {
  const bf16* x;   // [d]
  const bf16* wg;  // [F, d]
  const bf16* wu;  // [F, d]
  float* z;        // [nz]
  int d, F, nz;
};

template <int WU, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) k_gateup_row(const GateUpArgs a) {
  constexpr int kColsG = WU * 32 * 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint4* xs = reinterpret_cast<uint4*>(smem_raw);  // x, d / 8 words
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = blockIdx.x * kWarps + warp;
  const bool active = j < a.F;
  const bf16* pg = a.wg + static_cast<std::size_t>(active ? j : 0) * a.d;
  const bf16* pu = a.wu + static_cast<std::size_t>(active ? j : 0) * a.d;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 G[WU], U[WU];
  auto load = [&](int bt) {
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = bt * kColsG + (u * 32 + lane) * 8;
      const bool ok = col < a.d && active;
      G[u] = ok ? ld_stream(pg + col) : zero;
      U[u] = ok ? ld_stream(pu + col) : zero;
    }
  };
  pdl_trigger();
  load(0);  // weights: no op of the chain writes them
  pdl_wait();
  const uint4* xg = reinterpret_cast<const uint4*>(a.x);
  for (int e = threadIdx.x; e < a.d / 8; e += kThreads) xs[e] = __ldcg(xg + e);
  __syncthreads();
  float ag = 0.0f, au = 0.0f;
  const int nbatch = (a.d + kColsG - 1) / kColsG;
  for (int bt = 0; bt < nbatch; ++bt) {
    if (bt > 0) load(bt);
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = bt * kColsG + (u * 32 + lane) * 8;
      if (col < a.d) {
        const uint4 xv = xs[col / 8];
        fma8(ag, G[u], xv);
        fma8(au, U[u], xv);
      }
    }
  }
  ag = warp_sum(ag);
  au = warp_sum(au);
  if (lane == 0 && j < a.nz) a.z[j] = active ? silu_f(ag) * au : 0.0f;
}

struct DownArgs {
  const float* z;   // [nz]
  const bf16* wdt;  // [d, ld]
  bf16* out;        // [d], accumulated
  int d, nz, ld;
};

template <int WU, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) k_down_row(const DownArgs a) {
  constexpr int kColsD = WU * 32 * 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* zs = reinterpret_cast<float*>(smem_raw);  // z, nz floats
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x * kWarps + warp;
  const bool active = c < a.d;
  const bf16* pw = a.wdt + static_cast<std::size_t>(active ? c : 0) * a.ld;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 W[WU];
  auto load = [&](int bt) {
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = bt * kColsD + (u * 32 + lane) * 8;
      W[u] = col < a.nz && active ? ld_stream(pw + col) : zero;
    }
  };
  pdl_trigger();
  load(0);
  pdl_wait();
  const float4* zg = reinterpret_cast<const float4*>(a.z);
  for (int e = threadIdx.x; e < a.nz / 4; e += kThreads) reinterpret_cast<float4*>(zs)[e] = __ldcg(zg + e);
  __syncthreads();
  float acc = 0.0f;
  const int nbatch = (a.nz + kColsD - 1) / kColsD;
  for (int bt = 0; bt < nbatch; ++bt) {
    if (bt > 0) load(bt);
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = bt * kColsD + (u * 32 + lane) * 8;
      if (col < a.nz) {
        const float4 z0 = *reinterpret_cast<const float4*>(zs + col);
        const float4 z1 = *reinterpret_cast<const float4*>(zs + col + 4);
        const uint4 w = W[u];
        acc = fmaf(bf_lo(w.x), z0.x, acc);
        acc = fmaf(bf_hi(w.x), z0.y, acc);
        acc = fmaf(bf_lo(w.y), z0.z, acc);
        acc = fmaf(bf_hi(w.y), z0.w, acc);
        acc = fmaf(bf_lo(w.z), z1.x, acc);
        acc = fmaf(bf_hi(w.z), z1.y, acc);
        acc = fmaf(bf_lo(w.w), z1.z, acc);
        acc = fmaf(bf_hi(w.w), z1.w, acc);
      }
    }
  }
  acc = warp_sum(acc);
  if (lane == 0 && active) a.out[c] = __float2bfloat16_rn(__bfloat162float(a.out[c]) + acc);
}


// Two warps per row of W_down^T: warp pair (2i, 2i + 1) of a block owns row 4b + i, each one half of its
// columns (one load batch for d_ffn <= 2 x WU x 256), the halves added in shared memory.
template <int WU, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) k_down_half(const DownArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* zs = reinterpret_cast<float*>(smem_raw);  // z, nz floats
  __shared__ float part[kWarps];
  constexpr int kColsD = WU * 32 * 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x * (kWarps / 2) + warp / 2;
  const bool active = c < a.d;
  const int half = ((a.nz + 1) / 2 + 7) / 8 * 8;
  const int h0 = (warp & 1) * half, h1 = min(a.nz, h0 + half);
  const bf16* pw = a.wdt + static_cast<std::size_t>(active ? c : 0) * a.ld;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 W[WU];
  auto load = [&](int bt) {
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = h0 + bt * kColsD + (u * 32 + lane) * 8;
      W[u] = col < h1 && active ? ld_stream(pw + col) : zero;
    }
  };
  pdl_trigger();
  load(0);
  pdl_wait();
  const float4* zg = reinterpret_cast<const float4*>(a.z);
  for (int e = threadIdx.x; e < a.nz / 4; e += kThreads) reinterpret_cast<float4*>(zs)[e] = __ldcg(zg + e);
  __syncthreads();
  float acc = 0.0f;
  const int nbatch = (h1 - h0 + kColsD - 1) / kColsD;
  for (int bt = 0; bt < nbatch; ++bt) {
    if (bt > 0) load(bt);
#pragma unroll
    for (int u = 0; u < WU; ++u) {
      const int col = h0 + bt * kColsD + (u * 32 + lane) * 8;
      if (col < h1) {
        const float4 z0 = *reinterpret_cast<const float4*>(zs + col);
        const float4 z1 = *reinterpret_cast<const float4*>(zs + col + 4);
        const uint4 w = W[u];
        acc = fmaf(bf_lo(w.x), z0.x, acc);
        acc = fmaf(bf_hi(w.x), z0.y, acc);
        acc = fmaf(bf_lo(w.y), z0.z, acc);
        acc = fmaf(bf_hi(w.y), z0.w, acc);
        acc = fmaf(bf_lo(w.z), z1.x, acc);
        acc = fmaf(bf_hi(w.z), z1.y, acc);
        acc = fmaf(bf_lo(w.w), z1.z, acc);
        acc = fmaf(bf_hi(w.w), z1.w, acc);
      }
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) part[warp] = acc;
  __syncthreads();
  if (lane == 0 && !(warp & 1) && active)
    a.out[c] = __float2bfloat16_rn(__bfloat162float(a.out[c]) + (part[warp] + part[warp + 1]));
}

}  // namespace

bool dense_rows_fits(const Problem& p) {
  const auto a16 = [](const void* q) { return (reinterpret_cast<std::uintptr_t>(q) & 15u) == 0; };
  const int nz = (p.d_ffn + 7) / 8 * 8;
  return p.rows == 1 && p.kind == SelKind::dense && p.dtype == DType::bf16 && p.w_down_rows != nullptr &&
         p.d % 8 == 0 && p.w_down_ld >= nz && p.w_down_ld % 8 == 0 && a16(p.x) && a16(p.w_gate_t) && a16(p.w_up_t) &&
         a16(p.w_down_rows) && static_cast<std::size_t>(nz) * 4 <= 200 * 1024;
}

void launch_dense_rows(const Problem& p, float* z, cudaStream_t st, bool entry_pdl, bool pdl, int down_wu, int gate_variant) {
  const int nz = (p.d_ffn + 7) / 8 * 8;
  GateUpArgs g{static_cast<const bf16*>(p.x), static_cast<const bf16*>(p.w_gate_t),
               static_cast<const bf16*>(p.w_up_t), z, p.d, p.d_ffn, nz};
  const std::int64_t d = p.d, F = p.d_ffn;
  // What each kernel must move: x, W_gate and W_up, z written; z, W_down, out read and written.
  {
    MOC_OP_COST(OpCost{"ffn_decode.gate_up", 2 * d + 4 * d * F + 4 * F, 4 * d * F});
    const std::size_t xs = static_cast<std::size_t>(p.d) * 2;
    const dim3 grid(static_cast<unsigned>(ceil_div(nz, kWarps)));
    auto go = [&](auto kernel) {
      allow_smem(kernel, xs);
      if (entry_pdl) launch_pdl("k_gateup_row", kernel, grid, dim3(kThreads), xs, st, g);
      else kernel<<<grid, kThreads, xs, st>>>(g);
    };
    switch (gate_variant) {
      case 1: go(k_gateup_row<4, 4>); break;
      case 2: go(k_gateup_row<4, 6>); break;
      case 3: go(k_gateup_row<4, 5>); break;
      case 4: go(k_gateup_row<2, 8>); break;
      case 5: go(k_gateup_row<4, 3>); break;
      case 6: go(k_gateup_row<8, 2>); break;
      default: go(k_gateup_row<kWU, 1>); break;
    }
    MOC_CUDA_LAUNCHED("k_gateup_row");
  }
  MOC_OP_COST(OpCost{"ffn_decode.down", 4 * F + 2 * d * F + 4 * d, 2 * d * F});
  DownArgs dn{z, static_cast<const bf16*>(p.w_down_rows), static_cast<bf16*>(p.out), p.d, nz, p.w_down_ld};
  const std::size_t zsb = static_cast<std::size_t>(nz) * 4;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.d, kWarps)));
  auto go = [&](auto kernel) {
    allow_smem(kernel, zsb);
    if (pdl) launch_pdl("k_down_row", kernel, grid, dim3(kThreads), zsb, st, dn);
    else kernel<<<grid, kThreads, zsb, st>>>(dn);
  };
  if (down_wu == 112 || down_wu == 1124) {  // two warps per row (bench/micro A/B)
    const dim3 g2(static_cast<unsigned>(ceil_div(p.d, kWarps / 2)));
    auto k = down_wu == 112 ? k_down_half<12, 1> : k_down_half<12, 4>;
    allow_smem(k, zsb);
    if (pdl) launch_pdl("k_down_row", k, g2, dim3(kThreads), zsb, st, dn);
    else k<<<g2, kThreads, zsb, st>>>(dn);
  } else if (down_wu == 16) go(k_down_row<16, 1>);
  else if (down_wu == 162) go(k_down_row<16, 2>);
  else if (down_wu == 163) go(k_down_row<16, 3>);
  else if (down_wu == 12) go(k_down_row<12, 1>);
  else if (down_wu == 122) go(k_down_row<12, 2>);
  else if (down_wu == 84) go(k_down_row<8, 4>);
  else go(k_down_row<kWU, 1>);
  MOC_CUDA_LAUNCHED("k_down_row");
}

}  // namespace moc::cuda::ffn

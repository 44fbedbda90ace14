// The batch-1 QKV projection as one weight stream per SM (decode_gemv.cu includes it after its helpers: Args,
// row_ptr, round_bf16, qkv_store; design of the ring in bulk_ring.cuh).
//
// Block b of one per SM owns a balanced range of RoPE units (rows i and i + hd/2 of one head of q | k | v). A
// producer warp streams the units' weight rows through a ring of kRingSlots slots of kSlotBytes (two bulk copies per
// unit), before the PDL wait when W is a weights tensor; the 8 consumer warps normalize x after the wait (as
// stage_x_norm does, among themselves), then each slot's rows are split over the warps (a row, or a share of its
// columns), the partial dot products kept in shared memory; after the last slot each unit's two sums are rounded
// and stored with RoPE and the cache write (qkv_store). Against k_qkv_row (a warp per row, two waves of 768 blocks
// at 3 per SM, one load batch per warp before the wait): no wave boundary, the whole ring requested before the wait.
#pragma once
#include "kernels/cuda/bulk_ring.cuh"

namespace moc::cuda {
namespace gemv {
namespace {

namespace qring {
constexpr int kConsumers = kThreads;       // 8 warps
constexpr int kThreadsAll = kThreads + 32;  // + the producer warp
constexpr unsigned kSlotBytes = 16u * 1024u;
constexpr int kSlots = 4;  // 64 KB: fits beside the dense FFN's ring block (134 KB) on an SM
constexpr int kMaxSplit = 8;

struct Plan {
  int upi = 1;    // units per slot
  int split = 1;  // warps per row (column shares)
  int umax = 1;   // most units of one block
};
// d <= 4096 (one unit's two rows in a slot).
__host__ __device__ inline Plan plan(int d, int units, int blocks) {
  Plan p;
  p.upi = static_cast<int>(kSlotBytes / (4u * static_cast<unsigned>(d)));
  if (p.upi > 8) p.upi = 8;
  const int rows = 2 * p.upi;
  p.split = rows >= kWarps ? 1 : kWarps / rows;
  p.umax = (units + blocks - 1) / blocks;
  return p;
}
__host__ __device__ inline std::size_t smem_bytes(int d, int umax, int split) {
  return static_cast<std::size_t>(kSlots) * kSlotBytes + static_cast<std::size_t>(d) * 2 +
         static_cast<std::size_t>(umax) * 2 * split * 4 + 2 * kSlots * 8 + kWarps * 4 + 64;
}
}  // namespace qring

__global__ void __launch_bounds__(qring::kThreadsAll, 1) k_qkv_ring(const Args a, const qring::Plan pl) {
  using namespace qring;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d = a.d;
  bf16* ring = reinterpret_cast<bf16*>(smem_raw);
  bf16* xs = reinterpret_cast<bf16*>(smem_raw + static_cast<std::size_t>(kSlots) * kSlotBytes);
  float* part = reinterpret_cast<float*>(xs + d);  // [umax][2][split]
  auto* full = reinterpret_cast<unsigned long long*>(part + static_cast<std::size_t>(pl.umax) * 2 * pl.split);
  unsigned long long* empty = full + kSlots;
  float* red = reinterpret_cast<float*>(empty + kSlots);

  const long long nb = gridDim.x, b = blockIdx.x;
  const int u0 = static_cast<int>(b * a.units / nb), u1 = static_cast<int>((b + 1) * a.units / nb), n = u1 - u0;
  const int T = (n + pl.upi - 1) / pl.upi, half = a.hd / 2;
  constexpr std::size_t kSlotElems = kSlotBytes / 2;
  if (tid == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  pdl_trigger();
  if (warp == kConsumers / 32) {
    if (lane == 0) {
      if (!a.early) pdl_wait();  // W may be the previous kernel's output
      const unsigned row_bytes = static_cast<unsigned>(d) * 2u;
      for (int i = 0; i < T; ++i) {
        const int s = i % kSlots, j0 = i * pl.upi, cnt = min(pl.upi, n - j0);
        if (i >= kSlots) mbar_wait(empty + s, static_cast<unsigned>((i / kSlots) - 1) & 1u);
        bf16* dst = ring + s * kSlotElems;
        mbar_expect_tx(full + s, 2u * static_cast<unsigned>(cnt) * row_bytes);
        for (int j = 0; j < cnt; ++j) {
          const int u = u0 + j0 + j, head = u / half, r0 = head * a.hd + (u - head * half);
          bulk_copy(dst + static_cast<std::size_t>(2 * j) * d, row_ptr(a, r0), row_bytes, full + s);
          bulk_copy(dst + static_cast<std::size_t>(2 * j + 1) * d, row_ptr(a, r0 + half), row_bytes, full + s);
        }
      }
    }
    __syncwarp();
    return;  // (no block-wide barrier follows)
  }
  // Consumers: x normalized into xs (rounded to bf16 as rmsnorm_vec_kernel writes it).
  pdl_wait();
  const int nv = d / 8;
  float ss = 0.f;
  for (int e = tid; e < nv; e += kConsumers) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(a.x) + e);
    reinterpret_cast<uint4*>(xs)[e] = v;
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) ss += bf_lo(u[k]) * bf_lo(u[k]) + bf_hi(u[k]) * bf_hi(u[k]);
  }
  ss = warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  consumers_sync<kConsumers>();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  const float rs = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(d) + a.eps));
  for (int e = tid; e < nv; e += kConsumers) {
    const uint4 v = reinterpret_cast<const uint4*>(xs)[e], w = __ldg(reinterpret_cast<const uint4*>(a.norm) + e);
    const bf16* xe = reinterpret_cast<const bf16*>(&v);
    const bf16* we = reinterpret_cast<const bf16*>(&w);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = __float2bfloat16_rn(__bfloat162float(xe[k]) * rs * __bfloat162float(we[k]));
    reinterpret_cast<uint4*>(xs)[e] = o;
  }
  consumers_sync<kConsumers>();
  // Slots: row rr of the slot (unit j0 + rr / 2, its first or second row), column share sh of split.
  for (int i = 0; i < T; ++i) {
    const int s = i % kSlots, j0 = i * pl.upi, cnt = min(pl.upi, n - j0);
    mbar_wait(full + s, static_cast<unsigned>(i / kSlots) & 1u);
    const bf16* slot = ring + s * kSlotElems;
    for (int w2 = warp; w2 < 2 * cnt * pl.split; w2 += kWarps) {
      const int rr = w2 / pl.split, sh = w2 - rr * pl.split;
      const bf16* row = slot + static_cast<std::size_t>(rr) * d;
      float acc = 0.f;
#pragma unroll 4
      for (int col = (sh * 32 + lane) * 8; col < d; col += pl.split * 256)
        fma8(acc, *reinterpret_cast<const uint4*>(row + col), *reinterpret_cast<const uint4*>(xs + col));
      acc = warp_sum(acc);
      if (lane == 0) part[((j0 + rr / 2) * 2 + (rr & 1)) * pl.split + sh] = acc;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
  }
  consumers_sync<kConsumers>();
  for (int j = tid; j < n; j += kConsumers) {
    float x0 = 0.f, x1 = 0.f;
    for (int sh = 0; sh < pl.split; ++sh) {
      x0 += part[(j * 2) * pl.split + sh];
      x1 += part[(j * 2 + 1) * pl.split + sh];
    }
    const int u = u0 + j, head = u / half;
    qkv_store(a, 0, head, u - head * half, round_bf16(x0), round_bf16(x1));
  }
}

}  // namespace
}  // namespace gemv
}  // namespace moc::cuda

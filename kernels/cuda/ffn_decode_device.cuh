// The decode FFN kernels' shared constants and device helpers (ffn_decode.cu and its kernel headers:
// ffn_decode_gate.cuh, ffn_decode_select.cuh, ffn_decode_updown.cuh, ffn_decode_generic.cuh). Included by
// ffn_decode.cu only (everything here is internal to that translation unit).
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/cuda/ffn_topk.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/stage_stamps.cuh"
#include "kernels/op_cost.h"

namespace moc::cuda {
namespace ffn {
namespace {

namespace cg = cooperative_groups;
using namespace moc::cuda::dev;  // ld_stream, prefetch_l2, bf_lo/hi, silu_f (decode_device.cuh); sel_key (select_key.cuh)

constexpr int kThreads = 256;  // gate, up/down and prep kernels: 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 16;     // channels of one mma tile (its M)
constexpr int kMaxRows = 8;    // rows per chunk (the N of one mma tile)
constexpr int kTile = 32;      // columns one warp covers per mma step (4 lanes x 8 bf16)
constexpr int kDownCols = kThreads * 8;  // columns of one pass of the down projection (8 per thread)
constexpr int kMaxCluster = 8;
constexpr int kGateBlocksPerSm = 3;
constexpr int kDefaultUpdownCluster = 2;  // Options::updown_cluster 0

// Selection kernel: one block of kSelThreads per row (a cluster over the rows of a chunk).
constexpr int kSelThreads = 512;
using topk::kHBins;  // ffn_topk.cuh: the row top-K inside one block
using topk::kHShift;
using topk::kRankMax;
constexpr int kKeyCache = 8192;        // rows of at most this many channels keep their keys in shared memory

// Workspace counters: one 128-byte line per column slice of the up/down reduction.
constexpr int kLine = 32;  // u32 per line
constexpr std::size_t kCtrlBytes = kMaxCluster * kLine * 4;

enum GateMode : int { kGateOnly = 0, kGateGroupLocal = 1 };
// kMaskSpec: kMaskChannels at one row, the block starting on the channels above the selection's published threshold
// bin before the selection ends (Options::topk_speculate; ffn_decode_updown.cuh ud_spec_channels).
enum ChannelMode : int { kAllChannels = 0, kListChannels = 1, kMaskChannels = 2, kMaskSpec = 3 };
enum SelMode : int { kSelTopK = 0, kSelGroup = 1, kSelForce = 2 };

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t(15); }
inline std::size_t align256(std::size_t n) { return (n + 255) & ~std::size_t(255); }

// The selection's threshold-bin word (ffn_decode_select.cuh publishes, ffn_decode_updown.cuh polls): tag << 16 |
// (bin + 1), 0 until published. The tag names the layer's call (a hash of its W_up pointer, never 0), so that a word
// left by another call is not taken for this one's.
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---------------------------------------------------------------------------------------------------------
// Device helpers

// x is small and read by every block: cached.
__device__ __forceinline__ uint4 ld_x(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The cluster's split barrier (not .aligned: callers may reach it from divergent code). An arrive that orders nothing
// (relaxed), and the wait for every block's arrive; ud_cluster_reduce / ud_finish use it to keep a block's shared
// memory alive until the cluster's other blocks have read it, waiting only when the block leaves.
__device__ __forceinline__ void cluster_arrive_relaxed_any() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_any() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
// An arrive that releases (what the block wrote to its shared memory before it, e.g. an mbarrier's initialization, is
// seen by the other blocks after their wait); a shared-memory address of this block mapped to block `rank` of the
// cluster; a 16-byte store into another block's shared memory that completes 16 bytes of the transaction count of an
// mbarrier in that block (both addresses shared::cluster, from mapa).
__device__ __forceinline__ void cluster_arrive_release_any() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
__device__ __forceinline__ unsigned mapa_u32(const void* p, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(r)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_async_f4(unsigned remote, float a0, float a1, float a2, float a3, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "f"(a0), "f"(a1), "f"(a2), "f"(a3), "r"(bar)
               : "memory");
}

// Programmatic dependent launch: wait for the previous kernel's results (a no-op without PDL) / let the next
// kernel be scheduled. Nothing a previous kernel writes is read, and nothing is written, before the wait.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// The W_up and W_down rows of channel j (row_bytes each) into L2, for the up/down kernel that follows.
__device__ __forceinline__ void prefetch_rows(const void* wu, const void* wd, unsigned row_bytes, int j) {
  const std::size_t o = static_cast<std::size_t>(j) * row_bytes;
  prefetch_l2(static_cast<const unsigned char*>(wu) + o, row_bytes);
  prefetch_l2(static_cast<const unsigned char*>(wd) + o, row_bytes);
}



// Zeroes part `part` of `nparts` of the n16 16-byte words at p.
__device__ __forceinline__ void zero_part(uint4* p, unsigned n16, unsigned part, unsigned nparts, int nthreads) {
  const unsigned per = (n16 + nparts - 1) / nparts;
  const unsigned b = per * part, e = min(n16, b + per);
  for (unsigned i = b + threadIdx.x; i < e; i += static_cast<unsigned>(nthreads)) p[i] = make_uint4(0, 0, 0, 0);
}


// Best `take` of len keys (larger key first, ties to the lower channel): returns the take-th best as
// (key, channel); a channel is kept iff (key > bk) || (key == bk && j <= bj).
template <class KeyAt>
__device__ void group_threshold(KeyAt key_at, int j0, int len, int take, unsigned& bk, int& bj) {
  bool have = false;
  bk = 0;
  bj = -1;
  for (int n = 0; n < take; ++n) {
    unsigned ck = 0;
    int cj = -1;
    for (int j = j0; j < j0 + len; ++j) {
      const unsigned key = key_at(j);
      const bool after_prev = !have || key < bk || (key == bk && j > bj);
      if (after_prev && (cj < 0 || key > ck)) {
        ck = key;
        cj = j;
      }
    }
    bk = ck;
    bj = cj;
    have = true;
  }
}

}  // namespace
}  // namespace ffn
}  // namespace moc::cuda

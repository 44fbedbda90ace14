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
enum ChannelMode : int { kAllChannels = 0, kListChannels = 1, kMaskChannels = 2 };
enum SelMode : int { kSelTopK = 0, kSelGroup = 1, kSelForce = 2 };

__host__ __device__ constexpr std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t(15); }
inline std::size_t align256(std::size_t n) { return (n + 255) & ~std::size_t(255); }

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


__device__ __forceinline__ float dot8(const uint4 w, const uint4 x) {
  float s = bf_lo(w.x) * bf_lo(x.x);
  s = fmaf(bf_hi(w.x), bf_hi(x.x), s);
  s = fmaf(bf_lo(w.y), bf_lo(x.y), s);
  s = fmaf(bf_hi(w.y), bf_hi(x.y), s);
  s = fmaf(bf_lo(w.z), bf_lo(x.z), s);
  s = fmaf(bf_hi(w.z), bf_hi(x.z), s);
  s = fmaf(bf_lo(w.w), bf_lo(x.w), s);
  return fmaf(bf_hi(w.w), bf_hi(x.w), s);
}

// Shared memory stage_x_rows needs beside xs: the norm's weight [d] bf16 and each row's 1 / rms.
__host__ __device__ inline std::size_t stage_x_scratch_bytes(int d) {
  return align16(static_cast<std::size_t>(d) * 2) + static_cast<std::size_t>(kMaxRows) * 4;
}

// x's rows [0, R) ([R, d] bf16, rows d apart, R <= kMaxRows) into xs (rows ld apart) and rows [R, rz) of xs zeroed, by
// the NT threads tid < NT; with w (an RMSNorm weight [d]) each row normalized as rmsnorm_forward computes it (fp32 sum
// of squares, 1 / sqrt in double, the product rounded to bf16), every block for itself (x is d * 2 bytes a row).
// scratch: stage_x_scratch_bytes(d) of shared memory (16-byte aligned). out (or null): the staged rows also written
// there, [R, d]. sync(): the NT threads' barrier; xs is ready when this returns. x and w arrive by cp.async (no
// registers held: callers keep their weight loads in flight); a warp sums a row's squares in a fixed order.
template <int NT, class Sync>
__device__ __forceinline__ void stage_x_rows(const bf16* x, const bf16* w, float eps, int R, int rz, int d, int ld,
                                             bf16* xs, unsigned char* scratch, int tid, Sync sync, bf16* out) {
  const int nv = d / 8, n = R * nv, lane = tid & 31, warp = tid >> 5;
  bf16* ws = reinterpret_cast<bf16*>(scratch);
  float* rs = reinterpret_cast<float*>(scratch + align16(static_cast<std::size_t>(d) * 2));
  auto word = [&](int r, int c) { return reinterpret_cast<uint4*>(xs + static_cast<std::size_t>(r) * ld) + c; };
  for (int i = tid; i < n; i += NT) {
    const int r = i / nv;
    cp_async16(word(r, i - r * nv), x + static_cast<std::size_t>(i) * 8);
  }
  if (w)
    for (int c = tid; c < nv; c += NT) cp_async16(reinterpret_cast<uint4*>(ws) + c, w + static_cast<std::size_t>(c) * 8);
  cp_async_commit();
  for (int i = n + tid; i < rz * nv; i += NT) {
    const int r = i / nv;
    *word(r, i - r * nv) = make_uint4(0, 0, 0, 0);
  }
  cp_async_wait_all();
  sync();
  if (!w) {
    if (out)
      for (int i = tid; i < n; i += NT) {
        const int r = i / nv;
        reinterpret_cast<uint4*>(out)[i] = *word(r, i - r * nv);
      }
    return;
  }
  for (int r = warp; r < R; r += NT / 32) {  // a warp per row
    float t = 0.f;
    for (int c = lane; c < nv; c += 32) {
      const uint4 v = *word(r, c);
      t += dot8(v, v);
    }
    t = warp_sum(t);
    if (lane == 0) rs[r] = static_cast<float>(1.0 / sqrt(static_cast<double>(t) / static_cast<double>(d) + eps));
  }
  sync();
  for (int i = tid; i < n; i += NT) {
    const int r = i / nv, c = i - r * nv;
    const float rr = rs[r];
    uint4 v = *word(r, c);
    const uint4 wv = reinterpret_cast<const uint4*>(ws)[c];
    unsigned* vw = reinterpret_cast<unsigned*>(&v);
    const unsigned ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const __nv_bfloat162 h2 =
          __floats2bfloat162_rn(bf_lo(vw[e]) * rr * bf_lo(ww[e]), bf_hi(vw[e]) * rr * bf_hi(ww[e]));
      vw[e] = *reinterpret_cast<const unsigned*>(&h2);
    }
    *word(r, c) = v;
    if (out) reinterpret_cast<uint4*>(out)[i] = v;
  }
  sync();
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

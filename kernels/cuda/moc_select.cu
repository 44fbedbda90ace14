// Mixture-of-Channels selection on the GPU: the row top-K / a:b selection (paper eq. 4), moc_select. The compact
// gather / scatter and the sparse down projection that use its indices are in moc_gather.cu.
//
// Selection ranks order-preserving keys (NaN -> -inf, -0 -> +0, so equal floats give equal keys; ties go to the
// lower channel). Row top-K (the training step's selection, issue #5): persistent grids, one row per block at a
// time, the next row streaming in while the current one is selected; a histogram of the keys' top 11 bits in
// shared memory (one pass over global memory) gives the threshold bin, only that bin's candidates are refined,
// and the kept channels are written in ascending order.
//  - bf16 with the gate rule (the training step's case), row_topk_bf16_gate_kernel: 16-bit keys in registers
//    (rows copied in with cp.async), an 11-bit then a 5-bit digit, per-thread masks of the kept channels and
//    one block scan for their output offsets.
//  - f32 or the silu rules, row_topk_kernel: 32-bit keys in shared memory, 11/11/10-bit passes, ballots.
//  - Rows wider than those kernels hold, and a:b groups above 256 channels: topk_radix_kernel (one block per
//    segment, three passes). Small groups (b <= 256): group_select_small_kernel, one thread per channel.
// With TopkBackend::raft the row top-K is RAFT's select_k (raft_topk.h), its indices put in ascending order by a
// bitmap kernel.
//
// Byte floor of the row top-K (headline: 16384 rows x 5461 bf16, K 1024): read rows*F*2 = 179 MB, write
// rows*K*2 = 33.5 MB (i16), 212 MB at ~2.99 TB/s (H100 copy) = 71 us. The 60m/130m/350m training shapes
// (65536 x 1376 K 256, 65536 x 2048 K 384, 32768 x 2736 K 512, bf16) are 214 / 319 / 213 MB: 72 / 107 / 71 us.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/moc_ops_common.cuh"
#include "kernels/cuda/raft_topk.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/select_key.cuh"

namespace moc::cuda {
namespace {

using moc_ops::check_idx;
using moc_ops::grid_for;

constexpr int kSelThreads = 256;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSmemKeysMax = 16384;  // segments up to this length keep their keys in shared memory
constexpr int kSmallGroupMax = 256;  // a:b groups up to this b use one thread per channel

// The ranking key: select_key.cuh, the one definition the decode FFN's selection uses too.
using dev::rank_value;
using dev::key_of;

template <class T>
__device__ __forceinline__ std::uint32_t select_key(const T* p, int rule) {
  return dev::sel_key<-1, true>(to_f32(*p), rule);
}

// Exclusive prefix sum over the block (kSelThreads threads) and, in *total, the block's sum; scratch holds
// kSelWarps ints. All threads call it (reduce.cuh's block scan).
__device__ __forceinline__ int block_exclusive_sum(int v, int* scratch, int* total = nullptr) {
  int tot = 0;
  const int r = dev::block_excl_scan<kSelThreads>(v, scratch, tot);
  if (total) *total = tot;
  return r;
}

// One block per segment: a whole row (top-K) or one group of b channels (a:b). Segment blockIdx.x is
// group gi = blockIdx.x % nseg of row blockIdx.x / nseg; it keeps k channels (top-K) or min(a, len) (a:b).
template <class T, bool kSmemKeys>
__global__ void __launch_bounds__(kSelThreads) topk_radix_kernel(const T* __restrict__ g, std::uint16_t* __restrict__ idx,
                                                                 int F, long long ld, int seglen, int nseg, int kept,
                                                                 int a, int k, int rule) {
  extern __shared__ std::uint32_t keys[];
  __shared__ unsigned hist[2048];
  __shared__ int scratch[kSelWarps];
  __shared__ int found[3];
  const int tid = threadIdx.x;
  const long long row = blockIdx.x / nseg;
  const int gi = blockIdx.x % nseg;
  const int start = gi * seglen;
  const int len = min(seglen, F - start);
  const bool grouped = nseg > 1 || a > 0;
  const int K = grouped ? min(a, len) : k;
  const T* src = g + row * ld + start;
  std::uint16_t* dst = idx + row * kept + (grouped ? static_cast<long long>(gi) * a : 0);

  // Selected: key bits under mask above prefix, or equal to it and among the first `need` such in index order.
  std::uint32_t prefix = 0, mask = 0;
  int need = K;
  if (K < len) {
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
      const int nbins = pass == 2 ? 1024 : 2048;
      for (int b = tid; b < nbins; b += kSelThreads) hist[b] = 0;
      __syncthreads();
      if (pass == 0) {
        // Every key counts; batches of kBatch loads in flight per thread.
        constexpr int kBatch = 8;
        for (int base = 0; base < len; base += kSelThreads * kBatch) {
          float x[kBatch];
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            const int i = base + tid + u * kSelThreads;
            x[u] = i < len ? to_f32(src[i]) : 0.0f;
          }
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            const int i = base + tid + u * kSelThreads;
            if (i < len) {
              const std::uint32_t key = key_of(rank_value<-1, true>(x[u], rule));
              if constexpr (kSmemKeys) keys[i] = key;
              atomicAdd(&hist[key >> shift], 1u);
            }
          }
        }
      } else {
        for (int i = tid; i < len; i += kSelThreads) {
          std::uint32_t u;
          if constexpr (kSmemKeys) u = keys[i];
          else u = select_key(src + i, rule);
          if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & (nbins - 1)], 1u);
        }
      }
      __syncthreads();
      // The bin holding the need-th largest candidate: thread t owns bins [t*per, t*per + per).
      const int per = nbins / kSelThreads;
      int tsum = 0;
      for (int b = 0; b < per; ++b) tsum += static_cast<int>(hist[tid * per + b]);
      // Candidates in bins above this thread's: an exclusive sum in reversed thread order.
      int total = 0;
      const int below = block_exclusive_sum(tsum, scratch, &total);
      int running = total - below - tsum;
      for (int b = per - 1; b >= 0; --b) {
        const int c = static_cast<int>(hist[tid * per + b]);
        if (running < need && running + c >= need) {
          found[0] = tid * per + b;
          found[1] = running;
          found[2] = c;
        }
        running += c;
      }
      __syncthreads();
      const int bin = found[0], above = found[1], count = found[2];
      prefix |= static_cast<std::uint32_t>(bin) << shift;
      mask |= static_cast<std::uint32_t>(nbins - 1) << shift;
      need -= above;
      __syncthreads();  // found[] is rewritten by the next pass
      if (count == need) break;  // every candidate is kept: no finer bits needed
    }
  }
  // 2: above the threshold, 1: a candidate, 0: not selected.
  auto cls = [&](int i) -> int {
    if (mask == 0) return 1;
    std::uint32_t u;
    if constexpr (kSmemKeys) u = keys[i];
    else u = select_key(src + i, rule);
    const std::uint32_t hi = u & mask;
    return hi > prefix ? 2 : hi == prefix ? 1 : 0;
  };
  const int per = (len + kSelThreads - 1) / kSelThreads;
  const int b0 = min(len, tid * per), b1 = min(len, b0 + per);
  int gt = 0, eq = 0;
  for (int i = b0; i < b1; ++i) {
    const int c = cls(i);
    gt += c == 2;
    eq += c == 1;
  }
  const int eq_base = block_exclusive_sum(eq, scratch);
  const int take_eq = max(0, min(eq, need - eq_base));
  int out = block_exclusive_sum(gt + take_eq, scratch);
  int eq_seen = eq_base;
  for (int i = b0; i < b1; ++i) {
    const int c = cls(i);
    bool keep = c == 2;
    if (c == 1) keep = eq_seen++ < need;
    if (keep) dst[out++] = static_cast<std::uint16_t>(start + i);
  }
}

// ---------------------------------------------------------------- row top-K (the training step's selection)

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kRowBins = 2048;  // 11-bit first digit

// Elements of T in one 16-byte vector, and T's bit pattern as an unsigned integer.
template <class T>
constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));
template <class T>
using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;

// A row is read as the aligned 16-byte vectors that cover it: position j of the row's keys is element j - off
// of the row (off = the row's misalignment in elements). Positions outside [off, off + F) hold key 0, below
// every real key (the smallest, that of -inf and NaN, is 0x007fffff, or 0x00ff as a bf16 key), so they never
// match a threshold prefix and are never selected (K < F: the threshold is a real key).
struct RowSpan {
  const uint4* base;
  int off, nvec;
};

template <class T>
__device__ __forceinline__ RowSpan row_span(const T* row, int F) {
  const auto addr = reinterpret_cast<std::uintptr_t>(row);
  const int off = static_cast<int>(addr & 15u) / static_cast<int>(sizeof(T));
  return {reinterpret_cast<const uint4*>(addr & ~std::uintptr_t{15}), off, (off + F + kVecElems<T> - 1) / kVecElems<T>};
}

template <class T>
__device__ __forceinline__ bool whole_vector(const RowSpan& s, int vi, int F) {
  return (vi > 0 || s.off == 0) && (vi + 1) * kVecElems<T> <= s.off + F;
}

// This thread's vectors first + v * stride (v < kVPT), whole ones with one 16-byte load; the row's first and
// last vector, when only partly inside the row, element by element (no read outside the tensor) with 0 bits
// elsewhere.
template <class T, int kVPT>
__device__ __forceinline__ void load_row(const T* row, int F, int first, int stride, uint4 (&buf)[kVPT]) {
  constexpr int kVec = kVecElems<T>;
  const RowSpan s = row_span(row, F);
  // The whole vectors' loads back to back (straight-line, so they are all in flight together), then the rare
  // partial ones.
#pragma unroll
  for (int v = 0; v < kVPT; ++v) {
    const int vi = first + v * stride;
    if (vi < s.nvec && whole_vector<T>(s, vi, F)) buf[v] = __ldg(s.base + vi);
  }
#pragma unroll
  for (int v = 0; v < kVPT; ++v) {
    const int vi = first + v * stride;
    if (vi < s.nvec && !whole_vector<T>(s, vi, F)) {
      union {
        uint4 v4;
        Bits<T> e[kVec];
      } part;
      const auto* src = reinterpret_cast<const Bits<T>*>(row);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int c = vi * kVec + e - s.off;
        part.e[e] = c >= 0 && c < F ? src[c] : Bits<T>{0};
      }
      buf[v] = part.v4;
    }
  }
}

// Asynchronous 16-byte copy global -> shared (cp.async, L2 only), zero-filling past src_bytes (0..16); the
// source is 16-byte aligned. cp_async_wait_all: this thread's copies have landed.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Starts copying this thread's vectors v0 .. v0 + kVPT - 1 of a bf16 row into raw[] (indexed by vector). The
// last vector stops at the row's end; the first one, when the row is misaligned, starts up to 14 bytes before
// the row (same allocation: it is 16-byte aligned); those channels' keys are zeroed after.
template <int kVPT>
__device__ __forceinline__ void prefetch_row(uint4* raw, const __nv_bfloat16* row, int F, int v0) {
  const RowSpan s = row_span(row, F);
  const int end_bytes = (s.off + F) * static_cast<int>(sizeof(__nv_bfloat16));
#pragma unroll
  for (int v = 0; v < kVPT; ++v) {
    const int vi = v0 + v;
    if (vi < s.nvec) cp_async16(raw + vi, s.base + vi, min(16, end_bytes - vi * 16));
  }
}

// Bit masks of a thread's channels: 32 or 64 bits.
__device__ __forceinline__ int lowest_bit(std::uint32_t m) { return __ffs(static_cast<int>(m)) - 1; }
__device__ __forceinline__ int lowest_bit(unsigned long long m) { return __ffsll(static_cast<long long>(m)) - 1; }
__device__ __forceinline__ int popcount(std::uint32_t m) { return __popc(m); }
__device__ __forceinline__ int popcount(unsigned long long m) { return __popcll(m); }

// The 16-bit key of element e (0..7, not known at compile time) of a vector of keys in registers.
__device__ __forceinline__ unsigned key_in(const uint4& x, int e) {
  const std::uint32_t w = e < 4 ? (e < 2 ? x.x : x.y) : (e < 6 ? x.z : x.w);
  return (e & 1) ? w >> 16 : w & 0xffffu;
}

// Two bf16 (one 32-bit word) -> their 16-bit keys, ordered as the values with NaN = -inf and -0 = +0: per
// half 0x807f + m for a positive magnitude m, 0x807f - m for a negative one (two's complement, so -0 = +0),
// modulo 2^16 (VIADD.16x2); NaN wraps below -inf's 0x00ff and the max (VIMNMX.U16x2) lifts it to 0x00ff.
// Keys run 0x00ff (-inf) .. 0xffff (+inf).
__device__ __forceinline__ std::uint32_t bf16x2_keys(std::uint32_t w) {
  const std::uint32_t neg = (w >> 15) & 0x00010001u;              // 1 per negative half
  const std::uint32_t mag = (w & 0x7fff7fffu) ^ (neg * 0xffffu);  // ~m for negative halves
  return __vmaxu2(__vadd2(mag, neg + 0x807f807fu), 0x00ff00ffu);
}

// The histogram bin holding the need-th largest candidate (1 <= need <= candidates): *bin, the candidates
// in higher bins (*above) and in the bin itself (*count). Thread t owns bins [8t, 8t + 8); all threads call
// it; every read of hist happens before its first barrier.
__device__ __forceinline__ void threshold_bin(const unsigned* hist, int need, int* warp_sum, int* found, int* bin,
                                              int* above, int* count) {
  constexpr int kPer = kRowBins / kRowThreads;
  static_assert(kPer == 8, "two uint4 of bins per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned c[kPer];
  const uint4* h4 = reinterpret_cast<const uint4*>(hist);
  const uint4 h0 = h4[2 * tid], h1 = h4[2 * tid + 1];
  c[0] = h0.x, c[1] = h0.y, c[2] = h0.z, c[3] = h0.w, c[4] = h1.x, c[5] = h1.y, c[6] = h1.z, c[7] = h1.w;
  int mine = 0;
#pragma unroll
  for (int b = 0; b < kPer; ++b) mine += static_cast<int>(c[b]);
  const int suffix = dev::warp_suffix_sum(mine, lane);  // candidates in this lane's bins and all higher lanes'
  if (lane == 0) warp_sum[warp] = suffix;
  __syncthreads();
  int run = suffix - mine;  // in bins above this thread's
#pragma unroll
  for (int w = 0; w < kRowWarps; ++w)
    if (w > warp) run += warp_sum[w];
  if (run < need && run + mine >= need) {
#pragma unroll
    for (int b = kPer - 1; b >= 0; --b) {
      const int cb = static_cast<int>(c[b]);
      if (run < need && run + cb >= need) {
        found[0] = tid * kPer + b;
        found[1] = run;
        found[2] = cb;
      }
      run += cb;
    }
  }
  __syncthreads();
  *bin = found[0];
  *above = found[1];
  *count = found[2];
}

// Writes this warp's kept positions [j0, j1) of the row in ascending order: cls(j) is 2 (above the threshold),
// 1 (equal: kept while fewer than `need` equal ones come before it in the row) or 0. eq_run: equal keys
// before j0; out: kept channels before j0. The row's channel is j - off.
template <class Cls>
__device__ __forceinline__ void write_ascending(const Cls& cls, int j0, int j1, int off, int need, int eq_run, int out,
                                                std::uint16_t* __restrict__ dst) {
  const int lane = threadIdx.x & 31;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int jb = j0; jb < j1; jb += 32) {
    const int j = jb + lane;
    const int c = j < j1 ? cls(j) : 0;
    const unsigned eq_lanes = __ballot_sync(0xffffffffu, c == 1);
    const bool keep = c == 2 || (c == 1 && eq_run + __popc(eq_lanes & lanes_below) < need);
    const unsigned keep_lanes = __ballot_sync(0xffffffffu, keep);
    if (keep) dst[out + __popc(keep_lanes & lanes_below)] = static_cast<std::uint16_t>(j - off);
    eq_run += __popc(eq_lanes);
    out += __popc(keep_lanes);
  }
}

// Row top-K of g [rows, F] (rows ld apart) into idx [rows, K], K < F (ascending channels; ties to the lower
// channel), f32 or any rule. Persistent: block b handles rows b, b + gridDim.x, ...; the dynamic shared
// memory holds the row's 32-bit keys. Passes over the keys refine the threshold by 11, 11 and 10 bits.
template <class T, int kVPT>
__global__ void __launch_bounds__(kRowThreads) row_topk_kernel(const T* __restrict__ g, std::uint16_t* __restrict__ idx,
                                                               long long rows, int F, long long ld, int K, int rule) {
  constexpr int kVec = kVecElems<T>;
  extern __shared__ uint4 smem_keys[];
  auto* keys = reinterpret_cast<std::uint32_t*>(smem_keys);
  __shared__ __align__(16) unsigned hist[kRowBins];
  __shared__ int warp_sum[kRowWarps], warp_gt[kRowWarps], warp_eq[kRowWarps];
  __shared__ int found[3];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  long long row = blockIdx.x;
  uint4 buf[kVPT];
  if (row < rows) load_row<T, kVPT>(g + row * ld, F, tid, kRowThreads, buf);
  for (; row < rows; row += gridDim.x) {
    const RowSpan span = row_span(g + row * ld, F);
    const int off = span.off, npos = span.nvec * kVec;
    for (int q = tid; q < kRowBins / 4; q += kRowThreads) reinterpret_cast<uint4*>(hist)[q] = make_uint4(0, 0, 0, 0);
    __syncthreads();  // the previous row is written out (keys free), hist is clear

    // Keys to shared memory and the histogram of their top 11 bits, from the registers.
#pragma unroll
    for (int v = 0; v < kVPT; ++v) {
      const int vi = tid + v * kRowThreads;
      if (vi >= span.nvec) continue;
      const std::uint32_t w[4] = {buf[v].x, buf[v].y, buf[v].z, buf[v].w};
      const bool whole = whole_vector<T>(span, vi, F);
      std::uint32_t key[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        std::uint32_t bits;
        if constexpr (sizeof(T) == 4) bits = w[e];
        else bits = (e & 1) ? (w[e >> 1] & 0xffff0000u) : (w[e >> 1] << 16);
        key[e] = key_of(rank_value<-1, true>(__uint_as_float(bits), rule));
        const int c = vi * kVec + e - off;
        if (!whole && (c < 0 || c >= F)) key[e] = 0;
        atomicAdd(&hist[key[e] >> 21], 1u);  // padding lands in bin 0, below the threshold's
      }
#pragma unroll
      for (int q = 0; q < kVec / 4; ++q)
        reinterpret_cast<uint4*>(keys)[vi * (kVec / 4) + q] =
            make_uint4(key[4 * q], key[4 * q + 1], key[4 * q + 2], key[4 * q + 3]);
    }
    // The next row streams in while this one is selected.
    if (row + gridDim.x < rows) load_row<T, kVPT>(g + (row + gridDim.x) * ld, F, tid, kRowThreads, buf);
    __syncthreads();

    // Selected: (key & mask) above prefix, or equal to it and among the first `need` such in channel order.
    std::uint32_t prefix = 0, mask = 0;
    int need = K;
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
      const unsigned digit = pass == 2 ? 1023u : 2047u;
      if (pass > 0) {  // the previous bin's candidates, by their next digit
        for (int q = tid; q < kRowBins / 4; q += kRowThreads)
          reinterpret_cast<uint4*>(hist)[q] = make_uint4(0, 0, 0, 0);
        __syncthreads();
        for (int j = tid; j < npos; j += kRowThreads) {
          const std::uint32_t u = keys[j];
          if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & digit], 1u);
        }
        __syncthreads();
      }
      int bin, above, count;
      threshold_bin(hist, need, warp_sum, found, &bin, &above, &count);
      prefix |= static_cast<std::uint32_t>(bin) << shift;
      mask |= digit << shift;
      need -= above;
      if (count == need) break;  // the whole bin is kept
    }

    // Output in channel order: warp w owns positions [w * seg, w * seg + seg); counts, then ballots.
    auto cls = [&](int j) -> int {
      const std::uint32_t hi = keys[j] & mask;
      return hi > prefix ? 2 : hi == prefix ? 1 : 0;
    };
    const int seg = (npos + kRowThreads - 1) / kRowThreads * 32;
    const int j0 = min(npos, warp * seg), j1 = min(npos, j0 + seg);
    int gt = 0, eq = 0;
    for (int j = j0 + lane; j < j1; j += 32) {
      const int c = cls(j);
      gt += c == 2;
      eq += c == 1;
    }
    gt = __reduce_add_sync(0xffffffffu, gt);
    eq = __reduce_add_sync(0xffffffffu, eq);
    if (lane == 0) warp_gt[warp] = gt, warp_eq[warp] = eq;
    __syncthreads();
    int gt_before = 0, eq_before = 0;
#pragma unroll
    for (int w = 0; w < kRowWarps; ++w)
      if (w < warp) gt_before += warp_gt[w], eq_before += warp_eq[w];
    write_ascending(cls, j0, j1, off, need, eq_before, gt_before + min(eq_before, need), idx + row * K);
  }
}

// The same for bf16 g with the gate rule (the training step's case), keys kept in registers. Thread t owns
// the row's consecutive 16-byte vectors t * kVPT .. t * kVPT + kVPT - 1 (8 channels each, one mask bit per
// channel) and their 16-bit keys (bf16x2_keys). The block has as many warps as the row needs (blockDim.x).
// An 11-bit then a 5-bit digit resolve the keys exactly: warp 0 finds the first digit's threshold bin in
// the shared histogram; that bin's candidates fill a 32-bin one. Each thread then holds masks of its keys
// above the threshold key and equal to it; one block scan of (above, equal) counts gives its output offset
// in channel order (ties: the first `need` equal keys in channel order are kept).
template <int kVPT, int kMinBlocks>
__global__ void __launch_bounds__(kRowThreads, kMinBlocks)
    row_topk_bf16_gate_kernel(const __nv_bfloat16* __restrict__ g, std::uint16_t* __restrict__ idx, long long rows,
                              int F, long long ld, int K) {
  using T = __nv_bfloat16;
  constexpr int kVec = kVecElems<T>;
  using Mask = std::conditional_t<(kVPT * kVec <= 32), std::uint32_t, unsigned long long>;
  extern __shared__ uint4 raw[];  // the row's 16-byte vectors, copied in (cp.async) while the previous one ran
  __shared__ __align__(16) unsigned hist[kRowBins];
  __shared__ unsigned fine[32];
  __shared__ unsigned warp_total[kRowWarps];
  __shared__ int found[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int v0 = tid * kVPT;  // this thread's first vector (each thread copies and reads only its own)

  long long row = blockIdx.x;
  if (row < rows) prefetch_row<kVPT>(raw, g + row * ld, F, v0);
  for (; row < rows; row += gridDim.x) {
    const RowSpan span = row_span(g + row * ld, F);
    const int off = span.off;
    const int partial_last = (off + F) % kVec != 0 ? span.nvec - 1 : -1;
    for (int q = tid; q < kRowBins / 4; q += nthreads) reinterpret_cast<uint4*>(hist)[q] = make_uint4(0, 0, 0, 0);
    if (tid < 32) fine[tid] = 0;
    cp_async_wait_all();
    __syncthreads();  // the histograms are clear (the previous row read them before its later barriers)

    // Keys and the histogram of their top 11 bits.
    uint4 kw[kVPT];
#pragma unroll
    for (int v = 0; v < kVPT; ++v) {
      const int vi = v0 + v;
      kw[v] = make_uint4(0, 0, 0, 0);
      if (vi >= span.nvec) continue;
      const uint4 x = raw[vi];
      std::uint32_t w[4] = {bf16x2_keys(x.x), bf16x2_keys(x.y), bf16x2_keys(x.z), bf16x2_keys(x.w)};
      if ((vi == 0 && off != 0) || vi == partial_last) {  // zero the keys outside the row (never selected)
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const int c = vi * kVec + e - off;
          if (c < 0 || c >= F) w[e >> 1] &= (e & 1) ? 0x0000ffffu : 0xffff0000u;
        }
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e)  // padding lands in bin 0, below the threshold's (real keys >= 0x00ff)
        atomicAdd(&hist[(e & 1) ? w[e >> 1] >> 21 : (w[e >> 1] >> 5) & 2047u], 1u);
      kw[v] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    // The next row streams in meanwhile (this thread's vectors were read above).
    if (row + gridDim.x < rows) prefetch_row<kVPT>(raw, g + (row + gridDim.x) * ld, F, v0);
    __syncthreads();

    // Warp 0: the bin of the K-th largest key. Lane l sums bins [64 l, 64 l + 64) (XOR-swizzled order: no
    // bank conflicts), the crossing lane's 64 bins are then split two per lane.
    if (warp == 0) {
      const uint4* h4 = reinterpret_cast<const uint4*>(hist) + lane * 16;
      unsigned s = 0;
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const uint4 x = h4[q ^ (lane & 15)];
        s += x.x + x.y + x.z + x.w;
      }
      const int suffix = dev::warp_suffix_sum(static_cast<int>(s), lane);  // keys in bins >= 64 lane
      const int L = 31 - __clz(static_cast<int>(__ballot_sync(0xffffffffu, suffix >= K)));
      const int above_l = __shfl_sync(0xffffffffu, suffix - static_cast<int>(s), L);
      const uint2 c = reinterpret_cast<const uint2*>(hist)[L * 32 + lane];
      const int pair = static_cast<int>(c.x + c.y);
      const int suffix2 = dev::warp_suffix_sum(pair, lane) + above_l;
      const int J = 31 - __clz(static_cast<int>(__ballot_sync(0xffffffffu, suffix2 >= K)));
      if (lane == J) {
        const int above_pair = suffix2 - pair;
        const bool upper = above_pair + static_cast<int>(c.y) >= K;
        found[0] = L * 64 + 2 * J + (upper ? 1 : 0);
        found[1] = upper ? above_pair : above_pair + static_cast<int>(c.y);
      }
    }
    __syncthreads();
    const unsigned lo0 = static_cast<unsigned>(found[0]) << 5;  // the bin's keys are lo0 .. lo0 + 31
    const int need1 = K - found[1];                             // of them, the largest need1 are kept

    // Masks of the keys above the bin and of those in it (candidates); candidates into the fine histogram by
    // their low 5 bits. A key is compared in the top half of a word (a high half on the whole word: the low
    // half below it cannot reach the next key): key >= lo0, key > lo0 + 31 (no overflow for the top bin).
    Mask above = 0, cand = 0;
    {
      const std::uint32_t at_least = lo0 << 16, beyond = ((lo0 + 31) << 16) | 0xffffu;
#pragma unroll
      for (int v = 0; v < kVPT; ++v) {
        const std::uint32_t w[4] = {kw[v].x, kw[v].y, kw[v].z, kw[v].w};
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const std::uint32_t x = (e & 1) ? w[e >> 1] : w[e >> 1] << 16;
          if (x >= at_least) cand |= Mask{1} << (v * kVec + e);
          if (x > beyond) above |= Mask{1} << (v * kVec + e);
        }
      }
      cand &= ~above;
    }
#pragma unroll
    for (int v = 0; v < kVPT; ++v)
      for (unsigned m = static_cast<unsigned>(cand >> (v * kVec)) & 0xffu; m != 0; m &= m - 1)
        atomicAdd(&fine[key_in(kw[v], lowest_bit(m)) & 31u], 1u);
    __syncthreads();

    // Every warp: the threshold key thr = lo0 + b1 and how many keys equal to it are kept (need).
    const int h = static_cast<int>(fine[lane]);
    const int suffix = dev::warp_suffix_sum(h, lane);  // candidates in fine bins >= lane
    const int b1 = 31 - __clz(static_cast<int>(__ballot_sync(0xffffffffu, suffix >= need1)));
    const int need = need1 - __shfl_sync(0xffffffffu, suffix - h, b1);
    const unsigned thr = lo0 + static_cast<unsigned>(b1);
    Mask equal = 0;
#pragma unroll
    for (int v = 0; v < kVPT; ++v)
      for (unsigned m = static_cast<unsigned>(cand >> (v * kVec)) & 0xffu; m != 0; m &= m - 1) {
        const int e = lowest_bit(m);
        const unsigned key = key_in(kw[v], e);
        if (key > thr) above |= Mask{1} << (v * kVec + e);
        if (key == thr) equal |= Mask{1} << (v * kVec + e);
      }

    // Block exclusive scan of (above | equal << 16): the kept-above and equal keys before this thread's.
    const unsigned own = static_cast<unsigned>(popcount(above)) | static_cast<unsigned>(popcount(equal)) << 16;
    unsigned total;
    const unsigned before = dev::block_excl_scan<0>(own, warp_total, total);
    if ((above | equal) == 0) continue;
    const int above_before = static_cast<int>(before & 0xffffu), equal_before = static_cast<int>(before >> 16);
    int take = need - equal_before;  // this thread's first `take` equal keys are kept
    for (Mask m = equal; m != 0; m &= m - 1)
      if (--take < 0) equal &= ~(m & (Mask{0} - m));
    std::uint16_t* out = idx + row * K + above_before + min(equal_before, need);
    const int channel0 = v0 * kVec - off;
    for (Mask m = above | equal; m != 0; m &= m - 1) *out++ = static_cast<std::uint16_t>(channel0 + lowest_bit(m));
  }
}

// idx[r, c] = c for every row: K == F keeps every channel.
__global__ void iota_rows_kernel(std::uint16_t* __restrict__ idx, long long total, int F) {
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x)
    idx[e] = static_cast<std::uint16_t>(e % F);
}

// Key slots of a row of F elements of T at its worst alignment (whole 16-byte vectors).
template <class T>
int row_key_slots(int F) {
  return (2 * kVecElems<T> - 2 + F) / kVecElems<T> * kVecElems<T>;
}

// A persistent grid: as many blocks of `threads` as fit on the GPU.
template <class Kernel>
unsigned persistent_blocks(Kernel kernel, int threads, std::size_t smem, long long rows) {
  allow_smem(kernel, smem);
  int dev = 0, sms = 0, per_sm = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  MOC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MOC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return static_cast<unsigned>(std::min<long long>(rows, static_cast<long long>(std::max(1, per_sm)) * sms));
}

// bf16 with the gate rule: kVPT vectors per thread, as many warps as a row of F needs. kMinBlocks caps the
// registers so that that many 256-thread blocks fit an SM (bench/micro/topk_micro.cu compares caps).
template <int kVPT, int kMinBlocks = 1>
void launch_row_topk_bf16_gate(cudaStream_t st, const __nv_bfloat16* g, std::uint16_t* idx, long long rows, int F,
                               long long ld, int K) {
  const int nvec = row_key_slots<__nv_bfloat16>(F) / kVecElems<__nv_bfloat16>;
  const int threads = (nvec + 32 * kVPT - 1) / (32 * kVPT) * 32;
  const std::size_t smem = static_cast<std::size_t>(nvec) * sizeof(uint4);
  auto kernel = row_topk_bf16_gate_kernel<kVPT, kMinBlocks>;
  kernel<<<persistent_blocks(kernel, threads, smem, rows), threads, smem, st>>>(g, idx, rows, F, ld, K);
  MOC_CUDA_LAUNCHED("row_topk_bf16_gate_kernel");
}

template <class T, int kVPT>
void launch_row_topk(cudaStream_t st, const T* g, std::uint16_t* idx, long long rows, int F, long long ld, int K,
                     int rule) {
  const std::size_t smem = static_cast<std::size_t>(row_key_slots<T>(F)) * sizeof(std::uint32_t);
  auto kernel = row_topk_kernel<T, kVPT>;
  kernel<<<persistent_blocks(kernel, kRowThreads, smem, rows), kRowThreads, smem, st>>>(g, idx, rows, F, ld, K, rule);
  MOC_CUDA_LAUNCHED("row_topk_kernel");
}

// The row top-K through the row kernels when a row fits their registers (bf16 F <= 16377, f32 F <= 8189);
// false when the row is wider (topk_radix_kernel then).
template <class T>
bool row_topk(cudaStream_t st, const T* g, std::uint16_t* idx, long long rows, int F, long long ld, int K, int rule) {
  if (K == F) {
    const long long total = rows * F;
    iota_rows_kernel<<<grid_for(total, 256), 256, 0, st>>>(idx, total, F);
    MOC_CUDA_LAUNCHED("iota_rows_kernel");
    return true;
  }
  const int nvec = row_key_slots<T>(F) / kVecElems<T>;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (rule == static_cast<int>(SelectRule::gate)) {
      const int per_thread = (nvec + kRowThreads - 1) / kRowThreads;
      // Register caps (kMinBlocks blocks of 256 per SM) that ptxas meets without spilling.
      if (per_thread <= 3) launch_row_topk_bf16_gate<3, 6>(st, g, idx, rows, F, ld, K);
      else if (per_thread <= 4) launch_row_topk_bf16_gate<4, 5>(st, g, idx, rows, F, ld, K);
      else if (per_thread <= 6) launch_row_topk_bf16_gate<6, 3>(st, g, idx, rows, F, ld, K);
      else if (per_thread <= 8) launch_row_topk_bf16_gate<8, 2>(st, g, idx, rows, F, ld, K);
      else return false;
      return true;
    }
  }
  switch ((nvec + kRowThreads - 1) / kRowThreads) {
    case 1: launch_row_topk<T, 1>(st, g, idx, rows, F, ld, K, rule); return true;
    case 2: launch_row_topk<T, 2>(st, g, idx, rows, F, ld, K, rule); return true;
    case 3: launch_row_topk<T, 3>(st, g, idx, rows, F, ld, K, rule); return true;
    case 4: launch_row_topk<T, 4>(st, g, idx, rows, F, ld, K, rule); return true;
    case 5: case 6: launch_row_topk<T, 6>(st, g, idx, rows, F, ld, K, rule); return true;
    case 7: case 8: launch_row_topk<T, 8>(st, g, idx, rows, F, ld, K, rule); return true;
    default: return false;
  }
}

// ---------------------------------------------------------------- RAFT backend: its output in our layout

// keys [rows, F] = the rule's keys of g's first F of ld columns as floats (NaN -> -inf, -0 -> +0): what RAFT
// ranks for silu / abs_silu.
template <class T>
__global__ void rule_keys_kernel(const T* __restrict__ g, float* __restrict__ keys, long long rows, long long F,
                                 long long ld, int rule) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * F;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    keys[i] = rank_value<-1, true>(to_f32(g[i / F * ld + i % F]), rule);  // NaN as -inf, -0 as +0
  }
}

// One block per row: RAFT's K indices (value order, int32) as a bitmap of F bits in shared memory, then
// written out ascending (i16); each thread a run of consecutive words, placed by a block scan of popcounts.
__global__ void __launch_bounds__(kSelThreads) indices_ascending_kernel(const int* __restrict__ in,
                                                                       std::uint16_t* __restrict__ out, int F, int K) {
  extern __shared__ unsigned bitmap[];
  __shared__ int scratch[kSelWarps];
  const int tid = threadIdx.x;
  const int nwords = (F + 31) / 32;
  const long long row = blockIdx.x;
  for (int w = tid; w < nwords; w += kSelThreads) bitmap[w] = 0;
  __syncthreads();
  for (int i = tid; i < K; i += kSelThreads) {
    const int c = in[row * K + i];
    if (c >= 0 && c < F) atomicOr(&bitmap[c >> 5], 1u << (c & 31));
  }
  __syncthreads();
  const int per = (nwords + kSelThreads - 1) / kSelThreads;
  const int w0 = min(nwords, tid * per), w1 = min(nwords, w0 + per);
  int cnt = 0;
  for (int w = w0; w < w1; ++w) cnt += __popc(bitmap[w]);
  int pos = block_exclusive_sum(cnt, scratch);
  std::uint16_t* dst = out + row * K;
  for (int w = w0; w < w1; ++w)
    for (unsigned b = bitmap[w]; b != 0; b &= b - 1) {
      if (pos < K) dst[pos] = static_cast<std::uint16_t>(w * 32 + __ffs(static_cast<int>(b)) - 1);
      ++pos;
    }
}

// a:b with b <= kSmallGroupMax: gpb groups per block, one thread per channel; rank within the group by
// (key desc, index asc), keep rank < min(a, len), write ascending.
template <class T>
__global__ void __launch_bounds__(kSelThreads) group_select_small_kernel(const T* __restrict__ g,
                                                                         std::uint16_t* __restrict__ idx, int F,
                                                                         long long ld, int a, int b, int ngroups,
                                                                         int kept, int gpb, int blocks_per_row,
                                                                         int rule) {
  __shared__ std::uint32_t ks[kSelThreads];
  __shared__ unsigned char flag[kSelThreads];
  const int tid = threadIdx.x;
  const long long row = blockIdx.x / blocks_per_row;
  const int gb = blockIdx.x % blocks_per_row;
  const int gl = tid / b, i = tid % b;
  const int grp = gb * gpb + gl;
  const int c = grp * b + i;
  const bool valid = gl < gpb && grp < ngroups && c < F;
  ks[tid] = valid ? select_key(g + row * ld + c, rule) : 0u;
  __syncthreads();
  bool sel = false;
  const int base = gl * b;
  if (valid) {
    const int len = min(b, F - grp * b);
    const int take = min(a, len);
    const std::uint32_t mine = ks[tid];
    int rank = 0;
    for (int j = 0; j < len; ++j) {
      const std::uint32_t kj = ks[base + j];
      rank += kj > mine || (kj == mine && j < i);
    }
    sel = rank < take;
  }
  flag[tid] = sel;
  __syncthreads();
  if (sel) {
    int pos = 0;
    for (int j = 0; j < i; ++j) pos += flag[base + j];
    idx[row * kept + static_cast<long long>(grp) * a + pos] = static_cast<std::uint16_t>(c);
  }
}

// a:8 (the paper's 2:8) on rows whose groups are 16-byte aligned (ld % 8 == 0, the model's padded layout):
// one thread per group of 8 channels, loaded as one or two 16-byte words; same ranking and output as
// group_select_small_kernel. Bytes: rows*ld*sizeof(T) read, rows*kept*2 written (1b bf16 2:8: 179 + 45 MB).
template <class T>
__global__ void __launch_bounds__(256) group8_select_kernel(const T* __restrict__ g, std::uint16_t* __restrict__ idx,
                                                            int F, long long ld, int a, int ngroups, int kept,
                                                            long long total, int rule) {
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = e / ngroups;
    const int grp = static_cast<int>(e - row * ngroups);
    const T* src = g + row * ld + static_cast<long long>(grp) * 8;
    float v[8];
    if constexpr (sizeof(T) == 2) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(src));
      const std::uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[2 * j] = __uint_as_float(u[j] << 16);
        v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
      }
    } else {
      const float4 w0 = __ldg(reinterpret_cast<const float4*>(src)), w1 = __ldg(reinterpret_cast<const float4*>(src) + 1);
      v[0] = w0.x, v[1] = w0.y, v[2] = w0.z, v[3] = w0.w, v[4] = w1.x, v[5] = w1.y, v[6] = w1.z, v[7] = w1.w;
    }
    const int len = min(8, F - grp * 8), take = min(a, len);
    std::uint32_t k[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) k[j] = j < len ? key_of(rank_value<-1, true>(v[j], rule)) : 0u;
    std::uint16_t* dst = idx + row * kept + static_cast<long long>(grp) * a;
    int w = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int rank = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) rank += (k[i] > k[j] || (k[i] == k[j] && i < j)) ? 1 : 0;
      if (j < len && rank < take) dst[w++] = static_cast<std::uint16_t>(grp * 8 + j);
    }
  }
}

// Row top-K with TopkBackend::raft: RAFT's select_k (unsorted: value order is of no use here) on g itself for
// the gate rule, else on the rule's keys in an f32 workspace; then its int32 indices in our ascending i16 layout.
// RAFT takes dense rows: the first F of ld columns are copied out first when the row has padding channels.
void raft_row_select(Ops& ops, const Tensor& g, const MocSelect& sel, Tensor& idx) {
  const std::int64_t n = g.rows(), ld = g.cols(), F = sel.channels(ld);
  const int K = sel.k;
  require(n <= std::numeric_limits<int>::max(), "moc_select", "topk_backend raft takes at most 2^31 - 1 rows");
  cudaStream_t st = stream_of(ops);
  Tensor raft_idx = ops.empty({n, K}, DType::i32, workspace_tag());
  dispatch_float(g.dtype(), "moc_select", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (sel.rule == SelectRule::gate) {
      Tensor dense;  // g without its padding channels
      const T* in = g.data<T>();
      if (ld != F) {
        dense = ops.empty({n, F}, g.dtype(), workspace_tag());
        MOC_CUDA_CHECK(cudaMemcpy2DAsync(dense.raw(), F * sizeof(T), g.raw(), ld * sizeof(T), F * sizeof(T), n,
                                         cudaMemcpyDeviceToDevice, st));
        in = dense.data<T>();
      }
      Tensor values = ops.empty({n, K}, g.dtype(), workspace_tag());
      raft_select_k(st, in, static_cast<int>(n), static_cast<int>(F), K, values.data<T>(), raft_idx.data<int>(),
                    /*sorted=*/false);
    } else {
      Tensor keys = ops.empty({n, F}, DType::f32, workspace_tag());
      rule_keys_kernel<T><<<grid_for(n * F, 256), 256, 0, st>>>(g.data<T>(), keys.data<float>(), n, F, ld,
                                                                static_cast<int>(sel.rule));
      MOC_CUDA_LAUNCHED("rule_keys_kernel");
      Tensor values = ops.empty({n, K}, DType::f32, workspace_tag());
      raft_select_k(st, keys.data<float>(), static_cast<int>(n), static_cast<int>(F), K, values.data<float>(),
                    raft_idx.data<int>(), /*sorted=*/false);
    }
  });
  const std::size_t smem = static_cast<std::size_t>((F + 31) / 32) * sizeof(unsigned);
  indices_ascending_kernel<<<static_cast<unsigned>(n), kSelThreads, smem, st>>>(
      raft_idx.data<int>(), idx.data<std::uint16_t>(), static_cast<int>(F), K);
  MOC_CUDA_LAUNCHED("indices_ascending_kernel");
}

}  // namespace

// Rows of g are ld = g.cols() apart; the first F = sel.channels(ld) channels of each take part.
void moc_select(Ops& ops, const Tensor& g, const MocSelect& sel, Tensor& idx) {
  const std::int64_t n = g.rows(), ld = g.cols(), F = sel.channels(ld);
  require(is_float(g.dtype()), "moc_select", "g must be f32 or bf16");
  check_idx(idx, "moc_select");
  require(F >= 1 && F <= 65536, "moc_select", "d_ffn must be in [1, 65536] for i16 channel indices");
  require(F <= ld, "moc_select",
          "width " + std::to_string(F) + " exceeds the row's " + std::to_string(ld) + " columns");
  const int kept = sel.kept(static_cast<int>(F));
  require(kept > 0 && kept <= F, "moc_select", "kept channels " + std::to_string(kept) + " not in [1, d_ffn]");
  require(idx.rows() == n && idx.cols() == kept, "moc_select",
          "idx must be [" + std::to_string(n) + ", " + std::to_string(kept) + "], got " + shape_str(idx.shape()));
  if (sel.grouped()) require(sel.group_a > 0 && sel.group_a <= sel.group_b, "moc_select", "a:b needs 0 < a <= b");
  const bool use_raft = sel.backend == TopkBackend::raft && !sel.grouped();  // a:b groups: always our kernels
  if (use_raft)
    require(raft_available(), "moc_select",
            "topk_backend raft: the CUDA backend was built without RAFT (run scripts/setup_raft.sh, then reconfigure "
            "and rebuild)");
  if (n == 0) return;
  if (use_raft) {
    raft_row_select(ops, g, sel, idx);
    return;
  }
  cudaStream_t st = stream_of(ops);
  const int rule = static_cast<int>(sel.rule);
  auto* out = idx.data<std::uint16_t>();
  dispatch_float(g.dtype(), "moc_select", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* gp = g.data<T>();
    if (sel.grouped() && sel.group_b == 8 && ld % 8 == 0 && reinterpret_cast<std::uintptr_t>(gp) % 16 == 0) {
      const int ngroups = static_cast<int>((F + 7) / 8);
      const long long total = n * ngroups;
      group8_select_kernel<T><<<grid_for(total, 256), 256, 0, st>>>(gp, out, static_cast<int>(F), ld, sel.group_a,
                                                                   ngroups, kept, total, rule);
      MOC_CUDA_LAUNCHED("group8_select_kernel");
      return;
    }
    if (sel.grouped() && sel.group_b <= kSmallGroupMax) {
      const int b = sel.group_b;
      const int ngroups = static_cast<int>((F + b - 1) / b);
      const int gpb = kSelThreads / b;
      const int bpr = (ngroups + gpb - 1) / gpb;
      group_select_small_kernel<T><<<static_cast<unsigned>(n * bpr), kSelThreads, 0, st>>>(
          gp, out, static_cast<int>(F), ld, sel.group_a, b, ngroups, kept, gpb, bpr, rule);
      MOC_CUDA_LAUNCHED("group_select_small_kernel");
      return;
    }
    if (!sel.grouped() && row_topk<T>(st, gp, out, n, static_cast<int>(F), ld, sel.k, rule)) return;
    const int seglen = sel.grouped() ? std::min<int>(sel.group_b, static_cast<int>(F)) : static_cast<int>(F);
    const int nseg = sel.grouped() ? static_cast<int>((F + sel.group_b - 1) / sel.group_b) : 1;
    const int a = sel.grouped() ? sel.group_a : 0;
    const unsigned blocks = static_cast<unsigned>(n * nseg);
    if (seglen <= kSmemKeysMax) {
      const std::size_t smem = static_cast<std::size_t>(seglen) * sizeof(std::uint32_t);
      auto kernel = topk_radix_kernel<T, true>;
      allow_smem(kernel, smem);
      kernel<<<blocks, kSelThreads, smem, st>>>(gp, out, static_cast<int>(F), ld, seglen, nseg, kept, a, sel.k, rule);
    } else {
      topk_radix_kernel<T, false><<<blocks, kSelThreads, 0, st>>>(gp, out, static_cast<int>(F), ld, seglen, nseg, kept,
                                                                  a, sel.k, rule);
    }
    MOC_CUDA_LAUNCHED("topk_radix_kernel");
  });
}

}  // namespace moc::cuda

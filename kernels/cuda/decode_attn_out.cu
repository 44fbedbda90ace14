// Ops::decode_attn_out on the kernel path (issue #26): a decode layer's attention over its KV cache and the
// output projection with the residual add, x += round(attention(q, caches, pos)) Wo^T, as one kernel where
// the composed ops take two (attn_decode_fast_kernel, then the o-projection GEMV with beta 1).
//
// Layout: one thread-block cluster of C blocks (ranks) per query head, C in {1, 2, 4, 8}. Rank c
// - before the PDL wait (Wo is a weights tensor, never written by a step): copies its slice of Wo -- output
//   rows [c R, c R + R) (R = ceil(d / C)) by the head's hd columns, at most 64 KB -- into shared memory;
// - after it: the online softmax of the head's query over the c-th share of the row's cached positions
//   0..pos (as attn_decode_fast_kernel: lanes of a key split its hd values into 16-byte words, 4 load steps
//   in flight per warp), its block state (max, sum, hd partial outputs) pushed to every rank's shared memory
//   (distributed shared memory), one cluster barrier, and every rank merges the C states in rank order into
//   the head's output, rounded to bf16 as attention_decode writes it;
// - multiplies its Wo slice by that output (a row per 8 or 16 lanes) and adds the R partial sums into an
//   fp32 accumulator in the ops' zeroed scratch (red.global.add: the h heads' blocks of rank c meet there);
// - takes a ticket on rank c's counter; the last of the h blocks adds the accumulator's R sums to x (the
//   residual), rounds them once, stores them and leaves the accumulator and the counter zero.
// So every attention output is computed once per rank (C times per head: the ranks need all of it, and
// it is a few hundred cached positions read from L2), and Wo is read once from DRAM.
//
// Numerics: as the composed ops up to the order of the fp32 sums over the heads (atomics), i.e. within the
// rounding of one bf16 output -- the decode FFN's up/down kernel adds its split sums the same way.
// Floor: Wo's bytes (2048 x 2048 bf16: 8.4 MB, 2.8 us at 3 TB/s) plus the K/V rows of the attended positions.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/decode_device.cuh"

namespace moc::cuda {
namespace attn_out {
namespace {

namespace cgr = cooperative_groups;
using namespace moc::cuda::dev;  // bf16, bf_lo / bf_hi, cp_async16, lane_group_sum / lane_group_max

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRounds = 4;     // load steps per warp tile (K and V words in flight per thread: 2 x 4 x 16 B)
constexpr int kMaxC = 8;       // portable cluster size
constexpr int kMaxB = 4;       // rows of x
constexpr int kLine = 32;      // one counter per 128-byte line
std::size_t max_slice() {  // EXPERIMENT (reverted): MOCBENCH_AO_SLICE=KB
  static const std::size_t v = [] {
    const char* e = std::getenv("MOCBENCH_AO_SLICE");
    return static_cast<std::size_t>(e ? std::atoi(e) : 64) * 1024;
  }();
  return v;
}
#define kMaxSlice max_slice()
constexpr std::size_t kAccOffset = kMaxC * kLine * sizeof(unsigned);  // the accumulator after the counters
constexpr float kLog2e = 1.4426950408889634f;
constexpr std::size_t kStaticSmem = 24 * 1024;  // bounds k_attn_out's static shared memory (~20 KB at hd 128)

struct Args {
  const bf16* q;   // [b, h, hd]
  const bf16* kc;  // [b, kvh, T, hd]
  const bf16* vc;
  const std::int32_t* pos;  // [b]
  const bf16* wo;           // [d, h * hd]
  bf16* x;                  // [b, d]
  unsigned* ctrl;           // [C * kLine], zero
  float* acc;               // [b, d], zero
  int b, h, kvh, T, d, R;   // R: output rows per rank
  int early;                // Wo may be copied before the wait (a weights tensor)
  int hint;                 // EXPERIMENT: MOCBENCH_AO_HINT
  int skip;                 // EXPERIMENT: MOCBENCH_AO_SKIP bits (1: no Wo staging, 2: no atomics; wrong results)
  float scale_log2;
};

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bf_lo(w[i]);
    f[2 * i + 1] = bf_hi(w[i]);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads) k_attn_out(const Args a) {
  constexpr int TPK = HD / 8;         // lanes per key (16-byte words per cache row)
  constexpr int KPS = 32 / TPK;       // keys per warp load step
  constexpr int TK = KPS * kRounds;   // keys per warp tile
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ws = reinterpret_cast<bf16*>(smem);  // [R, HD]: this rank's slice of Wo
  __shared__ float wst[kWarps][2];                 // per warp: max (log2 units), sum
  __shared__ float wacc[kWarps][HD];
  __shared__ float rst[kMaxB][kMaxC][2];           // pushed by every rank: its block's max and sum per row
  __shared__ __align__(16) float racc[kMaxB][kMaxC][HD];  // pushed by every rank: its block's partial outputs
  __shared__ __align__(16) float ov[kMaxB][HD];    // the head's attention output per row, rounded to bf16
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int C = static_cast<int>(gridDim.x), rank = static_cast<int>(blockIdx.x), head = blockIdx.y;
  const int kh = head / (a.h / a.kvh);
  const int r0 = rank * a.R, nr = max(0, min(a.R, a.d - r0));
  const int qdim = a.h * HD;

  auto stage_w = [&] {
    constexpr int WPR = HD / 8;  // 16-byte words per slice row
    const bf16* src = a.wo + static_cast<std::size_t>(r0) * qdim + head * HD;
    for (int i = tid; i < nr * WPR; i += kThreads) {
      const int rr = i / WPR, w = i - rr * WPR;
      if (a.hint) cp_async16(ws + rr * HD + w * 8, src + static_cast<std::size_t>(rr) * qdim + w * 8);
      else {
        const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(ws + rr * HD + w * 8));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src + static_cast<std::size_t>(rr) * qdim + w * 8) : "memory");
      }
    }
    cp_async_commit();
  };
  pdl_trigger();
  const bool clustered = C > 1;
  if (clustered) cluster_arrive_relaxed();  // "started": waited for before the first remote store
  if (a.early && !(a.skip & 1)) stage_w();
  pdl_wait();
  if (!a.early && !(a.skip & 1)) stage_w();

  cgr::cluster_group cluster = cgr::this_cluster();
  const int sub = lane % TPK, ks = lane / TPK;
  for (int bi = 0; bi < a.b; ++bi) {
    const int len = min(a.pos[bi] + 1, a.T);
    const int chunk = (len + C - 1) / C, c0 = rank * chunk, c1 = min(len, c0 + chunk);
    float qv[8], kf[8], vf[8];
    unpack8(*reinterpret_cast<const uint4*>(a.q + (static_cast<std::size_t>(bi) * a.h + head) * HD + sub * 8), qv);
#pragma unroll
    for (int e = 0; e < 8; ++e) qv[e] *= a.scale_log2;
    float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    const std::size_t row0 = (static_cast<std::size_t>(bi) * a.kvh + kh) * a.T;
    const uint4* kbase = reinterpret_cast<const uint4*>(a.kc + row0 * HD) + sub;
    const uint4* vbase = reinterpret_cast<const uint4*>(a.vc + row0 * HD) + sub;
    for (int t0 = c0 + warp * TK; t0 < c1; t0 += kWarps * TK) {
      uint4 kr[kRounds], vr[kRounds];
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const int key = t0 + r * KPS + ks;
        if (key < c1) {
          kr[r] = __ldcg(kbase + static_cast<std::size_t>(key) * TPK);  // L2: the newest row was just written
          vr[r] = __ldcg(vbase + static_cast<std::size_t>(key) * TPK);
        } else {
          kr[r] = vr[r] = make_uint4(0u, 0u, 0u, 0u);
        }
      }
      float s[kRounds];
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        unpack8(kr[r], kf);
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qv[e], kf[e], d);
        if constexpr (TPK > 1) d = lane_group_sum<1, TPK>(d);
        s[r] = t0 + r * KPS + ks < c1 ? d : -INFINITY;
      }
      float mx = s[0];
#pragma unroll
      for (int r = 1; r < kRounds; ++r) mx = fmaxf(mx, s[r]);
      if constexpr (TPK < 32) mx = lane_group_max<TPK, 32>(mx);
      const float m_new = fmaxf(m, mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m - base);
      m = m_new;
      l *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= alpha;
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const float p = exp2f(s[r] - base);
        unpack8(vr[r], vf);
        l += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = fmaf(p, vf[e], acc[e]);
      }
    }
    // The warp's state: sums over its key lanes (the TPK lanes of one key hold equal p).
    if constexpr (TPK < 32) {
      l = lane_group_sum<TPK, 32>(l);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = lane_group_sum<TPK, 32>(acc[e]);
    }
    if (ks == 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) wacc[warp][sub * 8 + e] = acc[e];
      if (sub == 0) {
        wst[warp][0] = m;
        wst[warp][1] = l;
      }
    }
    __syncthreads();
    if (bi == 0 && clustered) cluster_wait();  // every rank is running: its shared memory may be written
    // The block's state, pushed to every rank (the ranks all need the whole head output).
    if (tid < HD) {
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wst[w][0]);
      const float base = M == -INFINITY ? 0.0f : M;
      float L = 0.0f, A = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(wst[w][0] - base);
        L += f * wst[w][1];
        A += f * wacc[w][tid];
      }
      for (int q = 0; q < C; ++q) {
        float* ra = clustered ? cluster.map_shared_rank(&racc[0][0][0], q) : &racc[0][0][0];
        ra[(bi * kMaxC + rank) * HD + tid] = A;
        if (tid == 0) {
          float* rs = clustered ? cluster.map_shared_rank(&rst[0][0][0], q) : &rst[0][0][0];
          rs[(bi * kMaxC + rank) * 2] = M;
          rs[(bi * kMaxC + rank) * 2 + 1] = L;
        }
      }
    }
    __syncthreads();  // wst / wacc are refilled by the next row
  }
  if (clustered) cluster.sync();  // release / acquire: every rank's states are here
  else __syncthreads();
  // The head's output per row: the C states merged in rank order, rounded as attention_decode's output.
  for (int i = tid; i < a.b * HD; i += kThreads) {
    const int bi = i / HD, e = i - bi * HD;
    float M = -INFINITY;
    for (int q = 0; q < C; ++q) M = fmaxf(M, rst[bi][q][0]);
    const float base = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, A = 0.0f;
    for (int q = 0; q < C; ++q) {
      const float f = exp2f(rst[bi][q][0] - base);
      L += f * rst[bi][q][1];
      A += f * racc[bi][q][e];
    }
    ov[bi][e] = __bfloat162float(__float2bfloat16_rn(L > 0.0f ? A * (1.0f / L) : 0.0f));
  }
  cp_async_wait_all();
  __syncthreads();

  // The slice times the head's output: TPK lanes per Wo row (8 columns each), 32 / TPK rows per warp step. The
  // loop runs warp-uniformly (its shuffles take the whole warp); lanes past the slice's rows multiply zeros.
  {
    float o[kMaxB][8];
#pragma unroll
    for (int bi = 0; bi < kMaxB; ++bi)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[bi][e] = bi < a.b ? ov[bi][sub * 8 + e] : 0.0f;
    for (int rb = warp * KPS; rb < nr; rb += kWarps * KPS) {
      const int rr = rb + ks;
      float wf[8];
      unpack8(rr < nr && !(a.skip & 1) ? *reinterpret_cast<const uint4*>(ws + rr * HD + sub * 8) : make_uint4(0u, 0u, 0u, 0u), wf);
#pragma unroll
      for (int bi = 0; bi < kMaxB; ++bi) {
        if (bi >= a.b) break;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(wf[e], o[bi][e], s);
        if constexpr (TPK > 1) s = lane_group_sum<1, TPK>(s);
        if (sub == 0 && rr < nr && !(a.skip & 2)) atomicAdd(a.acc + static_cast<std::size_t>(bi) * a.d + r0 + rr, s);
      }
    }
  }
  // The heads' sums of rank c's rows meet in the accumulator; the last block adds them to x.
  __threadfence();
  int last = 0;
  if (tid == 0) last = atomicAdd(a.ctrl + rank * kLine, 1u) == static_cast<unsigned>(a.h - 1) ? 1 : 0;
  if (!__syncthreads_or(last)) return;
  __threadfence();
  for (int i = tid; i < a.b * nr; i += kThreads) {
    const int bi = i / nr;
    const std::size_t o = static_cast<std::size_t>(bi) * a.d + r0 + (i - bi * nr);
    const float v = __ldcg(a.acc + o);
    __stcg(a.acc + o, 0.0f);
    a.x[o] = __float2bfloat16_rn(__bfloat162float(a.x[o]) + v);
  }
  if (tid == 0) a.ctrl[rank * kLine] = 0;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The cluster size: the fewest ranks whose Wo slice fits kMaxSlice (0: none does).
int ranks_for(std::int64_t d, std::int64_t hd) {
  for (int c = 1; c <= kMaxC; c *= 2) {
    const std::int64_t rows = (d + c - 1) / c;
    if (static_cast<std::size_t>(rows * hd) * sizeof(bf16) <= kMaxSlice) return c <= d ? c : 0;
  }
  return 0;
}

bool takes(const Tensor& q, const Tensor& k_cache, const Tensor& wo_t, const Tensor& x) {
  if (q.rank() != 3 || k_cache.rank() != 4 || wo_t.rank() != 2 || x.rank() != 2) return false;
  const std::int64_t b = q.dim(0), h = q.dim(1), hd = q.dim(2), kvh = k_cache.dim(1), d = x.dim(1);
  if (b < 1 || b > kMaxB || x.dim(0) != b || (hd != 64 && hd != 128) || kvh < 1 || h % kvh != 0) return false;
  if (wo_t.dim(0) != d || wo_t.dim(1) != h * hd || k_cache.dim(0) != b || k_cache.dim(3) != hd) return false;
  if (h > 65535 || d > (std::int64_t(1) << 30) || k_cache.dim(2) < 1 || ranks_for(d, hd) == 0) return false;
  for (const Tensor* t : {&q, &k_cache, &wo_t, &x})
    if (t->dtype() != DType::bf16) return false;
  return aligned16(q.raw()) && aligned16(k_cache.raw()) && aligned16(wo_t.raw());
}

}  // namespace
}  // namespace attn_out

std::size_t attn_out_zero_bytes(const Tensor& q, const Tensor& k_cache, const Tensor& wo_t, const Tensor& x) {
  if (!attn_out::takes(q, k_cache, wo_t, x)) return 0;
  return attn_out::kAccOffset + static_cast<std::size_t>(x.numel()) * sizeof(float);
}

bool decode_attn_out_fused(cudaStream_t st, void* zeroed, const Tensor& q, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& pos, const Tensor& wo_t, Tensor& x) {
  using namespace attn_out;
  if (!zeroed || !takes(q, k_cache, wo_t, x) || v_cache.shape() != k_cache.shape() ||
      v_cache.dtype() != DType::bf16 || !aligned16(v_cache.raw()) || pos.dtype() != DType::i32 ||
      pos.numel() != q.dim(0))
    return false;
  Args a{};
  a.q = q.data<bf16>();
  a.kc = k_cache.data<bf16>();
  a.vc = v_cache.data<bf16>();
  a.pos = pos.data<std::int32_t>();
  a.wo = wo_t.data<bf16>();
  a.x = x.data<bf16>();
  a.ctrl = static_cast<unsigned*>(zeroed);
  a.acc = reinterpret_cast<float*>(static_cast<unsigned char*>(zeroed) + kAccOffset);
  a.b = static_cast<int>(q.dim(0));
  a.h = static_cast<int>(q.dim(1));
  a.kvh = static_cast<int>(k_cache.dim(1));
  a.T = static_cast<int>(k_cache.dim(2));
  a.d = static_cast<int>(x.dim(1));
  const int hd = static_cast<int>(q.dim(2));
  const int C = ranks_for(a.d, hd);
  a.R = (a.d + C - 1) / C;
  a.early = wo_t.tag().category == MemCategory::weights ? 1 : 0;
  a.skip = std::getenv("MOCBENCH_AO_SKIP") ? std::atoi(std::getenv("MOCBENCH_AO_SKIP")) : 0;
  a.hint = std::getenv("MOCBENCH_AO_HINT") ? std::atoi(std::getenv("MOCBENCH_AO_HINT")) : 0;
  a.scale_log2 = kLog2e / std::sqrt(static_cast<float>(hd));
  const std::size_t smem = static_cast<std::size_t>(a.R) * hd * sizeof(bf16);
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(a.h), 1);
  auto go = [&](auto kernel) {
    allow_smem(kernel, smem + kStaticSmem);  // opted in whenever static + dynamic pass 48 KB
    launch_pdl_cluster("k_attn_out", kernel, grid, dim3(kThreads), smem, st, dim3(static_cast<unsigned>(C), 1, 1), a);
  };
  if (hd == 64) go(k_attn_out<64>);
  else go(k_attn_out<128>);
  return true;
}

}  // namespace moc::cuda

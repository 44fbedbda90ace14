// Decode attention on the GPU: one query token per sequence against its KV cache [b, kvh, max_seq, hd]. The fast path
// (attn_decode_fast_kernel: cache rows of a power-of-two count of 16-byte words, 16-aligned) is one PDL-launched kernel
// whose splits of a (sequence, kv head) form a thread-block cluster and merge on chip; the general path (any head_dim)
// is flash-decoding's split kernel staging K/V in shared memory, then a combine kernel. The training kernels are in
// attention.cu; the CPU twin is CpuOps::attention_decode (kernels/cpu/cpu_attention.cpp).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups.h>

#include "kernels/cuda/cuda_ops_impl.cuh"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace {

// A decode block's query heads: blockIdx.y is (kv head kh, chunk hc of at most NH of its group's h / kvh query
// heads); the block takes heads h0 .. h0 + nh - 1.
struct DecHeads {
  int kh, h0, nh;
};
template <int NH>
__device__ __forceinline__ DecHeads dec_heads(int h, int kvh) {
  const int group = h / kvh;
  const int nhc = cdiv(group, NH);
  const int kh = blockIdx.y / nhc, hc = blockIdx.y % nhc;
  return {kh, kh * group + hc * NH, min(NH, group - hc * NH)};
}

// ---- decode: split the keys of each sequence into chunks (flash-decoding), then combine the partials.
// A block stages its chunk of K and V in shared memory (many 16-byte loads in flight), scores one key per
// thread for every query head of its GQA group, and accumulates one output dim per thread.
constexpr int kDecThreads = 128;
constexpr int kDecMaxHeads = 8;  // query heads (of one GQA group) per block
constexpr int kDecMaxHd = 128;

int dec_chunk(DType dt) { return dt == DType::bf16 ? 128 : 64; }  // keys per split (shared memory ~70 KB)
__host__ __device__ __forceinline__ int dec_row_stride(int hd) { return ((hd + 1) & ~1) + 2; }  // odd word stride

__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// n contiguous rows of hd elements at src into shared rows of ss elements; a padding column (odd hd) is zeroed.
template <class T>
__device__ __forceinline__ void stage_rows(T* dst, int ss, const T* __restrict__ src, int n, int hd, bool vec) {
  if (vec) {  // hd * sizeof(T) is a multiple of 16 and src is 16-byte aligned
    constexpr int E = 16 / sizeof(T);
    constexpr int kBatch = 16;
    const int per_row = hd / E, total = n * per_row;
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    for (int base = 0; base < total; base += kDecThreads * kBatch) {
      uint4 r[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int p = base + threadIdx.x + u * kDecThreads;
        if (p < total) r[u] = s4[p];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int p = base + threadIdx.x + u * kDecThreads;
        if (p < total) {
          std::uint32_t* w = reinterpret_cast<std::uint32_t*>(dst + (p / per_row) * ss + (p % per_row) * E);
          w[0] = r[u].x;
          w[1] = r[u].y;
          w[2] = r[u].z;
          w[3] = r[u].w;
        }
      }
    }
  } else {
    for (int e = threadIdx.x; e < n * hd; e += kDecThreads) dst[(e / hd) * ss + e % hd] = src[e];
  }
  if (hd & 1)
    for (int j = threadIdx.x; j < n; j += kDecThreads) dst[j * ss + hd] = from_f32<T>(0.0f);
}

// Partial attention of heads h0 .. h0+nh-1 (nh <= NH, sharing kv head kh) over keys [c0, c0+n) of one
// sequence: unnormalized output, max (log2 units) and sum of exponentials.
template <class T, int NH>
__global__ void __launch_bounds__(kDecThreads) attn_decode_split_kernel(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, const std::int32_t* __restrict__ pos,
    float* __restrict__ opart, float* __restrict__ mpart, float* __restrict__ lpart, int h, int kvh, int T_len,
    int hd, int nsplit, int chunk, float scale_log2, bool vec) {
  extern __shared__ float4 smem_f4[];
  const int split = blockIdx.x, bi = blockIdx.z;
  const auto [kh, h0, nh] = dec_heads<NH>(h, kvh);
  const int len = min(pos[bi] + 1, T_len);
  const int c0 = split * chunk;
  if (c0 >= len) return;  // beyond this sequence's position: the combine step skips it
  const int n = min(chunk, len - c0);
  const int ss = dec_row_stride(hd), hde = (hd + 1) & ~1;
  T* Ks = reinterpret_cast<T*>(smem_f4);
  T* Vs = Ks + chunk * ss;
  float* qs = reinterpret_cast<float*>(Vs + chunk * ss);  // [NH][hde], pre-scaled to log2 units
  float* sc = qs + NH * hde;                                // [NH][chunk]
  const long long row0 = (static_cast<long long>(bi) * kvh + kh) * T_len + c0;
  stage_rows(Ks, ss, kc + row0 * hd, n, hd, vec);
  stage_rows(Vs, ss, vc + row0 * hd, n, hd, vec);
  for (int e = threadIdx.x; e < NH * hde; e += kDecThreads) {
    const int hh = e / hde, d = e % hde;
    qs[e] = (hh < nh && d < hd) ? to_f32(q[(static_cast<long long>(bi) * h + h0 + hh) * hd + d]) * scale_log2 : 0.0f;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kDecThreads) {  // scores: one key per thread
    float acc[NH] = {};
    const T* kr = Ks + j * ss;
    for (int d = 0; d < hde; d += 2) {
      const float2 kv = load_pair(kr + d);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
        const float2 qv = *reinterpret_cast<const float2*>(qs + hh * hde + d);
        acc[hh] += qv.x * kv.x + qv.y * kv.y;
      }
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) sc[hh * chunk + j] = acc[hh];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int hh = warp; hh < nh; hh += kDecThreads / 32) {  // softmax statistics: one warp per head
    float* row = sc + hh * chunk;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, row[j]);
    mx = dev::warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = exp2f(row[j] - mx);
      row[j] = p;
      sum += p;
    }
    sum = dev::warp_sum(sum);
    if (lane == 0) {
      const long long slot = (static_cast<long long>(bi) * h + h0 + hh) * nsplit + split;
      mpart[slot] = mx;
      lpart[slot] = sum;
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kDecThreads) {  // unnormalized output: one dim per thread
    float acc[NH] = {};
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const float vv = to_f32(Vs[j * ss + d]);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) acc[hh] += sc[hh * chunk + j] * vv;  // rows hh >= nh: discarded
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
      if (hh < nh) opart[((static_cast<long long>(bi) * h + h0 + hh) * nsplit + split) * hd + d] = acc[hh];
  }
}

template <class T>
__global__ void attn_decode_combine_kernel(const float* __restrict__ opart, const float* __restrict__ mpart,
                                           const float* __restrict__ lpart, const std::int32_t* __restrict__ pos,
                                           T* __restrict__ out, int h, int T_len, int hd, int nsplit, int chunk) {
  const int hi = blockIdx.x, bi = blockIdx.y;
  const int len = min(pos[bi] + 1, T_len);
  const int used = len > 0 ? cdiv(len, chunk) : 0;
  const long long slot0 = (static_cast<long long>(bi) * h + hi) * nsplit;
  float M = -INFINITY;
  for (int sp = 0; sp < used; ++sp) M = fmaxf(M, mpart[slot0 + sp]);
  float denom = 0.0f;
  for (int sp = 0; sp < used; ++sp) denom += exp2f(mpart[slot0 + sp] - M) * lpart[slot0 + sp];
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int sp = 0; sp < used; ++sp) acc += exp2f(mpart[slot0 + sp] - M) * opart[(slot0 + sp) * hd + d];
    out[(static_cast<long long>(bi) * h + hi) * hd + d] = from_f32<T>(acc * inv);
  }
}

// ---- decode, the fast path: one kernel, the splits of a (sequence, kv head) form a thread-block cluster.
// For caches whose rows are whole 16-byte words (hd / (16 / sizeof(T)) threads per key, a power of two):
// the split count comes from max_seq (>= 64 keys per split, 1 / 2 / 4 / 8 splits); within a block each
// warp runs an online softmax over its own keys straight from 16-byte loads of K and V (no shared-memory
// staging: 4 keys x TPK threads per load step, kFdRounds steps in flight); the block's warps and then the
// cluster's blocks merge their (max, sum, output) states, the last by pushing them into the owning rank's
// shared memory (one cluster barrier).
// No partials leave the chip and there is no second kernel. PDL-launched.
namespace cgr = cooperative_groups;
constexpr int kFdThreads = 128;
constexpr int kFdWarps = kFdThreads / 32;
constexpr int kFdRounds = 4;      // load steps per warp tile (K and V loads in flight per thread: 2 x 4 x 16 B)
constexpr int kFdMaxSplit = 8;    // portable cluster size
constexpr int kFdKeysPerSplit = 64;
constexpr int kFdMaxHeads = 4;    // query heads of one GQA group per block

__device__ __forceinline__ void unpack16(const uint4& v, float (&f)[8], const __nv_bfloat16*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack16(const uint4& v, float (&f)[4], const float*) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

template <class T, int TPK, int NH>
__global__ void __launch_bounds__(kFdThreads) attn_decode_fast_kernel(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, const std::int32_t* __restrict__ pos,
    T* __restrict__ out, int h, int kvh, int T_len, int hd, int chunk, float scale_log2) {
  constexpr int E = 16 / sizeof(T);   // elements per 16-byte word
  constexpr int KPS = 32 / TPK;       // keys per warp load step
  constexpr int TK = KPS * kFdRounds; // keys per warp tile
  __shared__ float wst[kFdWarps][NH][2];        // per warp: max (log2 units), sum
  __shared__ float wacc[kFdWarps][NH][kDecMaxHd];
  __shared__ float rst[kFdMaxSplit][NH][2];     // pushed by each rank: its block's max and sum per head
  __shared__ float racc[NH * kDecMaxHd + kFdMaxSplit];  // pushed by each rank: its outputs of this rank's share
  pdl_trigger();
  const bool clustered = gridDim.x > 1;  // the cluster spans the gridDim.x splits
  if (clustered) cluster_arrive_relaxed();  // "started": waited for before the first remote store
  pdl_wait();
  const int split = blockIdx.x, bi = blockIdx.z;
  const auto [kh, h0, nh] = dec_heads<NH>(h, kvh);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % TPK, ks = lane / TPK;
  const int len = min(pos[bi] + 1, T_len);
  const int c0 = split * chunk, c1 = min(len, c0 + chunk);

  float qv[NH][E];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int e = 0; e < E; ++e)
      qv[hh][e] = hh < nh ? to_f32(q[(static_cast<long long>(bi) * h + h0 + hh) * hd + sub * E + e]) * scale_log2 : 0.0f;
  float m[NH], l[NH], acc[NH][E];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[hh][e] = 0.0f;
  }
  const long long row0 = (static_cast<long long>(bi) * kvh + kh) * T_len;
  const uint4* kbase = reinterpret_cast<const uint4*>(kc + row0 * hd) + sub;
  const uint4* vbase = reinterpret_cast<const uint4*>(vc + row0 * hd) + sub;
  const int wpr = hd / E;  // 16-byte words per cache row
  for (int t0 = c0 + warp * TK; t0 < c1; t0 += kFdWarps * TK) {
    uint4 kr[kFdRounds], vr[kFdRounds];
#pragma unroll
    for (int r = 0; r < kFdRounds; ++r) {
      const int key = t0 + r * KPS + ks;
      if (key < c1) {
        kr[r] = __ldcg(kbase + static_cast<long long>(key) * wpr);  // L2: the newest row was just written
        vr[r] = __ldcg(vbase + static_cast<long long>(key) * wpr);
      } else {
        kr[r] = vr[r] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    float s[kFdRounds][NH];
#pragma unroll
    for (int r = 0; r < kFdRounds; ++r) {
      float kf[E];
      unpack16(kr[r], kf, static_cast<const T*>(nullptr));
#pragma unroll
      for (int hh = 0; hh < NH; ++hh) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) d = fmaf(qv[hh][e], kf[e], d);
        if constexpr (TPK > 1) d = dev::lane_group_sum<1, TPK>(d);
        s[r][hh] = t0 + r * KPS + ks < c1 ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) {
      float mx = s[0][hh];
#pragma unroll
      for (int r = 1; r < kFdRounds; ++r) mx = fmaxf(mx, s[r][hh]);
      if constexpr (TPK < 32) mx = dev::lane_group_max<TPK, 32>(mx);
      const float m_new = fmaxf(m[hh], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[hh] - base);
      m[hh] = m_new;
      l[hh] *= alpha;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[hh][e] *= alpha;
#pragma unroll
      for (int r = 0; r < kFdRounds; ++r) {
        const float p = exp2f(s[r][hh] - base);
        float vf[E];
        unpack16(vr[r], vf, static_cast<const T*>(nullptr));
        l[hh] += p;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[hh][e] = fmaf(p, vf[e], acc[hh][e]);
      }
    }
  }
  // The warp's state: sums over its key lanes (the TPK lanes of one key hold equal p).
#pragma unroll
  for (int hh = 0; hh < NH; ++hh) {
    if constexpr (TPK < 32) {
      l[hh] = dev::lane_group_sum<TPK, 32>(l[hh]);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[hh][e] = dev::lane_group_sum<TPK, 32>(acc[hh][e]);
    }
    if (ks == 0) {
#pragma unroll
      for (int e = 0; e < E; ++e) wacc[warp][hh][sub * E + e] = acc[hh][e];
      if (sub == 0) {
        wst[warp][hh][0] = m[hh];
        wst[warp][hh][1] = l[hh];
      }
    }
  }
  __syncthreads();
  // The block's state, pushed straight to the ranks that own its outputs: rank r finishes outputs
  // [r * per, (r + 1) * per) of the nh * hd of this block group (distributed shared memory), then one
  // cluster barrier (release / acquire), then each owner merges the ns states in rank order.
  cgr::cluster_group cluster = cgr::this_cluster();
  const int ns = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int total = nh * hd, per = cdiv(total, ns);
  if (clustered) cluster_wait();  // every rank is running: its shared memory may be written
  for (int o = threadIdx.x; o < total; o += kFdThreads) {
    const int hh = o / hd, d = o % hd;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kFdWarps; ++w) M = fmaxf(M, wst[w][hh][0]);
    const float base = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < kFdWarps; ++w) {
      const float f = exp2f(wst[w][hh][0] - base);
      L += f * wst[w][hh][1];
      A += f * wacc[w][hh][d];
    }
    const int owner = o / per;
    (clustered ? cluster.map_shared_rank(&racc[0], owner) : racc)[rank * per + (o - owner * per)] = A;
    if (d == 0)
      for (int q = 0; q < ns; ++q) {
        float* st = (clustered ? cluster.map_shared_rank(&rst[0][0][0], q) : &rst[0][0][0]) + (rank * NH + hh) * 2;
        st[0] = M;
        st[1] = L;
      }
  }
  if (clustered) cluster.sync();  // release / acquire: the pushed states are visible
  else __syncthreads();
  for (int j = threadIdx.x; j < min(per, total - rank * per); j += kFdThreads) {
    const int o = rank * per + j, hh = o / hd, d = o % hd;
    float M = -INFINITY;
    for (int q = 0; q < ns; ++q) M = fmaxf(M, rst[q][hh][0]);
    const float base = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, A = 0.0f;
    for (int q = 0; q < ns; ++q) {
      const float f = exp2f(rst[q][hh][0] - base);
      L += f * rst[q][hh][1];
      A += f * racc[q * per + j];
    }
    out[(static_cast<long long>(bi) * h + h0 + hh) * hd + d] = from_f32<T>(L > 0.0f ? A * (1.0f / L) : 0.0f);
  }
}

template <class T>
bool launch_decode_fast(cudaStream_t st, const T* q, const T* kc, const T* vc, const std::int32_t* pos, T* out,
                        int b, int h, int kvh, int T_len, int hd) {
  constexpr int E = 16 / static_cast<int>(sizeof(T));
  if (T_len <= 0 || hd % E != 0 || reinterpret_cast<std::uintptr_t>(kc) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(vc) % 16 != 0)
    return false;
  const int tpk = hd / E;
  if (tpk > 32 || (tpk & (tpk - 1)) != 0) return false;
  const int group = h / kvh;
  const int NHr = group >= 4 ? 4 : group >= 2 ? 2 : 1;
  int ns = 1;  // a power of two: cluster shapes 1, 2, 4, 8
  while (ns < kFdMaxSplit && ns * kFdKeysPerSplit < T_len) ns *= 2;
  const int chunk = ceil_div(T_len, ns);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(hd));
  const dim3 grid(static_cast<unsigned>(ns), static_cast<unsigned>(kvh * ceil_div(group, NHr)),
                  static_cast<unsigned>(b));
  auto go = [&](auto tpk_tag, auto nh_tag) {
    constexpr int TPK = decltype(tpk_tag)::value, NH = decltype(nh_tag)::value;
    if constexpr (TPK * E <= kDecMaxHd)  // always true at run time: hd <= 128
    launch_pdl_cluster("attn_decode_fast_kernel", attn_decode_fast_kernel<T, TPK, NH>, grid, dim3(kFdThreads), 0, st,
                       dim3(static_cast<unsigned>(ns), 1, 1), q, kc, vc, pos, out, h, kvh, T_len, hd, chunk,
                       scale_log2);
  };
  auto with_nh = [&](auto tpk_tag) {
    if (NHr == 1) go(tpk_tag, std::integral_constant<int, 1>{});
    else if (NHr == 2) go(tpk_tag, std::integral_constant<int, 2>{});
    else go(tpk_tag, std::integral_constant<int, kFdMaxHeads>{});
  };
  switch (tpk) {
    case 1: with_nh(std::integral_constant<int, 1>{}); break;
    case 2: with_nh(std::integral_constant<int, 2>{}); break;
    case 4: with_nh(std::integral_constant<int, 4>{}); break;
    case 8: with_nh(std::integral_constant<int, 8>{}); break;
    case 16: with_nh(std::integral_constant<int, 16>{}); break;
    default: with_nh(std::integral_constant<int, 32>{}); break;
  }
  return true;
}


}  // namespace

void attention_decode(Ops& ops, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                      Tensor& out) {
  require(q.rank() == 3 && k_cache.rank() == 4 && out.shape() == q.shape(), "attention_decode",
          "q [b, h, hd], caches [b, kvh, max_seq, hd], out like q");
  const int b = static_cast<int>(q.dim(0)), h = static_cast<int>(q.dim(1)), hd = static_cast<int>(q.dim(2));
  const int kvh = static_cast<int>(k_cache.dim(1)), T_len = static_cast<int>(k_cache.dim(2));
  require(k_cache.shape() == v_cache.shape() && k_cache.dim(0) == b && k_cache.dim(3) == hd, "attention_decode",
          "cache " + shape_str(k_cache.shape()) + " does not fit q " + shape_str(q.shape()));
  require(kvh > 0 && h % kvh == 0, "attention_decode", "kv heads must divide heads");
  require(hd > 0 && hd <= kDecMaxHd, "attention_decode", "head_dim must be in [1, 128]");
  require(pos.dtype() == DType::i32 && pos.numel() == b, "attention_decode", "pos must be i32 [b]");
  require(is_float(q.dtype()) && k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype() &&
              out.dtype() == q.dtype(),
          "attention_decode", "q, caches and out must share one float dtype");
  if (q.numel() == 0) return;
  cudaStream_t st = stream_of(ops);
  bool done = false;
  dispatch_float(q.dtype(), "attention_decode", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    done = launch_decode_fast<T>(st, q.data<T>(), k_cache.data<T>(), v_cache.data<T>(), pos.data<std::int32_t>(),
                                 out.data<T>(), b, h, kvh, T_len, hd);
  });
  if (done) return;
  // The general path (any head_dim): split kernel staging K/V in shared memory, then a combine kernel.
  const int chunk = dec_chunk(q.dtype());
  const int nsplit = T_len > 0 ? ceil_div(T_len, chunk) : 1;
  Tensor opart = ops.empty({b, h, nsplit, hd}, DType::f32, workspace_tag());
  Tensor stats = ops.empty({2, b, h, nsplit}, DType::f32, workspace_tag());
  float* mpart = stats.data<float>();
  float* lpart = mpart + static_cast<long long>(b) * h * nsplit;
  const int group = h / kvh;
  const int nh = std::min(group, kDecMaxHeads);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(hd));
  const std::size_t elt = dtype_bytes(q.dtype());
  const bool vec = (hd * elt) % 16 == 0 && reinterpret_cast<std::uintptr_t>(k_cache.raw()) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(v_cache.raw()) % 16 == 0;
  dispatch_float(q.dtype(), "attention_decode", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (T_len > 0) {
      auto launch = [&](auto nh_tag) {
        constexpr int NH = decltype(nh_tag)::value;
        const int hde = (hd + 1) & ~1;
        const std::size_t smem = 2 * static_cast<std::size_t>(chunk) * dec_row_stride(hd) * sizeof(T) +
                                 static_cast<std::size_t>(NH) * (hde + chunk) * sizeof(float);
        auto kernel = attn_decode_split_kernel<T, NH>;
        allow_smem(kernel, smem);
        dim3 grid(nsplit, kvh * ceil_div(group, NH), b);
        kernel<<<grid, kDecThreads, smem, st>>>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(),
                                                pos.data<std::int32_t>(), opart.data<float>(), mpart, lpart, h, kvh,
                                                T_len, hd, nsplit, chunk, scale_log2, vec);
        MOC_CUDA_LAUNCHED("attn_decode_split_kernel");
      };
      if (nh == 1) launch(std::integral_constant<int, 1>{});
      else if (nh == 2) launch(std::integral_constant<int, 2>{});
      else if (nh <= 4) launch(std::integral_constant<int, 4>{});
      else launch(std::integral_constant<int, kDecMaxHeads>{});
    }
    attn_decode_combine_kernel<T><<<dim3(h, b), 128, 0, st>>>(opart.data<float>(), mpart, lpart,
                                                               pos.data<std::int32_t>(), out.data<T>(), h, T_len, hd,
                                                               nsplit, chunk);
    MOC_CUDA_LAUNCHED("attn_decode_combine_kernel");
  });
}


}  // namespace moc::cuda

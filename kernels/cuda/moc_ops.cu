// Mixture-of-Channels ops on the GPU: the row top-K / a:b selection (paper eq. 4), compact gather/scatter and
// the sparse down projection Z'·W_down with its backward (paper eq. 6-7).
//
// Selection ranks order-preserving 32-bit keys (NaN -> -inf, -0 -> +0, so equal floats give equal keys).
// A row (or a large group) is one block: radix select on the key (11/11/10-bit passes over a shared
// histogram) finds the K-th key, then a block scan in index order keeps every larger key and the lowest-
// index equal ones, written ascending. Small groups (b <= 256) are one thread per channel.
// The projection scatters Z' into a dense [rows, d_ffn] workspace chunk and multiplies on the tensor cores
// through ops.gemm (fp32 accumulation); at 20% density that beats gathering weight rows on CUDA cores.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace moc::cuda {
namespace {

constexpr int kSelThreads = 256;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSmemKeysMax = 16384;  // segments up to this length keep their keys in shared memory
constexpr int kSmallGroupMax = 256;  // a:b groups up to this b use one thread per channel

// The CPU's SiLU, x * (1 / (1 + exp(-x))), rounded step by step; exp in double then rounded to float is
// the correctly rounded expf that glibc's expf matches.
__device__ __forceinline__ float rule_key(float x, int rule) {
  if (rule == static_cast<int>(SelectRule::gate)) return x;
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  const float y = __fmul_rn(x, __fdiv_rn(1.0f, __fadd_rn(1.0f, e)));
  return rule == static_cast<int>(SelectRule::abs_silu) ? fabsf(y) : y;
}

// Larger key -> larger unsigned; NaN ranks as -inf and -0 as +0.
__device__ __forceinline__ std::uint32_t order_key(float key) {
  std::uint32_t u = __float_as_uint(key);
  if (isnan(key)) u = 0xff800000u;
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <class T>
__device__ __forceinline__ std::uint32_t select_key(const T* p, int rule) {
  return order_key(rule_key(to_f32(*p), rule));
}

// Exclusive prefix sum over the block (kSelThreads threads) and, in *total, the block's sum; scratch holds
// kSelWarps ints. All threads call it.
__device__ __forceinline__ int block_exclusive_sum(int v, int* scratch, int* total = nullptr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kSelWarps ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < kSelWarps; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kSelWarps) scratch[lane] = w;
  }
  __syncthreads();
  const int r = (warp > 0 ? scratch[warp - 1] : 0) + x - v;
  if (total) *total = scratch[kSelWarps - 1];
  __syncthreads();  // scratch may be reused right away
  return r;
}

// One block per segment: a whole row (top-K) or one group of b channels (a:b). Segment blockIdx.x is
// group gi = blockIdx.x % nseg of row blockIdx.x / nseg; it keeps k channels (top-K) or min(a, len) (a:b).
template <class T, bool kSmemKeys>
__global__ void __launch_bounds__(kSelThreads) topk_radix_kernel(const T* __restrict__ g, std::uint16_t* __restrict__ idx,
                                                                 int F, int seglen, int nseg, int kept, int a, int k,
                                                                 int rule) {
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
  const T* src = g + row * F + start;
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
              const std::uint32_t key = order_key(rule_key(x[u], rule));
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

// a:b with b <= kSmallGroupMax: gpb groups per block, one thread per channel; rank within the group by
// (key desc, index asc), keep rank < min(a, len), write ascending.
template <class T>
__global__ void __launch_bounds__(kSelThreads) group_select_small_kernel(const T* __restrict__ g,
                                                                         std::uint16_t* __restrict__ idx, int F, int a,
                                                                         int b, int ngroups, int kept, int gpb,
                                                                         int blocks_per_row, int rule) {
  __shared__ std::uint32_t ks[kSelThreads];
  __shared__ unsigned char flag[kSelThreads];
  const int tid = threadIdx.x;
  const long long row = blockIdx.x / blocks_per_row;
  const int gb = blockIdx.x % blocks_per_row;
  const int gl = tid / b, i = tid % b;
  const int grp = gb * gpb + gl;
  const int c = grp * b + i;
  const bool valid = gl < gpb && grp < ngroups && c < F;
  ks[tid] = valid ? select_key(g + row * F + c, rule) : 0u;
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

template <class S, class O>
__global__ void gather_cols_kernel(const S* __restrict__ src, const std::uint16_t* __restrict__ idx, O* __restrict__ out,
                                   long long total, int K, int F) {
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long i = e / K;
    out[e] = from_f32<O>(to_f32(src[i * F + idx[e]]));
  }
}

template <class S, class O>
__global__ void scatter_cols_kernel(const S* __restrict__ compact, const std::uint16_t* __restrict__ idx,
                                    O* __restrict__ dense, long long total, int K, int F) {
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long i = e / K;
    dense[i * F + idx[e]] = from_f32<O>(to_f32(compact[e]));
  }
}

int grid_for(long long total, int threads) {
  return static_cast<int>(std::min<long long>((total + threads - 1) / threads, 65536LL * 8));
}

void check_idx(const Tensor& idx, const char* op) {
  require(idx.dtype() == DType::i16, op, "channel indices must be i16");
}

// Rows per chunk of a dense [rows, F] workspace of elt-byte elements (at most ~128 MiB, at least 64 rows).
std::int64_t chunk_rows(std::int64_t n, std::int64_t F, std::size_t elt) {
  const std::int64_t budget = (std::int64_t{128} << 20) / std::max<std::int64_t>(1, F * static_cast<std::int64_t>(elt));
  return std::max<std::int64_t>(1, std::min(n, std::max<std::int64_t>(64, budget)));
}

}  // namespace

void moc_select(Ops& ops, const Tensor& g, const MocSelect& sel, Tensor& idx) {
  const std::int64_t n = g.rows(), F = g.cols();
  require(is_float(g.dtype()), "moc_select", "g must be f32 or bf16");
  check_idx(idx, "moc_select");
  require(F >= 1 && F <= 65536, "moc_select", "d_ffn must be in [1, 65536] for i16 channel indices");
  const int kept = sel.kept(static_cast<int>(F));
  require(kept > 0 && kept <= F, "moc_select", "kept channels " + std::to_string(kept) + " not in [1, d_ffn]");
  require(idx.rows() == n && idx.cols() == kept, "moc_select",
          "idx must be [" + std::to_string(n) + ", " + std::to_string(kept) + "], got " + shape_str(idx.shape()));
  if (sel.grouped()) require(sel.group_a > 0 && sel.group_a <= sel.group_b, "moc_select", "a:b needs 0 < a <= b");
  if (n == 0) return;
  cudaStream_t st = stream_of(ops);
  const int rule = static_cast<int>(sel.rule);
  auto* out = idx.data<std::uint16_t>();
  dispatch_float(g.dtype(), "moc_select", [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* gp = g.data<T>();
    if (sel.grouped() && sel.group_b <= kSmallGroupMax) {
      const int b = sel.group_b;
      const int ngroups = static_cast<int>((F + b - 1) / b);
      const int gpb = kSelThreads / b;
      const int bpr = (ngroups + gpb - 1) / gpb;
      group_select_small_kernel<T><<<static_cast<unsigned>(n * bpr), kSelThreads, 0, st>>>(
          gp, out, static_cast<int>(F), sel.group_a, b, ngroups, kept, gpb, bpr, rule);
      MOC_CUDA_LAUNCHED("group_select_small_kernel");
      return;
    }
    const int seglen = sel.grouped() ? std::min<int>(sel.group_b, static_cast<int>(F)) : static_cast<int>(F);
    const int nseg = sel.grouped() ? static_cast<int>((F + sel.group_b - 1) / sel.group_b) : 1;
    const int a = sel.grouped() ? sel.group_a : 0;
    const unsigned blocks = static_cast<unsigned>(n * nseg);
    if (seglen <= kSmemKeysMax) {
      const std::size_t smem = static_cast<std::size_t>(seglen) * sizeof(std::uint32_t);
      auto kernel = topk_radix_kernel<T, true>;
      MOC_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      kernel<<<blocks, kSelThreads, smem, st>>>(gp, out, static_cast<int>(F), seglen, nseg, kept, a, sel.k, rule);
    } else {
      topk_radix_kernel<T, false><<<blocks, kSelThreads, 0, st>>>(gp, out, static_cast<int>(F), seglen, nseg, kept, a,
                                                                  sel.k, rule);
    }
    MOC_CUDA_LAUNCHED("topk_radix_kernel");
  });
}

void gather_cols(Ops& ops, const Tensor& src, const Tensor& idx, Tensor& out) {
  const std::int64_t n = src.rows(), F = src.cols(), K = idx.cols();
  check_idx(idx, "gather_cols");
  require(idx.rows() == n && out.rows() == n && out.cols() == K, "gather_cols", "shape mismatch");
  const long long total = n * K;
  if (total == 0) return;
  cudaStream_t st = stream_of(ops);
  dispatch_float(src.dtype(), "gather_cols", [&](auto stag) {
    using S = std::remove_pointer_t<decltype(stag)>;
    dispatch_float(out.dtype(), "gather_cols", [&](auto otag) {
      using O = std::remove_pointer_t<decltype(otag)>;
      gather_cols_kernel<S, O><<<grid_for(total, 256), 256, 0, st>>>(
          src.data<S>(), idx.data<std::uint16_t>(), out.data<O>(), total, static_cast<int>(K), static_cast<int>(F));
      MOC_CUDA_LAUNCHED("gather_cols_kernel");
    });
  });
}

void scatter_cols(Ops& ops, const Tensor& compact, const Tensor& idx, Tensor& dense) {
  const std::int64_t n = dense.rows(), F = dense.cols(), K = idx.cols();
  check_idx(idx, "scatter_cols");
  require(idx.rows() == n && compact.rows() == n && compact.cols() == K, "scatter_cols", "shape mismatch");
  require(is_float(compact.dtype()) && is_float(dense.dtype()), "scatter_cols", "expected f32 or bf16 tensors");
  if (dense.numel() == 0) return;
  cudaStream_t st = stream_of(ops);
  MOC_CUDA_CHECK(cudaMemsetAsync(dense.raw(), 0, dense.nbytes(), st));  // +0 in f32 and bf16
  const long long total = n * K;
  if (total == 0) return;
  dispatch_float(compact.dtype(), "scatter_cols", [&](auto ctag) {
    using S = std::remove_pointer_t<decltype(ctag)>;
    dispatch_float(dense.dtype(), "scatter_cols", [&](auto dtag) {
      using O = std::remove_pointer_t<decltype(dtag)>;
      scatter_cols_kernel<S, O><<<grid_for(total, 256), 256, 0, st>>>(compact.data<S>(), idx.data<std::uint16_t>(),
                                                                       dense.data<O>(), total, static_cast<int>(K),
                                                                       static_cast<int>(F));
      MOC_CUDA_LAUNCHED("scatter_cols_kernel");
    });
  });
}

// ops.gemm takes all-f32 operands, or bf16 x bf16 into bf16 or f32: the dense workspaces use w's dtype, and
// an f32 GEMM result that must land in bf16 goes through an f32 temporary.
void sparse_rows_matmul(Ops& ops, const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta) {
  const std::int64_t n = z.rows(), K = z.cols(), F = w.rows(), d = w.cols();
  check_idx(idx, "sparse_rows_matmul");
  require(idx.rows() == n && idx.cols() == K && out.rows() == n && out.cols() == d, "sparse_rows_matmul",
          "shape mismatch");
  require(is_float(z.dtype()) && is_float(w.dtype()) && is_float(out.dtype()), "sparse_rows_matmul",
          "expected f32 or bf16 tensors");
  if (n == 0 || d == 0) return;
  const DType wt = w.dtype();
  const Tensor z2 = z.reshape({n, K}), i2 = idx.reshape({n, K}), w2 = w.reshape({F, d});
  Tensor o2 = out.reshape({n, d});
  Tensor acc = o2;  // what the GEMMs write
  const bool via_f32 = wt == DType::f32 && out.dtype() != DType::f32;
  if (via_f32) {
    acc = ops.empty({n, d}, DType::f32, workspace_tag());
    if (beta != 0.0f) ops.copy(acc, o2);
  }
  const std::int64_t chunk = chunk_rows(n, F, dtype_bytes(wt));
  Tensor dense = ops.empty({chunk, F}, wt, workspace_tag());
  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t r1 = std::min(n, r0 + chunk);
    Tensor zd = dense.slice0(0, r1 - r0);
    Tensor oc = acc.slice0(r0, r1);
    scatter_cols(ops, z2.slice0(r0, r1), i2.slice0(r0, r1), zd);
    ops.gemm(zd, false, w2, false, oc, 1.0f, beta);
  }
  if (via_f32) ops.copy(o2, acc);
}

void sparse_rows_matmul_backward(Ops& ops, const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                 Tensor& dz, Tensor& dw) {
  const std::int64_t n = z.rows(), K = z.cols(), F = w.rows(), d = w.cols();
  check_idx(idx, "sparse_rows_matmul_backward");
  require(dz.rows() == n && dz.cols() == K && dw.shape() == w.shape() && dout.rows() == n && dout.cols() == d &&
              idx.rows() == n && idx.cols() == K,
          "sparse_rows_matmul_backward", "shape mismatch");
  require(is_float(dout.dtype()) && is_float(z.dtype()) && is_float(w.dtype()) && is_float(dz.dtype()) &&
              is_float(dw.dtype()),
          "sparse_rows_matmul_backward", "expected f32 or bf16 tensors");
  if (n == 0 || K == 0) return;
  const DType wt = w.dtype();
  const Tensor do2 = dout.reshape({n, d}), z2 = z.reshape({n, K}), i2 = idx.reshape({n, K}), w2 = w.reshape({F, d});
  Tensor dz2 = dz.reshape({n, K}), dw2 = dw.reshape({F, d});
  // dZ = dout W^T densely (f32), gathered at the kept channels; dW += scatter(Z')^T dout.
  const std::int64_t chunk = chunk_rows(n, F, sizeof(float));
  const bool one_chunk = chunk >= n;
  // dW accumulates in fp32 unless one bf16 GEMM (fp32 inside, one rounding) does it all.
  Tensor dwacc = dw2;
  const bool dw_via_f32 = dw.dtype() != DType::f32 && (wt == DType::f32 || !one_chunk);
  if (dw_via_f32) {
    dwacc = ops.empty({F, d}, DType::f32, workspace_tag());
    ops.copy(dwacc, dw2);
  }
  Tensor dzd = ops.empty({chunk, F}, DType::f32, workspace_tag());
  Tensor zd = ops.empty({chunk, F}, wt, workspace_tag());
  Tensor dout_w;  // dout in w's dtype when they differ
  if (dout.dtype() != wt) dout_w = ops.empty({chunk, d}, wt, workspace_tag());
  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t r1 = std::min(n, r0 + chunk);
    Tensor doc = do2.slice0(r0, r1);
    if (dout_w.defined()) {
      Tensor conv = dout_w.slice0(0, r1 - r0);
      ops.copy(conv, doc);
      doc = conv;
    }
    const Tensor ic = i2.slice0(r0, r1);
    Tensor dzc = dz2.slice0(r0, r1);
    Tensor dzdc = dzd.slice0(0, r1 - r0);
    ops.gemm(doc, false, w2, true, dzdc, 1.0f, 0.0f);
    gather_cols(ops, dzdc, ic, dzc);
    Tensor zdc = zd.slice0(0, r1 - r0);
    scatter_cols(ops, z2.slice0(r0, r1), ic, zdc);
    ops.gemm(zdc, true, doc, false, dwacc, 1.0f, 1.0f);
  }
  if (dw_via_f32) ops.copy(dw2, dwacc);
}

}  // namespace moc::cuda

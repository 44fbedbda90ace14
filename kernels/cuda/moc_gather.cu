// Mixture-of-Channels compact gather / scatter and the sparse down projection Z'·W_down with its backward (paper
// eq. 6-7) on the GPU; moc_select.cu gives their indices.
//
// The projection scatters Z' into a dense [rows, d_ffn] workspace chunk and multiplies on the tensor cores
// through ops.gemm (fp32 accumulation); at 20% density that beats gathering weight rows on CUDA cores.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/moc_ops_common.cuh"

namespace moc::cuda {
namespace {

using moc_ops::check_idx;
using moc_ops::grid_for;

// Row-at-a-time gather / scatter for rows that fit in shared memory (training rows: 5464 bf16 = 10.7 KB).
// Gather: the row is read once, coalesced (16-byte words when aligned), and picked from shared memory instead
// of K scattered 2-byte loads. Scatter: the dense row is built in shared memory (zeros, then the kept values)
// and stored once with 16-byte words, instead of a memset pass plus partial-sector writes of the kept values.
// Bytes per row: gather F*sizeof(S) read + K*sizeof(O) written; scatter K*sizeof(S) read + F*sizeof(O) written.
constexpr int kGsThreads = 256;
constexpr std::size_t kRowSmemMax = 96 * 1024;

template <class T>
__device__ __forceinline__ bool aligned16(const T* p, int F) {
  return (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ((static_cast<std::size_t>(F) * sizeof(T)) % 16 == 0);
}

template <class S, class O>
__global__ void __launch_bounds__(kGsThreads) gather_rows_kernel(const S* __restrict__ src,
                                                                  const std::uint16_t* __restrict__ idx,
                                                                  O* __restrict__ out, int K, int F) {
  extern __shared__ __align__(16) unsigned char row_smem[];
  S* row = reinterpret_cast<S*>(row_smem);
  const long long r = blockIdx.x;
  const S* s = src + r * F;
  if (aligned16(s, F)) {
    const int n16 = static_cast<int>(static_cast<std::size_t>(F) * sizeof(S) / 16);
    for (int i = threadIdx.x; i < n16; i += kGsThreads)
      reinterpret_cast<uint4*>(row)[i] = __ldcs(reinterpret_cast<const uint4*>(s) + i);
  } else {
    for (int i = threadIdx.x; i < F; i += kGsThreads) row[i] = s[i];
  }
  __syncthreads();
  const std::uint16_t* ix = idx + r * K;
  O* o = out + r * K;
  for (int j = threadIdx.x; j < K; j += kGsThreads) o[j] = from_f32<O>(to_f32(row[ix[j]]));
}

template <class S, class O>
__global__ void __launch_bounds__(kGsThreads) scatter_rows_kernel(const S* __restrict__ compact,
                                                                   const std::uint16_t* __restrict__ idx,
                                                                   O* __restrict__ dense, int K, int F) {
  extern __shared__ __align__(16) unsigned char row_smem[];
  O* row = reinterpret_cast<O*>(row_smem);
  const long long r = blockIdx.x;
  const int n16 = static_cast<int>((static_cast<std::size_t>(F) * sizeof(O) + 15) / 16);
  for (int i = threadIdx.x; i < n16; i += kGsThreads) reinterpret_cast<uint4*>(row)[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  const std::uint16_t* ix = idx + r * K;
  const S* c = compact + r * K;
  for (int j = threadIdx.x; j < K; j += kGsThreads) row[ix[j]] = from_f32<O>(to_f32(c[j]));
  __syncthreads();
  O* d = dense + r * F;
  if (aligned16(d, F)) {
    for (int i = threadIdx.x; i < n16; i += kGsThreads) reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(row)[i];
  } else {
    for (int i = threadIdx.x; i < F; i += kGsThreads) d[i] = row[i];
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

// Rows per chunk of a dense [rows, F] workspace of elt-byte elements (at most ~384 MiB, at least 64 rows): a
// training layer of the 1b model (16384 x 5464, bf16 or f32) is one chunk, so each projection is one GEMM.
std::int64_t chunk_rows(std::int64_t n, std::int64_t F, std::size_t elt) {
  const std::int64_t budget = (std::int64_t{384} << 20) / std::max<std::int64_t>(1, F * static_cast<std::int64_t>(elt));
  return std::max<std::int64_t>(1, std::min(n, std::max<std::int64_t>(64, budget)));
}

}  // namespace

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
      const std::size_t smem = (static_cast<std::size_t>(F) * sizeof(S) + 15) / 16 * 16;
      if (smem <= kRowSmemMax && n <= std::numeric_limits<int>::max()) {
        allow_smem(gather_rows_kernel<S, O>, smem);
        gather_rows_kernel<S, O><<<static_cast<unsigned>(n), kGsThreads, smem, st>>>(
            src.data<S>(), idx.data<std::uint16_t>(), out.data<O>(), static_cast<int>(K), static_cast<int>(F));
        MOC_CUDA_LAUNCHED("gather_rows_kernel");
        return;
      }
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
  const std::size_t row_bytes = static_cast<std::size_t>(F) * dtype_bytes(dense.dtype());
  if (K > 0 && (row_bytes + 15) / 16 * 16 <= kRowSmemMax && n <= std::numeric_limits<int>::max()) {
    dispatch_float(compact.dtype(), "scatter_cols", [&](auto ctag) {
      using S = std::remove_pointer_t<decltype(ctag)>;
      dispatch_float(dense.dtype(), "scatter_cols", [&](auto dtag) {
        using O = std::remove_pointer_t<decltype(dtag)>;
        const std::size_t smem = (row_bytes + 15) / 16 * 16;
        allow_smem(scatter_rows_kernel<S, O>, smem);
        scatter_rows_kernel<S, O><<<static_cast<unsigned>(n), kGsThreads, smem, st>>>(
            compact.data<S>(), idx.data<std::uint16_t>(), dense.data<O>(), static_cast<int>(K), static_cast<int>(F));
        MOC_CUDA_LAUNCHED("scatter_rows_kernel");
      });
    });
    return;
  }
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
  // dZ = dout W^T densely, gathered at the kept channels; dW += scatter(Z')^T dout. With bf16 weights and a
  // bf16 dZ' the dense dZ is bf16 too (the GEMM accumulates in fp32 and rounds once, as the gather would).
  const DType dzt = wt == DType::bf16 && dz.dtype() == DType::bf16 ? DType::bf16 : DType::f32;
  const std::int64_t chunk = chunk_rows(n, F, dtype_bytes(dzt));
  const bool one_chunk = chunk >= n;
  // dW accumulates in fp32 unless one bf16 GEMM (fp32 inside, one rounding) does it all.
  Tensor dwacc = dw2;
  const bool dw_via_f32 = dw.dtype() != DType::f32 && (wt == DType::f32 || !one_chunk);
  if (dw_via_f32) {
    dwacc = ops.empty({F, d}, DType::f32, workspace_tag());
    ops.copy(dwacc, dw2);
  }
  Tensor dzd = ops.empty({chunk, F}, dzt, workspace_tag());
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

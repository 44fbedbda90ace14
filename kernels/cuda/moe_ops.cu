// CudaOps: the row gathers and scatters of a mixture-of-experts layer (tokens grouped per expert).
// fp32 math on f32/bf16 storage; semantics are those of CpuOps (kernels/cpu/cpu_moe.cpp). Each is one pass
// over n x d elements, bound by memory: no reuse to exploit, so plain grid-stride kernels.
#include "kernels/op_cost.h"
#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_ops_impl.cuh"

namespace moc::cuda {

namespace {

constexpr int kThreads = 256;

// Out-of-range row ids (the CPU backend throws) give NaN rows (gather) or are skipped (scatter, dot: NaN).
__global__ void gather_rows_kernel(FIn src, const std::int32_t* rows, const float* scale, FOut out, std::int64_t n,
                                   std::int64_t d, std::int64_t src_rows) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n * d;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / d, j = e - i * d;
    const std::int32_t r = rows[i];
    const float f = scale ? scale[i] : 1.0f;
    out.set(e, r >= 0 && r < src_rows ? f * src[r * d + j] : __int_as_float(0x7fc00000));
  }
}

__global__ void scatter_add_rows_kernel(FIn src, const std::int32_t* rows, const float* scale, FOut out,
                                        std::int64_t n, std::int64_t d, std::int64_t out_rows) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n * d;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / d, j = e - i * d;
    const std::int32_t r = rows[i];
    if (r < 0 || r >= out_rows) continue;
    const float f = scale ? scale[i] : 1.0f;
    const std::int64_t o = r * d + j;
    out.set(o, out.get(o) + f * src[e]);
  }
}

// One block per row i: out[i] = a[rows[i]] . b[i].
__global__ void rows_dot_kernel(FIn a, const std::int32_t* rows, FIn b, float* out, std::int64_t n, std::int64_t d,
                                std::int64_t a_rows) {
  __shared__ float red[32];
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int32_t r = rows[i];
    float acc = 0.0f;
    if (r >= 0 && r < a_rows)
      for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) acc += a[r * d + j] * b[i * d + j];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) out[i] = r >= 0 && r < a_rows ? acc : __int_as_float(0x7fc00000);
    __syncthreads();  // red is reused by the next row
  }
}

const float* scale_ptr(const Tensor* scale, std::int64_t n, const char* op) {
  if (!scale) return nullptr;
  require(scale->dtype() == DType::f32 && scale->numel() == n, op, "scale must be f32 [" + std::to_string(n) + "]");
  return scale->data<float>();
}

const std::int32_t* rows_ptr(const Tensor& rows, std::int64_t n, const char* op) {
  require(rows.dtype() == DType::i32 && rows.numel() == n, op, "rows must be i32 [" + std::to_string(n) + "]");
  return rows.data<std::int32_t>();
}

}  // namespace

void CudaOps::gather_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) {
  MOC_OP_COST(cost::gather_rows(rows, scale, out));
  const std::int64_t n = out.rows(), d = out.cols();
  require(src.cols() == d, "gather_rows", "src and out must have the same columns");
  const std::int32_t* r = rows_ptr(rows, n, "gather_rows");
  const float* s = scale_ptr(scale, n, "gather_rows");
  const FIn S = fin(src, "gather_rows", "src");
  const FOut O = fout(out, "gather_rows", "out");
  if (n * d == 0) return;
  gather_rows_kernel<<<grid_1d(n * d, kThreads), kThreads, 0, cur()>>>(S, r, s, O, n, d, src.rows());
  MOC_CUDA_LAUNCHED("gather_rows_kernel");
}

void CudaOps::scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor* scale, Tensor& out) {
  MOC_OP_COST(cost::scatter_add_rows(src, rows, scale));
  const std::int64_t n = src.rows(), d = src.cols();
  require(out.cols() == d, "scatter_add_rows", "src and out must have the same columns");
  const std::int32_t* r = rows_ptr(rows, n, "scatter_add_rows");
  const float* s = scale_ptr(scale, n, "scatter_add_rows");
  const FIn S = fin(src, "scatter_add_rows", "src");
  const FOut O = fout(out, "scatter_add_rows", "out");
  if (n * d == 0) return;
  scatter_add_rows_kernel<<<grid_1d(n * d, kThreads), kThreads, 0, cur()>>>(S, r, s, O, n, d, out.rows());
  MOC_CUDA_LAUNCHED("scatter_add_rows_kernel");
}

void CudaOps::rows_dot(const Tensor& a, const Tensor& rows, const Tensor& b, Tensor& out) {
  MOC_OP_COST(cost::rows_dot(a, rows, b, out));
  const std::int64_t n = b.rows(), d = b.cols();
  require(a.cols() == d, "rows_dot", "a and b must have the same columns");
  require(out.dtype() == DType::f32 && out.numel() == n, "rows_dot", "out must be f32 [" + std::to_string(n) + "]");
  const std::int32_t* r = rows_ptr(rows, n, "rows_dot");
  const FIn A = fin(a, "rows_dot", "a"), B = fin(b, "rows_dot", "b");
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>(n, 65535));
  rows_dot_kernel<<<blocks, 128, 0, cur()>>>(A, r, B, out.data<float>(), n, d, a.rows());
  MOC_CUDA_LAUNCHED("rows_dot_kernel");
}

}  // namespace moc::cuda

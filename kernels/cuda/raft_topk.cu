// Batched row top-K through RAFT's raft::matrix::select_k (header-only; RAFT, RMM, rapids_logger and
// a CCCL newer than the toolkit's come from the PyPI wheels that scripts/setup_raft.sh installs into
// .local/rapids, and cmake/raft.cmake turns them into the mocbench_raft target).
// Without MOCBENCH_HAVE_RAFT (CI, or no wheels) this is a stub TU: raft_available() is false and
// raft_select_k throws, so the rest of the backend builds and the RAFT paths skip.
#include "kernels/cuda/raft_topk.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#ifndef MOCBENCH_HAVE_RAFT

namespace moc::cuda {

bool raft_available() { return false; }

void raft_select_k(cudaStream_t, const float*, int, int, int, float*, int*) {
  throw std::runtime_error("raft_select_k: built without RAFT (run scripts/setup_raft.sh and reconfigure)");
}
void raft_select_k(cudaStream_t, const __nv_bfloat16*, int, int, int, float*, int*) {
  throw std::runtime_error("raft_select_k: built without RAFT (run scripts/setup_raft.sh and reconfigure)");
}

}  // namespace moc::cuda

#else  // MOCBENCH_HAVE_RAFT

#include <raft/core/device_mdarray.hpp>
#include <raft/core/device_mdspan.hpp>
#include <raft/core/resource/cuda_stream.hpp>
#include <raft/core/resources.hpp>
#include <raft/matrix/select_k.cuh>

#include <cstdint>
#include <optional>

namespace moc::cuda {
namespace {

// One raft::resources per host thread (its workspace allocator and stream slot are reused); the
// stream is re-pointed on every call. select_k's scratch comes from RAFT's workspace resource, i.e.
// RMM's current device resource (plain cudaMalloc unless the caller installs a pool).
raft::resources& resources_for(cudaStream_t stream) {
  thread_local raft::resources res;
  raft::resource::set_cuda_stream(res, ::cuda::stream_ref{stream});
  return res;
}

void check_shape(int rows, int cols, int k) {
  if (rows < 0 || cols <= 0 || k <= 0 || k > cols)
    throw std::invalid_argument("raft_select_k: need rows >= 0 and 0 < k <= cols");
}

template <typename T>
void select_largest(raft::resources& res, const T* in, int rows, int cols, int k, T* out_values,
                    int* out_indices) {
  auto in_view = raft::make_device_matrix_view<const T, int64_t, raft::row_major>(in, rows, cols);
  auto val_view = raft::make_device_matrix_view<T, int64_t, raft::row_major>(out_values, rows, k);
  auto idx_view = raft::make_device_matrix_view<int, int64_t, raft::row_major>(out_indices, rows, k);
  raft::matrix::select_k<T, int>(res, in_view, std::nullopt, val_view, idx_view,
                                 /*select_min=*/false, /*sorted=*/true);
}

__global__ void bf16_to_float(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}

}  // namespace

bool raft_available() { return true; }

void raft_select_k(cudaStream_t stream, const float* in, int rows, int cols, int k, float* out_values,
                   int* out_indices) {
  check_shape(rows, cols, k);
  if (rows == 0) return;
  select_largest<float>(resources_for(stream), in, rows, cols, k, out_values, out_indices);
}

void raft_select_k(cudaStream_t stream, const __nv_bfloat16* in, int rows, int cols, int k,
                   float* out_values, int* out_indices) {
  check_shape(rows, cols, k);
  if (rows == 0) return;
  raft::resources& res = resources_for(stream);
  // select_k writes values in the input type: bf16 scratch from RAFT's workspace, then widen.
  auto tmp = raft::make_device_matrix<__nv_bfloat16, int64_t>(res, rows, k);
  select_largest<__nv_bfloat16>(res, in, rows, cols, k, tmp.data_handle(), out_indices);
  const int64_t n = int64_t(rows) * k;
  constexpr int threads = 256;
  bf16_to_float<<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(tmp.data_handle(),
                                                                              out_values, n);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("raft_select_k: bf16_to_float launch: ") + cudaGetErrorString(err));
}

}  // namespace moc::cuda

#endif  // MOCBENCH_HAVE_RAFT

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

void raft_select_k(cudaStream_t, const float*, int, int, int, float*, int*, bool) {
  throw std::invalid_argument("raft_select_k: built without RAFT (run scripts/setup_raft.sh and reconfigure)");
}
void raft_select_k(cudaStream_t, const __nv_bfloat16*, int, int, int, __nv_bfloat16*, int*, bool) {
  throw std::invalid_argument("raft_select_k: built without RAFT (run scripts/setup_raft.sh and reconfigure)");
}

}  // namespace moc::cuda

#else  // MOCBENCH_HAVE_RAFT

#include <raft/core/device_mdspan.hpp>
#include <raft/core/resource/cuda_stream.hpp>
#include <raft/core/resource/device_memory_resource.hpp>
#include <raft/core/resources.hpp>
#include <raft/matrix/select_k.cuh>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace moc::cuda {
namespace {

// Most RAFT's scratch pool may hold (it batches rows to fit); a pool rather than RMM's default resource,
// which would cudaMalloc and cudaFree (synchronously) on every call: unfair to time, and not capturable.
constexpr std::size_t kRaftWorkspaceBytes = std::size_t{2} << 30;

// One raft::resources per host thread (its scratch pool and stream slot are reused); the stream is
// re-pointed on every call. The pool grows on first use and keeps its memory until the thread exits.
raft::resources& resources_for(cudaStream_t stream) {
  thread_local raft::resources res = [] {
    raft::resources r;
    raft::resource::set_workspace_resource(
        r, raft::mr::device_resource{rmm::mr::pool_memory_resource(rmm::mr::get_current_device_resource_ref(), 0,
                                                                   kRaftWorkspaceBytes)},
        kRaftWorkspaceBytes);
    return r;
  }();
  raft::resource::set_cuda_stream(res, ::cuda::stream_ref{stream});
  return res;
}

void check_shape(int rows, int cols, int k) {
  if (rows < 0 || cols <= 0 || k <= 0 || k > cols)
    throw std::invalid_argument("raft_select_k: need rows >= 0 and 0 < k <= cols");
}

template <typename T>
void select_largest(cudaStream_t stream, const T* in, int rows, int cols, int k, T* out_values, int* out_indices,
                    bool sorted) {
  check_shape(rows, cols, k);
  if (rows == 0) return;
  raft::resources& res = resources_for(stream);
  auto in_view = raft::make_device_matrix_view<const T, int64_t, raft::row_major>(in, rows, cols);
  auto val_view = raft::make_device_matrix_view<T, int64_t, raft::row_major>(out_values, rows, k);
  auto idx_view = raft::make_device_matrix_view<int, int64_t, raft::row_major>(out_indices, rows, k);
  raft::matrix::select_k<T, int>(res, in_view, std::nullopt, val_view, idx_view, /*select_min=*/false, sorted);
}

}  // namespace

bool raft_available() { return true; }

void raft_select_k(cudaStream_t stream, const float* in, int rows, int cols, int k, float* out_values,
                   int* out_indices, bool sorted) {
  select_largest<float>(stream, in, rows, cols, k, out_values, out_indices, sorted);
}

void raft_select_k(cudaStream_t stream, const __nv_bfloat16* in, int rows, int cols, int k,
                   __nv_bfloat16* out_values, int* out_indices, bool sorted) {
  select_largest<__nv_bfloat16>(stream, in, rows, cols, k, out_values, out_indices, sorted);
}

}  // namespace moc::cuda

#endif  // MOCBENCH_HAVE_RAFT

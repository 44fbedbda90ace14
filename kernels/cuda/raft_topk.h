// Batched row top-K through RAFT's header-only raft::matrix::select_k (from the PyPI wheels that
// scripts/setup_raft.sh installs into .local/rapids). Plain C++ header: callers need no RAFT or CUDA
// headers (the two CUDA types are declared exactly as the CUDA headers declare them).
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as driver_types.h
struct __nv_bfloat16;                       // cuda_bf16.h

namespace moc::cuda {

// True when the backend was built with RAFT (MOCBENCH_HAVE_RAFT); otherwise raft_select_k throws.
bool raft_available();

// For each of `rows` rows of the row-major [rows, cols] device matrix `in`, the `k` largest values
// (out_values, row-major [rows, k], sorted descending) and their column indices (out_indices, [rows, k]).
// Asynchronous on `stream`; all pointers are device memory. bf16 inputs give float values.
void raft_select_k(cudaStream_t stream, const float* in, int rows, int cols, int k, float* out_values,
                   int* out_indices);
void raft_select_k(cudaStream_t stream, const __nv_bfloat16* in, int rows, int cols, int k,
                   float* out_values, int* out_indices);

}  // namespace moc::cuda

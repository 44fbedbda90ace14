// Batched row top-K through RAFT's header-only raft::matrix::select_k (from the PyPI wheels that
// scripts/setup_raft.sh installs into .local/rapids). Plain C++ header: callers need no RAFT or CUDA
// headers (the two CUDA types are declared exactly as the CUDA headers declare them).
//
// moc_select with TopkBackend::raft (moc_select.cu) calls it unsorted and turns the indices into its ascending
// layout. What differs from our own kernel: ties. RAFT keeps *some* K of the keys equal to the K-th largest
// (which ones depends on its radix passes and thread schedule), not the lowest channels; on tie-free rows
// both give the same set. For the gate rule g goes to RAFT as it is, so a NaN ranks where RAFT's bit order
// puts it (a positive-sign NaN above +inf) and -0 below +0; for silu / abs_silu moc_select hands RAFT f32 keys
// with NaN -> -inf and -0 -> +0, as ours.
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as driver_types.h
struct __nv_bfloat16;                       // cuda_bf16.h

namespace moc::cuda {

// True when the backend was built with RAFT (MOCBENCH_HAVE_RAFT); otherwise raft_select_k throws.
bool raft_available();

// For each of `rows` rows of the row-major [rows, cols] device matrix `in`, the `k` largest values
// (out_values, row-major [rows, k], in the input's type) and their column indices (out_indices, [rows, k]):
// sorted descending when `sorted`, else in RAFT's order. Asynchronous on `stream`; all pointers are device
// memory. RAFT's scratch comes from a pool kept per host thread (see raft_topk.cu), outside the Ops allocator.
void raft_select_k(cudaStream_t stream, const float* in, int rows, int cols, int k, float* out_values,
                   int* out_indices, bool sorted = true);
void raft_select_k(cudaStream_t stream, const __nv_bfloat16* in, int rows, int cols, int k,
                   __nv_bfloat16* out_values, int* out_indices, bool sorted = true);

}  // namespace moc::cuda

// Helpers of the MoC ops shared by moc_select.cu (the selection) and moc_gather.cu (gather / scatter, the sparse
// down projection).
#pragma once
#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace moc::cuda::moc_ops {

// A grid-stride kernel's blocks for total items of threads each (at most 65536 x 8 blocks).
inline int grid_for(long long total, int threads) {
  return static_cast<int>(std::min<long long>((total + threads - 1) / threads, 65536LL * 8));
}

inline void check_idx(const Tensor& idx, const char* op) {
  require(idx.dtype() == DType::i16, op, "channel indices must be i16");
}

}  // namespace moc::cuda::moc_ops

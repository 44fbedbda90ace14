// GPU test helpers: tests named Gpu* get a CudaOps and a CpuOps, and skip cleanly without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "kernels/ops.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace moc::testing {

inline std::unique_ptr<Ops> gpu_ops_or_null() {
#ifdef MOCBENCH_HAVE_CUDA
  if (cuda::gpu_available()) return cuda::make_cuda_ops(0);
#endif
  return nullptr;
}

}  // namespace moc::testing

// In a test body: `MOC_GPU_OR_SKIP(gpu);` declares std::unique_ptr<Ops> gpu or skips the test.
#define MOC_GPU_OR_SKIP(var)                                                     \
  auto var = ::moc::testing::gpu_ops_or_null();                                  \
  if (!var) GTEST_SKIP() << "no CUDA GPU here (the GPU tests run on the device)"

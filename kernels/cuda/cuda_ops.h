// The CUDA backend's entry point. Plain C++: callers (the runner, the tests) need no CUDA headers.
#pragma once
#include <cstddef>
#include <memory>

#include "kernels/ops.h"

namespace moc::cuda {

// True when a CUDA device is visible and usable.
bool gpu_available();
// CudaOps on `device`: caching device allocator behind the category-tagged Allocator (memory_limit_bytes
// > 0 makes allocations beyond it throw OutOfMemory), one non-blocking stream, cuBLASLt GEMMs, bf16 storage
// with fp32 accumulation. Throws std::runtime_error naming the failing CUDA call when no GPU is usable.
std::unique_ptr<Ops> make_cuda_ops(int device = 0, std::size_t memory_limit_bytes = 0);

}  // namespace moc::cuda

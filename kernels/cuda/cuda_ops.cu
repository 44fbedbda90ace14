// STUB (being written): CudaOps.
#include <stdexcept>

#include "kernels/cuda/cuda_ops.h"

namespace moc::cuda {
bool gpu_available() { return false; }
std::unique_ptr<Ops> make_cuda_ops(int, std::size_t) { throw std::runtime_error("CudaOps: not implemented yet"); }
}  // namespace moc::cuda

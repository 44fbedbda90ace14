// Communication between data-parallel ranks (issue 15), backend-neutral: one rank's end of a communicator.
// Implementations: NCCL over the ranks' GPUs (kernels/cuda/nccl.h) and LocalCommunicator (kernels/local_comm.h),
// in-process threads on any backend: the reference the NCCL one is checked against.
#pragma once
#include <vector>

#include "kernels/tensor.h"

namespace moc {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // In place: each tensor (f32 or bf16, the same shapes on every rank, on this rank's device) becomes the
  // mean over the ranks.
  virtual void all_reduce_mean(const std::vector<Tensor*>& tensors) = 0;
  // The mean over the ranks of a host value (every rank gets the same).
  virtual double mean(double value) = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
};

}  // namespace moc

// STUB (being written): causal flash-style attention forward/backward and decode attention over the KV cache.
#include <stdexcept>

#include "kernels/cuda/kernels.h"

namespace moc::cuda {
void attention_forward(Ops&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  throw std::logic_error("cuda attention_forward: not implemented yet");
}
void attention_backward(Ops&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        Tensor&, Tensor&, Tensor&) {
  throw std::logic_error("cuda attention_backward: not implemented yet");
}
void attention_decode(Ops&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  throw std::logic_error("cuda attention_decode: not implemented yet");
}
}  // namespace moc::cuda

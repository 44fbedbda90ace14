// STUB (being written): decode-time FFN kernels (dense GEMVs, gate GEMV fused with the row top-K, sparse up/down).
#include <stdexcept>

#include "kernels/cuda/kernels.h"

namespace moc::cuda {
void ffn_decode(Ops&, const Tensor&, const DecodeFfnWeights&, const MocSelect*, Tensor&, const Tensor*, Tensor*, unsigned) {
  throw std::logic_error("cuda ffn_decode: not implemented yet");
}
}  // namespace moc::cuda

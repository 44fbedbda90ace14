// STUB (being written): row top-K / a:b selection, compact gather/scatter, sparse down projection.
#include <stdexcept>

#include "kernels/cuda/kernels.h"

namespace moc::cuda {
void moc_select(Ops&, const Tensor&, const MocSelect&, Tensor&) { throw std::logic_error("cuda moc_select: not implemented yet"); }
void gather_cols(Ops&, const Tensor&, const Tensor&, Tensor&) { throw std::logic_error("cuda gather_cols: not implemented yet"); }
void scatter_cols(Ops&, const Tensor&, const Tensor&, Tensor&) { throw std::logic_error("cuda scatter_cols: not implemented yet"); }
void sparse_rows_matmul(Ops&, const Tensor&, const Tensor&, const Tensor&, Tensor&, float) {
  throw std::logic_error("cuda sparse_rows_matmul: not implemented yet");
}
void sparse_rows_matmul_backward(Ops&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  throw std::logic_error("cuda sparse_rows_matmul_backward: not implemented yet");
}
}  // namespace moc::cuda

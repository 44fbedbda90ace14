// Internal interface between CudaOps (cuda_ops.cu) and the kernel files of the CUDA backend. Every
// function issues work on ops.stream() (a cudaStream_t), allocates temporaries with
// ops.empty(..., workspace_tag()) and checks its arguments (std::invalid_argument naming the op).
// Float tensors may be f32 or bf16 (computed in fp32); channel indices are i16 read as unsigned.
// The semantics of each function are those of the Ops method of the same name (kernels/ops.h).
#pragma once
#include "kernels/ops.h"

namespace moc::cuda {

// attention.cu
void attention_forward(Ops& ops, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse);
void attention_backward(Ops& ops, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
// attention_decode.cu
void attention_decode(Ops& ops, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                      Tensor& out);

// moc_select.cu
void moc_select(Ops& ops, const Tensor& g, const MocSelect& sel, Tensor& idx);
// moc_gather.cu
void gather_cols(Ops& ops, const Tensor& src, const Tensor& idx, Tensor& out);
void scatter_cols(Ops& ops, const Tensor& compact, const Tensor& idx, Tensor& dense);
void sparse_rows_matmul(Ops& ops, const Tensor& z, const Tensor& idx, const Tensor& w, Tensor& out, float beta);
void sparse_rows_matmul_backward(Ops& ops, const Tensor& dout, const Tensor& z, const Tensor& idx, const Tensor& w,
                                 Tensor& dz, Tensor& dw);

// ffn_decode.cu
void ffn_decode(Ops& ops, const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                const Tensor* force_idx, Tensor* idx_out, unsigned parts);

// cuda_ops.cu: a device region of at least `bytes` that is zero whenever the CudaOps' stream reaches the next
// op -- each op that uses it leaves it zero again (the decode FFN's accumulator and counters) -- or null when
// there is none yet: the first request allocates and zeroes it (not inside a stream capture: then it stays
// null until a later call outside one), and a larger request replaces it (the old region stays allocated until
// the ops go: a captured graph may still use it). Ops on the stream it was zeroed on only.
void* zeroed_scratch(Ops& ops, std::size_t bytes);

}  // namespace moc::cuda

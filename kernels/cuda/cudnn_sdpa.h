// Causal attention forward/backward through cuDNN's fused SDPA (flash attention on tensor cores), for
// the cases cuDNN takes: bf16 q/k/v, head_dim a multiple of 8, 16-byte aligned tensors. attention.cu
// asks here first and runs its own kernels when the answer is no (f32, refused shapes, MOCBENCH_ATTN=own,
// a build without the cuDNN frontend). Same layouts and semantics as Ops::attention_forward/backward:
// q [b, s, h, hd], k/v [b, s, kvh, hd], lse [b, h, s] = the natural-log log-sum-exp of the scaled scores
// of each query row, which is exactly cuDNN's softmax "stats" tensor, so either path's lse feeds either
// path's backward.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace moc::cuda {

struct SdpaShape {
  int b, s, h, kvh, hd;
};

// Whether this build has the cuDNN path (cmake/cudnn_frontend.cmake found the headers and libcudnn).
bool cudnn_sdpa_built();

// Run the op through cuDNN and return true, or do nothing and return false (the caller runs its own
// kernels). Arguments are checked by the caller. The cuDNN graph of each shape is built once and cached;
// a shape cuDNN refuses is remembered (and reported once on stderr) too.
bool cudnn_sdpa_forward(Ops& ops, const SdpaShape& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        Tensor& lse);
bool cudnn_sdpa_backward(Ops& ops, const SdpaShape& d, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);

// How many forward and backward calls cuDNN has run in this process (tests check the dispatch).
struct CudnnSdpaRuns {
  std::int64_t forward = 0, backward = 0;
};
CudnnSdpaRuns cudnn_sdpa_runs();

}  // namespace moc::cuda

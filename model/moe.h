// Mixtral-style mixture of experts in place of a layer's FFN (Jiang et al. 2024, the paper's Table 7):
//   router:  logits = x W_router (f32 [n, E]); each token keeps its top experts_per_token experts (ties ->
//            lower expert index) with weights softmax over the kept logits (Mixtral's renormalized top-2).
//   experts: tokens grouped per expert (a gather of their rows), each expert an Ffn of the model's variant
//            (dense or MoC, a:b, GCP) on its own rows only, then a weighted scatter-add into the output.
// No E-times dense compute: an expert runs on the rows routed to it. Routing is decided on the host from
// the downloaded f32 logits (the group sizes shape the experts' tensors), so a MoE layer cannot run inside
// a captured decode step; training and whole-sequence forwards use it.
//
// Kept for backward (tag activations/ffn/layer), with T = experts_per_token x n routed rows:
//   the routed rows' token ids (i32 [T]) and weights (f32 [T]), the experts' inputs X (T x d) and outputs
//   Y (T x d, for the router's gradient dL/dw = dout . y), and what each expert's Ffn keeps for its rows:
//   stored_bytes() below, exactly what the allocator measures.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/ffn.h"
#include "profiling/ranges.h"

namespace moc {

class MoeFfn {
 public:
  MoeFfn(Ops& ops, const ModelConfig& cfg, int layer);

  // out += MoE(x) for x [n, d]; experts holds cfg.experts weight sets.
  void forward(const Tensor& x, const Tensor& w_router, const std::vector<FfnWeights>& experts, Tensor& out,
               bool keep, RangeSink* ranges = nullptr);
  // dx = dMoE/dx (overwritten); the router's and experts' weight gradients accumulate. Releases what
  // forward kept.
  void backward(const Tensor& x, const Tensor& dout, const Tensor& w_router, const std::vector<FfnWeights>& experts,
                Tensor& dx, Tensor& d_router, const std::vector<FfnGrads>& grads, RangeSink* ranges = nullptr);
  void release();

  // The experts each token was routed to by the last forward: [n][experts_per_token], best first.
  const std::vector<std::int32_t>& routing() const { return route_; }
  // Route tokens to these experts ([n * experts_per_token], distinct per token) instead of the router's
  // top-k, until cleared; their weights still come from the router's logits (so the router's gradient is
  // checked by finite differences with the routing held fixed, e.g. where the top-2 is at a tie).
  void force_routing(std::vector<std::int32_t> experts) { forced_ = std::move(experts); }
  void clear_forced_routing() { forced_.clear(); }
  Ffn& expert(int e) { return experts_[static_cast<std::size_t>(e)]; }

  // Bytes forward(keep = true) keeps for n tokens: independent of how they are routed.
  static std::int64_t stored_bytes(const ModelConfig& cfg, std::int64_t n);

 private:
  void route(const std::vector<float>& logits, std::int64_t n);

  Ops* ops_;
  const ModelConfig* cfg_;
  int layer_;
  std::vector<Ffn> experts_;
  // Host routing of the last forward: per token its experts and weights; per expert its routed rows
  // [offset[e], offset[e+1]) of the grouped order, whose token ids are rows_host_.
  std::vector<std::int32_t> route_, forced_;
  std::vector<float> weight_;
  std::vector<std::int64_t> offset_;
  std::vector<std::int32_t> rows_host_;
  std::vector<std::int32_t> slot_of_row_;  // grouped row -> its slot in route_/weight_
  // Kept between forward and backward.
  Tensor rows_, w_, x_, y_;
};

}  // namespace moc

// LLaMA-style decoder-only transformer written once against the Ops interface:
// embedding -> L x [RMSNorm -> causal MHA/GQA with RoPE -> residual -> RMSNorm -> FFN -> residual]
// -> RMSNorm -> LM head -> cross-entropy. Qwen3-like models (qk_norm) add an RMSNorm on each head's q and
// k before RoPE; Mixtral-like models (experts > 0) replace each FFN by a mixture of experts (model/moe.h).
// Training keeps, per layer, only:
//   attention: Q, K, V (after RoPE), attention output, log-sum-exp (what flash attention keeps); with
//              QK-norm also q and k before the norm and their 1/rms per head
//   norm:      both normalized outputs (inputs of the following projections) and 1/rms
//   residual:  the layer input and the mid-layer residual stream (inputs of the two norms)
//   ffn:       what the FFN variant declares (model/ffn.h)
// and for the head the final residual stream, its normalized output, 1/rms and the f32 logits.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/ffn.h"
#include "model/moe.h"
#include "profiling/ranges.h"

namespace moc {

struct Param {
  std::string name;
  Tensor value;
  Tensor grad;   // allocated by allocate_grads()
  bool decay;    // weight decay applies (matrices, not norm gains)
};

struct KvCache {
  std::vector<Tensor> k, v;  // per layer [batch, kv_heads, max_seq, head_dim]
  int batch = 0;
  int max_seq = 0;
};

class Transformer {
 public:
  Transformer(Ops& ops, const ModelConfig& cfg);  // validates cfg; weights from cfg.seed
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  Ops& ops() { return *ops_; }
  const ModelConfig& config() const { return cfg_; }
  std::vector<Param>& params() { return params_; }
  Param& param(const std::string& name);
  std::int64_t parameter_count() const;
  void allocate_grads();
  void zero_grads();
  void set_ranges(RangeSink* r) { ranges_ = r; }
  // Called with each layer's FFN input (the normalized rows [batch*seq, d]) during a training-layout
  // forward, before the FFN runs (model/activation_analysis.h). Empty: none.
  using FfnProbe = std::function<void(int layer, const Tensor& xn)>;
  void set_ffn_probe(FfnProbe p) { ffn_probe_ = std::move(p); }
  RangeSink* ranges() const { return ranges_; }
  // Data-parallel training: backward() calls this each time a group of gradients is final, with their
  // indices in params(): the LM head and final norm, then each layer from the last, the embedding last
  // (grad_ready_groups(), in that order). The call comes after the ops that produce them were issued.
  using GradsReady = std::function<void(const std::vector<std::size_t>& params)>;
  void set_grads_ready(GradsReady f) { grads_ready_ = std::move(f); }
  const std::vector<std::vector<std::size_t>>& grad_ready_groups() const { return ready_groups_; }

  // Training forward over tokens/targets i32 [batch*seq] (targets < 0 are ignored). Returns the mean
  // loss. With keep_for_backward the activations listed above stay alive until backward().
  double forward(const Tensor& tokens, const Tensor& targets, int batch, int seq, bool keep_for_backward = true);
  // Accumulates into every Param::grad and releases the kept activations.
  void backward();
  void release_activations();

  // Logits [batch*seq, vocab] (f32) of every position, nothing kept.
  Tensor forward_logits(const Tensor& tokens, int batch, int seq);

  // Switches the FFN weights to the decode layout (W_gate and W_up transposed in place, so a channel is a
  // contiguous row: Ops::ffn_decode) and transposes the attention projections and the LM head ([out, in]
  // rows: one output is one contiguous row for the decode GEMVs and Ops::decode_qkv; prefill then passes
  // trans_b to its GEMMs). decode_step runs one op per stage (each a kernel, or a few, in a CUDA graph on
  // the GPU). Inference only from then on: backward() throws. Idempotent.
  void prepare_decode();
  bool decode_layout() const { return decode_layout_; }

  // Decoding. prefill writes K/V of positions 0..seq-1 and returns the prompt logits [batch*seq, vocab].
  KvCache make_kv_cache(int batch, int max_seq);
  Tensor prefill(const Tensor& tokens, int batch, int seq, KvCache& cache);
  // One token per sequence: tokens i32 [batch] at positions pos i32 [batch] -> logits [batch, vocab].
  // Reads only tensors, so it can be captured in an OpGraph and replayed. With greedy_next, also greedy_next[i] =
  // argmax(logits[i]) where the LM head can give it (Ops::lm_head_argmax, the decode layout): returns whether it did.
  bool decode_step(const Tensor& tokens, const Tensor& pos, KvCache& cache, Tensor& logits,
                   Tensor* greedy_next = nullptr);

  // The FFN of a layer (tests inspect MoC selections); unused in a mixture-of-experts model.
  const Ffn& ffn(int layer) const { return ffns_[static_cast<std::size_t>(layer)]; }
  Ffn& ffn(int layer) { return ffns_[static_cast<std::size_t>(layer)]; }
  // The mixture of experts of a layer (experts > 0).
  MoeFfn& moe(int layer) { return moes_.at(static_cast<std::size_t>(layer)); }

 private:
  struct LayerParams {
    Param *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    Param *q_norm = nullptr, *k_norm = nullptr;  // QK-norm gains [head_dim]
    Param* router = nullptr;                     // MoE: [d, experts]
    std::vector<Param*> expert_gate, expert_up, expert_down;  // MoE: per expert (w_gate.. then null)
  };
  struct LayerSaved {
    Tensor h_in, xn1, rstd1, q, k, v, attn, lse, h_mid, xn2, rstd2;
    Tensor q_raw, k_raw, rstd_q, rstd_k;  // QK-norm
  };
  enum class Mode { train, infer, prefill };

  Param& add_param(const std::string& name, const Shape& shape, float init_std, bool decay);
  void init_weights();
  bool decode_layout_ = false;
  bool proj_transposed_ = false;  // wq, wk, wv, wo and the LM head stored [out, in]
  // C (+)= x W (beta 0 or 1) for a projection stored [in, out], or [out, in] once proj_transposed_.
  void proj(const Tensor& x, const Param& w, Tensor& out, float beta = 0.0f);
  // Embedding through the final norm; returns the normalized final hidden state [n, d].
  Tensor run_layers(const Tensor& tokens, int batch, int seq, Mode mode, KvCache* cache);
  Tensor head_logits(const Tensor& xf, bool keep);
  FfnWeights ffn_weights(int l) const;
  std::vector<FfnWeights> expert_weights(int l) const;
  // q and k of n rows projected from xn, QK-normed when the model has it (raw/rstd receive the pre-norm
  // values and 1/rms per head), not yet rotated.
  void project_qk(const Tensor& xn, const LayerParams& lp, Tensor& q2, Tensor& k2, Tensor* q_raw, Tensor* k_raw,
                  Tensor* rstd_q, Tensor* rstd_k);

  Ops* ops_;
  ModelConfig cfg_;
  RangeSink* ranges_ = nullptr;
  FfnProbe ffn_probe_;
  GradsReady grads_ready_;
  std::vector<std::vector<std::size_t>> ready_groups_;
  std::vector<Param> params_;
  Param *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<LayerParams> layers_;
  std::vector<Ffn> ffns_;
  std::vector<MoeFfn> moes_;

  // Kept between forward and backward.
  std::vector<LayerSaved> saved_;
  Tensor tokens_, targets_, h_final_, xf_, rstdf_, logits_;
  int batch_ = 0, seq_ = 0;
  std::int64_t valid_targets_ = 0;
};

}  // namespace moc

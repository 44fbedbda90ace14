#include "model/memory_model.h"

#include "model/ffn.h"
#include "model/moe.h"

namespace moc {

double paper_ffn_bsd(const ModelConfig& c) {
  const double d = c.hidden, F = c.d_ffn, K = c.kept_channels();
  double elems;  // per token
  if (c.ffn.kind == FfnKind::dense) elems = (c.ffn.gcp ? 2 * F : 4 * F) + d;  // G,U(,S,Z) + D
  else elems = (c.ffn.gcp ? 3 * K : 5 * K) + d;  // G⊙M, U⊙M(, S⊙M, Z⊙M), M, + D
  return elems / d;
}

ActivationBreakdown paper_activation_model(const ModelConfig& c, std::int64_t b, std::int64_t s, double bpe) {
  const double bs = static_cast<double>(b) * static_cast<double>(s), d = c.hidden;
  ActivationBreakdown r;
  r.layers = c.layers;
  r.attention = 5 * bs * d * bpe;
  // A mixture of experts (no formula in the paper): each token's FFN activations in each of its experts.
  r.ffn = paper_ffn_bsd(c) * bs * d * bpe * (c.moe() ? c.experts_per_token : 1);
  r.norm = 2 * bs * d * bpe;
  r.residual = 2 * bs * d * bpe;
  r.head = bs * c.vocab * 4.0 + bs * d * bpe;
  return r;
}

ActivationBreakdown engine_activation_model(const ModelConfig& c, std::int64_t b, std::int64_t s) {
  const double n = static_cast<double>(b) * static_cast<double>(s), d = c.hidden;
  const double act = static_cast<double>(dtype_bytes(c.act_dtype));
  const double kvd = static_cast<double>(c.kv_heads) * c.head_dim();
  ActivationBreakdown r;
  r.layers = c.layers;
  r.attention = n * (2 * d + 2 * kvd) * act + static_cast<double>(b) * c.heads * static_cast<double>(s) * 4.0;
  if (c.qk_norm) r.attention += n * (d + kvd) * act + n * (c.heads + c.kv_heads) * 4.0;  // q, k before the norm; 1/rms
  r.ffn = static_cast<double>(c.moe() ? MoeFfn::stored_bytes(c, b * s) : Ffn::stored_bytes(c, b * s));
  r.norm = 2 * n * 4.0;  // 1/rms of both norms (the normalized inputs are recomputed in backward)
  r.residual = 2 * n * d * act;
  r.head = 2 * n * d * act + n * 4.0 + n * c.vocab * act;  // final residual, its norm, 1/rms, logits
  return r;
}

double parameter_count(const ModelConfig& c) {
  const double d = c.hidden, kvd = static_cast<double>(c.kv_heads) * c.head_dim();
  const double layer = 2 * d * d + 2 * d * kvd + 3 * d * c.d_ffn * c.ffn_blocks() + d * c.experts + 2 * d +
                       (c.qk_norm ? 2.0 * c.head_dim() : 0.0);
  return c.layers * layer + 2 * d * c.vocab + d;  // + embedding, LM head, final norm
}

double training_lower_bound_bytes(const ModelConfig& c, std::int64_t b, std::int64_t s) {
  const double d = c.hidden, kvd = static_cast<double>(c.kv_heads) * c.head_dim();
  const double layer_params = 2 * d * d + 2 * d * kvd + 3 * d * c.d_ffn * c.ffn_blocks() + d * c.experts;
  const double weights = static_cast<double>(c.layers) * layer_params * static_cast<double>(dtype_bytes(c.param_dtype));
  return 2 * weights + engine_activation_model(c, b, s).total();
}

}  // namespace moc

// Activation-memory model (paper §2 and Table 2, SPEC §3) beside the engine's own accounting.
//   paper:  per layer attention 5bsd, FFN (4 d_ffn + d) bs [+GCP: 2 d_ffn + d; MoC: 5K + d; MoC+GCP: 3K + d,
//           i.e. bs d_ffn + bsd and 0.6 bs d_ffn + bsd at K = 0.2 d_ffn], RMSNorm 2bsd, residual 2bsd,
//           in elements of bytes_per_element (2 for bf16). The paper gives no formula for the LM head; we
//           read its 2.16G as f32 logits (4 bs V bytes) plus the final norm output (bsd elements).
//   engine: exactly what mocbench keeps (model/transformer.h): the paper's sets without the module
//           outputs O and D (no backward reads them: the residual stream after the add is kept instead)
//           and without the RMSNorm outputs (recomputed in backward from the kept residual and 1/rms),
//           plus the small f32 side tensors (log-sum-exp, 1/rms), the i16 channel indices, and the LM head's
//           logits in the activation dtype.
//   Qwen3-like QK-norm adds q and k before the norm and their 1/rms per head to attention (engine only:
//   the paper gives no formula); a mixture of experts keeps, per token, experts_per_token rows of expert
//   input, output, token id, weight and FFN activations (model/moe.h); the paper model counts its FFN term
//   experts_per_token times.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"

namespace moc {

struct ActivationBreakdown {
  // Bytes per layer.
  double attention = 0, ffn = 0, norm = 0, residual = 0;
  // Bytes once per model (final norm, logits).
  double head = 0;
  int layers = 0;
  double per_layer() const { return attention + ffn + norm + residual; }
  double others_per_layer() const { return norm + residual; }
  double total() const { return per_layer() * layers + head; }
};

ActivationBreakdown paper_activation_model(const ModelConfig& cfg, std::int64_t batch, std::int64_t seq,
                                           double bytes_per_element = 2.0);
ActivationBreakdown engine_activation_model(const ModelConfig& cfg, std::int64_t batch, std::int64_t seq);

// A lower bound of what a training step of this model holds at its peak: the layers' weights and their
// gradients (embedding and head left out, so a tied or untied head cannot make it an overestimate) plus
// the activations the engine keeps (engine_activation_model). A point whose bound exceeds the memory
// available cannot fit, whatever else it allocates: the runner refuses it before allocating anything.
double training_lower_bound_bytes(const ModelConfig& cfg, std::int64_t batch, std::int64_t seq);

// Parameters of the model as the engine builds it (the FFN's logical d_ffn, not its zero padding), from the
// configuration alone: Transformer::parameter_count() without allocating.
double parameter_count(const ModelConfig& cfg);

// The paper's FFN activation in units of bsd (11.67 / 6.33 / 3.67 / 2.6 at d_ffn = 8d/3, K = 0.2 d_ffn).
double paper_ffn_bsd(const ModelConfig& cfg);

}  // namespace moc

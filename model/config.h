// Model configuration: presets (SPEC §2), overrides and validation with actionable messages.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace moc {

enum class FfnKind : std::uint8_t { dense, moc };

struct FfnConfig {
  FfnKind kind = FfnKind::dense;
  int k = 0;             // MoC: channels kept per row (row top-K)
  int group_a = 0;       // MoC a:b grouped mode when group_b > 0 (k is then derived)
  int group_b = 0;
  bool gcp = false;      // recompute S and Z in backward instead of storing them
  SelectRule rule = SelectRule::gate;
  TopkBackend topk_backend = TopkBackend::own;
  MocSelect selection() const { return {k, group_a, group_b, rule, topk_backend}; }
};

struct ModelConfig {
  std::string preset = "custom";
  int vocab = 32000;
  int hidden = 512;
  int d_ffn = 1376;
  int heads = 8;
  int kv_heads = 8;
  int layers = 8;
  int seq_len = 256;
  float rope_theta = 10000.0f;
  // Qwen3-style attention: RMSNorm (one gain of head_dim shared by the heads) on every head's q and k,
  // after the projections and before RoPE.
  bool qk_norm = false;
  // Mixtral-style mixture of experts in place of each layer's FFN when experts > 0: a router (softmax
  // over the experts' logits, the top experts_per_token kept and their weights renormalized) and
  // `experts` FFNs of d_ffn channels, each of the `ffn` variant (dense or MoC, a:b, GCP).
  int experts = 0;
  int experts_per_token = 2;
  float norm_eps = 1e-6f;
  float init_std = 0.02f;
  std::uint64_t seed = 1;
  DType param_dtype = DType::f32;  // weights
  DType act_dtype = DType::f32;    // activations (logits are always f32)
  FfnConfig ffn;

  int head_dim() const { return hidden / heads; }
  bool moe() const { return experts > 0; }
  // FFN blocks per layer: the experts, or the one FFN.
  int ffn_blocks() const { return experts > 0 ? experts : 1; }
  // Columns the FFN's weights and [rows, d_ffn] activations are stored with: d_ffn rounded up to a multiple
  // of 8, so every row starts on a 16-byte boundary (cuBLASLt's fast GEMM kernels need aligned leading
  // dimensions; an odd d_ffn such as 5461 would otherwise fall onto slow ones). The extra channels have
  // zero weights, so their activations and gradients are zero, and a MoC selection never picks them.
  int ffn_cols() const { return (d_ffn + 7) / 8 * 8; }
  // Channels each row keeps in the FFN (d_ffn for dense).
  int kept_channels() const;
  // Throws ConfigError naming the field and what to change.
  void validate() const;
  std::string describe() const;  // one line: preset, dims, ffn variant
  std::string ffn_name() const;  // dense | dense+gcp | moc | moc+gcp | moc_2:8 | ...
};

class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

std::vector<std::string> preset_names();
ModelConfig preset(std::string_view name);  // throws ConfigError listing the presets

// key=value overrides, the keys are the field names above plus ffn, k, gcp, select, dtype.
// ffn accepts dense | moc | moc_a:b (e.g. moc_2:8); k accepts an integer or a fraction of d_ffn ("0.2").
void apply_override(ModelConfig& cfg, std::string_view key, std::string_view value);
std::vector<std::string> override_keys();

SelectRule parse_select_rule(std::string_view s);
std::string_view select_rule_name(SelectRule r);

}  // namespace moc

#include "db/metrics.h"

#include <cctype>

namespace moc::metrics {

namespace {
constexpr auto L = Direction::lower;
constexpr auto H = Direction::higher;
constexpr auto N = Direction::neither;
// The timed median's relative noise; metrics computed from the same repetitions (rates, % of floor, the
// phase and range times of those steps) inherit it.
constexpr std::string_view kNoise = "noise";

// Exact names, grouped by who writes them (app/harness/point_bench.cpp unless said).
const std::vector<MetricInfo> kRegistry = {
    // Every mode: the timed repetitions (app/harness/point_bench.cpp, measured_point).
    {"median_ms", "ms", L, kNoise, "median time"},
    {"mean_ms", "ms", L, kNoise, "mean time"},
    {"min_ms", "ms", L, kNoise, "fastest repetition"},
    {"max_ms", "ms", L, kNoise, "slowest repetition"},
    {"stddev_ms", "ms", N, "", "standard deviation"},
    {"reps", "count", N, "", "repetitions"},
    {"noise", "fraction", N, "", "relative noise of the median"},
    {"noise_met", "flag", N, "", "noise target met"},
    {"peak_bytes", "bytes", L, "", "peak memory"},
    {"peak_activation_bytes", "bytes", L, "", "peak activation memory"},
    {"gate_ms", "ms", L, kNoise, "gate time"},
    {"up_down_ms", "ms", L, kNoise, "up + down projection time"},
    {"topk_ms", "ms", L, kNoise, "top-K time"},
    // train
    {"step_ms", "ms", L, kNoise, "training step"},
    {"tokens_per_s", "tokens/s", H, kNoise, "throughput"},
    {"model_flops_per_token", "FLOP/token", N, "", "model FLOPs per token"},
    {"model_tflops", "TFLOP/s", H, kNoise, "model TFLOP/s"},
    {"mfu_pct", "%", H, kNoise, "model FLOPs utilisation"},
    {"loss_first", "nats", N, "", "first step's loss"},
    {"loss_last", "nats", L, "", "last step's loss"},
    {"comm_ms", "ms", L, kNoise, "communication per step"},
    {"comm_exposed_ms", "ms", L, kNoise, "communication not hidden by backward"},
    {"comm_bytes_per_step", "bytes", N, "", "bytes all-reduced per step"},
    {"comm_busbw_GBps", "GB/s", H, kNoise, "all-reduce bus bandwidth"},
    {"grad_buckets", "count", N, "", "gradient buckets"},
    {"act_total_bytes", "bytes", L, "", "live activations"},
    {"activation_model_bytes", "bytes", L, "", "activations (memory model)"},
    {"activation_paper_bytes", "bytes", L, "", "activations (paper's model)"},
    // Data-parallel training (app/harness/dist_launch.cpp, app/harness/runner.cpp).
    {"tokens_per_s_per_gpu", "tokens/s", H, kNoise, "throughput per GPU"},
    {"peak_bytes_max", "bytes", L, "", "peak memory of the fullest rank"},
    {"ranks", "count", N, "", "ranks"},
    {"scaling_efficiency_pct", "%", H, kNoise, "scaling efficiency"},
    // decode
    {"ms_per_token", "ms", L, kNoise, "time per token"},
    {"prefill_ms", "ms", L, "prefill_noise", "prefill"},
    {"prefill_noise", "fraction", N, "", "relative noise of the prefill"},
    {"prefill_reps", "count", N, "", "prefill repetitions"},
    {"union_channels", "channels", N, "", "channels read per step"},
    {"kept_channels", "channels", N, "", "channels kept per token"},
    // ffn-train
    {"fwd_bwd_ms", "ms", L, kNoise, "forward + backward"},
    {"forward_ms", "ms", L, kNoise, "forward"},
    {"backward_ms", "ms", L, kNoise, "backward"},
    {"ffn_activation_bytes", "bytes", L, "", "stored FFN activations"},
    // ffn-decode: the layer against the bytes it must read (the floor is a reference, not a result).
    {"latency_us", "us", L, kNoise, "latency"},
    {"floor_bytes", "bytes", L, "", "bytes the layer must read"},
    {"achieved_GBps", "GB/s", H, kNoise, "achieved bandwidth"},
    {"copy_GBps", "GB/s", N, "", "device copy bandwidth"},
    {"pct_of_floor", "%", H, kNoise, "% of the byte floor"},
    {"floor_us", "us", N, "", "byte floor time"},
    {"gate_us", "us", L, kNoise, "gate"},
    {"topk_us", "us", L, kNoise, "top-K"},
    {"up_down_us", "us", L, kNoise, "up + down projections (added to the call)"},
    {"other_us", "us", L, kNoise, "other"},
    {"up_down_alone_us", "us", L, kNoise, "up + down projections timed alone"},
    {"unfused_us", "us", L, kNoise, "unfused latency"},
    {"weight_copies", "count", N, "", "weight copies rotated"},
    {"calls_per_replay", "count", N, "", "calls per timed replay"},
    // topk
    {"rows_per_s", "rows/s", H, kNoise, "rows per second"},
    // Profiled points: the profile pass's own numbers, not the timed median (no noise estimate, no verdict).
    {"profile_steps", "count", N, "", "profiled steps"},
    {"profile_kernels", "count", N, "", "kernels per step"},
    {"profile_gpu_busy_ms", "ms", N, "", "device busy per step"},
    {"profile_inclusive_sum_ms", "ms", N, "", "kernel times summed per step"},
    {"profile_untraced_ms", "ms", N, "", "step without tracing"},
    {"profile_traced_ms", "ms", N, "", "step with tracing"},
    {"profile_overhead_pct", "%", N, "", "tracing overhead"},
    {"profile_dropped_records", "count", N, "", "dropped trace records"},
    {"profile_stamped_ms", "ms", N, "", "step with stage stamps"},
    {"profile_unstamped_ms", "ms", N, "", "step without stage stamps"},
    {"profile_stamp_overhead_pct", "%", N, "", "stage stamp overhead"},
    {"profile_stamped_kernel_ms", "ms", N, "", "stamped kernels per step"},
    {"profile_stage_rep_ms", "ms", N, "", "stamped step the stages come from"},
    {"profile_stages", "count", N, "", "stages per step"},
    {"profile_dropped_stamps", "count", N, "", "dropped stage stamps"},
    // Training on text (app/modes/text_train.cpp).
    {"train_s", "s", L, kNoise, "training time"},
    {"steps", "count", N, "", "steps"},
    {"start_step", "count", N, "", "first step (resumed)"},
    {"tokens_seen", "tokens", N, "", "tokens seen"},
    {"epochs", "count", N, "", "epochs"},
    {"val_loss_initial", "nats", N, "", "validation loss before training"},
    {"val_loss", "nats", L, "", "validation loss"},
    {"val_ppl", "perplexity", L, "", "validation perplexity"},
    {"val_ppl_min", "perplexity", L, "", "best validation perplexity"},
    {"val_ppl_min_step", "count", N, "", "step of the best perplexity"},
    {"eval_loss", "nats", L, "", "loss on the evaluated text"},
    {"eval_ppl", "perplexity", L, "", "perplexity on the evaluated text"},
    {"eval_tokens", "tokens", N, "", "tokens evaluated"},
    {"eval_windows", "count", N, "", "windows evaluated"},
    {"eval_ms", "ms", L, kNoise, "evaluation pass"},
    {"val_tokens_evaluated", "tokens", N, "", "validation tokens"},
    {"data_train_tokens", "tokens", N, "", "training tokens"},
    {"data_val_tokens", "tokens", N, "", "validation tokens"},
    {"data_train_docs", "count", N, "", "training documents"},
    {"data_val_docs", "count", N, "", "validation documents"},
    {"tokenizer_pieces", "count", N, "", "tokenizer vocabulary"},
    {"data_prepare_s", "s", N, "", "data preparation"},
    {"analysis_kept", "channels", N, "", "channels kept (gate analysis)"},
    {"analysis_tokens", "tokens", N, "", "tokens analysed"},
    {"kept_silu_mass", "fraction", N, "", "SiLU mass kept"},
    {"overlap_mean", "fraction", N, "", "mean selection overlap"},
    // Patterns, tried in this order after the exact names.
    {"phase_*_ms", "ms", L, kNoise, "phase time"},
    {"peak_*_bytes", "bytes", L, "", "peak memory of a category"},
    {"act_*_bytes", "bytes", L, "", "live activations of a module"},
    {"gate_threshold_pre.L*", "value", N, "", "gate threshold before training, per layer"},
    {"gate_threshold_post.L*", "value", N, "", "gate threshold after training, per layer"},
    {"overlap_mean.L*", "fraction", N, "", "mean selection overlap, per layer"},
    {"union_independent_b*", "channels", N, "", "channels of a batch if independent"},
    {"union_b*", "channels", N, "", "channels read by a batch"},
};

// '*' matches one or more characters (at most one '*' per pattern, as the table has).
bool matches(std::string_view pattern, std::string_view name) {
  const auto star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == name;
  const auto head = pattern.substr(0, star), tail = pattern.substr(star + 1);
  return name.size() > head.size() + tail.size() && name.starts_with(head) && name.ends_with(tail);
}

// "rank3_step_ms" -> "step_ms"; anything else unchanged.
std::string_view without_rank(std::string_view name) {
  if (!name.starts_with("rank")) return name;
  std::size_t i = 4;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 4 || i >= name.size() || name[i] != '_') return name;
  return name.substr(i + 1);
}
}  // namespace

const std::vector<MetricInfo>& registry() { return kRegistry; }

const MetricInfo* find(std::string_view name) {
  name = without_rank(name);
  for (const auto& m : kRegistry)
    if (m.pattern == name) return &m;
  for (const auto& m : kRegistry)
    if (m.pattern.find('*') != std::string_view::npos && matches(m.pattern, name)) return &m;
  return nullptr;
}

Direction direction(std::string_view name) {
  const auto* m = find(name);
  return m ? m->direction : Direction::neither;
}

bool noisy(std::string_view name) { return !noise_metric(name).empty(); }

std::string_view noise_metric(std::string_view name) {
  const auto* m = find(name);
  return m ? m->noise : std::string_view();
}

std::string_view unit(std::string_view name) {
  const auto* m = find(name);
  return m ? m->unit : std::string_view();
}

std::string label(std::string_view name) {
  const auto* m = find(name);
  if (!m) return std::string(name);
  const auto bare = without_rank(name);
  const std::string own(m->label);
  if (bare.size() == name.size()) return own;
  return std::string(name.substr(0, name.size() - bare.size() - 1)) + ": " + own;  // "rank1: training step"
}

bool is_bytes(std::string_view name) { return unit(name) == "bytes"; }

const std::vector<std::string>& default_compare_metrics() {
  // step_ms and fwd_bwd_ms are not listed: in their modes they are median_ms, which is.
  static const std::vector<std::string> k = {"latency_us",  "ms_per_token",  "median_ms",  "tokens_per_s",
                                             "rows_per_s",  "achieved_GBps", "pct_of_floor", "mfu_pct",
                                             "eval_ppl",    "peak_bytes",    "peak_activation_bytes"};
  return k;
}

}  // namespace moc::metrics

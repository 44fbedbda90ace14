// eval: a model's next-token loss and perplexity on text (issue #29's `mocbench eval` as a scenario mode, so a
// sweep over K stores perplexity per point). The model: [model] weights (a published checkpoint -- GGUF or a
// Hugging Face folder -- or mocbench's own), or random weights; with `ffn = "moc"` and `k` on a dense
// checkpoint, training-free MoC. The text: [data] tokens (a file of the model's token ids), or [data] corpus's
// validation split (mocbench's own tokenizer: for checkpoints trained here), or random ids (timing only). One
// repetition is one pass over the windows: `seq` inputs each, `batch` windows per forward. With [data]
// analyze (the default) a MoC point also stores the gate analysis of its selection on the first windows:
// per-layer G / SiLU(G) histograms with the top-K threshold, the overlap of two tokens' selections, the
// unions of B tokens (model/activation_analysis.h), as text training stores them.
#include <cmath>
#include <memory>

#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "app/modes/text_train.h"
#include "model/activation_analysis.h"
#include "model/checkpoint.h"
#include "model/evaluate.h"
#include "model/token_ids.h"
#include "model/transformer.h"

namespace moc {

namespace {

// A file of token ids (model/token_ids.h), each checked against the vocabulary.
std::vector<std::int32_t> read_token_file(const std::string& path, int vocab) {
  std::vector<std::int32_t> ids;
  try {
    ids = read_token_ids(path);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("[data] tokens: ") + e.what());
  }
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab)
      throw ConfigError("[data] tokens: id " + std::to_string(ids[i]) + " (id " + std::to_string(i) + " of " + path +
                        ") is outside the model's " + std::to_string(vocab) + " ids");
  return ids;
}

// Windows over given ids (a token file, or random ids), as `mocbench eval --window seq + 1` cuts them.
struct IdWindows final : EvalWindows {
  IdWindows(std::vector<std::int32_t> v, int s) : ids(std::move(v)), seq(s) {}
  std::int64_t windows() const override { return id_windows(ids.size(), seq); }
  void window(std::int64_t w, std::vector<std::int32_t>& in, std::vector<std::int32_t>& out) const override {
    id_window(ids, seq, w, in, out);
  }
  std::vector<std::int32_t> ids;
  int seq;
};

std::unique_ptr<EvalWindows> eval_text(PointState& st) {
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  std::unique_ptr<EvalWindows> w;
  if (!spec.data.tokens.empty()) w = std::make_unique<IdWindows>(read_token_file(spec.data.tokens, cfg.vocab), spec.seq);
  else if (spec.data.active()) w = validation_windows(spec.data, cfg.vocab, spec.seq);
  else  // no text: random ids, one batch of windows (a timing of the forward pass, not a perplexity)
    w = std::make_unique<IdWindows>(
        random_ids(st.rng(), static_cast<std::size_t>(spec.batch) * (static_cast<std::size_t>(spec.seq) + 1), cfg.vocab),
        spec.seq);
  if (w->windows() < 1)
    throw ConfigError("eval: the text holds no window of " + std::to_string(spec.seq) + " + 1 tokens; lower seq");
  return w;
}

// The selection's gate analysis on up to 8 windows (different parts of the text), as text training stores it.
void gate_analysis(PointState& st, Transformer& model, const EvalWindows& text) {
  const PointSpec& spec = st.spec();
  const std::int64_t nb = std::min<std::int64_t>(8, text.windows());
  if (nb < 2) return;  // two sequences at least: the overlap is between tokens of different sequences
  std::vector<std::int32_t> ids, unused;
  for (std::int64_t b = 0; b < nb; ++b) text.window(text.windows() * b / nb, ids, unused);
  const GateAnalysis ga = analyze_gates(model, ids, static_cast<int>(nb), spec.seq, 4, spec.data.seed + 1);
  store_gate_analysis(ga, st.outcome());
}

void run_eval(PointState& st) {
  Ops& ops = st.ops();
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  const std::unique_ptr<EvalWindows> text = eval_text(st);
  const std::int64_t windows =
      spec.data.eval_windows > 0 ? std::min<std::int64_t>(spec.data.eval_windows, text->windows()) : text->windows();
  Transformer model(ops, cfg);
  if (!spec.weights.empty()) load_weights(spec.weights, model);
  model.set_ranges(st.ranges());
  double loss = 0;
  const std::function<double()> sample = [&] {
    return st.repetition([&] {
      loss = mean_window_loss(model, windows, spec.batch, spec.seq,
                              [&](std::int64_t w, auto& in, auto& out) { text->window(w, in, out); },
                              [&] { st.check_stop(); });
    });
  };
  const Stats& stats = st.exec(sample);
  const double tokens = static_cast<double>(windows) * spec.seq;
  // A forward pass is a third of a training step's FLOPs (backward: two matrix products per forward one).
  st.set_cost({.flops = train_flops_per_token(cfg, spec.seq) / 3.0 * tokens});
  st.metric("eval_loss", loss);
  st.metric("eval_ppl", std::exp(loss));
  st.metric("eval_tokens", tokens);
  st.metric("eval_windows", static_cast<double>(windows));
  st.metric("eval_ms", stats.median_s * 1e3);
  st.metric("tokens_per_s", tokens / stats.median_s);
  if (!spec.data.tokens.empty() || spec.data.active())
    if (spec.data.analyze && cfg.ffn.kind == FfnKind::moc && !cfg.moe()) gate_analysis(st, model, *text);
}

}  // namespace

extern const Mode kEvalMode;
const Mode kEvalMode{
    .name = "eval",
    .needs = "the model (random, or [model] weights: a GGUF file, a Hugging Face folder or a mocbench checkpoint); "
             "the text ([data] tokens, or [data] corpus's validation split; else random ids)",
    .repetition = "the next-token loss over the text's windows: seq tokens each, batch windows per forward",
    .flush_when_cold = true,
    .refuse = nullptr,
    .run = run_eval,
};

}  // namespace moc

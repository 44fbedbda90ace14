#include "app/modes/text_train.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "app/harness/point_bench.h"
#include "app/modes/mode_util.h"
#include "model/activation_analysis.h"
#include "model/checkpoint.h"
#include "model/data/token_data.h"
#include "model/evaluate.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace moc {

namespace {

// prepare_data reads and hashes every document of the corpus and loads the tokenizer to find (or build) its
// cache entry; every point of a sweep with the same [data] settings gets the same entry, so it is looked up
// once per process.
data::PreparedData prepare(const TextData& d, int vocab) {
  static std::mutex mu;
  static std::map<std::string, data::PreparedData> done;
  std::ostringstream key;
  key << d.corpus << '\n' << vocab << '\n' << d.val_fraction << '\n' << d.seed << '\n' << d.cache;
  std::lock_guard lk(mu);
  if (const auto it = done.find(key.str()); it != done.end()) return it->second;
  data::DataSpec ds;
  ds.corpus = d.corpus;
  ds.vocab = vocab;
  ds.val_fraction = d.val_fraction;
  ds.seed = d.seed;
  ds.cache_root = d.cache;
  try {
    return done.emplace(key.str(), data::prepare_data(ds, &std::cerr)).first->second;
  } catch (const data::DataError& e) {
    throw ConfigError(std::string("[data] ") + e.what());
  }
}

}  // namespace

namespace {
struct CorpusWindows final : EvalWindows {
  CorpusWindows(const data::PreparedData& prep, int seq, std::uint64_t seed)
      : file(prep.val_tokens), loader(file, seq, seed) {}
  std::int64_t windows() const override { return loader.windows(); }
  void window(std::int64_t w, std::vector<std::int32_t>& in, std::vector<std::int32_t>& out) const override {
    loader.window(w, in, out);
  }
  data::TokenFile file;
  data::WindowLoader loader;
};
}  // namespace

std::unique_ptr<EvalWindows> validation_windows(const TextData& d, int vocab, int seq) {
  return std::make_unique<CorpusWindows>(prepare(d, vocab), seq, d.seed);
}

std::vector<std::int32_t> validation_prompts(const TextData& d, int vocab, int batch, int prompt, int follow) {
  const auto prep = prepare(d, vocab);
  const data::TokenFile val(prep.val_tokens);
  data::WindowLoader loader(val, prompt + follow, d.seed);
  if (loader.windows() < batch)
    throw ConfigError("[data] the validation split holds " + std::to_string(loader.windows()) + " windows of " +
                      std::to_string(prompt + follow) + " tokens, fewer than batch " + std::to_string(batch) +
                      "; raise val_fraction or lower prompt");
  // Windows spread over the split, so rows come from different documents where there are enough; a
  // window's inputs are its prompt + follow tokens.
  std::vector<std::int32_t> ids, unused;
  for (int b = 0; b < batch; ++b) loader.window(loader.windows() * b / batch, ids, unused);
  return ids;
}

namespace {

// The corpus as it was prepared (tokenized once, cached).
void add_data_metrics(const data::PreparedData& prep, double prep_s, std::vector<std::pair<std::string, double>>& m) {
  m.push_back({"data_train_tokens", static_cast<double>(prep.train_token_count)});
  m.push_back({"data_val_tokens", static_cast<double>(prep.val_token_count)});
  m.push_back({"data_train_docs", prep.train_docs});
  m.push_back({"data_val_docs", prep.val_docs});
  m.push_back({"tokenizer_pieces", prep.tokenizer_vocab});
  m.push_back({"data_prepare_s", prep_s});
}

// The trained gates on validation text (model/activation_analysis.h): per layer the pre- and post-SiLU
// histograms with the top-K threshold, the overlap of two tokens' selections, the unions of B tokens.
void add_gate_analysis(Transformer& model, data::WindowLoader& val, const PointSpec& spec, PointOutcome& out) {
  std::vector<std::int32_t> htok, htgt;
  // The trained gates on validation text: up to 8 windows (different documents where the split has them).
  const int nb = static_cast<int>(std::min<std::int64_t>(8, val.windows()));
  for (int b = 0; b < nb; ++b) val.window(val.windows() * b / nb, htok, htgt);
  store_gate_analysis(analyze_gates(model, htok, nb, spec.seq, 4, spec.data.seed + 1), out);
}

// The optimizer schedule of [data]: AdamW with a linear warm-up, then cosine decay.
TrainConfig text_train_config(const TextData& d, const PointSpec& spec, const ModelConfig& cfg) {
  TrainConfig tc;
  tc.lr = static_cast<float>(d.lr);
  tc.total_steps = d.steps;
  tc.warmup_steps = d.warmup >= 0 ? d.warmup : std::max(1, d.steps / 20);
  tc.min_lr_ratio = static_cast<float>(d.min_lr_ratio);
  tc.weight_decay = static_cast<float>(d.weight_decay);
  tc.fp32_master = spec.fp32_master && cfg.param_dtype == DType::bf16;
  return tc;
}
// The steps this run trains, [start, end): from the checkpoint's step when resuming (weights, optimizer state
// and step count from it; batch i of the loader is a function of i alone, so the run goes on with the batches
// it would have seen) to stop_at or steps.
std::pair<int, int> text_steps(const PointSpec& spec, Transformer& model, Trainer& trainer) {
  const TextData& d = spec.data;
  if (d.resume) {
    if (spec.weights.empty()) throw ConfigError("[data] resume = true needs [model] weights: the checkpoint to resume");
    load_checkpoint(spec.weights, model, trainer);
    if (trainer.steps_done() >= d.steps)
      throw ConfigError("[data] resume: the checkpoint is at step " + std::to_string(trainer.steps_done()) +
                        ", not below steps = " + std::to_string(d.steps) + "; raise steps");
  }
  const int start_step = trainer.steps_done();
  const int end_step = d.stop_at > 0 ? std::min(d.stop_at, d.steps) : d.steps;
  if (end_step <= start_step)
    throw ConfigError("[data] stop_at = " + std::to_string(d.stop_at) + " is not after the checkpoint's step " +
                      std::to_string(start_step));
  return {start_step, end_step};
}

// [data] save: weights and optimizer state, its folder made when missing.
void save_text_checkpoint(const std::string& path, Transformer& model, Trainer& trainer) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  save_checkpoint(path, model, &trainer);
}

}  // namespace

void run_text_train(Ops& ops, const PointSpec& spec, const ModelConfig& cfg, PointOutcome& out) {
  const TextData& d = spec.data;
  const auto t_prep = std::chrono::steady_clock::now();
  const auto prep = prepare(d, cfg.vocab);
  const double prep_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prep).count();
  const data::TokenFile train_file(prep.train_tokens), val_file(prep.val_tokens);
  data::WindowLoader train(train_file, spec.seq, d.seed), val(val_file, spec.seq, d.seed);

  Transformer model(ops, cfg);
  if (!spec.weights.empty() && !d.resume) load_weights(spec.weights, model);
  Trainer trainer(model, text_train_config(d, spec, cfg));
  const auto [start_step, end_step] = text_steps(spec, model, trainer);

  const std::int64_t n = static_cast<std::int64_t>(spec.batch) * spec.seq;
  Tensor tok = ops.empty({n}, DType::i32, workspace_tag()), tgt = ops.empty({n}, DType::i32, workspace_tag());
  std::vector<std::int32_t> htok, htgt;
  auto stop = [&] {
    if (spec.stop && spec.stop->load()) throw Interrupted();
  };

  // Mean loss over the validation windows (every token weighs the same), in batches of the point's batch.
  const std::int64_t eval_windows = d.eval_windows > 0 ? std::min<std::int64_t>(d.eval_windows, val.windows()) : val.windows();
  auto evaluate = [&] {
    return mean_window_loss(model, eval_windows, spec.batch, spec.seq,
                            [&](std::int64_t w, auto& in, auto& targets) { val.window(w, in, targets); }, stop);
  };

  Series s_loss{"train_loss", {}, {}}, s_lr{"lr", {}, {}}, s_tokens{"tokens_seen", {}, {}};
  Series s_vloss{"val_loss", {}, {}}, s_vppl{"val_ppl", {}, {}};
  auto record_eval = [&](int step) {
    const double vl = evaluate();
    s_vloss.x.push_back(step);
    s_vloss.y.push_back(vl);
    s_vppl.x.push_back(step);
    s_vppl.y.push_back(std::exp(vl));
    return vl;
  };
  const int every = d.eval_every > 0 ? d.eval_every : std::max(1, d.steps / 10);
  const double val_first = record_eval(start_step);
  std::vector<double> step_s;
  for (int i = start_step; i < end_step; ++i) {
    stop();
    train.batch(trainer.steps_done(), spec.batch, htok, htgt);
    ops.upload_i32(tok, htok);
    ops.upload_i32(tgt, htgt);
    // The third step's allocator timeline is the point's (the first two set up the optimizer and caches).
    const bool record = i == std::min(start_step + 2, end_step - 1);
    if (record) {
      out.memory_baseline_bytes = ops.memory().live().total();
      ops.memory().set_record_events(true);
    }
    StepResult r;
    step_s.push_back(ops.timed([&] { r = trainer.step(tok, tgt, spec.batch, spec.seq); }));
    if (record) {
      ops.memory().set_record_events(false);
      out.memory_events = ops.memory().events();
    }
    const int step = trainer.steps_done();
    s_loss.x.push_back(step);
    s_loss.y.push_back(r.loss);
    s_lr.x.push_back(step);
    s_lr.y.push_back(r.lr);
    s_tokens.x.push_back(step);
    s_tokens.y.push_back(static_cast<double>(step) * static_cast<double>(n));
    if (!std::isfinite(r.loss)) throw std::runtime_error("training diverged: loss " + std::to_string(r.loss) +
                                                         " at step " + std::to_string(step) + "; lower [data] lr");
    if (step % every == 0 && step != end_step) record_eval(step);
  }
  const double val_last = record_eval(end_step);

  // Steady-state step time: without the first steps (allocations, autotuning).
  std::vector<double> steady(step_s.begin() + std::min<std::ptrdiff_t>(3, static_cast<std::ptrdiff_t>(step_s.size()) - 1),
                             step_s.end());
  out.stats = summarize(steady);
  auto& m = out.metrics;
  const double tail = std::min<double>(10, static_cast<double>(s_loss.y.size()));
  double last = 0;
  for (std::size_t i = s_loss.y.size() - static_cast<std::size_t>(tail); i < s_loss.y.size(); ++i) last += s_loss.y[i];
  m.push_back({"step_ms", out.stats.median_s * 1e3});
  m.push_back({"tokens_per_s", static_cast<double>(n) / out.stats.median_s});
  m.push_back({"train_s", std::accumulate(step_s.begin(), step_s.end(), 0.0)});
  const double tflops = train_flops_per_token(cfg, spec.seq) * static_cast<double>(n) / out.stats.median_s / 1e12;
  m.push_back({"model_tflops", tflops});
  if (spec.peak_flops > 0) m.push_back({"mfu_pct", 100.0 * tflops * 1e12 / spec.peak_flops});
  m.push_back({"steps", end_step});
  m.push_back({"start_step", start_step});
  m.push_back({"tokens_seen", static_cast<double>(end_step) * static_cast<double>(n)});
  m.push_back({"epochs", static_cast<double>(end_step) * spec.batch / static_cast<double>(train.windows())});
  m.push_back({"loss_first", s_loss.y.empty() ? std::nan("") : s_loss.y.front()});
  m.push_back({"loss_last", s_loss.y.empty() ? std::nan("") : last / tail});
  m.push_back({"val_loss_initial", val_first});
  m.push_back({"val_loss", val_last});
  m.push_back({"val_ppl", std::exp(val_last)});
  // The best evaluation (a small corpus can be overfit: the curve's minimum says where).
  const auto best = std::min_element(s_vppl.y.begin(), s_vppl.y.end());
  m.push_back({"val_ppl_min", *best});
  m.push_back({"val_ppl_min_step", s_vppl.x[static_cast<std::size_t>(best - s_vppl.y.begin())]});
  m.push_back({"val_tokens_evaluated", static_cast<double>(eval_windows * spec.seq)});
  add_data_metrics(prep, prep_s, m);
  for (auto* s : {&s_loss, &s_lr, &s_tokens, &s_vloss, &s_vppl}) out.series.push_back(std::move(*s));

  if (!d.save.empty()) save_text_checkpoint(d.save, model, trainer);

  if (d.analyze && !cfg.moe()) add_gate_analysis(model, val, spec, out);
}

}  // namespace moc

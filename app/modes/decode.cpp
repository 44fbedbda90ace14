// decode: one greedy decode step of the whole model at batch rows (embedding .. LM head, sampling, feeding the
// token back), captured once and replayed as a serving loop does (a CUDA graph on the GPU). Needs the model
// (random or [model] weights) and prompts (random ids, or [data]'s validation text). Also times the prompt's
// prefill and, for MoC, the channel union a step reads. Declares no bytes or FLOPs: the step's cost depends on
// the attended cache positions, which only the profile's per-kernel costs (kernels/op_cost.h) follow.
#include <algorithm>
#include <numeric>

#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/transformer.h"
#include "profiling/tracer.h"

namespace moc {

namespace {

// The prompts and the tokens that follow them, row-major [batch, prompt + follow].
struct DecodeRows {
  std::vector<std::int32_t> ids;
  int width = 0;
  std::int32_t at(int row, int t) const {
    return ids[static_cast<std::size_t>(row) * static_cast<std::size_t>(width) + static_cast<std::size_t>(t)];
  }
};

// Time to first token: the prompt's prefill (logits of every prompt position), warmed up and repeated like the
// step; each sample starts the sequence again.
void prefill_metrics(PointState& st, const std::function<void()>& refill) {
  const Stats pre = measure(st.spec().measure, [&] {
    st.check_stop();
    if (st.flushes()) st.ops().flush_caches();
    return timed(st.ops(), refill);
  });
  st.metric("prefill_ms", pre.median_s * 1e3);
  st.metric("prefill_noise", pre.noise);
  st.metric("prefill_reps", pre.reps);
}

// The channels a MoC step reads: per layer, the union of the batch's selections, over `follow` steps fed with
// the prompts' continuations (steps outside the timed graph, selections recorded).
void union_metrics(PointState& st, Transformer& model, Decoder& dec, const DecodeRows& rows, int follow) {
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  for (int l = 0; l < cfg.layers; ++l) model.ffn(l).set_record_selection(true);
  std::vector<double> per_step;
  std::vector<char> used(static_cast<std::size_t>(cfg.d_ffn));
  for (int t = 0; t < follow; ++t) {
    std::vector<std::int32_t> next;
    for (int r = 0; r < spec.batch; ++r) next.push_back(rows.at(r, spec.prompt + t));
    dec.step(next);
    double sum = 0;
    for (int l = 0; l < cfg.layers; ++l) {
      std::fill(used.begin(), used.end(), 0);
      for (auto j : st.ops().download_i32(model.ffn(l).selected()))
        if (j >= 0 && j < cfg.d_ffn) used[static_cast<std::size_t>(j)] = 1;
      sum += static_cast<double>(std::count(used.begin(), used.end(), 1));
    }
    per_step.push_back(sum / cfg.layers);
  }
  for (int l = 0; l < cfg.layers; ++l) model.ffn(l).set_record_selection(false);
  st.metric("union_channels",
            std::accumulate(per_step.begin(), per_step.end(), 0.0) / static_cast<double>(per_step.size()));
  st.metric("kept_channels", static_cast<double>(cfg.kept_channels()));
  Series us{"union_by_step", {}, {}};
  for (std::size_t t = 0; t < per_step.size(); ++t) {
    us.x.push_back(static_cast<double>(t));
    us.y.push_back(per_step[t]);
  }
  st.outcome().series.push_back(std::move(us));
}

void run_decode(PointState& st) {
  Ops& ops = st.ops();
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  Transformer model(ops, cfg);
  if (!spec.weights.empty()) load_weights(spec.weights, model);
  model.set_ranges(st.ranges());
  model.prepare_decode();
  const int max_seq = spec.prompt + spec.generate;
  Decoder dec(model, spec.batch, max_seq);
  // Prompts: random ids, or [data]'s validation text; `follow` more tokens per row feed the union
  // measurement (the text that continues each prompt, or random ids).
  const int follow = std::min(16, spec.generate);
  DecodeRows rows;
  rows.width = spec.prompt + follow;
  rows.ids = spec.data.active()
      ? validation_prompts(spec.data, cfg.vocab, spec.batch, spec.prompt, follow)
      : random_ids(st.rng(), static_cast<std::size_t>(spec.batch) * static_cast<std::size_t>(rows.width), cfg.vocab);
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < spec.batch; ++r)
    for (int t = 0; t < spec.prompt; ++t) prompt.push_back(rows.at(r, t));
  const std::function<void()> refill = [&] { dec.prefill(prompt, spec.prompt); };
  refill();
  std::vector<std::int32_t> first(static_cast<std::size_t>(spec.batch), 1);
  dec.step(first);  // the step's tensors hold a token; from here the captured step feeds itself
  auto graph = dec.capture_step();
  const std::function<double()> sample = [&] {
    if (dec.position() >= max_seq) {  // untimed: a fresh sequence once the cache is full
      refill();
      dec.step(first);
    }
    // The step attends cache positions 0..position (per-position costs: attention at decode).
    if (st.tracer()) st.tracer()->set_step_positions(dec.position() + 1);
    const double t = st.repetition([&] {
      ScopedRange sr(st.ranges(), "step");
      graph->replay();
    });
    dec.advance();
    return t;
  };
  ExecOptions eo;
  eo.recapture = [&] { graph = dec.capture_step(); };
  const Stats& stats = st.exec(sample, eo);
  const double b = spec.batch;
  st.metric("ms_per_token", stats.median_s * 1e3);
  st.metric("tokens_per_s", b / stats.median_s);
  prefill_metrics(st, refill);
  if (cfg.ffn.kind == FfnKind::moc && follow > 0) {
    refill();
    union_metrics(st, model, dec, rows, follow);
  }
}

}  // namespace

extern const Mode kDecodeMode;
const Mode kDecodeMode{
    .name = "decode",
    .needs = "the model in the decode layout (random, or [model] weights); prompts (random, or [data]'s "
             "validation text)",
    .repetition = "one greedy decode step of batch rows, replayed from its captured graph",
    .flush_when_cold = true,
    .refuse = nullptr,
    .run = run_decode,
};

}  // namespace moc

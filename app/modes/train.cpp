// train: one optimizer step of the whole model on random tokens (forward, backward, AdamW; data-parallel
// over a communicator when the point has one), or with [data] a training run on real text
// (app/modes/text_train.h) whose steps are the run. Needs the model (random or [model] weights) and, data-parallel,
// the ranks' communicator. Declares the step's model FLOPs (PaLM's convention, train_flops_per_token).
#include <algorithm>

#include "app/harness/dist_launch.h"
#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "model/checkpoint.h"
#include "model/memory_model.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace moc {

namespace {

void refuse_train(const PointSpec& spec, const ModelConfig& cfg) {
  if (!spec.memory_limit_bytes) return;
  const double need = training_lower_bound_bytes(cfg, spec.batch, spec.seq);
  if (need > static_cast<double>(spec.memory_limit_bytes))
    throw OutOfMemory("refused before allocating: a training step of this model needs at least " +
                      format_bytes(static_cast<std::int64_t>(need)) +
                      " (the layers' weights and gradients and the activations kept, by the memory model), the "
                      "limit is " + format_bytes(static_cast<std::int64_t>(spec.memory_limit_bytes)));
}

// The timed steps' communication (the warm-up's dropped): medians per step.
void comm_metrics(PointState& st, const Communicator& comm, const std::vector<CommTimes>& comm_steps,
                  const Trainer& trainer) {
  const PointSpec& spec = st.spec();
  const std::size_t skip = std::min(comm_steps.size(), static_cast<std::size_t>(std::max(0, spec.measure.warmup)));
  std::vector<double> busy, exposed;
  for (std::size_t i = skip; i < comm_steps.size(); ++i) {
    busy.push_back(comm_steps[i].busy_ms);
    exposed.push_back(comm_steps[i].exposed_ms);
  }
  const double bytes = comm_steps.empty() ? 0.0 : comm_steps.back().bytes;
  const double busy_ms = median_of(busy), w = comm.world();
  st.metric("comm_ms", busy_ms);
  st.metric("comm_exposed_ms", median_of(exposed));
  st.metric("comm_bytes_per_step", bytes);
  // All-reduce bus bandwidth (NCCL's convention: 2 (n-1)/n of the payload crosses each link).
  if (!spec.zero1 && busy_ms > 0) st.metric("comm_busbw_GBps", bytes * 2.0 * (w - 1) / w / (busy_ms * 1e-3) / 1e9);
  st.metric("grad_buckets", static_cast<double>(trainer.buckets()));
}

// Activations by module, measured: what one training forward keeps (the allocator's live bytes per module
// tag once forward returns), for the paper's §2 profile and Table 2. One extra forward after the timed
// steps; it stays below a step's peak (no backward workspace, no gradients in flight).
void activation_metrics(PointState& st, Transformer& model, const Tensor& tok, const Tensor& tgt) {
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  const auto engine = engine_activation_model(cfg, spec.batch, spec.seq);
  model.forward(tok, tgt, spec.batch, spec.seq, true);
  const auto live = st.ops().memory().live();
  for (ActModule mod : {ActModule::attention, ActModule::ffn, ActModule::norm, ActModule::residual, ActModule::head})
    st.metric("act_" + std::string(module_name(mod)) + "_bytes", static_cast<double>(live.module(mod)));
  st.metric("act_total_bytes", static_cast<double>(live.category(MemCategory::activations)));
  model.release_activations();
  st.metric("activation_model_bytes", engine.total());
  st.metric("activation_paper_bytes",
            paper_activation_model(cfg, spec.batch, spec.seq, static_cast<double>(dtype_bytes(cfg.act_dtype))).total());
}

void run_train(PointState& st) {
  Ops& ops = st.ops();
  const PointSpec& spec = st.spec();
  const ModelConfig& cfg = st.config();
  if (spec.data.active()) {
    // A training run on real text (app/modes/text_train.h): the steps are the run, not timed repetitions.
    run_text_train(ops, spec, cfg, st.outcome());
    const std::int64_t n = static_cast<std::int64_t>(spec.batch) * spec.seq;
    st.set_cost({.flops = train_flops_per_token(cfg, spec.seq) * static_cast<double>(n)});
    return;
  }
  Transformer model(ops, cfg);
  if (!spec.weights.empty()) load_weights(spec.weights, model);
  model.set_ranges(st.ranges());
  Communicator* comm = spec.comm != nullptr && spec.comm->world() > 1 ? spec.comm : nullptr;
  const int rank = comm ? comm->rank() : 0;
  const std::int64_t n = static_cast<std::int64_t>(spec.batch) * spec.seq;
  // Each rank its own tokens; rank 0's are those of the same point on one GPU.
  std::mt19937 data_rng(static_cast<std::uint32_t>(cfg.seed + 7919 * static_cast<std::uint64_t>(rank)));
  auto ids = random_ids(rank == 0 ? st.rng() : data_rng, static_cast<std::size_t>(n + 1), cfg.vocab);
  Tensor tok = ops.empty({n}, DType::i32, workspace_tag()), tgt = ops.empty({n}, DType::i32, workspace_tag());
  ops.upload_i32(tok, std::vector<std::int32_t>(ids.begin(), ids.end() - 1));
  ops.upload_i32(tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
  TrainConfig tc;
  tc.fp32_master = spec.fp32_master && cfg.param_dtype == DType::bf16;
  tc.zero1 = spec.zero1;
  tc.overlap = spec.comm_overlap;
  Trainer trainer(model, tc, comm);
  double first_loss = -1, last_loss = 0;  // the first warm-up step's, the last timed step's
  std::vector<CommTimes> comm_steps;
  const std::function<double()> sample = [&] {
    return st.repetition([&] {
      const StepResult r = trainer.step(tok, tgt, spec.batch, spec.seq);
      if (st.timing()) last_loss = r.loss;
      comm_steps.push_back(r.comm);
      if (first_loss < 0) first_loss = r.loss;
    });
  };
  ExecOptions eo;
  // No profile pass on a data-parallel point: its repetition count follows each rank's own timing, which
  // would break the lockstep; the communication's time comes from CUDA events (comm_ms) instead.
  eo.profile = comm == nullptr;
  if (comm) eo.agree = [comm](bool stop) { return comm->mean(stop ? 1.0 : 0.0) > 0.0; };  // any rank done: all
  const Stats& stats = st.exec(sample, eo);
  const double b = spec.batch, s = spec.seq;
  const double flops_per_token = train_flops_per_token(cfg, spec.seq);
  st.set_cost({.flops = flops_per_token * b * s});
  st.metric("step_ms", stats.median_s * 1e3);
  st.metric("tokens_per_s", b * s / stats.median_s);
  const double tflops = st.outcome().cost.flops / stats.median_s / 1e12;
  st.metric("model_flops_per_token", flops_per_token);
  st.metric("model_tflops", tflops);
  if (spec.peak_flops > 0) st.metric("mfu_pct", 100.0 * tflops * 1e12 / spec.peak_flops);
  st.metric("loss_first", first_loss);
  st.metric("loss_last", last_loss);
  if (comm) comm_metrics(st, *comm, comm_steps, trainer);
  activation_metrics(st, model, tok, tgt);
}

}  // namespace

extern const Mode kTrainMode;
const Mode kTrainMode{
    .name = "train",
    .needs = "the model (random, or [model] weights); with [data] the corpus; data-parallel, the ranks' communicator",
    .repetition = "one optimizer step (forward, backward, AdamW) of batch x seq tokens; with [data], one step of "
                  "the training run",
    .flush_when_cold = true,
    .refuse = refuse_train,
    .run = run_train,
};

}  // namespace moc

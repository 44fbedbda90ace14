#include "app/point_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

#include "app/ceilings.h"
#include "app/dist_launch.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/ffn.h"
#include "model/memory_model.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "profiling/recording_ops.h"
#include "profiling/tracer.h"

namespace moc {

namespace {

// Times fn on the backend: CUDA events around its ops on the GPU, the host clock between two
// synchronizations elsewhere (Ops::timed).
template <class Fn>
double timed(Ops& ops, Fn&& fn) {
  return ops.timed(std::function<void()>(std::forward<Fn>(fn)));
}

Tensor random_tensor(Ops& ops, std::mt19937& rng, const Shape& shape, DType dt, const MemTag& tag, float std) {
  Tensor t = ops.empty(shape, dt, tag);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  for (auto& x : v) x = d(rng);
  ops.upload_f32(t, v);
  return t;
}

// An FFN weight as the Transformer stores it: `rows` x `cols` random values with `pad_rows` / `pad_cols`
// zero channels appended (ModelConfig::ffn_cols()).
Tensor random_ffn_weight(Ops& ops, std::mt19937& rng, std::int64_t rows, std::int64_t cols, std::int64_t pad_rows,
                         std::int64_t pad_cols, DType dt) {
  const std::int64_t R = rows + pad_rows, C = cols + pad_cols;
  Tensor t = ops.empty({R, C}, dt, weights_tag());
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> v(static_cast<std::size_t>(R * C), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(r * C + c)] = d(rng);
  ops.upload_f32(t, v);
  return t;
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, std::size_t n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Phase ranges timed on the backend's timeline (Ops::mark: CUDA events on the GPU, so a range is what the
// device spent between its ends, not when the host enqueued it; the host clock on the CPU). Only the
// recorded repetition is stamped. Ranges opened inside a graph capture get no stamps and are dropped.
class MarkRangeTimer final : public RangeSink {
 public:
  explicit MarkRangeTimer(Ops& ops) : ops_(ops) {}
  void set_recording(bool on) {
    if (on && !recording_) {
      ops_.clear_marks();
      closed_.clear();
      ops_.mark();  // mark 0: the timeline's origin
    }
    recording_ = on;
  }
  void push(std::string_view name) override { stack_.push_back({std::string(name), recording_ ? ops_.mark() : -1}); }
  void pop() override {
    if (stack_.empty()) return;
    Open o = std::move(stack_.back());
    stack_.pop_back();
    if (!recording_ || o.start < 0) return;
    const int end = ops_.mark();
    if (end >= 0) closed_.push_back({std::move(o.name), o.start, end, static_cast<int>(stack_.size())});
  }
  // The recorded ranges in ns from the origin (synchronizes with the marks).
  std::vector<HostRangeTimer::Event> events() {
    std::vector<HostRangeTimer::Event> out;
    for (const auto& c : closed_)
      out.push_back({c.name, static_cast<std::int64_t>(ops_.mark_ms(c.start) * 1e6),
                     static_cast<std::int64_t>(ops_.mark_ms(c.end) * 1e6), c.depth});
    return out;
  }

 private:
  struct Open {
    std::string name;
    int start;
  };
  struct Closed {
    std::string name;
    int start, end, depth;
  };
  Ops& ops_;
  bool recording_ = false;
  std::vector<Open> stack_;
  std::vector<Closed> closed_;
};

// Forwards ranges to a sink that may come later (the GPU's tracer exists only for the profile pass).
struct LateRangeSink final : RangeSink {
  explicit LateRangeSink(RangeSink* t) : target(t) {}
  void push(std::string_view name) override {
    if (target) target->push(name);
  }
  void pop() override {
    if (target) target->pop();
  }
  RangeSink* target;
};

// Wraps a repetition: while timing, memory events and ranges are recorded for the first measured one only;
// in the profile pass (after the timed repetitions) each repetition is either untraced or traced for the
// overhead metric, or a profiled step that the tracer keeps.
struct Recorder {
  enum class Phase { timing, untraced, stamped, traced, profiled };
  Ops& ops;
  MarkRangeTimer& timer;
  int warmup;
  std::int64_t* baseline;
  const std::atomic<bool>* stop;
  prof::Tracer* tracer = nullptr;
  Phase phase = Phase::timing;
  int calls = 0;
  std::vector<double> stamped_kernel_ms;  // per stamped repetition: the stamped kernels' time
  bool flush = false;  // cold timing (every mode but ffn-decode): the caches evicted before each repetition
  template <class Fn>
  double operator()(Fn&& fn) {
    if (stop && stop->load()) throw Interrupted();
    if (flush) ops.flush_caches();  // issued before the repetition's timing (and profiled step) begins
    if (phase != Phase::timing) {
      if (phase == Phase::profiled) tracer->begin_step();
      const double t = timed(ops, fn);  // synchronizes: the step's work is done when it ends
      if (phase == Phase::profiled) {
        tracer->end_step();
        // After the step's window: reading the stamps back copies memory, which must not count in it.
        std::uint64_t dropped = 0;
        auto stamps = ops.take_stamps(&dropped);
        tracer->add_stamps(std::move(stamps), dropped);
      } else if (phase == Phase::stamped) {
        // This repetition measures what stamping costs; its stamps say how long the stamped kernels ran
        // without CUPTI attached (first block's start to last block's end, summed over launches).
        std::uint64_t dropped = 0;
        double ns = 0;
        for (const auto& l : ops.take_stamps(&dropped)) ns += static_cast<double>(l.end_ns - l.start_ns);
        if (ns > 0) stamped_kernel_ms.push_back(ns / 1e6);
      }
      return t;
    }
    const bool record = calls++ == warmup;
    if (record) *baseline = ops.memory().live().total();
    ops.memory().set_record_events(record);
    timer.set_recording(record);
    const double t = timed(ops, fn);
    ops.memory().set_record_events(false);
    timer.set_recording(false);
    return t;
  }
};

double median_of(std::vector<double> v) { return summarize(v).median_s; }

// The profile pass of a point, after its timed repetitions: `sample` runs one repetition through the
// Recorder (as the measuring loop does). First the same work untraced, then `start` brings the tracer up
// (on the GPU: subscribes to CUPTI and re-captures the point's graphs, so that their nodes map to ranges)
// and the work runs traced (the tracing overhead; those records are dropped), then spec.profile_steps
// profiled steps whose records, ranges and allocator events make the point's profile.
void profile_pass(Ops& ops, Recorder& rec, const std::function<prof::Tracer*()>& start, const PointSpec& spec,
                  double median_s, const std::function<double()>& sample, PointOutcome& out) {
  // About a second of each on the GPU, a tenth on the slow CPU backend; 3 to 20 repetitions.
  const double budget_s = ops.device() == DeviceKind::cuda ? 1.0 : 0.1;
  const int reps = std::clamp(static_cast<int>(budget_s / std::max(median_s, 1e-9)), 3, 20);
  std::vector<double> untraced, traced;
  rec.phase = Recorder::Phase::untraced;
  for (int i = 0; i < reps; ++i) untraced.push_back(sample());
  // The cost of device-side stage stamps: the same repetitions untraced with stamping on, interleaved with
  // stamping off so that drift hits both alike (only mocbench's multi-stage kernels stamp; a point without
  // them pays nothing).
  std::vector<double> stamped, unstamped;
  if (ops.device() == DeviceKind::cuda) {
    for (int i = 0; i < reps; ++i) {
      rec.phase = Recorder::Phase::stamped;
      ops.set_stamping(true);
      stamped.push_back(sample());
      ops.set_stamping(false);
      rec.phase = Recorder::Phase::untraced;
      unstamped.push_back(sample());
    }
  }
  prof::Tracer* t = start();
  if (t == nullptr) {
    rec.phase = Recorder::Phase::timing;
    return;
  }
  prof::Tracer& tracer = *t;
  rec.tracer = t;
  tracer.enable();
  rec.phase = Recorder::Phase::traced;
  sample();  // CUPTI's first traced launches set up its buffers: not part of the overhead
  for (int i = 0; i < reps; ++i) traced.push_back(sample());

  MemoryTracker& mem = ops.memory();
  prof::AllocatorTimeline alloc;
  alloc.origin = mem.origin();
  const MemSnapshot live = mem.live();
  for (std::size_t c = 0; c < kMemCategories; ++c)
    alloc.live_at_start.emplace_back(std::string(category_name(static_cast<MemCategory>(c))), live.by_category[c]);
  out.memory_events = mem.events();  // the timed repetition's timeline; the profiled steps' go to the profile
  const std::size_t events_before = out.memory_events.size();
  mem.set_record_events(true);
  rec.phase = Recorder::Phase::profiled;
  ops.set_stamping(true);
  for (int i = 0; i < std::max(1, spec.profile_steps); ++i) sample();
  ops.set_stamping(false);
  mem.set_record_events(false);
  rec.phase = Recorder::Phase::timing;
  const auto events = mem.events();
  for (std::size_t i = events_before; i < events.size(); ++i) {
    const auto& e = events[i];
    alloc.events.push_back({e.t_ns, std::string(category_name(e.tag.category)), std::string(module_name(e.tag.module)),
                            e.tag.layer, e.bytes});
  }
  prof::ProfileTrace trace = tracer.finish(alloc);

  const double steps = std::max(1, trace.steps);
  const double untraced_ms = median_of(untraced) * 1e3, traced_ms = median_of(traced) * 1e3;
  auto& m = out.profile_metrics;
  m.push_back({"profile_steps", static_cast<double>(trace.steps)});
  m.push_back({"profile_kernels", static_cast<double>(trace.kernels.size()) / steps});
  m.push_back({"profile_gpu_busy_ms", static_cast<double>(prof::busy_ns(trace)) / 1e6 / steps});
  {
    // The records' inclusive times summed (CUPTI's start to end): above the busy time by what overlapped (PDL
    // waits); the exclusive times sum to the busy time exactly.
    const prof::DeviceTimes in = prof::device_times(trace, prof::TimeMode::inclusive);
    double sum = 0;
    for (auto v : in.kernels) sum += static_cast<double>(v);
    for (auto v : in.memcpys) sum += static_cast<double>(v);
    for (auto v : in.memsets) sum += static_cast<double>(v);
    m.push_back({"profile_inclusive_sum_ms", sum / 1e6 / steps});
  }
  m.push_back({"profile_untraced_ms", untraced_ms});
  m.push_back({"profile_traced_ms", traced_ms});
  m.push_back({"profile_overhead_pct", 100.0 * (traced_ms / untraced_ms - 1.0)});
  m.push_back({"profile_dropped_records", static_cast<double>(trace.dropped_records)});
  if (!stamped.empty()) {
    const double s_ms = median_of(stamped) * 1e3, u_ms = median_of(unstamped) * 1e3;
    m.push_back({"profile_stamped_ms", s_ms});
    m.push_back({"profile_unstamped_ms", u_ms});
    m.push_back({"profile_stamp_overhead_pct", 100.0 * (s_ms / u_ms - 1.0)});
    // The stamped kernels' own time in those untraced repetitions (median): the stamped kernels as the
    // timed runs see them, without CUPTI's overhead on the profiled steps.
    if (!rec.stamped_kernel_ms.empty()) m.push_back({"profile_stamped_kernel_ms", median_of(rec.stamped_kernel_ms)});
  }
  if (!trace.stages.empty()) {
    m.push_back({"profile_stages", static_cast<double>(trace.stages.size()) / steps});
    m.push_back({"profile_dropped_stamps", static_cast<double>(trace.dropped_stamps)});
  }
  if (trace.dropped_records > 0)
    std::fprintf(stderr, "mocbench: profile: CUPTI dropped %llu records at this point (stored as profile_dropped_records)\n",
                 static_cast<unsigned long long>(trace.dropped_records));
  out.profile = std::move(trace);
}
}  // namespace

double train_flops_per_token(const ModelConfig& cfg, int seq) {
  // Model FLOPs per token of a training step (forward + backward = 3 x forward, PaLM's convention):
  // 6 x the matmul parameters a token runs through (q/k/v/o, the FFN as executed -- MoC's down
  // projection on its kept channels only -- and the LM head; not the embedding lookup) plus
  // 12 x layers x hidden x seq for the attention scores and values (causal counted in full, as PaLM).
  const double d = cfg.hidden, kvd = static_cast<double>(cfg.kv_heads) * cfg.head_dim(), F = cfg.d_ffn;
  // A mixture of experts: each token runs through its experts_per_token experts and the router.
  const double ffn_one = cfg.ffn.kind == FfnKind::dense ? 3 * d * F : 2 * d * F + d * cfg.kept_channels();
  const double ffn_params = cfg.moe() ? cfg.experts_per_token * ffn_one + d * cfg.experts : ffn_one;
  const double matmul_params = cfg.layers * (2 * d * d + 2 * d * kvd + ffn_params) + d * cfg.vocab;
  return 6 * matmul_params + 12.0 * cfg.layers * d * seq;
}

std::vector<std::string> point_modes() { return {"train", "decode", "ffn-train", "ffn-decode", "topk"}; }

PointOutcome run_point(Ops& backend, const PointSpec& spec) {
  PointOutcome out;
  // On the CPU backend every op goes through the recording decorator (a branch when not tracing). On the GPU
  // the CUPTI tracer exists only during the profile pass: while a process is subscribed to CUPTI, graphs
  // instantiated then carry its instrumentation, which measured 4-12% on the decode study's timed numbers.
  std::unique_ptr<prof::Tracer> tracer;
  std::unique_ptr<prof::RecordingOps> recording;
  // The CUPTI tracer hears the CUDA backend's cost declarations while it lives (kernels/op_cost.h); the CPU
  // backend's recording decorator declares them to its tracer directly.
  struct CostSinkReset {
    ~CostSinkReset() { set_cost_sink(nullptr); }
  } cost_sink_reset;
  if (spec.profile && backend.device() != DeviceKind::cuda) {
    auto cpu = std::make_unique<prof::CpuTracer>();
    recording = std::make_unique<prof::RecordingOps>(backend, *cpu);
    tracer = std::move(cpu);
  }
  Ops& ops = recording ? static_cast<Ops&>(*recording) : backend;
  ModelConfig cfg = spec.model;
  if (spec.batch <= 0 || spec.seq <= 0) throw ConfigError("batch and seq must be positive");
  cfg.seq_len = std::max(cfg.seq_len, std::max(spec.seq, spec.prompt + spec.generate));
  cfg.validate();
  ops.memory().set_record_events(false);
  ops.memory().reset_peak();
  MarkRangeTimer timer(ops);
  // On the GPU the same ranges also go to NVTX (Nsight Systems).
  NvtxRangeSink nvtx;
  LateRangeSink to_tracer(tracer.get());
  TeeRangeSink tee({&timer, ops.device() == DeviceKind::cuda ? &nvtx : nullptr, &to_tracer});
  RangeSink* sink = &tee;
  // cold: ffn-decode rotates weight copies inside each repetition (below); every other mode flushes.
  Recorder rec{ops,    timer,    spec.measure.warmup, &out.memory_baseline_bytes, spec.stop, tracer.get(),
               Recorder::Phase::timing, 0, {}, spec.cold && spec.mode != "ffn-decode"};
  // After a mode's timed repetitions: its profile, from the same repetition function. recapture re-records
  // the point's CUDA graphs once the tracer is up (it must see their nodes created inside the ranges).
  auto profile = [&](const std::function<double()>& sample, const std::function<void()>& recapture = {}) {
    if (!spec.profile) return;
    auto start = [&]() -> prof::Tracer* {
      if (!tracer) {
        tracer = prof::make_cupti_tracer(&out.profile_note);
        if (!tracer) return nullptr;
        to_tracer.target = tracer.get();
        if (ops.device() == DeviceKind::cuda) set_cost_sink(tracer.get());
        if (recapture) recapture();
      }
      return tracer.get();
    };
    profile_pass(ops, rec, start, spec, out.stats.median_s, sample, out);
    if (ops.device() == DeviceKind::cuda) {  // unsubscribe before anything else is captured or timed
      to_tracer.target = nullptr;
      rec.tracer = nullptr;
      set_cost_sink(nullptr);
      tracer.reset();
    }
  };
  std::mt19937 rng(static_cast<std::uint32_t>(cfg.seed));
  auto& m = out.metrics;
  const double b = spec.batch, s = spec.seq;

  if (spec.mode == "train" && spec.memory_limit_bytes) {
    const double need = training_lower_bound_bytes(cfg, spec.batch, spec.seq);
    if (need > static_cast<double>(spec.memory_limit_bytes))
      throw OutOfMemory("refused before allocating: a training step of this model needs at least " +
                        format_bytes(static_cast<std::int64_t>(need)) +
                        " (the layers' weights and gradients and the activations kept, by the memory model), the "
                        "limit is " + format_bytes(static_cast<std::int64_t>(spec.memory_limit_bytes)));
  }
  if (spec.mode == "train" && spec.data.active()) {
    // A training run on real text (app/text_train.h): the steps are the run, not timed repetitions.
    run_text_train(ops, spec, cfg, out);
  } else if (spec.mode == "train") {
    Transformer model(ops, cfg);
    if (!spec.weights.empty()) load_weights(spec.weights, model);
    model.set_ranges(sink);
    Communicator* comm = spec.comm != nullptr && spec.comm->world() > 1 ? spec.comm : nullptr;
    const int rank = comm ? comm->rank() : 0;
    const std::int64_t n = static_cast<std::int64_t>(spec.batch) * spec.seq;
    // Each rank its own tokens; rank 0's are those of the same point on one GPU.
    std::mt19937 data_rng(static_cast<std::uint32_t>(cfg.seed + 7919 * static_cast<std::uint64_t>(rank)));
    auto ids = random_ids(rank == 0 ? rng : data_rng, static_cast<std::size_t>(n + 1), cfg.vocab);
    Tensor tok = ops.empty({n}, DType::i32, workspace_tag()), tgt = ops.empty({n}, DType::i32, workspace_tag());
    ops.upload_i32(tok, std::vector<std::int32_t>(ids.begin(), ids.end() - 1));
    ops.upload_i32(tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
    TrainConfig tc;
    tc.fp32_master = spec.fp32_master && cfg.param_dtype == DType::bf16;
    tc.zero1 = spec.zero1;
    tc.overlap = spec.comm_overlap;
    Trainer trainer(model, tc, comm);
    double first_loss = -1, last_loss = 0;
    std::vector<CommTimes> comm_steps;
    const std::function<double()> sample = [&] {
      return rec([&] {
        const StepResult r = trainer.step(tok, tgt, spec.batch, spec.seq);
        last_loss = r.loss;
        comm_steps.push_back(r.comm);
        if (first_loss < 0) first_loss = last_loss;
      });
    };
    MeasureSettings ms = spec.measure;
    if (comm) ms.agree = [comm](bool stop) { return comm->mean(stop ? 1.0 : 0.0) > 0.0; };  // any rank done: all
    out.stats = measure(ms, sample);
    const double loss_timed = last_loss;
    // No profile pass on a data-parallel point: its repetition count follows each rank's own timing, which
    // would break the lockstep; the communication's time comes from CUDA events (comm_ms) instead.
    if (!comm) profile(sample);
    last_loss = loss_timed;
    const auto engine = engine_activation_model(cfg, spec.batch, spec.seq);
    m.push_back({"step_ms", out.stats.median_s * 1e3});
    m.push_back({"tokens_per_s", b * s / out.stats.median_s});
    const double flops_per_token = train_flops_per_token(cfg, spec.seq);
    const double tflops = flops_per_token * b * s / out.stats.median_s / 1e12;
    m.push_back({"model_flops_per_token", flops_per_token});
    m.push_back({"model_tflops", tflops});
    if (spec.peak_flops > 0) m.push_back({"mfu_pct", 100.0 * tflops * 1e12 / spec.peak_flops});
    m.push_back({"loss_first", first_loss});
    m.push_back({"loss_last", last_loss});
    if (comm) {
      // The timed steps' communication (the warm-up's dropped): medians per step.
      const std::size_t skip = std::min(comm_steps.size(), static_cast<std::size_t>(std::max(0, spec.measure.warmup)));
      std::vector<double> busy, exposed;
      for (std::size_t i = skip; i < comm_steps.size(); ++i) {
        busy.push_back(comm_steps[i].busy_ms);
        exposed.push_back(comm_steps[i].exposed_ms);
      }
      const double bytes = comm_steps.empty() ? 0.0 : comm_steps.back().bytes;
      const double busy_ms = median_of(busy), w = comm->world();
      m.push_back({"comm_ms", busy_ms});
      m.push_back({"comm_exposed_ms", median_of(exposed)});
      m.push_back({"comm_bytes_per_step", bytes});
      // All-reduce bus bandwidth (NCCL's convention: 2 (n-1)/n of the payload crosses each link).
      if (!spec.zero1 && busy_ms > 0) m.push_back({"comm_busbw_GBps", bytes * 2.0 * (w - 1) / w / (busy_ms * 1e-3) / 1e9});
      m.push_back({"grad_buckets", static_cast<double>(trainer.buckets())});
    }
    // Activations by module, measured: what one training forward keeps (the allocator's live bytes per
    // module tag once forward returns), for the paper's §2 profile and Table 2. One extra forward after the
    // timed steps; it stays below a step's peak (no backward workspace, no gradients in flight).
    {
      model.forward(tok, tgt, spec.batch, spec.seq, true);
      const auto live = ops.memory().live();
      for (ActModule mod : {ActModule::attention, ActModule::ffn, ActModule::norm, ActModule::residual, ActModule::head})
        m.push_back({"act_" + std::string(module_name(mod)) + "_bytes", static_cast<double>(live.module(mod))});
      m.push_back({"act_total_bytes", static_cast<double>(live.category(MemCategory::activations))});
      model.release_activations();
    }
    m.push_back({"activation_model_bytes", engine.total()});
    m.push_back({"activation_paper_bytes", paper_activation_model(cfg, spec.batch, spec.seq,
                                                                   static_cast<double>(dtype_bytes(cfg.act_dtype)))
                                                .total()});
  } else if (spec.mode == "decode") {
    Transformer model(ops, cfg);
    if (!spec.weights.empty()) load_weights(spec.weights, model);
    model.set_ranges(sink);
    model.prepare_decode();
    const int max_seq = spec.prompt + spec.generate;
    Decoder dec(model, spec.batch, max_seq);
    // Prompts: random ids, or [data]'s validation text; `follow` more tokens per row feed the union
    // measurement below (the text that continues each prompt, or random ids).
    const int follow = std::min(16, spec.generate);
    std::vector<std::int32_t> rows = spec.data.active()
        ? validation_prompts(spec.data, cfg.vocab, spec.batch, spec.prompt, follow)
        : random_ids(rng, static_cast<std::size_t>(spec.batch) * static_cast<std::size_t>(spec.prompt + follow), cfg.vocab);
    const auto row_at = [&](int row, int t) {
      return rows[static_cast<std::size_t>(row) * static_cast<std::size_t>(spec.prompt + follow) + static_cast<std::size_t>(t)];
    };
    std::vector<std::int32_t> prompt;
    for (int r = 0; r < spec.batch; ++r)
      for (int t = 0; t < spec.prompt; ++t) prompt.push_back(row_at(r, t));
    auto refill = [&] { dec.prefill(prompt, spec.prompt); };
    refill();
    std::vector<std::int32_t> first(static_cast<std::size_t>(spec.batch), 1);
    dec.step(first);  // the step's tensors hold a token; from here the captured step feeds itself
    // One decode step (embedding .. LM head, sampling, feeding the token back) captured once and
    // replayed, as a serving loop does: a CUDA graph on the GPU.
    auto graph = dec.capture_step();
    const std::function<double()> sample = [&] {
      if (dec.position() >= max_seq) {  // untimed: a fresh sequence once the cache is full
        refill();
        dec.step(first);
      }
      // The step attends cache positions 0..position (per-position costs: attention at decode).
      if (rec.tracer) rec.tracer->set_step_positions(dec.position() + 1);
      const double t = rec([&] {
        ScopedRange sr(sink, "step");
        graph->replay();
      });
      dec.advance();
      return t;
    };
    out.stats = measure(spec.measure, sample);
    profile(sample, [&] { graph = dec.capture_step(); });
    m.push_back({"ms_per_token", out.stats.median_s * 1e3});
    m.push_back({"tokens_per_s", b / out.stats.median_s});
    // Time to first token: the prompt's prefill (logits of every prompt position), warmed up and repeated
    // like the step; each sample starts the sequence again.
    const Stats pre = measure(spec.measure, [&] {
      if (spec.stop && spec.stop->load()) throw Interrupted();
      if (rec.flush) ops.flush_caches();
      return timed(ops, refill);
    });
    m.push_back({"prefill_ms", pre.median_s * 1e3});
    m.push_back({"prefill_noise", pre.noise});
    m.push_back({"prefill_reps", pre.reps});
    // The channels a MoC step reads: per layer, the union of the batch's selections, over `follow` steps
    // fed with the prompts' continuations (steps outside the timed graph, selections recorded).
    if (cfg.ffn.kind == FfnKind::moc && follow > 0) {
      refill();
      for (int l = 0; l < cfg.layers; ++l) model.ffn(l).set_record_selection(true);
      std::vector<double> per_step;
      std::vector<char> used(static_cast<std::size_t>(cfg.d_ffn));
      for (int t = 0; t < follow; ++t) {
        std::vector<std::int32_t> next;
        for (int r = 0; r < spec.batch; ++r) next.push_back(row_at(r, spec.prompt + t));
        dec.step(next);
        double sum = 0;
        for (int l = 0; l < cfg.layers; ++l) {
          std::fill(used.begin(), used.end(), 0);
          for (auto j : ops.download_i32(model.ffn(l).selected()))
            if (j >= 0 && j < cfg.d_ffn) used[static_cast<std::size_t>(j)] = 1;
          sum += static_cast<double>(std::count(used.begin(), used.end(), 1));
        }
        per_step.push_back(sum / cfg.layers);
      }
      for (int l = 0; l < cfg.layers; ++l) model.ffn(l).set_record_selection(false);
      m.push_back({"union_channels", std::accumulate(per_step.begin(), per_step.end(), 0.0) / static_cast<double>(per_step.size())});
      m.push_back({"kept_channels", static_cast<double>(cfg.kept_channels())});
      Series us{"union_by_step", {}, {}};
      for (std::size_t t = 0; t < per_step.size(); ++t) {
        us.x.push_back(static_cast<double>(t));
        us.y.push_back(per_step[t]);
      }
      out.series.push_back(std::move(us));
    }
  } else if (spec.mode == "ffn-train" || spec.mode == "ffn-decode") {
    const bool train = spec.mode == "ffn-train";
    const std::int64_t rows = train ? static_cast<std::int64_t>(spec.batch) * spec.seq : spec.batch;
    const std::size_t layer_bytes = 3 * static_cast<std::size_t>(cfg.hidden) * static_cast<std::size_t>(cfg.d_ffn) *
                                    dtype_bytes(cfg.param_dtype);
    const int copies = !train && spec.cold ? static_cast<int>(std::clamp<std::size_t>(spec.cold_bytes / layer_bytes + 1, 2, 64)) : 1;
    // Measured before anything else is allocated, so its buffers stay out of the point's peak memory.
    const double copy_GBps = train ? 0.0 : copy_bandwidth_GBps(ops);
    ops.memory().reset_peak();
    // ffn-decode keeps W_gate and W_up transposed (the decode layout: a channel is one contiguous row);
    // ffn-train stores them as the Transformer does: [d, ffn_cols] / [ffn_cols, d], zero padding channels.
    const std::int64_t hid = cfg.hidden, ffn_ch = cfg.d_ffn, pad = train ? cfg.ffn_cols() - cfg.d_ffn : 0;
    std::vector<Tensor> wg, wu, wd;
    for (int c = 0; c < copies; ++c) {
      for (auto* w : {&wg, &wu})
        w->push_back(train ? random_ffn_weight(ops, rng, hid, ffn_ch, 0, pad, cfg.param_dtype)
                           : random_ffn_weight(ops, rng, ffn_ch, hid, 0, 0, cfg.param_dtype));
      wd.push_back(random_ffn_weight(ops, rng, ffn_ch, hid, pad, 0, cfg.param_dtype));
    }
    Tensor x = random_tensor(ops, rng, {rows, cfg.hidden}, cfg.act_dtype, workspace_tag(), 1.0f);
    Tensor y = ops.empty({rows, cfg.hidden}, cfg.act_dtype, workspace_tag());
    Ffn ffn(ops, cfg, 0);
    if (train) {
      Tensor gg = ops.empty(wg[0].shape(), cfg.param_dtype, {MemCategory::gradients});
      Tensor gu = ops.empty(wu[0].shape(), cfg.param_dtype, {MemCategory::gradients});
      Tensor gd = ops.empty(wd[0].shape(), cfg.param_dtype, {MemCategory::gradients});
      Tensor dx = ops.empty({rows, cfg.hidden}, cfg.act_dtype, workspace_tag());
      std::vector<double> fwd, bwd;
      const std::function<double()> sample = [&] {
        return rec([&] {
          const FfnWeights w{&wg[0], &wu[0], &wd[0]};
          fwd.push_back(timed(ops, [&] { ffn.forward(x, w, y, 0.0f, true, sink); }));
          bwd.push_back(timed(ops, [&] { ffn.backward(x, y, w, dx, {&gg, &gu, &gd}, sink); }));
        });
      };
      out.stats = measure(spec.measure, sample);
      const std::size_t timed_reps = fwd.size();
      profile(sample);
      fwd.resize(timed_reps);
      bwd.resize(timed_reps);
      m.push_back({"fwd_bwd_ms", out.stats.median_s * 1e3});
      m.push_back({"forward_ms", median_of(fwd) * 1e3});
      m.push_back({"backward_ms", median_of(bwd) * 1e3});
      m.push_back({"tokens_per_s", static_cast<double>(rows) / out.stats.median_s});
      m.push_back({"ffn_activation_bytes", static_cast<double>(Ffn::stored_bytes(cfg, rows))});
    } else {
      // One call per weight copy, captured as a graph and replayed: the latency of a call is a replay's
      // time over the copies (launch gaps do not count, as inside a decode step's graph), and with copies
      // rotating through more bytes than the L2 the weights come from memory (cold).
      const bool moc = cfg.ffn.kind == FfnKind::moc;
      const MocSelect sel = moc ? cfg.ffn.selection() : MocSelect{};
      const int kept = moc ? sel.kept(cfg.d_ffn) : cfg.d_ffn;
      Tensor idx = ops.empty({rows, kept}, DType::i16, workspace_tag());
      auto graph_of = [&](unsigned parts, const Tensor* force) {
        return ops.capture([&, parts, force] {
          for (int c = 0; c < copies; ++c)
            ops.ffn_decode(x, {&wg[static_cast<std::size_t>(c)], &wu[static_cast<std::size_t>(c)],
                               &wd[static_cast<std::size_t>(c)]},
                           moc ? &sel : nullptr, y, force, nullptr, parts);
        });
      };
      ops.fill(y, 0.0f);
      auto full = graph_of(kFfnAll, nullptr);
      const std::function<double()> sample = [&] {
        return rec([&] {
          ScopedRange sr(sink, "ffn.decode");
          full->replay();
        }) / copies;
      };
      out.stats = measure(spec.measure, sample);
      profile(sample, [&] { full = graph_of(kFfnAll, nullptr); });
      // The paper's breakdown, each part timed alone the same way: gate projection, top-K (gate + selection
      // minus gate), up & down projection (on a fixed selection), other (the rest of the whole call).
      MeasureSettings part = spec.measure;
      part.time_bound_s = std::min(part.time_bound_s, 0.5);
      auto part_us = [&](unsigned parts, const Tensor* force) {
        auto g = graph_of(parts, force);
        return measure(part, [&] { return timed(ops, [&] { g->replay(); }) / copies; }).median_s * 1e6;
      };
      const double total_us = out.stats.median_s * 1e6;
      const double gate_us = part_us(kFfnGate, nullptr);
      double topk_us = 0, updown_us = 0;
      // The selection on this x: the union of the rows' channels (the floor below).
      if (moc) ops.ffn_decode(x, {&wg[0], &wu[0], &wd[0]}, &sel, y, nullptr, &idx, kFfnGate | kFfnSelect);
      if (moc) {
        topk_us = std::max(0.0, part_us(kFfnGate | kFfnSelect, nullptr) - gate_us);
        updown_us = part_us(kFfnUpDown, &idx);
      } else {
        updown_us = std::max(0.0, total_us - gate_us);
      }
      // The same layer through the generic ops (GEMMs, moc_select, gathers: what a framework without fused
      // decode kernels runs), for comparison with the fused decode path.
      auto unfused = ops.capture([&] {
        for (int c = 0; c < copies; ++c)
          ffn.forward(x, {&wg[static_cast<std::size_t>(c)], &wu[static_cast<std::size_t>(c)],
                          &wd[static_cast<std::size_t>(c)], true},
                      y, 1.0f, false);
      });
      const double unfused_us = measure(part, [&] { return timed(ops, [&] { unfused->replay(); }) / copies; }).median_s * 1e6;
      // Byte floor of one call (paper §5): dense 3 d d_ffn, MoC d d_ffn + 2 U d weight elements, U the
      // channels some row selected (each needed weight row is read once per call; U = K at batch 1).
      double union_channels = kept;
      if (moc) {
        std::vector<char> used(static_cast<std::size_t>(cfg.d_ffn), 0);
        for (auto j : ops.download_i32(idx)) used[static_cast<std::size_t>(j)] = 1;
        union_channels = static_cast<double>(std::count(used.begin(), used.end(), 1));
      }
      const double d = cfg.hidden, F = cfg.d_ffn, K = union_channels;
      const double elems = moc ? d * F + 2 * K * d : 3 * d * F;
      const double floor_bytes = elems * static_cast<double>(dtype_bytes(cfg.param_dtype));
      const double achieved = floor_bytes / out.stats.median_s / 1e9;
      m.push_back({"latency_us", total_us});
      m.push_back({"union_channels", union_channels});
      m.push_back({"floor_bytes", floor_bytes});
      m.push_back({"achieved_GBps", achieved});
      m.push_back({"copy_GBps", copy_GBps});
      m.push_back({"pct_of_floor", 100.0 * achieved / copy_GBps});
      m.push_back({"floor_us", floor_bytes / copy_GBps / 1e3});
      m.push_back({"gate_us", gate_us});
      m.push_back({"topk_us", topk_us});
      m.push_back({"up_down_us", updown_us});
      m.push_back({"other_us", total_us - gate_us - topk_us - updown_us});
      m.push_back({"unfused_us", unfused_us});
      m.push_back({"weight_copies", copies});
    }
  } else if (spec.mode == "topk") {
    const std::int64_t rows = static_cast<std::int64_t>(spec.batch) * spec.seq;
    Tensor g = random_tensor(ops, rng, {rows, cfg.d_ffn}, cfg.act_dtype, workspace_tag(), 1.0f);
    const MocSelect sel = cfg.ffn.kind == FfnKind::moc ? cfg.ffn.selection() : MocSelect{cfg.ffn.k, 0, 0, cfg.ffn.rule, cfg.ffn.topk_backend};
    if (sel.kept(cfg.d_ffn) <= 0) throw ConfigError("topk mode needs k > 0");
    Tensor idx = ops.empty({rows, sel.kept(cfg.d_ffn)}, DType::i16, workspace_tag());
    const std::function<double()> sample = [&] {
      return rec([&] {
        ScopedRange sr(sink, "ffn.topk");
        ops.moc_select(g, sel, idx);
      });
    };
    out.stats = measure(spec.measure, sample);
    profile(sample);
    m.push_back({"latency_us", out.stats.median_s * 1e6});
    m.push_back({"rows_per_s", static_cast<double>(rows) / out.stats.median_s});
  } else {
    std::string modes;
    for (const auto& md : point_modes()) modes += (modes.empty() ? "" : ", ") + md;
    throw ConfigError("unknown mode '" + spec.mode + "'; use one of " + modes);
  }

  m.push_back({"median_ms", out.stats.median_s * 1e3});
  m.push_back({"mean_ms", out.stats.mean_s * 1e3});
  m.push_back({"min_ms", out.stats.min_s * 1e3});
  m.push_back({"max_ms", out.stats.max_s * 1e3});
  m.push_back({"stddev_ms", out.stats.stddev_s * 1e3});
  m.push_back({"reps", out.stats.reps});
  m.push_back({"noise", out.stats.noise});
  // 0: the repetitions stopped at max_reps or time_bound_s with the noise still above target_noise (`show`
  // marks such a median as not final); 1: the noise met the target.
  m.push_back({"noise_met", out.stats.converged ? 1.0 : 0.0});
  out.peak = ops.memory().at_peak();
  out.peak_bytes = ops.memory().peak_total();
  for (std::size_t c = 0; c < kMemCategories; ++c)
    m.push_back({"peak_" + std::string(category_name(static_cast<MemCategory>(c))) + "_bytes",
                 static_cast<double>(out.peak.by_category[c])});
  m.push_back({"peak_bytes", static_cast<double>(out.peak_bytes)});
  m.push_back({"peak_activation_bytes", static_cast<double>(ops.memory().peak_of(MemCategory::activations))});
  // Phases of the recorded repetition on the backend's timeline (ffn-decode reports its own breakdown in
  // µs above): the paper's gate / up & down / top-K split, and every range name summed over its calls
  // (phase_<name>_ms, layers merged: the step-time breakdown). Nested names overlap their parents.
  double gate = 0, updown = 0, topk = 0;
  out.ranges = timer.events();
  std::map<std::string, double> phase;
  for (const auto& e : out.ranges) {
    const double ms = static_cast<double>(e.end_ns - e.start_ns) / 1e6;
    if (e.name == "ffn.gate") gate += ms;
    else if (e.name == "ffn.up" || e.name == "ffn.down") updown += ms;
    else if (e.name == "ffn.topk") topk += ms;
    if (!e.name.starts_with("layer.")) phase[e.name] += ms;
  }
  // Ranges opened while a CUDA graph was captured (the GPU decode step) are not timed: no breakdown then.
  const bool ffn_timed = std::any_of(out.ranges.begin(), out.ranges.end(),
                                     [](const HostRangeTimer::Event& e) { return e.name.starts_with("ffn."); });
  if (ffn_timed) {
    m.push_back({"gate_ms", gate});
    m.push_back({"up_down_ms", updown});
    m.push_back({"topk_ms", topk});
  }
  for (const auto& [name, ms] : phase) m.push_back({"phase_" + name + "_ms", ms});
  if (!out.profile) out.memory_events = ops.memory().events();
  m.insert(m.end(), out.profile_metrics.begin(), out.profile_metrics.end());  // after the point's own metrics
  if (spec.comm != nullptr && spec.comm->world() > 1) join_rank_metrics(*spec.comm, m);  // rank 0: every rank's
  return out;
}

}  // namespace moc

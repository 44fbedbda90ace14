#include "app/harness/point_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>

#include "app/harness/dist_launch.h"
#include "app/modes/mode.h"
#include "app/modes/mode_util.h"
#include "profiling/recording_ops.h"
#include "profiling/tracer.h"

namespace moc {

namespace {

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
  bool flush = false;  // cold timing (every mode but ffn-decode): the caches evicted before each repetition
  // Per stamped repetition: its time and its launches' stamps (the profile's stages come from the median one).
  struct StampedRep {
    double t = 0;
    std::vector<StampedLaunch> launches;
    std::uint64_t dropped = 0;
  };
  std::vector<StampedRep> stamped_reps;
  const StampedRep* stages_from = nullptr;  // the stamped repetition whose stages each profiled step gets
  double operator()(const std::function<void()>& fn) {
    if (stop && stop->load()) throw Interrupted();
    if (flush) ops.flush_caches();  // issued before the repetition's timing (and profiled step) begins
    if (phase != Phase::timing) {
      if (phase == Phase::profiled) tracer->begin_step();
      const double t = timed(ops, fn);  // synchronizes: the step's work is done when it ends
      if (phase == Phase::profiled) {
        tracer->end_step();
        // The profiled steps run unstamped (stamping costs 1-5% of a MoC step: it would lengthen the very
        // kernels it splits); each gets the stages of the median stamped repetition, the same work.
        if (stages_from) tracer->add_stamps(stages_from->launches, stages_from->dropped);
      } else if (phase == Phase::stamped) {
        // This repetition measures what stamping costs; its stamps are kept for the profiled steps' stages
        // and say how long the stamped kernels ran without CUPTI attached (profile_pass).
        StampedRep rep{t, {}, 0};
        rep.launches = ops.take_stamps(&rep.dropped);
        stamped_reps.push_back(std::move(rep));
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

// The profile pass of a point, after its timed repetitions: `sample` runs one repetition through the
// Recorder (as the measuring loop does). First the same work untraced, then `start` brings the tracer up
// (on the GPU: subscribes to CUPTI and re-captures the point's graphs, so that their nodes map to ranges)
// and the work runs traced (the tracing overhead; those records are dropped), then spec.profile_steps
// profiled steps whose records, ranges and allocator events make the point's profile. On the GPU the
// profiled steps run with stage stamping off; their stamped kernels get the stages of an untraced stamped
// repetition of the same work (the median of those that measured the stamps' cost).
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
  rec.stamped_reps.clear();
  rec.stages_from = nullptr;
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
  // The stamped repetition of median time: its stages go onto every profiled step (Recorder::stages_from).
  std::vector<const Recorder::StampedRep*> by_time;
  for (const auto& r : rec.stamped_reps)
    if (!r.launches.empty()) by_time.push_back(&r);
  std::sort(by_time.begin(), by_time.end(), [](const auto* a, const auto* b) { return a->t < b->t; });
  rec.stages_from = by_time.empty() ? nullptr : by_time[(by_time.size() - 1) / 2];
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
  for (int i = 0; i < std::max(1, spec.profile_steps); ++i) sample();
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
    // The stamped kernels' own time in those untraced repetitions (median; first block's start to last block's
    // end, summed over a repetition's launches): the stamped kernels as the timed runs see them, without
    // CUPTI's overhead on the profiled steps.
    std::vector<double> kernel_ms;
    for (const auto& r : rec.stamped_reps) {
      double ns = 0;
      for (const auto& l : r.launches) ns += static_cast<double>(l.end_ns - l.start_ns);
      if (ns > 0) kernel_ms.push_back(ns / 1e6);
    }
    if (!kernel_ms.empty()) m.push_back({"profile_stamped_kernel_ms", median_of(kernel_ms)});
    if (rec.stages_from) m.push_back({"profile_stage_rep_ms", rec.stages_from->t * 1e3});
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

// The driver's side of a point (PointState's implementation): the backend (through the recording decorator
// when the CPU profiles), the ranges, the Recorder every repetition goes through, and the tracer.
struct Harness {
  Harness(Ops& backend, const PointSpec& s, const Mode& m, ModelConfig c, PointOutcome& o);
  void profile(const std::function<double()>& sample, const std::function<void()>& recapture);
  void shared_metrics();

  const PointSpec& spec;
  const Mode& mode;
  PointOutcome& out;
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
  Ops& ops;
  ModelConfig cfg;
  MarkRangeTimer timer;
  NvtxRangeSink nvtx;  // on the GPU the same ranges also go to NVTX (Nsight Systems)
  LateRangeSink to_tracer;
  TeeRangeSink tee;
  Recorder rec;
  std::mt19937 rng;
};

namespace {

std::unique_ptr<prof::Tracer> cpu_tracer(const PointSpec& spec, Ops& backend) {
  if (!spec.profile || backend.device() == DeviceKind::cuda) return nullptr;
  return std::make_unique<prof::CpuTracer>();
}

// The allocator with no events recorded and its peak reset: the point's peak is what its mode allocates.
Ops& fresh_memory(Ops& ops) {
  ops.memory().set_record_events(false);
  ops.memory().reset_peak();
  return ops;
}

// The point's model: spec.model with seq_len covering the point's sequences, validated.
ModelConfig point_config(const PointSpec& spec) {
  ModelConfig cfg = spec.model;
  if (spec.batch <= 0 || spec.seq <= 0) throw ConfigError("batch and seq must be positive");
  cfg.seq_len = std::max(cfg.seq_len, std::max(spec.seq, spec.prompt + spec.generate));
  cfg.validate();
  return cfg;
}

}  // namespace

Harness::Harness(Ops& backend, const PointSpec& s, const Mode& m, ModelConfig c, PointOutcome& o)
    : spec(s),
      mode(m),
      out(o),
      tracer(cpu_tracer(s, backend)),
      recording(tracer ? std::make_unique<prof::RecordingOps>(backend, static_cast<prof::CpuTracer&>(*tracer))
                       : nullptr),
      ops(recording ? static_cast<Ops&>(*recording) : backend),
      cfg(std::move(c)),
      timer(fresh_memory(ops)),
      to_tracer(tracer.get()),
      tee({&timer, ops.device() == DeviceKind::cuda ? &nvtx : nullptr, &to_tracer}),
      // cold: flushes before each repetition, unless the mode makes its work cold itself (ffn-decode).
      rec{ops,    timer,    spec.measure.warmup, &out.memory_baseline_bytes, spec.stop, tracer.get(),
          Recorder::Phase::timing, 0, spec.cold && mode.flush_when_cold, {}, nullptr},
      rng(static_cast<std::uint32_t>(cfg.seed)) {}

// After a mode's timed repetitions: its profile, from the same repetition function. recapture re-records the
// point's CUDA graphs once the tracer is up (it must see their nodes created inside the ranges).
void Harness::profile(const std::function<double()>& sample, const std::function<void()>& recapture) {
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
}

// What every point reports after its mode's own metrics: the repetitions' statistics, peak memory by category,
// and the phases of the recorded repetition.
void Harness::shared_metrics() {
  auto& m = out.metrics;
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
  // The rates of the cost a mode declares for one repetition (app/modes/mode.h), for every mode that declares
  // one: the achieved bandwidth of its bytes and its model FLOP rate. Modes that report one themselves
  // (ffn-decode's achieved_GBps, train's model_tflops) keep theirs: the same expressions.
  auto has = [&](std::string_view name) {
    return std::any_of(m.begin(), m.end(), [&](const auto& x) { return x.first == name; });
  };
  if (out.cost.bytes > 0 && out.stats.median_s > 0 && !has("achieved_GBps"))
    m.push_back({"achieved_GBps", out.cost.bytes / out.stats.median_s / 1e9});
  if (out.cost.flops > 0 && out.stats.median_s > 0 && !has("model_tflops"))
    m.push_back({"model_tflops", out.cost.flops / out.stats.median_s / 1e12});
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
}

Ops& PointState::ops() const { return h_.ops; }
const PointSpec& PointState::spec() const { return h_.spec; }
const ModelConfig& PointState::config() const { return h_.cfg; }
std::mt19937& PointState::rng() const { return h_.rng; }
RangeSink* PointState::ranges() const { return &h_.tee; }
PointOutcome& PointState::outcome() const { return h_.out; }
void PointState::metric(std::string name, double value) const { h_.out.metrics.emplace_back(std::move(name), value); }
double PointState::repetition(const std::function<void()>& fn) const { return h_.rec(fn); }
bool PointState::timing() const { return h_.rec.phase == Recorder::Phase::timing; }
bool PointState::flushes() const { return h_.rec.flush; }
prof::Tracer* PointState::tracer() const { return h_.rec.tracer; }
void PointState::set_cost(const RepetitionCost& c) const { h_.out.cost = c; }

void PointState::check_stop() const {
  if (h_.spec.stop && h_.spec.stop->load()) throw Interrupted();
}

const Stats& PointState::exec(const std::function<double()>& sample, const ExecOptions& opt) const {
  MeasureSettings ms = h_.spec.measure;
  if (opt.agree) ms.agree = opt.agree;
  h_.out.stats = measure(ms, sample);
  if (opt.profile) h_.profile(sample, opt.recapture);
  return h_.out.stats;
}

double ffn_matmul_params(const ModelConfig& cfg) {
  const double d = cfg.hidden, F = cfg.d_ffn;
  return cfg.ffn.kind == FfnKind::dense ? 3 * d * F : 2 * d * F + d * cfg.kept_channels();
}

double train_flops_per_token(const ModelConfig& cfg, int seq) {
  // Model FLOPs per token of a training step (forward + backward = 3 x forward, PaLM's convention):
  // 6 x the matmul parameters a token runs through (q/k/v/o, the FFN as executed -- MoC's down
  // projection on its kept channels only -- and the LM head; not the embedding lookup) plus
  // 12 x layers x hidden x seq for the attention scores and values (causal counted in full, as PaLM).
  const double d = cfg.hidden, kvd = static_cast<double>(cfg.kv_heads) * cfg.head_dim();
  // A mixture of experts: each token runs through its experts_per_token experts and the router.
  const double ffn_one = ffn_matmul_params(cfg);
  const double ffn_params = cfg.moe() ? cfg.experts_per_token * ffn_one + d * cfg.experts : ffn_one;
  const double matmul_params = cfg.layers * (2 * d * d + 2 * d * kvd + ffn_params) + d * cfg.vocab;
  return 6 * matmul_params + 12.0 * cfg.layers * d * seq;
}

std::vector<std::string> point_modes() {
  std::vector<std::string> names;
  for (const Mode* m : all_modes()) names.emplace_back(m->name);
  return names;
}

PointOutcome run_point(Ops& backend, const PointSpec& spec) {
  PointOutcome out;
  ModelConfig cfg = point_config(spec);
  const Mode* mode = find_mode(spec.mode);
  if (mode == nullptr) {
    std::string modes;
    for (const auto& md : point_modes()) modes += (modes.empty() ? "" : ", ") + md;
    throw ConfigError("unknown mode '" + spec.mode + "'; use one of " + modes);
  }
  Harness h(backend, spec, *mode, std::move(cfg), out);
  if (mode->refuse) mode->refuse(spec, h.cfg);
  PointState state(h);
  mode->run(state);  // its tensors are freed on return; the peak and the recorded events stay
  h.shared_metrics();
  return out;
}

}  // namespace moc

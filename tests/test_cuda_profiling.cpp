// The CUPTI tracer on the GPU (skipped without one): a known sequence of kernels, copies, a memset and a graph
// replay is recorded once each with its name, launch configuration, stream and phase; durations agree with
// CUDA events; a 1b decode point's profile drops nothing and attributes every kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app/harness/point_bench.h"
#include "gpu_util.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/transformer.h"
#include "kernels/op_cost.h"
#include "profiling/roofline.h"
#include "profiling/tracer.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/profiler_probe.h"
#include "kernels/cuda/stage_stamps.cuh"  // kStampLaunches (its device part is nvcc-only)
#endif

namespace moc {
namespace {

using prof::ProfileTrace;

std::string path_of(const ProfileTrace& t, std::int64_t id) {
  std::map<std::int64_t, const prof::PhaseRange*> by_id;
  for (const auto& r : t.ranges) by_id[r.id] = &r;
  std::string p;
  for (auto it = by_id.find(id); it != by_id.end(); it = by_id.find(it->second->parent_id))
    p = it->second->name + (p.empty() ? "" : "/" + p);
  return p;
}

std::unique_ptr<prof::Tracer> tracer_or_fail() {
  std::string why;
  auto t = prof::make_cupti_tracer(&why);
  EXPECT_TRUE(t) << why;
  return t;
}

TEST(GpuProfiling, KnownSequenceIsRecordedOnceEachWithNameConfigStreamAndPhase) {
  MOC_GPU_OR_SKIP(ops);
  auto tracer = tracer_or_fail();
  if (!tracer) return;
  set_cost_sink(tracer.get());  // the ops' cost declarations (kernels/op_cost.h), as a profiled point has them
  struct Reset {
    ~Reset() { set_cost_sink(nullptr); }
  } reset;
  const std::int64_t n = 1000 + 37;  // odd
  Tensor x = ops->empty({n}, DType::f32, workspace_tag()), y = ops->empty({n}, DType::f32, workspace_tag());
  // A graph captured (inside a range) before the profile, replayed inside it.
  std::unique_ptr<OpGraph> graph;
  {
    ScopedRange r(tracer.get(), "captured");
    graph = ops->capture([&] { ops->fill(y, 2.0f); });
  }
  std::vector<float> host(static_cast<std::size_t>(n), 0.5f);
  tracer->enable();
  tracer->begin_step();
  {
    ScopedRange step(tracer.get(), "step");
    {
      ScopedRange r(tracer.get(), "zero");
      ops->fill(x, 0.0f);  // cudaMemsetAsync
    }
    {
      ScopedRange r(tracer.get(), "load");
      ops->upload(x, host.data());  // HtoD
    }
    {
      ScopedRange r(tracer.get(), "scale");
      ops->fill(x, 1.5f);  // fill_kernel
    }
    graph->replay();
    ops->synchronize();
  }
  tracer->end_step();
  const ProfileTrace t = tracer->finish({});
  EXPECT_EQ(t.source, "cupti");
  EXPECT_EQ(t.dropped_records, 0u);
  ASSERT_EQ(t.kernels.size(), 2u);
  ASSERT_EQ(t.memcpys.size(), 1u);
  ASSERT_EQ(t.memsets.size(), 1u);
  const auto& eager = t.kernels[0];
  const auto& replayed = t.kernels[1];
  EXPECT_NE(eager.name.find("fill_kernel"), std::string::npos) << eager.name;
  EXPECT_EQ(eager.short_name, "fill_kernel");
  EXPECT_EQ(eager.block_x, 256) << "kThreads";
  EXPECT_EQ(eager.grid_x, static_cast<int>((n + 255) / 256));
  EXPECT_GT(eager.registers_per_thread, 0);
  EXPECT_EQ(eager.graph_node_id, 0u);
  EXPECT_EQ(path_of(t, eager.range_id), "step/scale");
  EXPECT_NE(replayed.graph_node_id, 0u);
  EXPECT_EQ(path_of(t, replayed.range_id), "step/captured");
  // Each kernel carries its op's declaration: eager (by its launch call) and replayed (by its captured node).
  for (const auto* k : {&eager, &replayed}) {
    EXPECT_EQ(k->op, "fill") << k->name;
    EXPECT_EQ(k->op_bytes, n * 4) << k->name;
    EXPECT_GE(k->op_call, 0) << k->name;
  }
  EXPECT_NE(eager.op_call, replayed.op_call);
  EXPECT_EQ(eager.stream_id, replayed.stream_id) << "one stream";
  EXPECT_EQ(t.memcpys[0].copy_kind, "HtoD");
  EXPECT_EQ(t.memcpys[0].bytes, n * 4);
  EXPECT_EQ(path_of(t, t.memcpys[0].range_id), "step/load");
  EXPECT_EQ(t.memsets[0].bytes, n * 4);
  EXPECT_EQ(path_of(t, t.memsets[0].range_id), "step/zero");
  // Launch records: every op's correlation id has an API call, and every op starts after it.
  std::map<std::uint32_t, std::int64_t> api;
  for (const auto& a : t.api) api.emplace(a.correlation_id, a.start_ns);
  for (const auto& k : t.kernels) {
    ASSERT_TRUE(api.count(k.correlation_id)) << k.name;
    EXPECT_GT(k.start_ns, api[k.correlation_id]);
  }
  EXPECT_TRUE(std::any_of(t.api.begin(), t.api.end(), [](const prof::ApiRecord& a) {
    return a.name.rfind("cudaGraphLaunch", 0) == 0 || a.name.rfind("cuGraphLaunch", 0) == 0;
  }));
}

TEST(GpuProfiling, KernelDurationsAgreeWithCudaEvents) {
  MOC_GPU_OR_SKIP(ops);
  auto tracer = tracer_or_fail();
  if (!tracer) return;
  // 2 GiB: ~0.7 ms to fill on an H100, ~0.5 ms on an H200. CUDA events around one launch also count its
  // launch (~10-15 us, measured on an H200 with a 1 GiB fill: CUPTI 0.258 ms, events 0.272 ms), which a
  // CUPTI record does not: the buffer is large enough that this stays well inside the tolerance.
  Tensor big = ops->empty({std::int64_t{512} << 20}, DType::f32, workspace_tag());
  for (int i = 0; i < 3; ++i) ops->fill(big, 1.0f);
  tracer->enable();
  std::vector<double> events_ms;
  for (int i = 0; i < 7; ++i) {
    tracer->begin_step();
    events_ms.push_back(ops->timed([&] { ops->fill(big, static_cast<float>(i + 2)); }) * 1e3);
    tracer->end_step();
  }
  const ProfileTrace t = tracer->finish({});
  ASSERT_EQ(t.kernels.size(), 7u);
  std::vector<double> cupti_ms;
  for (const auto& k : t.kernels) cupti_ms.push_back(static_cast<double>(k.end_ns - k.start_ns) / 1e6);
  std::sort(cupti_ms.begin(), cupti_ms.end());
  std::sort(events_ms.begin(), events_ms.end());
  const double a = cupti_ms[3], b = events_ms[3];
  EXPECT_NEAR(a, b, 0.05 * b) << "CUPTI median " << a << " ms, CUDA events median " << b << " ms";
}

// Spin kernels of ~10, 20 and 30 us, each timed alone with CUDA events, then traced as a PDL chain behind a
// 200 us spin that keeps the GPU busy while the host enqueues them, so that every one of them starts early
// and waits for its predecessor inside its record: their inclusive times hold the waits, their exclusive
// times are their own work again. CUDA events around back-to-back launches also count the ~1 us launch gap
// that a CUPTI record does not: the tolerance is 10% or 1.5 us, whichever is larger.
TEST(GpuProfiling, PdlChainExclusiveTimesMatchSoloDurations) {
  MOC_GPU_OR_SKIP(ops);
#ifdef MOCBENCH_HAVE_CUDA
  auto tracer = tracer_or_fail();
  if (!tracer) return;
  void* st = cuda::probe::make_stream();
  const std::vector<std::int64_t> spins = {10000, 20000, 30000};
  std::vector<double> solo_ns;
  for (auto ns : spins) solo_ns.push_back(cuda::probe::timed_spin_ms({ns}, 50, st) * 1e6);
  std::vector<std::int64_t> chain = {200000};
  chain.insert(chain.end(), spins.begin(), spins.end());
  cuda::probe::spin_chain(chain, true, st);  // warm-up of the PDL launch path
  cuda::probe::synchronize(st);
  tracer->enable();
  // CUPTI's first traced launches set up its buffers (~0.5 ms seen on an H100): traced once outside the step.
  cuda::probe::spin_chain(chain, true, st);
  cuda::probe::synchronize(st);
  tracer->begin_step();
  cuda::probe::spin_chain(chain, true, st);
  cuda::probe::synchronize(st);
  tracer->end_step();
  ProfileTrace t = tracer->finish({});
  cuda::probe::destroy_stream(st);
  ASSERT_EQ(t.kernels.size(), 4u);
  std::sort(t.kernels.begin(), t.kernels.end(),
            [](const prof::KernelRecord& a, const prof::KernelRecord& b) { return a.start_ns < b.start_ns; });
  const auto ex = prof::device_times(t, prof::TimeMode::exclusive);
  const auto in = prof::device_times(t, prof::TimeMode::inclusive);
  for (std::size_t i = 1; i < 4; ++i) {
    const double solo = solo_ns[i - 1];
    std::printf("spin %lld ns: solo (CUDA events) %.0f ns, inclusive %lld ns, exclusive %lld ns, started %lld ns "
                "before its predecessor ended\n",
                static_cast<long long>(spins[i - 1]), solo, static_cast<long long>(in.kernels[i]),
                static_cast<long long>(ex.kernels[i]), static_cast<long long>(t.kernels[i - 1].end_ns - t.kernels[i].start_ns));
    EXPECT_NEAR(static_cast<double>(ex.kernels[i]), solo, std::max(0.10 * solo, 1500.0)) << "kernel " << i;
    // It did start early (else the test shows nothing): its record overlaps its predecessor's.
    EXPECT_LT(t.kernels[i].start_ns, t.kernels[i - 1].end_ns) << "kernel " << i;
    EXPECT_GT(in.kernels[i], ex.kernels[i]) << "kernel " << i;
  }
  std::int64_t sum = 0;
  for (auto v : ex.kernels) sum += v;
  EXPECT_EQ(sum, prof::busy_ns(t));
#endif
}

// A spin kernel stamped whole (device-side stamps: its first block's start after the wait to its last
// block's end) lasts what CUDA events say, within 5%: 200 us spins, 20 launches timed by events, each also
// stamped. Events over back-to-back launches also count the launch gap (1-3 us seen on an H100; with 50 us
// spins that alone was 5.7%), which a stamp does not. Off, nothing is stamped.
TEST(GpuProfiling, StampedSpinKernelMatchesCudaEvents) {
  MOC_GPU_OR_SKIP(ops);
#ifdef MOCBENCH_HAVE_CUDA
  void* st = cuda::probe::make_stream();
  std::uint64_t dropped = 0;
  cuda::probe::spin_chain({1000}, false, st);
  cuda::probe::synchronize(st);
  EXPECT_TRUE(ops->take_stamps(&dropped).empty()) << "stamping is off";
  ops->set_stamping(true);
  const double events_ns = cuda::probe::timed_spin_ms({200000}, 20, st) * 1e6;  // + 1 warm-up launch
  auto launches = ops->take_stamps(&dropped);
  ops->set_stamping(false);
  cuda::probe::destroy_stream(st);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(launches.size(), 21u);
  std::vector<double> stamped;
  for (const auto& l : launches) {
    EXPECT_EQ(l.kernel, "spin_kernel");
    EXPECT_EQ(l.blocks, 1);
    ASSERT_EQ(l.stages.size(), 1u);
    EXPECT_EQ(l.stages[0].stage, "work");
    EXPECT_EQ(l.stages[0].end_ns - l.stages[0].start_ns, l.end_ns - l.start_ns);
    stamped.push_back(static_cast<double>(l.end_ns - l.start_ns));
  }
  std::sort(stamped.begin(), stamped.end());
  const double med = stamped[stamped.size() / 2];
  std::printf("200 us spin: stamped median %.0f ns, CUDA events %.0f ns per launch\n", med, events_ns);
  EXPECT_NEAR(med, events_ns, 0.05 * events_ns);
#endif
}

// The decode step (one kernel per op, chained with PDL, replayed from a graph): the decode FFN's own kernels
// stamp themselves -- at batch 1 each FFN is one ring kernel, k_updown: dense and a:b "gate & up" (everything until
// the last z), then "down"; row top-K "gate", "top-K", "up", "down" (the gate, selection and up/down kernels stamp
// "gate", "top-K" and "up" / "down" each, as at batch 2: ManyLaunchesFillTheSlotsInOrderAndCountTheRestDropped) --
// from their first block past its dependency wait to their last block's end, one launch per kernel per
// layer in order, each inside its CUPTI record and ending where it ends (to the stamp's alignment). Three
// layers of the 1b shape (vocab 512), batch 1. Off, nothing stamps.
TEST(GpuStageStamps, DecodeFfnKernelsStampTheirWorkAfterTheirWait) {
  MOC_GPU_OR_SKIP(gpu);
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  const int layers = 3;
  const std::map<std::string, std::vector<std::pair<std::string, std::vector<std::string>>>> expected = {
      {"dense", {{"k_updown", {"gate & up", "down"}}}},
      {"moc", {{"k_updown", {"gate", "top-K", "up", "down"}}}},  // the top-K ring: one kernel, four stages
      {"moc_2:8", {{"k_updown", {"gate & up", "down"}}}}};  // the a:b ring: gate, selection and up, then down
  for (const auto& [ffn, per_layer] : expected) {
    SCOPED_TRACE(ffn);
    ModelConfig cfg = preset("1b-gqa");
    apply_override(cfg, "ffn", ffn);
    cfg.layers = layers;
    cfg.vocab = 512;
    cfg.ffn.k = 1024;
    cfg.seed = seed;
    cfg.init_std = 0.02f;
    cfg.param_dtype = cfg.act_dtype = DType::bf16;
    Transformer m(*gpu, cfg);
    m.prepare_decode();
    Decoder dec(m, 1, 8);
    dec.prefill({1, 2, 3}, 3);
    dec.step({4});
    std::string why;
    auto tracer = prof::make_cupti_tracer(&why);
    ASSERT_TRUE(tracer) << why;
    auto graph = dec.capture_step();
    graph->replay();  // warm
    dec.advance();
    gpu->synchronize();
    std::uint64_t dropped = 0;
    EXPECT_TRUE(gpu->take_stamps(&dropped).empty()) << "stamping is off";
    gpu->set_stamping(true);
    tracer->enable();
    tracer->begin_step();
    graph->replay();
    gpu->synchronize();
    tracer->end_step();
    auto launches = gpu->take_stamps(&dropped);
    gpu->set_stamping(false);
    EXPECT_EQ(dropped, 0u);
    ASSERT_EQ(launches.size(), per_layer.size() * static_cast<std::size_t>(layers));
    for (std::size_t i = 0; i < launches.size(); ++i) {
      SCOPED_TRACE(i);
      const auto& l = launches[i];
      const auto& want = per_layer[i % per_layer.size()];
      EXPECT_EQ(l.kernel, want.first);
      ASSERT_EQ(l.stages.size(), want.second.size());
      std::int64_t at = l.start_ns;
      for (std::size_t s = 0; s < want.second.size(); ++s) {
        EXPECT_EQ(l.stages[s].stage, want.second[s]);
        EXPECT_EQ(l.stages[s].start_ns, at);
        EXPECT_GE(l.stages[s].end_ns, l.stages[s].start_ns);
        at = l.stages[s].end_ns;
      }
      EXPECT_EQ(at, l.end_ns);
      if (i > 0) {
        EXPECT_GE(l.start_ns, launches[i - 1].end_ns) << "a stamped launch starts after its predecessor ended";
      }
    }
    tracer->add_stamps(std::move(launches), dropped);
    const prof::ProfileTrace t = tracer->finish({});
    std::map<std::string, std::vector<const prof::KernelRecord*>> recs;
    for (const auto& k : t.kernels) recs[k.short_name].push_back(&k);
    const auto owner = prof::stage_kernels(t);
    ASSERT_EQ(owner.size(), t.stages.size());
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      ASSERT_GE(owner[i], 0) << t.stages[i].kernel << " stage without its record";
      const auto& k = t.kernels[static_cast<std::size_t>(owner[i])];
      EXPECT_GE(t.stages[i].start_ns, k.start_ns) << k.short_name;
      EXPECT_LE(t.stages[i].end_ns, k.end_ns) << k.short_name;
    }
    for (const auto& [name, stages] : per_layer) EXPECT_EQ(recs[name].size(), static_cast<std::size_t>(layers)) << name;
  }
}

// The buffer's slots over many stamped launches between two read-backs: each launch takes the next slot (its
// blocks' tickets; the last one moves the buffer on), so the slots hold the launches in order, each whole, and
// the launches past the buffer are counted dropped, not written over earlier slots.
TEST(GpuStageStamps, ManyLaunchesFillTheSlotsInOrderAndCountTheRestDropped) {
#ifndef MOCBENCH_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  MOC_GPU_OR_SKIP(gpu);
  ModelConfig cfg = preset("1b-gqa");
  apply_override(cfg, "ffn", "moc");
  cfg.layers = 2;
  cfg.vocab = 512;
  cfg.ffn.k = 1024;
  cfg.seed = test::fresh_seed();
  cfg.init_std = 0.02f;
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  Transformer m(*gpu, cfg);
  m.prepare_decode();
  Decoder dec(m, 2, 64);  // batch 2: the selection kernel is a cluster of two blocks, the gate many
  dec.prefill({1, 2, 3, 4, 5, 6}, 3);
  dec.step({7, 8});
  auto graph = dec.capture_step();
  graph->replay();
  dec.advance();
  gpu->synchronize();
  std::uint64_t dropped = 0;
  gpu->take_stamps(&dropped);
  gpu->set_stamping(true);
  const int per_step = 3 * cfg.layers;  // k_gate, k_select, k_updown per layer
  const int steps = cuda::step::kStampLaunches / per_step + 3;
  ASSERT_LT(dec.position() + steps, dec.max_seq());
  for (int i = 0; i < steps; ++i) {
    graph->replay();
    dec.advance();
  }
  gpu->synchronize();
  dropped = 0;
  const auto launches = gpu->take_stamps(&dropped);
  gpu->set_stamping(false);
  ASSERT_EQ(launches.size(), static_cast<std::size_t>(cuda::step::kStampLaunches));
  EXPECT_EQ(dropped, static_cast<std::uint64_t>(steps * per_step - cuda::step::kStampLaunches));
  const char* order[] = {"k_gate", "k_select", "k_updown"};
  for (std::size_t i = 0; i < launches.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(launches[i].kernel, order[i % 3]);
    EXPECT_GT(launches[i].blocks, 0);
    EXPECT_LE(launches[i].start_ns, launches[i].end_ns);
    if (i > 0) {
      EXPECT_GE(launches[i].start_ns, launches[i - 1].end_ns);
    }
  }
  dropped = 0;
  EXPECT_TRUE(gpu->take_stamps(&dropped).empty()) << "the read-back cleared the buffer";
  EXPECT_EQ(dropped, 0u);
#endif
}

TEST(GpuProfiling, DecodePointOfThe1bModelDropsNothingAndAttributesEveryKernel) {
  MOC_GPU_OR_SKIP(ops);
  PointSpec spec;
  spec.mode = "decode";
  spec.model = preset("1b");
  spec.model.param_dtype = spec.model.act_dtype = DType::bf16;
  spec.model.ffn.kind = FfnKind::moc;
  spec.model.ffn.k = 1024;
  spec.batch = 4;
  spec.prompt = 16;
  spec.generate = 32;
  spec.measure.warmup = 2;
  spec.measure.min_reps = 5;
  spec.measure.max_reps = 10;
  spec.profile = true;
  spec.profile_steps = 8;
  const PointOutcome out = run_point(*ops, spec);
  ASSERT_TRUE(out.profile.has_value()) << out.profile_note;
  const ProfileTrace& t = *out.profile;
  EXPECT_EQ(t.steps, 8);
  EXPECT_EQ(t.dropped_records, 0u);
  ASSERT_GT(t.kernels.size(), 8u * 24u * 5u);
  std::set<std::string> phases;
  for (const auto& k : t.kernels) {
    ASSERT_GE(k.range_id, 0) << k.name;
    ASSERT_NE(k.graph_node_id, 0u) << k.name << ": the decode step is a replayed graph";
    phases.insert(path_of(t, k.range_id));
  }
  EXPECT_TRUE(phases.count("step/layer.23/attention"));
  EXPECT_TRUE(phases.count("step/layer.0/ffn/ffn.decode"));
  EXPECT_TRUE(phases.count("step/head"));
  // Every kernel of the step carries what its op declared (the roofline), the FFN's per kernel; attention's
  // bytes grow with the positions each step attends.
  std::set<std::string> ops_declared;
  std::map<int, std::int64_t> attn;
  for (const auto& k : t.kernels) {
    EXPECT_GE(k.op_bytes, 0) << k.name << " in " << path_of(t, k.range_id) << ": undeclared";
    ops_declared.insert(k.op);
    if (k.op == "attention_decode") attn[k.step] += k.op_bytes;
  }
  for (const char* op : {"gemm", "rmsnorm_forward", "attention_decode", "ffn_decode.gate", "ffn_decode.select",
                         "ffn_decode.up_down", "lm_head_argmax"})
    EXPECT_TRUE(ops_declared.count(op)) << op;
  ASSERT_EQ(attn.size(), 8u);
  EXPECT_EQ(attn[1] - attn[0], 24LL * 2 * 4 * spec.model.kv_heads * spec.model.head_dim() * 2)
      << "one more K and V row per layer, sequence and KV head";
  bool overhead = false;
  for (const auto& [k, v] : out.metrics) overhead = overhead || (k == "profile_overhead_pct" && std::isfinite(v));
  EXPECT_TRUE(overhead);
  // Exclusive times of each step sum to its busy time; inclusive ones exceed it where PDL kernels overlapped.
  const auto ex = prof::device_times(t, prof::TimeMode::exclusive);
  std::int64_t sum = 0;
  for (auto v : ex.kernels) sum += v;
  for (auto v : ex.memcpys) sum += v;
  for (auto v : ex.memsets) sum += v;
  EXPECT_EQ(sum, prof::busy_ns(t));
}

// The one-layer point (mode ffn-decode) times the graph of what a decode step runs for its FFN: the decode FFN keeps
// its counters in the ops' zeroed scratch, which no capture may allocate, so the mode makes one call before it
// captures -- before, the dense and 2:8 graphs held a prep kernel (~0.7-1.1 us a call on an H100) that no decode
// step has. Dense, 2:8 and MoC top-K at batch 1: one ring kernel a call.
TEST(GpuProfiling, FfnDecodePointProfilesTheDecodeStepsKernels) {
  MOC_GPU_OR_SKIP(ops);
  const std::map<std::string, std::set<std::string>> want = {
      {"dense", {"k_updown"}}, {"moc_2:8", {"k_updown"}}, {"moc", {"k_updown"}}};
  for (const auto& [ffn, kernels] : want) {
    SCOPED_TRACE(ffn);
    PointSpec spec;
    spec.mode = "ffn-decode";
    spec.model = preset("1b");
    apply_override(spec.model, "ffn", ffn);
    spec.model.ffn.k = 1024;
    spec.model.param_dtype = spec.model.act_dtype = DType::bf16;
    spec.batch = 1;
    spec.measure.warmup = 1;
    spec.measure.min_reps = 3;
    spec.measure.max_reps = 3;
    spec.profile = true;
    spec.profile_steps = 2;
    const PointOutcome out = run_point(*ops, spec);
    ASSERT_TRUE(out.profile.has_value()) << out.profile_note;
    const ProfileTrace& t = *out.profile;
    std::set<std::string> seen;
    for (const auto& k : t.kernels) seen.insert(k.short_name);
    EXPECT_EQ(seen, kernels);
    // The profiled steps run unstamped; every record of a stamped kernel in each of them carries the stages
    // of the median stamped repetition, ending where the record ends.
    double rep_ms = -1, copies = 0, calls = 0;
    for (const auto& [name, v] : out.metrics) {
      if (name == "profile_stage_rep_ms") rep_ms = v;
      if (name == "weight_copies") copies = v;
      if (name == "calls_per_replay") calls = v;
    }
    EXPECT_GT(rep_ms, 0.0) << "the stamped repetition the stages come from";
    // A replay (the profiled step) is whole rounds over the weight copies, at least 16 calls, each call the
    // FFN's kernels once.
    ASSERT_GE(copies, 1.0);
    EXPECT_GE(calls, 16.0);
    EXPECT_EQ(std::fmod(calls, copies), 0.0);
    EXPECT_EQ(static_cast<double>(t.kernels.size()), calls * static_cast<double>(kernels.size()) * t.steps);
    const auto owner = prof::stage_kernels(t);
    std::map<std::size_t, std::int64_t> last_end;  // kernel record -> its latest stage end
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      ASSERT_GE(owner[i], 0) << t.stages[i].kernel << " launch " << t.stages[i].launch;
      const auto k = static_cast<std::size_t>(owner[i]);
      EXPECT_LE(t.stages[i].start_ns, t.stages[i].end_ns);
      last_end[k] = std::max(last_end.count(k) ? last_end[k] : 0, t.stages[i].end_ns);
    }
    for (std::size_t k = 0; k < t.kernels.size(); ++k) {
      SCOPED_TRACE(t.kernels[k].short_name);
      ASSERT_TRUE(last_end.count(k)) << "a stamped kernel's record without stages (step " << t.kernels[k].step << ")";
      EXPECT_EQ(last_end[k], t.kernels[k].end_ns);
    }
  }
}

}  // namespace
}  // namespace moc

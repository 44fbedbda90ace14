// The profiler core on the CPU: the recording Ops decorator (every op recorded once, in its innermost phase),
// attribution of eager and graph-replayed kernels to phase ranges, step windows, the allocator timeline, and
// a CPU point's profile end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "app/harness/point_bench.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "profiling/recording_ops.h"
#include "profiling/tracer.h"
#include "test_util.h"

namespace moc {
namespace {

using prof::KernelRecord;
using prof::PhaseRange;
using prof::ProfileTrace;

const PhaseRange* range_by_id(const ProfileTrace& t, std::int64_t id) {
  for (const auto& r : t.ranges)
    if (r.id == id) return &r;
  return nullptr;
}

// "layer.0/attention": the range path of an op.
std::string path_of(const ProfileTrace& t, std::int64_t id) {
  std::string p;
  for (const PhaseRange* r = range_by_id(t, id); r; r = range_by_id(t, r->parent_id)) p = r->name + (p.empty() ? "" : "/" + p);
  return p;
}

TEST(RecordingOps, RecordsEveryOpOnceInItsInnermostRangeAndOnlyInsideSteps) {
  auto cpu = make_cpu_ops();
  prof::CpuTracer tracer;
  prof::RecordingOps ops(*cpu, tracer);
  std::mt19937 rng(test::fresh_seed());
  const int n = 3 + static_cast<int>(rng() % 5);
  Tensor a = ops.empty({n, 4}, DType::f32, workspace_tag()), b = ops.empty({4, 5}, DType::f32, workspace_tag());
  Tensor c = ops.empty({n, 5}, DType::f32, workspace_tag());
  ops.fill(a, 1.0f);  // before enable(): not recorded
  tracer.enable();
  ops.fill(b, 2.0f);  // enabled, but outside a step: dropped
  tracer.begin_step();
  {
    ScopedRange outer(&tracer, "layer.0");
    ops.fill(c, 0.0f);
    {
      ScopedRange inner(&tracer, "ffn.gate");
      ops.gemm(a, false, b, false, c);
    }
    ops.add(c, c, c);
  }
  ops.fill(c, 3.0f);  // in the step, outside every range
  tracer.end_step();
  ops.fill(c, 4.0f);  // after the step: dropped
  const ProfileTrace t = tracer.finish({});
  EXPECT_EQ(t.source, "cpu");
  EXPECT_EQ(t.steps, 1);
  ASSERT_EQ(t.kernels.size(), 4u);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"fill", "layer.0"}, {"gemm", "layer.0/ffn.gate"}, {"add", "layer.0"}, {"fill", ""}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(t.kernels[i].name, want[i].first) << i;
    EXPECT_EQ(t.kernels[i].device_id, -1);
    EXPECT_EQ(path_of(t, t.kernels[i].range_id), want[i].second) << i;
    EXPECT_LE(t.kernels[i].start_ns, t.kernels[i].end_ns);
    EXPECT_GE(t.kernels[i].start_ns, t.start_ns);
    EXPECT_LE(t.kernels[i].end_ns, t.end_ns);
  }
  // Ranges: host times on the CPU; each counts the ops inside it and its children.
  ASSERT_EQ(t.ranges.size(), 2u);
  EXPECT_EQ(t.ranges[0].name, "layer.0");
  EXPECT_EQ(t.ranges[0].ops, 3);
  EXPECT_EQ(t.ranges[1].name, "ffn.gate");
  EXPECT_EQ(t.ranges[1].ops, 1);
  EXPECT_EQ(t.ranges[1].depth, 1);
  EXPECT_EQ(t.ranges[1].parent_id, t.ranges[0].id);
  EXPECT_EQ(t.ranges[0].start_ns, t.ranges[0].host_start_ns);
  EXPECT_LE(t.ranges[0].start_ns, t.ranges[1].start_ns);
  EXPECT_GE(t.ranges[0].end_ns, t.ranges[1].end_ns);
}

TEST(RecordingOps, ReplayedCpuGraphsAreRecordedPerReplay) {
  auto cpu = make_cpu_ops();
  prof::CpuTracer tracer;
  prof::RecordingOps ops(*cpu, tracer);
  Tensor x = ops.empty({7}, DType::f32, workspace_tag());
  auto graph = ops.capture([&] {
    ScopedRange r(&tracer, "head");
    ops.fill(x, 1.0f);
    ops.add(x, x, x);
  });
  tracer.enable();
  for (int s = 0; s < 3; ++s) {
    tracer.begin_step();
    graph->replay();
    tracer.end_step();
  }
  const ProfileTrace t = tracer.finish({});
  EXPECT_EQ(t.steps, 3);
  ASSERT_EQ(t.kernels.size(), 6u);
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    EXPECT_EQ(t.kernels[i].step, static_cast<int>(i / 2));
    EXPECT_EQ(path_of(t, t.kernels[i].range_id), "head");
  }
}

// A tracer whose clock the test sets and whose records the test injects, like the CUPTI tracer's.
class FakeGpuTracer final : public prof::Tracer {
 public:
  std::int64_t clock = 1000;
  void enable() override {}
  void disable() override {}
  std::string source() const override { return "cupti"; }
  std::int64_t now_ns() override { return clock; }
  std::int64_t from_steady(std::chrono::steady_clock::time_point t) override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  void api(const std::string& name, std::int64_t start, std::uint32_t corr) {
    raw().api.push_back({name, "runtime", start, start + 5, corr, 1, 0});
  }
  void kernel(const std::string& name, std::int64_t start, std::int64_t end, std::uint32_t corr,
              std::uint64_t node = 0) {
    KernelRecord k;
    k.name = k.short_name = name;
    k.start_ns = start;
    k.end_ns = end;
    k.device_id = 0;
    k.stream_id = 7;
    k.correlation_id = corr;
    k.graph_node_id = node;
    k.graph_id = node ? 1 : 0;
    raw().kernels.push_back(k);
  }
};

TEST(TracerAttribution, EagerKernelsBelongToTheRangeOpenAtTheirLaunch) {
  FakeGpuTracer t;
  t.enable();
  t.clock = 100;
  t.begin_step();
  t.clock = 110;
  t.push("step");
  t.clock = 120;
  t.push("attention");
  t.api("cudaLaunchKernel", 125, 1);
  t.clock = 130;
  t.pop();
  t.api("cudaLaunchKernel", 135, 2);
  t.clock = 140;
  t.pop();
  t.clock = 900;
  t.end_step();
  t.api("cudaLaunchKernel", 950, 3);  // after the step: dropped with its kernel
  // The device runs behind the host: kernels start after their ranges closed on the host.
  t.kernel("attn_kernel", 300, 400, 1);
  t.kernel("residual_kernel", 400, 450, 2);
  t.kernel("late_kernel", 960, 990, 3);
  const ProfileTrace tr = t.finish({});
  ASSERT_EQ(tr.kernels.size(), 2u);
  EXPECT_EQ(path_of(tr, tr.kernels[0].range_id), "step/attention");
  EXPECT_EQ(path_of(tr, tr.kernels[1].range_id), "step");
  EXPECT_EQ(tr.api.size(), 2u);
  // Ranges take their kernels' span on the device, and keep the host's push/pop times.
  const PhaseRange* step = nullptr;
  const PhaseRange* attn = nullptr;
  for (const auto& r : tr.ranges) (r.name == "step" ? step : attn) = &r;
  ASSERT_TRUE(step && attn);
  EXPECT_EQ(step->start_ns, 300);
  EXPECT_EQ(step->end_ns, 450);
  EXPECT_EQ(step->ops, 2);
  EXPECT_EQ(step->host_start_ns, 110);
  EXPECT_EQ(step->host_end_ns, 140);
  EXPECT_EQ(attn->start_ns, 300);
  EXPECT_EQ(attn->end_ns, 400);
  EXPECT_EQ(attn->ops, 1);
}

TEST(TracerAttribution, GraphReplayedKernelsGetTheRangesOfTheirCapture) {
  FakeGpuTracer t;
  // Capture: ranges open while graph nodes are created (no step, long before the profile).
  t.clock = 10;
  t.push("layer.0");
  t.push("attention");
  t.map_graph_node(101);
  t.pop();
  t.push("ffn");
  t.push("ffn.decode");
  t.map_graph_node(102);
  t.map_graph_node(103);
  t.pop();
  t.pop();
  t.pop();
  t.push("unrelated");  // a range of an unprofiled repetition: forgotten
  t.pop();
  t.map_graph_node(104);  // created outside every range
  t.map_graph_node_clone(102, 202);  // instantiation copies a node under a new id
  t.enable();
  // Two profiled steps, each one graph launch inside a host "step" range.
  std::int64_t base = 1000;
  for (std::uint32_t launch : {50u, 60u}) {
    t.clock = base;
    t.begin_step();
    t.clock = base + 1;
    t.push("step");
    t.api("cudaGraphLaunch", base + 2, launch);
    t.clock = base + 3;
    t.pop();
    t.kernel("attn", base + 10, base + 20, launch, 101);
    t.kernel("gate", base + 20, base + 30, launch, 202);
    t.kernel("updown", base + 30, base + 40, launch, 103);
    t.kernel("argmax", base + 40, base + 45, launch, 104);
    t.clock = base + 100;
    t.end_step();
    base += 1000;
  }
  const ProfileTrace tr = t.finish({});
  ASSERT_EQ(tr.kernels.size(), 8u);
  const std::vector<std::string> want = {"step/layer.0/attention", "step/layer.0/ffn/ffn.decode",
                                         "step/layer.0/ffn/ffn.decode", "step"};
  for (std::size_t i = 0; i < tr.kernels.size(); ++i) {
    EXPECT_EQ(path_of(tr, tr.kernels[i].range_id), want[i % 4]) << tr.kernels[i].name;
    EXPECT_EQ(tr.kernels[i].step, static_cast<int>(i / 4));
  }
  // Each replay has its own copies of the captured ranges (no host times), under that step's "step".
  std::map<std::string, int> count;
  for (const auto& r : tr.ranges) {
    ++count[r.name];
    if (r.name != "step") {
      EXPECT_EQ(r.host_start_ns, 0);
      EXPECT_EQ(r.host_end_ns, 0);
    }
  }
  EXPECT_EQ(count["step"], 2);
  EXPECT_EQ(count["layer.0"], 2);
  EXPECT_EQ(count["ffn.decode"], 2);
  EXPECT_EQ(count["unrelated"], 0);
  // The copy of ffn.decode in the second step spans its two kernels.
  for (const auto& r : tr.ranges)
    if (r.name == "ffn.decode" && r.step == 1) {
      EXPECT_EQ(r.start_ns, 2020);
      EXPECT_EQ(r.end_ns, 2040);
      EXPECT_EQ(r.ops, 2);
      EXPECT_EQ(r.depth, 3);
    }
  // Kernels whose launch record is missing fall back to the graph launch before them.
  FakeGpuTracer u;
  u.clock = 5;
  u.push("head");
  u.map_graph_node(7);
  u.pop();
  u.clock = 100;
  u.begin_step();
  u.api("cudaGraphLaunch", 110, 9);
  u.kernel("argmax", 150, 160, /*corr=*/0, 7);
  u.clock = 200;
  u.end_step();
  const ProfileTrace ut = u.finish({});
  ASSERT_EQ(ut.kernels.size(), 1u);
  EXPECT_EQ(path_of(ut, ut.kernels[0].range_id), "head");
}

TEST(TracerCosts, GraphKernelsGetTheDeclarationOfTheirCaptureAndEagerOnesOfTheirLaunch) {
  FakeGpuTracer t;
  // Capture: an op declares itself, one of its kernels declares its own part (innermost wins); a second op
  // declares bytes per attended position (attention at decode); a node outside every declaration.
  t.clock = 10;
  {
    t.push_cost({"ffn_decode", 1000, 10});
    t.push_cost({"ffn_decode.gate", 600, 6});
    t.map_graph_node(1);
    t.pop_cost();
    t.map_graph_node(2);  // two kernels of the remaining op share one declaration
    t.map_graph_node(3);
    t.pop_cost();
    OpCost attn{"attention_decode", 100, 0};
    attn.bytes_per_pos = 8;
    attn.flops_per_pos = 2;
    t.push_cost(attn);
    t.map_graph_node(4);
    t.pop_cost();
    t.map_graph_node(5);
    t.map_graph_node_clone(2, 22);
  }
  t.enable();
  std::int64_t base = 1000;
  for (std::uint32_t launch : {50u, 60u}) {
    t.set_step_positions(launch == 50u ? 10 : 11);
    t.clock = base;
    t.begin_step();
    t.api("cudaGraphLaunch", base + 2, launch);
    // An eager kernel launched inside a declaration opened during the step.
    t.clock = base + 3;
    t.push_cost({"sample", 64, 1});
    t.api("cudaLaunchKernel", base + 4, launch + 1);
    t.clock = base + 5;
    t.pop_cost();
    t.api("cudaLaunchKernel", base + 6, launch + 2);  // after it closed: undeclared
    t.kernel("k_gate", base + 10, base + 20, launch, 1);
    t.kernel("k_select", base + 20, base + 25, launch, 22);
    t.kernel("k_updown", base + 25, base + 40, launch, 3);
    t.kernel("attn", base + 40, base + 50, launch, 4);
    t.kernel("argmax", base + 50, base + 52, launch, 5);
    t.kernel("sample", base + 60, base + 62, launch + 1);
    t.kernel("late", base + 70, base + 72, launch + 2);
    t.clock = base + 100;
    t.end_step();
    base += 1000;
  }
  const ProfileTrace tr = t.finish({});
  ASSERT_EQ(tr.kernels.size(), 14u);
  std::map<std::pair<int, std::string>, const KernelRecord*> by;
  for (const auto& r : tr.kernels) by[{r.step, r.name}] = &r;
  auto k = [&](int step, const std::string& name) { return by.at({step, name}); };
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(k(s, "k_gate")->op, "ffn_decode.gate");
    EXPECT_EQ(k(s, "k_gate")->op_bytes, 600);
    EXPECT_EQ(k(s, "k_select")->op, "ffn_decode");  // through the clone of node 2
    EXPECT_EQ(k(s, "k_updown")->op_bytes, 1000);
    EXPECT_EQ(k(s, "k_select")->op_call, k(s, "k_updown")->op_call);
    EXPECT_NE(k(s, "k_select")->op_call, k(s, "k_gate")->op_call);
    EXPECT_EQ(k(s, "attn")->op_bytes, 100 + 8 * (10 + s));  // positions of the step
    EXPECT_EQ(k(s, "attn")->op_flops, 2 * (10 + s));
    EXPECT_EQ(k(s, "argmax")->op_bytes, -1);
    EXPECT_EQ(k(s, "argmax")->op_call, -1);
    EXPECT_EQ(k(s, "sample")->op, "sample");
    EXPECT_EQ(k(s, "sample")->op_bytes, 64);
    EXPECT_EQ(k(s, "late")->op_bytes, -1);
  }
  // A replay in another step is another call of the same declaration.
  EXPECT_NE(k(0, "k_updown")->op_call, k(1, "k_updown")->op_call);
}

TEST(TracerAttribution, AllocatorEventsMoveOntoTheTraceClockWithLiveBytes) {
  prof::CpuTracer t;
  t.enable();
  const auto origin = std::chrono::steady_clock::now() - std::chrono::milliseconds(5);
  prof::AllocatorTimeline a;
  a.origin = origin;
  a.live_at_start = {{"weights", 1000}, {"activations", 0}};
  t.begin_step();
  const auto in_step = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin).count();
  a.events.push_back({in_step, "activations", "ffn", 3, 256});
  a.events.push_back({in_step + 1, "activations", "ffn", 3, -256});
  t.end_step();
  a.events.push_back({in_step + std::int64_t{10'000'000'000}, "weights", "", -1, 64});  // long after: dropped
  const ProfileTrace tr = t.finish(a);
  ASSERT_EQ(tr.allocator.size(), 4u);
  EXPECT_EQ(tr.allocator[0].category, "weights");
  EXPECT_EQ(tr.allocator[0].category_live_bytes, 1000);
  EXPECT_EQ(tr.allocator[0].t_ns, tr.start_ns);
  EXPECT_EQ(tr.allocator[2].bytes, 256);
  EXPECT_EQ(tr.allocator[2].category_live_bytes, 256);
  EXPECT_EQ(tr.allocator[2].layer, 3);
  EXPECT_EQ(tr.allocator[3].category_live_bytes, 0);
  EXPECT_GE(tr.allocator[2].t_ns, tr.start_ns);
  EXPECT_LE(tr.allocator[3].t_ns, tr.end_ns);
}

TEST(TraceBusy, UnionOfIntervals) {
  ProfileTrace t;
  auto k = [&](std::int64_t s, std::int64_t e) {
    KernelRecord r;
    r.start_ns = s;
    r.end_ns = e;
    t.kernels.push_back(r);
  };
  k(0, 10);
  k(5, 15);   // overlaps: union [0, 15]
  k(20, 30);  // gap of 5
  k(22, 25);  // inside
  prof::MemsetRecord m;
  m.start_ns = 30;
  m.end_ns = 32;  // touches the previous end
  t.memsets.push_back(m);
  EXPECT_EQ(prof::busy_ns(t), 15 + 12);
}

TEST(ProfiledPoint, CpuDecodePointStoresEveryOpOfItsStepsWithPhases) {
  PointSpec spec;
  spec.mode = "decode";
  spec.model = preset("tiny");
  spec.model.ffn.kind = FfnKind::moc;
  spec.model.ffn.k = spec.model.d_ffn / 4;
  spec.batch = 2;
  spec.prompt = 4;
  spec.generate = 6;
  spec.measure.warmup = 1;
  spec.measure.min_reps = 2;
  spec.measure.max_reps = 3;
  spec.profile = true;
  spec.profile_steps = 2;
  auto ops = make_cpu_ops();
  const PointOutcome out = run_point(*ops, spec);
  ASSERT_TRUE(out.profile.has_value()) << out.profile_note;
  const ProfileTrace& t = *out.profile;
  EXPECT_EQ(t.steps, 2);
  ASSERT_FALSE(t.kernels.empty());
  std::set<std::string> paths;
  for (const auto& k : t.kernels) {
    EXPECT_GE(k.range_id, 0) << k.name;  // the whole step is inside "step"
    paths.insert(path_of(t, k.range_id));
  }
  EXPECT_TRUE(paths.count("step/layer.0/attention")) << "attention ops";
  EXPECT_TRUE(paths.count("step/layer.0/ffn/ffn.decode")) << "the FFN's decode op";
  EXPECT_TRUE(paths.count("step/head")) << "LM head";
  // Both steps hold the same ops.
  const auto per_step = std::count_if(t.kernels.begin(), t.kernels.end(), [](const KernelRecord& k) { return k.step == 0; });
  EXPECT_EQ(static_cast<std::size_t>(per_step) * 2, t.kernels.size());
  auto metric = [&](const std::string& n) {
    for (const auto& [k, v] : out.metrics)
      if (k == n) return v;
    ADD_FAILURE() << "no metric " << n;
    return -1.0;
  };
  EXPECT_EQ(metric("profile_steps"), 2);
  EXPECT_EQ(metric("profile_kernels"), static_cast<double>(per_step));
  EXPECT_GT(metric("profile_gpu_busy_ms"), 0);
  EXPECT_GT(metric("profile_untraced_ms"), 0);
  EXPECT_GT(metric("profile_traced_ms"), 0);
  EXPECT_EQ(metric("profile_dropped_records"), 0);
  metric("profile_overhead_pct");
}

TEST(ProfiledPoint, NoProfileWhenOff) {
  PointSpec spec;
  spec.mode = "topk";
  spec.model = preset("tiny");
  spec.model.ffn.k = 3;
  spec.batch = 2;
  spec.seq = 3;
  spec.measure.warmup = 0;
  spec.measure.min_reps = 1;
  spec.measure.max_reps = 1;
  auto ops = make_cpu_ops();
  const PointOutcome out = run_point(*ops, spec);
  EXPECT_FALSE(out.profile.has_value());
  for (const auto& [k, v] : out.metrics) EXPECT_NE(k.rfind("profile_", 0), 0u) << k;
}

}  // namespace
}  // namespace moc

// Device-side stage stamps on the CPU (the GPU tests are in test_cuda_profiling.cpp): the tracer places each
// stamped launch's stages onto the trace clock at the end of the n-th record of that kernel in its step; the
// paper breakdown splits a stamped kernel by its stages (the fused dense "gate & up" evenly, the kernel's
// time outside its stages to other) and still sums to the busy time; stage_sum totals per stage. The
// multi-stage kernel here is "k_step", shaped as older profiles hold the retired persistent decode step.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include <sstream>

#include "app/report/perfetto_export.h"
#include "app/report/profile_stats.h"
#include "profiling/phases.h"
#include "profiling/tracer.h"

namespace moc {
namespace {

using prof::ProfileTrace;

StampedLaunch launch(std::int64_t t0, const std::vector<std::pair<std::string, std::int64_t>>& stages, int layer = 0) {
  StampedLaunch l;
  l.kernel = "k_step";
  l.blocks = 132;
  l.start_ns = t0;
  std::int64_t at = t0;
  for (const auto& [name, ns] : stages) {
    StampedStage s;
    s.layer = name == "start" || name == "head" ? -1 : layer;
    s.stage = name;
    s.start_ns = at;
    s.end_ns = at + ns;
    s.wait_ns = ns / 10;
    at += ns;
    l.stages.push_back(s);
  }
  l.end_ns = at;
  return l;
}

TEST(StageStamps, TracerAlignsEachLaunchWithTheEndOfItsKernelRecord) {
  prof::CpuTracer tracer;
  tracer.enable();
  for (int step = 0; step < 2; ++step) {
    tracer.begin_step();
    // Ops start when they are recorded (inside the step's window); their ends may lie beyond it.
    const auto t0 = std::chrono::steady_clock::now();
    tracer.record_op("other", t0, t0 + std::chrono::microseconds(10));
    tracer.record_op("k_step", t0, t0 + std::chrono::microseconds(100));
    tracer.end_step();
    // Device clock: anything; the launch lasts 90 us of the record's 100 us.
    tracer.add_stamps({launch(5'000'000'000 + step * 77, {{"start", 10'000}, {"qkv", 30'000}, {"head", 50'000}})}, step);
  }
  const ProfileTrace t = tracer.finish({});
  ASSERT_EQ(t.stages.size(), 6u);
  EXPECT_EQ(t.dropped_stamps, 1u);
  for (int step = 0; step < 2; ++step) {
    const auto& k = t.kernels.at(static_cast<std::size_t>(2 * step + 1));
    ASSERT_EQ(k.short_name, "k_step");
    const auto* s = &t.stages[static_cast<std::size_t>(3 * step)];
    EXPECT_EQ(s[0].step, step);
    EXPECT_EQ(s[0].launch, 0);
    EXPECT_EQ(s[2].end_ns, k.end_ns) << "the launch ends where its record ends";
    EXPECT_EQ(s[0].start_ns, k.end_ns - 90'000);
    EXPECT_EQ(s[1].start_ns, s[0].end_ns);
    EXPECT_EQ(s[1].stage, "qkv");
    EXPECT_EQ(s[1].layer, 0);
    EXPECT_EQ(s[1].wait_ns, 3'000);
    EXPECT_EQ(s[0].range_id, k.range_id);
  }
  const auto owner = prof::stage_kernels(t);
  EXPECT_EQ(owner, (std::vector<std::ptrdiff_t>{1, 1, 1, 3, 3, 3}));
}

TEST(StageStamps, LaunchesWithoutARecordKeepNoStages) {
  prof::CpuTracer tracer;
  tracer.enable();
  tracer.begin_step();
  const auto base = std::chrono::steady_clock::now();
  tracer.record_op("k_step", base, base + std::chrono::microseconds(100));
  tracer.end_step();
  tracer.add_stamps({launch(0, {{"qkv", 10}}), launch(100, {{"qkv", 10}})}, 0);  // two launches, one record
  const ProfileTrace t = tracer.finish({});
  EXPECT_EQ(t.stages.size(), 1u);
}

// One k_step record of 1000 ns whose stamped stages cover 900 ns: gate 100, top-K 50, up 200, down 250,
// attention 300; plus a dense launch's fused "gate & up" of 400 in a second record of 500 ns.
ProfileTrace stamped_trace() {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  prof::KernelRecord k;
  k.name = "void moc::cuda::step::k_step<1>(Params)";
  k.short_name = "k_step";
  k.device_id = 0;
  k.start_ns = 10'000;
  k.end_ns = 11'000;
  t.kernels.push_back(k);
  k.start_ns = 12'000;
  k.end_ns = 12'500;
  t.kernels.push_back(k);
  std::int64_t at = 10'050;
  for (const auto& [name, ns] : std::vector<std::pair<std::string, std::int64_t>>{
           {"attention", 300}, {"gate", 100}, {"top-K", 50}, {"up", 200}, {"down", 250}}) {
    t.stages.push_back({0, "k_step", 0, -1, 0, name, at, at + ns, 5});
    at += ns;
  }
  t.stages.push_back({0, "k_step", 1, -1, 0, "gate & up", 12'050, 12'450, 0});
  return t;
}

TEST(StageStamps, BreakdownSplitsAStampedKernelByItsStages) {
  const ProfileTrace t = stamped_trace();
  const auto pb = prof::paper_breakdown(t);
  EXPECT_TRUE(pb.from_stages);
  EXPECT_TRUE(pb.fused_stages);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::gate)], 100 + 200);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::topk)], 50);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::up_down)], 200 + 250 + 200);
  // other: attention 300 + the first record's 100 ns outside its stages + the second's 100.
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::other)], 300 + 100 + 100);
  EXPECT_DOUBLE_EQ(std::accumulate(pb.ns.begin(), pb.ns.end(), 0.0), static_cast<double>(prof::busy_ns(t)));
}

// The kernel path: the decode FFN's own kernels stamp their work after their dependency wait. Inside
// ffn.decode each is split by its stages, and the part of its (exclusive) time before its stamps -- after its
// predecessor ended, before its first block passed the wait -- is the part its name says, not other.
TEST(StageStamps, KernelPathFfnKernelsSplitByStagesAndKeepTheirRestInTheirPart) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  t.ranges.push_back({1, -1, "ffn.decode", 0, 0, 0, 2000, 0, 0, 3});
  auto kernel = [&](const std::string& name, std::int64_t start, std::int64_t end) {
    prof::KernelRecord k;
    k.name = k.short_name = name;
    k.start_ns = start;
    k.end_ns = end;
    k.device_id = 0;
    k.range_id = 1;
    t.kernels.push_back(k);
  };
  kernel("k_gate", 0, 600);       // exclusive 600
  kernel("k_select", 500, 900);   // PDL: starts early; exclusive [600, 900) = 300
  kernel("k_updown", 800, 2000);  // exclusive [900, 2000) = 1100
  auto stage = [&](const std::string& k, const std::string& name, std::int64_t a, std::int64_t b) {
    t.stages.push_back({0, k, 0, 1, -1, name, a, b, 0});
  };
  stage("k_gate", "gate", 50, 600);       // 50 ns before its stamps: gate too
  stage("k_select", "top-K", 650, 900);   // 50 ns after its predecessor ended, before its stamps: top-K
  stage("k_updown", "up", 1000, 1400);    // 100 ns before: up & down
  stage("k_updown", "down", 1400, 2000);
  const auto pb = prof::paper_breakdown(t);
  EXPECT_TRUE(pb.from_stages);
  EXPECT_FALSE(pb.fused_stages);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::gate)], 600);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::topk)], 300);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::up_down)], 1100);
  EXPECT_DOUBLE_EQ(pb.ns[static_cast<int>(prof::PaperPart::other)], 0);
  // The dense kernel path's one FFN kernel: its fused gate & up pass is split evenly (marked), its down pass
  // measured; the rest of its time is up & down.
  ProfileTrace d = t;
  d.kernels.erase(d.kernels.begin(), d.kernels.begin() + 2);
  d.stages = {{0, "k_updown", 0, 1, -1, "gate & up", 1000, 1600, 0}, {0, "k_updown", 0, 1, -1, "down", 1600, 2000, 0}};
  const auto pd = prof::paper_breakdown(d);
  EXPECT_TRUE(pd.fused_stages);
  EXPECT_DOUBLE_EQ(pd.ns[static_cast<int>(prof::PaperPart::gate)], 300);
  EXPECT_DOUBLE_EQ(pd.ns[static_cast<int>(prof::PaperPart::up_down)], 300 + 400 + 200);  // 200 before its stamps
  EXPECT_DOUBLE_EQ(pd.ns[static_cast<int>(prof::PaperPart::other)], 0);
}

TEST(StageStamps, StageSumTotalsPerStageInKernelOrder) {
  const auto tb = stats::stage_sum(stamped_trace());
  ASSERT_EQ(tb.rows.size(), 6u);
  EXPECT_EQ(tb.rows[0][1].text, "attention");
  EXPECT_EQ(tb.rows[5][1].text, "gate & up");
  EXPECT_DOUBLE_EQ(*tb.rows[0][3].value, 300);
  EXPECT_DOUBLE_EQ(*tb.rows[0][4].value, 100.0 * 300 / 1300);
  EXPECT_DOUBLE_EQ(*tb.rows[0][5].value, 5);
  ASSERT_FALSE(tb.notes.empty());
  EXPECT_NE(tb.notes[0].find("86.7%"), std::string::npos) << tb.notes[0];  // 1300 of 1500 ns
  EXPECT_NE(stats::stage_sum(ProfileTrace{}).notes.at(0).find("no stage stamps"), std::string::npos);
}

// Where the stages came from: a profile since 2026-11-28 (metric profile_stage_rep_ms) ran its profiled steps
// unstamped and shows an untraced stamped repetition's stages; an older one stamped the profiled steps.
TEST(StageStamps, StageSumSaysWhichStepsWereStamped) {
  auto has = [](const stats::Table& tb, const std::string& text) {
    for (const auto& n : tb.notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  const auto now = stats::stage_sum(stamped_trace(), {{"profile_stage_rep_ms", 0.1157}});
  EXPECT_TRUE(has(now, "the profiled steps ran unstamped"));
  EXPECT_TRUE(has(now, "115.7 us"));
  EXPECT_FALSE(has(now, "stamped in the profiled steps themselves"));
  const auto before = stats::stage_sum(stamped_trace());
  EXPECT_TRUE(has(before, "stamped in the profiled steps themselves"));
  EXPECT_FALSE(has(before, "ran unstamped"));
}

TEST(StageStamps, PerfettoExportHasAStageTrackUnderTheKernelsStream) {
  const ProfileTrace t = stamped_trace();
  std::ostringstream o;
  perfetto::write_trace({{0, "point 0", &t}}, o);
  const auto doc = nlohmann::json::parse(o.str());
  int tid = -1;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "GPU 0 stream 0 k_step stages")
      tid = e["tid"].get<int>();
  ASSERT_GE(tid, 0);
  std::vector<std::string> names;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == tid) {
      EXPECT_EQ(e["cat"], "stage");
      names.push_back(e["name"]);
    }
  EXPECT_EQ(names, (std::vector<std::string>{"attention (layer 0)", "gate (layer 0)", "top-K (layer 0)", "up (layer 0)",
                                             "down (layer 0)", "gate & up (layer 0)"}));
}

}  // namespace
}  // namespace moc

// `mocbench stats` reports and the Perfetto export on synthetic profiles with hand-computed answers: every
// report's totals, medians (odd and even counts), sample standard deviations, ordering and percentages,
// layer merging and "(none)" in phase_sum, graph-replay ranges left out of nvtx_sum, the profiled vs timed
// breakdown; busy_ns on overlapping intervals; the Perfetto JSON parsed back (tracks, event counts,
// counters, flow pairs, nesting, overflow tracks). Each synthetic trace is shifted by a fresh random clock
// offset and its records shuffled: no answer may depend on either.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/report/perfetto_export.h"
#include "app/report/profile_stats.h"
#include "profiling/trace.h"
#include "test_util.h"

namespace moc {
namespace {

using nlohmann::json;
using prof::ProfileTrace;
using stats::Cell;
using stats::Table;

double num(const Cell& c) {
  EXPECT_TRUE(c.value.has_value());
  return c.value ? *c.value : std::nan("");
}
std::string text(const Cell& c) {
  EXPECT_FALSE(c.text.empty());
  return c.text;
}
bool empty(const Cell& c) { return c.empty(); }

prof::KernelRecord kernel(const std::string& name, std::int64_t s, std::int64_t e, std::int64_t range, std::uint32_t stream,
                          std::uint32_t corr, int step = 0) {
  prof::KernelRecord k;
  k.name = name + "(float*, int)";
  k.short_name = name;
  k.start_ns = s;
  k.end_ns = e;
  k.device_id = 0;
  k.stream_id = stream;
  k.correlation_id = corr;
  k.grid_x = 128, k.grid_y = 2, k.grid_z = 1, k.block_x = 256, k.block_y = 1, k.block_z = 1;
  k.registers_per_thread = 40;
  k.dynamic_shared_bytes = 1024;
  k.range_id = range;
  k.step = step;
  return k;
}

prof::PhaseRange range(std::int64_t id, std::int64_t parent, const std::string& name, int depth, int step,
                       std::int64_t s, std::int64_t e, std::int64_t hs, std::int64_t he, int ops) {
  return {id, parent, name, depth, step, s, e, hs, he, ops};
}

// Two profiled steps on one GPU. Step 0: step > layer.0 > ffn.gate; step > layer.1 > {ffn.up, ffn.topk (a
// graph replay: host times 0)}; step 1: step > ffn.gate. Kernels (ns):
//   gemm_a 100 (ffn.gate), 200 (layer.0), 300 (ffn.up), 600 (layer.1); topk 400 (ffn.topk);
//   elementwise 50 (outside every range, stream 13); gemm_b 500 (step 1's ffn.gate)
// memcpys HtoD 10 (none), 30 (step), 20 (none); DtoH 5 (none); memsets 7, 9 (step).
ProfileTrace sample_trace(std::int64_t t0) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 2;
  t.start_ns = t0 + 1000;
  t.end_ns = t0 + 40000;
  t.dropped_records = 0;
  auto T = [t0](std::int64_t v) { return t0 + v; };
  t.ranges = {range(1, -1, "step", 0, 0, T(2000), T(5509), T(1000), T(11000), 8),
              range(2, 1, "layer.0", 1, 0, T(2000), T(2800), T(1100), T(3100), 2),
              range(3, 2, "ffn.gate", 2, 0, T(2000), T(2100), T(1200), T(1300), 1),
              range(4, 1, "layer.1", 1, 0, T(2900), T(4600), T(3200), T(5200), 3),
              range(5, 4, "ffn.up", 2, 0, T(2900), T(3200), T(3300), T(3600), 1),
              range(6, 4, "ffn.topk", 2, 0, T(3300), T(3700), 0, 0, 1),
              range(7, -1, "step", 0, 1, T(21000), T(21500), T(20000), T(31000), 1),
              range(8, 7, "ffn.gate", 1, 1, T(21000), T(21500), T(20100), T(20400), 1)};
  t.kernels = {kernel("gemm_a", T(2000), T(2100), 3, 7, 1),     kernel("gemm_a", T(2600), T(2800), 2, 7, 2),
               kernel("gemm_a", T(2900), T(3200), 5, 7, 3),     kernel("topk", T(3300), T(3700), 6, 7, 4),
               kernel("elementwise", T(3800), T(3850), -1, 13, 5), kernel("gemm_a", T(4000), T(4600), 4, 7, 6),
               kernel("gemm_b", T(21000), T(21500), 8, 7, 7, 1)};
  t.kernels[6].graph_id = 3;
  t.kernels[6].graph_node_id = 42;
  auto copy = [&](const std::string& kind, std::int64_t s, std::int64_t e, std::int64_t r, std::uint32_t corr) {
    prof::MemcpyRecord m;
    m.start_ns = T(s);
    m.end_ns = T(e);
    m.stream_id = 7;
    m.correlation_id = corr;
    m.bytes = 4096;
    m.copy_kind = kind;
    m.src_kind = kind == "HtoD" ? "pinned" : "device";
    m.dst_kind = kind == "HtoD" ? "device" : "pinned";
    m.range_id = r;
    return m;
  };
  t.memcpys = {copy("HtoD", 5000, 5010, -1, 8), copy("HtoD", 5100, 5130, 1, 0), copy("HtoD", 5200, 5220, -1, 0),
               copy("DtoH", 5300, 5305, -1, 0)};
  auto set = [&](std::int64_t s, std::int64_t e) {
    prof::MemsetRecord m;
    m.start_ns = T(s);
    m.end_ns = T(e);
    m.stream_id = 7;
    m.bytes = 256;
    m.mem_kind = "device";
    m.range_id = 1;
    return m;
  };
  t.memsets = {set(5400, 5407), set(5500, 5509)};
  // One launch call per kernel and for the first copy (correlation ids 1..8), a synchronize that launched
  // nothing.
  auto api = [&](const std::string& name, std::int64_t s, std::uint32_t corr) {
    return prof::ApiRecord{name, "runtime", T(s), T(s + 40), corr, 100, 0};
  };
  t.api = {api("cudaLaunchKernel", 1900, 1),  api("cudaLaunchKernel", 2500, 2), api("cudaLaunchKernel", 2800, 3),
           api("cudaLaunchKernel", 3200, 4),  api("cudaLaunchKernel", 3700, 5), api("cudaLaunchKernel", 3900, 6),
           api("cudaMemcpyAsync", 4900, 8),   api("cudaGraphLaunch", 20900, 7)};
  t.api.push_back({"cudaStreamSynchronize", "runtime", T(5600), T(6000), 50, 100, 0});
  t.allocator = {{T(1000), "weights", "", -1, 0, 4096},
                 {T(1000), "activations", "", -1, 0, 0},
                 {T(2500), "activations", "ffn", 0, 1024, 1024},
                 {T(3000), "activations", "ffn", 0, -1024, 0}};
  return t;
}

// The sample with a fresh clock offset and its records in a fresh order.
ProfileTrace fresh_sample(std::mt19937& rng) {
  std::uniform_int_distribution<std::int64_t> off(0, std::int64_t{1} << 40);
  ProfileTrace t = sample_trace(off(rng));
  std::shuffle(t.kernels.begin(), t.kernels.end(), rng);
  std::shuffle(t.memcpys.begin(), t.memcpys.end(), rng);
  std::shuffle(t.memsets.begin(), t.memsets.end(), rng);
  std::shuffle(t.ranges.begin(), t.ranges.end(), rng);
  std::shuffle(t.api.begin(), t.api.end(), rng);
  return t;
}

TEST(ProfileStats, DurationStatsOddEvenOneEmpty) {
  auto s = stats::duration_stats({300, 100, 600, 200});  // even: (200 + 300) / 2
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.total, 1200);
  EXPECT_DOUBLE_EQ(s.avg, 300);
  EXPECT_DOUBLE_EQ(s.med, 250);
  EXPECT_DOUBLE_EQ(s.min, 100);
  EXPECT_DOUBLE_EQ(s.max, 600);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(140000.0 / 3.0));  // sample: (200² + 0 + 100² + 300²) / (4 - 1)
  s = stats::duration_stats({30, 10, 20});  // odd: the middle one
  EXPECT_DOUBLE_EQ(s.med, 20);
  EXPECT_DOUBLE_EQ(s.stddev, 10);
  s = stats::duration_stats({77});
  EXPECT_DOUBLE_EQ(s.med, 77);
  EXPECT_DOUBLE_EQ(s.stddev, 0);
  s = stats::duration_stats({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_DOUBLE_EQ(s.total, 0);
}

TEST(ProfileStats, DurationStatsMatchBruteForceOnFreshData) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<std::int64_t> v(1 + rng() % 40);
    for (auto& x : v) x = static_cast<std::int64_t>(rng() % 100000);
    const auto s = stats::duration_stats(v);
    std::sort(v.begin(), v.end());
    double total = 0;
    for (auto x : v) total += static_cast<double>(x);
    const double n = static_cast<double>(v.size());
    const double med = v.size() % 2 ? static_cast<double>(v[v.size() / 2])
                                     : (static_cast<double>(v[v.size() / 2 - 1]) + static_cast<double>(v[v.size() / 2])) / 2;
    double ss = 0;
    for (auto x : v) ss += (static_cast<double>(x) - total / n) * (static_cast<double>(x) - total / n);
    EXPECT_DOUBLE_EQ(s.total, total);
    EXPECT_DOUBLE_EQ(s.med, med);
    EXPECT_DOUBLE_EQ(s.min, static_cast<double>(v.front()));
    EXPECT_DOUBLE_EQ(s.max, static_cast<double>(v.back()));
    EXPECT_NEAR(s.stddev, v.size() > 1 ? std::sqrt(ss / (n - 1)) : 0.0, 1e-9 * (1 + s.stddev));
  }
}

TEST(ProfileBusy, UnionOfOverlappingIntervals) {
  ProfileTrace t;
  auto k = [](std::int64_t s, std::int64_t e) {
    prof::KernelRecord r;
    r.start_ns = s;
    r.end_ns = e;
    return r;
  };
  // [0,15) from three overlapping or nested kernels, [20,40) from a kernel and a copy that overlap, an
  // empty set at 50 and one touching interval [40,45): 15 + 25.
  t.kernels = {k(5, 15), k(0, 10), k(1, 2), k(20, 30)};
  prof::MemcpyRecord m;
  m.start_ns = 25, m.end_ns = 40;
  t.memcpys = {m};
  prof::MemsetRecord z;
  z.start_ns = 50, z.end_ns = 50;
  prof::MemsetRecord touch;
  touch.start_ns = 40, touch.end_ns = 45;
  t.memsets = {z, touch};
  EXPECT_EQ(prof::busy_ns(t), 15 + 25);
  EXPECT_EQ(prof::busy_ns(ProfileTrace{}), 0);
}

TEST(ProfileBusy, MatchesAPerNanosecondCountOnFreshIntervals) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ProfileTrace t;
  std::vector<char> covered(2000, 0);
  for (int i = 0; i < 60; ++i) {
    const std::int64_t s = rng() % 1900, e = s + rng() % 100;
    for (std::int64_t x = s; x < e; ++x) covered[static_cast<std::size_t>(x)] = 1;
    if (i % 3 == 0) {
      prof::KernelRecord k;
      k.start_ns = s, k.end_ns = e;
      t.kernels.push_back(k);
    } else if (i % 3 == 1) {
      prof::MemcpyRecord m;
      m.start_ns = s, m.end_ns = e;
      t.memcpys.push_back(m);
    } else {
      prof::MemsetRecord m;
      m.start_ns = s, m.end_ns = e;
      t.memsets.push_back(m);
    }
  }
  EXPECT_EQ(prof::busy_ns(t), std::count(covered.begin(), covered.end(), 1));
}

TEST(ProfileStats, KernelSummaryGroupsByNameSortedByTotalTime) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Table tb = stats::cuda_gpu_kern_sum(fresh_sample(rng));
  EXPECT_EQ(tb.id, "cuda_gpu_kern_sum");
  EXPECT_EQ(tb.title, "CUDA GPU Kernel Summary");
  std::vector<std::string> headers;
  for (const auto& c : tb.columns) headers.push_back(c.key);
  EXPECT_EQ(headers, (std::vector<std::string>{"Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                                               "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"}));
  ASSERT_EQ(tb.rows.size(), 4u);
  // Total kernel time 1200 + 500 + 400 + 50 = 2150.
  const std::vector<std::string> names = {"gemm_a(float*, int)", "gemm_b(float*, int)", "topk(float*, int)",
                                          "elementwise(float*, int)"};
  const double totals[] = {1200, 500, 400, 50};
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(text(tb.rows[r][8]), names[r]);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][0]), 100.0 * totals[r] / 2150.0);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][1]), totals[r]);
  }
  const auto& a = tb.rows[0];  // gemm_a: 100, 200, 300, 600
  EXPECT_DOUBLE_EQ(num(a[2]), 4);
  EXPECT_DOUBLE_EQ(num(a[3]), 300);
  EXPECT_DOUBLE_EQ(num(a[4]), 250);
  EXPECT_DOUBLE_EQ(num(a[5]), 100);
  EXPECT_DOUBLE_EQ(num(a[6]), 600);
  EXPECT_DOUBLE_EQ(num(a[7]), std::sqrt(140000.0 / 3.0));
  const auto& b = tb.rows[1];
  EXPECT_DOUBLE_EQ(num(b[2]), 1);
  EXPECT_DOUBLE_EQ(num(b[4]), 500);
  EXPECT_DOUBLE_EQ(num(b[7]), 0);
  double pct = 0;
  for (const auto& r : tb.rows) pct += num(r[0]);
  EXPECT_NEAR(pct, 100.0, 1e-9);
  ASSERT_EQ(tb.notes.size(), 1u);
  EXPECT_NE(tb.notes[0].find("exclusive"), std::string::npos) << "the table says which time it counts";
}

TEST(ProfileStats, MemTimeSummaryPerOperation) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Table tb = stats::cuda_gpu_mem_time_sum(fresh_sample(rng));
  EXPECT_EQ(tb.columns[2].key, "Count");
  EXPECT_EQ(tb.columns[8].key, "Operation");
  ASSERT_EQ(tb.rows.size(), 3u);
  // HtoD 10 + 30 + 20 = 60 (odd count: median 20), memsets 7 + 9 = 16 (even: 8), DtoH 5; of 81 ns.
  EXPECT_EQ(text(tb.rows[0][8]), "[CUDA memcpy Host-to-Device]");
  EXPECT_DOUBLE_EQ(num(tb.rows[0][1]), 60);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][2]), 3);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][4]), 20);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][7]), 10);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][0]), 100.0 * 60 / 81);
  EXPECT_EQ(text(tb.rows[1][8]), "[CUDA memset]");
  EXPECT_DOUBLE_EQ(num(tb.rows[1][1]), 16);
  EXPECT_DOUBLE_EQ(num(tb.rows[1][4]), 8);
  EXPECT_DOUBLE_EQ(num(tb.rows[1][7]), std::sqrt(2.0));
  EXPECT_EQ(text(tb.rows[2][8]), "[CUDA memcpy Device-to-Host]");
  EXPECT_DOUBLE_EQ(num(tb.rows[2][0]), 100.0 * 5 / 81);

  const Table none = stats::cuda_gpu_mem_time_sum(ProfileTrace{});
  EXPECT_TRUE(none.rows.empty());
  ASSERT_EQ(none.notes.size(), 1u);
}

TEST(ProfileStats, NvtxSumOverHostTimesSkipsGraphReplays) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Table tb = stats::nvtx_sum(fresh_sample(rng));
  std::vector<std::string> headers;
  for (const auto& c : tb.columns) headers.push_back(c.key);
  EXPECT_EQ(headers, (std::vector<std::string>{"Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                                               "Min (ns)", "Max (ns)", "StdDev (ns)", "Style", "Range"}));
  // step 10000 + 11000, layer.0 2000, layer.1 2000, ffn.gate 100 + 300, ffn.up 300 (ffn.topk: a replay).
  ASSERT_EQ(tb.rows.size(), 5u);
  const std::vector<std::string> order = {"step", "layer.0", "layer.1", "ffn.gate", "ffn.up"};
  const double totals[] = {21000, 2000, 2000, 400, 300};
  for (std::size_t r = 0; r < 5; ++r) {
    EXPECT_EQ(text(tb.rows[r][9]), order[r]);
    EXPECT_EQ(text(tb.rows[r][8]), "PushPop");
    EXPECT_DOUBLE_EQ(num(tb.rows[r][1]), totals[r]);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][0]), 100.0 * totals[r] / 25700.0);
  }
  EXPECT_DOUBLE_EQ(num(tb.rows[0][2]), 2);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][4]), 10500);
  EXPECT_DOUBLE_EQ(num(tb.rows[0][7]), std::sqrt(500.0 * 500.0 * 2));
  EXPECT_DOUBLE_EQ(num(tb.rows[3][4]), 200);
  EXPECT_DOUBLE_EQ(num(tb.rows[3][5]), 100);
  EXPECT_DOUBLE_EQ(num(tb.rows[3][6]), 300);
  ASSERT_EQ(tb.notes.size(), 1u);
  EXPECT_NE(tb.notes[0].find("1 range(s) replayed inside CUDA graphs"), std::string::npos) << tb.notes[0];
}

TEST(ProfileStats, NvtxDeviceProjectionIncludesReplays) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Table tb = stats::nvtx_gpu_proj_sum(fresh_sample(rng));
  EXPECT_EQ(tb.columns[1].key, "Total Proj Time (ns)");
  EXPECT_EQ(tb.columns[8].key, "Total GPU Ops");
  // step 3509 + 500, layer.1 1700, layer.0 800, ffn.gate 100 + 500, ffn.topk 400, ffn.up 300: of 7809.
  const std::vector<std::string> order = {"step", "layer.1", "layer.0", "ffn.gate", "ffn.topk", "ffn.up"};
  const double totals[] = {4009, 1700, 800, 600, 400, 300}, ops[] = {9, 3, 2, 2, 1, 1};
  ASSERT_EQ(tb.rows.size(), order.size());
  for (std::size_t r = 0; r < order.size(); ++r) {
    EXPECT_EQ(text(tb.rows[r][10]), order[r]);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][1]), totals[r]);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][8]), ops[r]);
    EXPECT_DOUBLE_EQ(num(tb.rows[r][0]), 100.0 * totals[r] / 7809.0);
  }
}

TEST(ProfileStats, PhaseOfMergesLayersAndNamesOpsOutsideEveryRange) {
  const ProfileTrace t = sample_trace(0);
  EXPECT_EQ(stats::phase_of(t, 2), "layer");
  EXPECT_EQ(stats::phase_of(t, 4), "layer");
  EXPECT_EQ(stats::phase_of(t, 3), "ffn.gate");
  EXPECT_EQ(stats::phase_of(t, -1), "(none)");
  EXPECT_EQ(stats::phase_of(t, 99), "(none)");
}

TEST(ProfileStats, PhaseSumPerStepWithTheTimedBreakdown) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const stats::Metrics m = {{"median_ms", 0.004}, {"gate_ms", 0.001}, {"up_down_ms", 0.0005}, {"topk_ms", 0.0003}};
  const ProfileTrace tr = fresh_sample(rng);
  const auto tables = stats::phase_sum(tr, m, "train");
  ASSERT_EQ(tables.size(), 2u);
  const Table& ph = tables[0];
  EXPECT_EQ(ph.id, "phase_sum");
  EXPECT_EQ(ph.columns[0].key, "Phase");
  EXPECT_EQ(ph.columns[1].key, "Kernels per step");
  EXPECT_EQ(ph.columns[2].key, "GPU time per step (ms)");
  EXPECT_EQ(ph.columns[3].key, "Share of step (%)");
  // Innermost ranges, layers merged, 2 steps; busy 2231 ns in all (every op disjoint), then the idle time
  // between the ops of each step; shares of the steps' span (busy + idle).
  const double span = static_cast<double>(prof::step_span_ns(tr)), idle = span - 2231;
  ASSERT_GT(idle, 0);
  struct Row {
    const char* phase;
    double kernels, ns;
  };
  const Row want[] = {{"layer", 2, 800},  {"ffn.gate", 2, 600}, {"ffn.topk", 1, 400}, {"ffn.up", 1, 300},
                      {"(none)", 1, 85},  {"step", 0, 46},      {"(idle between ops)", 0, idle}};
  ASSERT_EQ(ph.rows.size(), 7u);
  double share = 0;
  for (std::size_t r = 0; r < 7; ++r) {
    EXPECT_EQ(text(ph.rows[r][0]), want[r].phase);
    EXPECT_DOUBLE_EQ(num(ph.rows[r][1]), want[r].kernels / 2);
    EXPECT_DOUBLE_EQ(num(ph.rows[r][2]), want[r].ns / 2 / 1e6);
    EXPECT_DOUBLE_EQ(num(ph.rows[r][3]), 100.0 * want[r].ns / span);
    share += num(ph.rows[r][3]);
  }
  EXPECT_NEAR(share, 100.0, 1e-9) << "exclusive phases and the idle time make the step";
  ASSERT_FALSE(ph.notes.empty());
  EXPECT_NE(ph.notes[0].find("2 profiled step(s); per step: GPU busy 0.001 ms"), std::string::npos) << ph.notes[0];

  const Table& bd = tables[1];
  EXPECT_EQ(bd.id, "phase_sum_breakdown");
  EXPECT_EQ(bd.columns[1].key, "Profiled (ms)");
  EXPECT_EQ(bd.columns[2].key, "Timed (ms)");
  ASSERT_EQ(bd.rows.size(), 5u);
  // Profiled per step: gate 100 + 500, up & down 300, top-K 400, other 800 + 85 + 46 = 931 + the idle time.
  const char* parts[] = {"gate", "up & down", "top-K", "other", "total (step)"};
  const double prof_ns[] = {600, 300, 400, 931 + idle, span};
  const double timed[] = {0.001, 0.0005, 0.0003, 0.004 - 0.0018, 0.004};
  for (std::size_t r = 0; r < 5; ++r) {
    EXPECT_EQ(text(bd.rows[r][0]), parts[r]);
    EXPECT_NEAR(num(bd.rows[r][1]), prof_ns[r] / 2 / 1e6, 1e-15);
    EXPECT_NEAR(num(bd.rows[r][2]), timed[r], 1e-15);
    EXPECT_NEAR(num(bd.rows[r][3]), 100.0 * prof_ns[r] / span, 1e-9);
    EXPECT_NEAR(num(bd.rows[r][4]), 100.0 * timed[r] / 0.004, 1e-9);
  }
}

TEST(ProfileStats, PhaseSumBreakdownOfAnFfnDecodePointIsPerCallInMicroseconds) {
  const ProfileTrace t = sample_trace(0);
  const stats::Metrics m = {{"latency_us", 2.0}, {"gate_us", 0.5}, {"topk_us", 0.25}, {"up_down_us", 1.0},
                            {"other_us", 0.25},  {"weight_copies", 4}};
  const Table bd = stats::phase_sum(t, m, "ffn-decode")[1];
  EXPECT_EQ(bd.columns[1].key, "Profiled (us)");
  EXPECT_EQ(bd.columns[2].key, "Timed (us)");
  ASSERT_EQ(bd.rows.size(), 5u);
  EXPECT_EQ(text(bd.rows[4][0]), "total (call)");
  // Per call: the step's ns / (2 steps x 4 copies) / 1000; other holds the idle time between ops.
  const double idle = static_cast<double>(prof::step_span_ns(t) - prof::busy_ns(t));
  EXPECT_DOUBLE_EQ(num(bd.rows[0][1]), 600.0 / 8 / 1e3);
  EXPECT_DOUBLE_EQ(num(bd.rows[3][1]), (931.0 + idle) / 8 / 1e3);
  EXPECT_DOUBLE_EQ(num(bd.rows[0][2]), 0.5);
  EXPECT_DOUBLE_EQ(num(bd.rows[1][2]), 1.0);
  EXPECT_DOUBLE_EQ(num(bd.rows[2][2]), 0.25);
  EXPECT_DOUBLE_EQ(num(bd.rows[3][2]), 0.25);
  EXPECT_DOUBLE_EQ(num(bd.rows[4][2]), 2.0);
  EXPECT_DOUBLE_EQ(num(bd.rows[1][4]), 50.0);
}

// Since 2026-11-28 a replay makes calls_per_replay calls (rounds over the copies): the profiled step is divided by
// them, not by the copies.
TEST(ProfileStats, PhaseSumDividesAnFfnDecodeStepByItsCallsPerReplay) {
  const ProfileTrace t = sample_trace(0);
  const stats::Metrics m = {{"latency_us", 2.0}, {"weight_copies", 4}, {"calls_per_replay", 16}};
  const Table bd = stats::phase_sum(t, m, "ffn-decode")[1];
  EXPECT_DOUBLE_EQ(num(bd.rows[0][1]), 600.0 / 32 / 1e3);  // 2 steps x 16 calls
  bool said = false;
  for (const auto& n : bd.notes) said = said || n.find("calls_per_replay") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ProfileStats, PhaseSumLeavesMissingTimedMetricsEmpty) {
  const Table bd = stats::phase_sum(sample_trace(0), {{"gate_ms", 0.001}}, "train")[1];
  EXPECT_DOUBLE_EQ(num(bd.rows[0][2]), 0.001);
  EXPECT_TRUE(empty(bd.rows[0][4])) << "no median_ms: no share";
  EXPECT_TRUE(empty(bd.rows[1][2]));
  EXPECT_TRUE(empty(bd.rows[3][2])) << "other needs every part and the step time";
  EXPECT_TRUE(empty(bd.rows[4][2]));
}

TEST(ProfileStats, FusedDecodeOpsAreOtherWithANote) {
  ProfileTrace t;
  t.source = "cpu";
  t.steps = 1;
  t.ranges = {range(1, -1, "ffn.decode", 0, 0, 0, 100, 0, 100, 1)};
  prof::KernelRecord k;
  k.name = k.short_name = "ffn_decode";
  k.start_ns = 10, k.end_ns = 90, k.range_id = 1;
  t.kernels = {k};
  const auto tables = stats::phase_sum(t, {}, "ffn-decode");
  EXPECT_EQ(tables[0].columns[2].key, "CPU time per step (ms)");
  EXPECT_EQ(text(tables[0].rows[0][0]), "ffn.decode");
  EXPECT_DOUBLE_EQ(num(tables[1].rows[3][1]), 0.08);
  ASSERT_EQ(tables[1].notes.size(), 4u);
  EXPECT_NE(tables[1].notes[2].find("exclusive"), std::string::npos);
  EXPECT_NE(tables[1].notes[3].find("ffn.decode"), std::string::npos);
  EXPECT_EQ(stats::cuda_gpu_kern_sum(t).title, "CPU Op Summary");
}

TEST(ProfileStats, FusedCudaDecodeKernelsAreSplitByName) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  t.ranges = {range(1, -1, "ffn.decode", 0, 0, 0, 100, 0, 100, 4)};
  auto kernel = [&](const char* name, std::int64_t s, std::int64_t e) {
    prof::KernelRecord k;
    k.name = std::string("void moc::cuda::") + name + "(Args)";
    k.short_name = name;
    k.start_ns = s, k.end_ns = e, k.range_id = 1, k.device_id = 0;
    t.kernels.push_back(k);
  };
  kernel("k_gate", 0, 10'000);
  kernel("k_select", 10'000, 16'000);
  kernel("k_updown", 16'000, 30'000);
  kernel("k_prep", 30'000, 31'000);
  const auto tables = stats::phase_sum(t, {{"weight_copies", 1}}, "ffn-decode");
  const Table& bd = tables[1];
  EXPECT_DOUBLE_EQ(num(bd.rows[0][1]), 10.0);  // gate, us per call
  EXPECT_DOUBLE_EQ(num(bd.rows[1][1]), 14.0);  // up & down
  EXPECT_DOUBLE_EQ(num(bd.rows[2][1]), 6.0);   // top-K
  EXPECT_DOUBLE_EQ(num(bd.rows[3][1]), 1.0);   // other: k_prep
}

TEST(ProfileStats, RunReportByNameAndUnknownNames) {
  const ProfileTrace t = sample_trace(0);
  for (const auto& name : stats::report_names()) {
    const auto tables = stats::run_report(name, t, {}, "train");
    ASSERT_FALSE(tables.empty()) << name;
    EXPECT_EQ(tables[0].id, name);
  }
  EXPECT_EQ(stats::run_report("phase_sum", t, {}, "train").size(), 2u);
  EXPECT_THROW(stats::run_report("cuda_api_gpu_sum", t, {}, "train"), std::invalid_argument);
  EXPECT_EQ(stats::default_reports(),
            (std::vector<std::string>{"cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "nvtx_sum", "phase_sum"}));
}

TEST(ProfileStats, ApiSumAndLaunchToStartLatency) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  auto api = [&](const char* name, const char* domain, std::int64_t s, std::int64_t e, std::uint32_t corr) {
    t.api.push_back({name, domain, s, e, corr, 1, 0});
  };
  auto kernel = [&](const char* name, std::int64_t s, std::int64_t e, std::uint32_t corr, std::uint64_t node = 0) {
    prof::KernelRecord k;
    k.name = k.short_name = name;
    k.start_ns = s, k.end_ns = e, k.correlation_id = corr, k.graph_node_id = node, k.device_id = 0;
    t.kernels.push_back(k);
  };
  api("cudaLaunchKernel", "runtime", 100, 110, 1);
  api("cuLaunchKernel", "driver", 102, 108, 1);  // inside the runtime call, same id: not the launch
  api("cudaLaunchKernel", "runtime", 200, 204, 2);
  api("cudaGraphLaunch", "runtime", 300, 320, 3);
  kernel("k", 150, 170, 1);   // latency 50
  kernel("k", 230, 240, 2);   // latency 30
  kernel("g", 400, 410, 3, 9);  // from a graph: not listed
  kernel("lost", 500, 510, 77);  // no launch record
  const Table a = stats::cuda_api_sum(t);
  ASSERT_EQ(a.rows.size(), 3u);
  EXPECT_EQ(text(a.rows[0].back()), "cudaGraphLaunch");  // 20 ns total: the largest
  EXPECT_DOUBLE_EQ(num(a.rows[1][1]), 14.0);             // cudaLaunchKernel: 10 + 4
  EXPECT_DOUBLE_EQ(num(a.rows[1][2]), 2.0);              // instances
  const Table e = stats::cuda_kern_exec_sum(t);
  ASSERT_EQ(e.rows.size(), 1u);
  EXPECT_EQ(text(e.rows[0].back()), "k");
  EXPECT_DOUBLE_EQ(num(e.rows[0][0]), 2.0);   // count
  EXPECT_DOUBLE_EQ(num(e.rows[0][1]), 7.0);   // API avg: (10 + 4) / 2
  EXPECT_DOUBLE_EQ(num(e.rows[0][2]), 40.0);  // launch-to-start avg
  EXPECT_DOUBLE_EQ(num(e.rows[0][4]), 30.0);  // min
  EXPECT_DOUBLE_EQ(num(e.rows[0][5]), 50.0);  // max
  EXPECT_DOUBLE_EQ(num(e.rows[0][6]), 15.0);  // kernel avg
  EXPECT_EQ(e.notes.size(), 4u);
}

TEST(ProfileStats, GroupThousands) {
  EXPECT_EQ(stats::group_thousands(1234567, 0), "1,234,567");
  EXPECT_EQ(stats::group_thousands(999, 0), "999");
  EXPECT_EQ(stats::group_thousands(1000, 1), "1,000.0");
  EXPECT_EQ(stats::group_thousands(-1234.5, 1), "-1,234.5");
  EXPECT_EQ(stats::group_thousands(0.0004, 3), "0.000");
  EXPECT_EQ(stats::group_thousands(123456.789, 3), "123,456.789");
}

TEST(ProfileStats, TextTableIsAlignedLikeNsysStats) {
  std::ostringstream o;
  stats::print_text(stats::cuda_gpu_kern_sum(sample_trace(0)), o);
  const std::string want =
      " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n"
      "\n"
      " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  Name\n"
      " --------  ---------------  ---------  --------  --------  --------  --------  -----------  ------------------------\n"
      "     55.8            1,200          4     300.0     250.0       100       600        216.0  gemm_a(float*, int)\n"
      "     23.3              500          1     500.0     500.0       500       500          0.0  gemm_b(float*, int)\n"
      "     18.6              400          1     400.0     400.0       400       400          0.0  topk(float*, int)\n"
      "      2.3               50          1      50.0      50.0        50        50          0.0  elementwise(float*, int)\n"
      "\n"
      " device times are exclusive (where records overlap -- a PDL kernel waiting for its predecessor -- the shared "
      "time counts once, for the record that started earlier; --time inclusive shows start to end)\n"
      "\n";
  EXPECT_EQ(o.str(), want);
}

TEST(ProfileStats, TextTableScalesLargeTimesAndShowsMissingCells) {
  Table tb;
  tb.id = "x";
  tb.title = "X";
  tb.columns = {stats::column("Total Time", stats::Unit::ns, false, 0), stats::column("Timed", stats::Unit::ms, false, 3),
                stats::column("Name", stats::Unit::none, true, 0)};
  tb.rows = {{2.5e9, 1.5, "a"}, {3.0e7, {}, "b"}};
  tb.notes = {"a note"};
  std::ostringstream o;
  stats::print_text(tb, o);
  // Median of the ns column is 2.5e9 or 3e7 (>= 1e7): milliseconds, three decimals.
  EXPECT_EQ(o.str(),
            " ** X (x):\n\n"
            " Total Time (ms)  Timed (ms)  Name\n"
            " ---------------  ----------  ----\n"
            "       2,500.000       1.500  a\n"
            "          30.000           -  b\n"
            "\n a note\n\n");
}

TEST(ProfileStats, CsvAndJsonCarryRawUnits) {
  const Table tb = stats::cuda_gpu_kern_sum(sample_trace(0));
  std::ostringstream c;
  stats::print_csv(tb, c, {{"point", "3"}, {"report", tb.id}});
  std::istringstream lines(c.str());
  std::string header, first;
  std::getline(lines, header);
  std::getline(lines, first);
  EXPECT_EQ(header, "point,report,Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name");
  EXPECT_EQ(first.rfind("3,cuda_gpu_kern_sum,55.81395348837", 0), 0u) << first;
  EXPECT_NE(first.find(",1200,4,300,250,100,600,216.024"), std::string::npos) << first;
  EXPECT_NE(first.find(",\"gemm_a(float*, int)\""), std::string::npos) << "a name with a comma is quoted: " << first;

  std::ostringstream j;
  stats::print_json(tb, j);
  const json doc = json::parse(j.str());
  EXPECT_EQ(doc["id"], "cuda_gpu_kern_sum");
  ASSERT_EQ(doc["columns"].size(), 9u);
  EXPECT_EQ(doc["columns"][1]["key"], "Total Time (ns)");
  EXPECT_EQ(doc["columns"][1]["unit"], "ns");
  EXPECT_EQ(doc["columns"][8]["unit"], "text");
  ASSERT_EQ(doc["rows"].size(), 4u);
  EXPECT_EQ(doc["rows"][0]["Name"], "gemm_a(float*, int)");
  EXPECT_EQ(doc["rows"][0]["Total Time (ns)"], 1200);
  EXPECT_DOUBLE_EQ(doc["rows"][0]["Med (ns)"].get<double>(), 250);
  EXPECT_DOUBLE_EQ(doc["rows"][0]["StdDev (ns)"].get<double>(), std::sqrt(140000.0 / 3.0));

  // Missing cells are null.
  const Table bd = stats::phase_sum(sample_trace(0), {}, "train")[1];
  std::ostringstream j2;
  stats::print_json(bd, j2);
  const json d2 = json::parse(j2.str());
  EXPECT_TRUE(d2["rows"][0]["Timed (ms)"].is_null());
  EXPECT_FALSE(d2["notes"].empty());
}

// ---- Perfetto

struct Parsed {
  json doc;
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
  std::map<int, std::string> processes;
  std::map<std::string, std::vector<json>> x_by_track;  // thread name (single process) -> X events
};

std::int64_t ns_of(const json& v) { return std::llround(v.get<double>() * 1000.0); }

Parsed parse_trace(const std::vector<perfetto::PointProfile>& pts, prof::TimeMode time = prof::TimeMode::exclusive) {
  std::ostringstream o;
  perfetto::write_trace(pts, o, time);
  Parsed p;
  p.doc = json::parse(o.str());
  EXPECT_EQ(p.doc["displayTimeUnit"], "ns");
  bool meta_done = false;
  for (const auto& e : p.doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M") {
      EXPECT_FALSE(meta_done) << "metadata events come first";
      if (e["name"] == "thread_name") p.threads[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
      if (e["name"] == "process_name") p.processes[e["pid"].get<int>()] = e["args"]["name"];
    } else {
      meta_done = true;
    }
  }
  for (const auto& e : p.doc["traceEvents"])
    if (e["ph"] == "X") {
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      p.x_by_track[p.threads.at({e["pid"].get<int>(), e["tid"].get<int>()})].push_back(e);
    }
  return p;
}

// Every track's X events nest: sorted by (start, longer first), each lies inside the innermost open one or
// after it ended.
void expect_nested(const Parsed& p) {
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> tracks;
  for (const auto& e : p.doc["traceEvents"])
    if (e["ph"] == "X") tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(ns_of(e["ts"]), ns_of(e["ts"]) + ns_of(e["dur"]));
  for (auto& [key, v] : tracks) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<std::int64_t> open;
    for (const auto& [s, e] : v) {
      while (!open.empty() && open.back() <= s) open.pop_back();
      EXPECT_TRUE(open.empty() || e <= open.back())
          << p.threads.at(key) << ": [" << s << ", " << e << ") overlaps an event ending at " << open.back();
      open.push_back(e);
    }
  }
}

TEST(Perfetto, UsText) {
  EXPECT_EQ(perfetto::us_text(0), "0.000");
  EXPECT_EQ(perfetto::us_text(1), "0.001");
  EXPECT_EQ(perfetto::us_text(1234567), "1234.567");
  EXPECT_EQ(perfetto::us_text(-1500), "-1.500");
}

TEST(Perfetto, CudaTraceTracksEventsCountersAndFlows) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ProfileTrace t = fresh_sample(rng);
  const Parsed p = parse_trace({{4, "point 4: ffn=moc batch=2", &t}});
  ASSERT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(p.processes.at(5), "point 4: ffn=moc batch=2");
  std::multiset<std::string> names;
  for (const auto& [k, n] : p.threads) names.insert(n);
  EXPECT_EQ(names, (std::multiset<std::string>{"Phases", "CUDA API", "GPU 0 stream 7", "GPU 0 stream 13"}));
  // 8 ranges; 9 API calls; stream 7: 6 kernels + 4 copies + 2 sets; stream 13: 1 kernel.
  EXPECT_EQ(p.x_by_track.at("Phases").size(), 8u);
  EXPECT_EQ(p.x_by_track.at("CUDA API").size(), 9u);
  EXPECT_EQ(p.x_by_track.at("GPU 0 stream 7").size(), 12u);
  EXPECT_EQ(p.x_by_track.at("GPU 0 stream 13").size(), 1u);
  expect_nested(p);

  // Times in µs from the trace start (t.start_ns: the allocator's first events are there).
  const json* k1 = nullptr;
  for (const auto& e : p.x_by_track.at("GPU 0 stream 7"))
    if (e["name"] == "gemm_a" && ns_of(e["ts"]) == 1000) k1 = &e;
  ASSERT_NE(k1, nullptr) << "the first kernel starts 1000 ns after the trace start";
  EXPECT_EQ(ns_of((*k1)["dur"]), 100);
  EXPECT_EQ((*k1)["cat"], "kernel");
  const json& a = (*k1)["args"];
  EXPECT_EQ(a["name"], "gemm_a(float*, int)");
  EXPECT_EQ(a["grid"], "(128, 2, 1)");
  EXPECT_EQ(a["block"], "(256, 1, 1)");
  EXPECT_EQ(a["registers_per_thread"], 40);
  EXPECT_EQ(a["dynamic_shared_bytes"], 1024);
  EXPECT_EQ(a["correlation_id"], 1);
  EXPECT_EQ(a["phase"], "step/layer.0/ffn.gate");
  bool graph_kernel = false, memcpy_seen = false;
  for (const auto& e : p.x_by_track.at("GPU 0 stream 7")) {
    if (e["name"] == "gemm_b") {
      graph_kernel = true;
      EXPECT_EQ(e["args"]["graph_node_id"], 42);
      EXPECT_EQ(e["args"]["step"], 1);
    }
    if (e["name"] == "[CUDA memcpy Host-to-Device]" && e["args"]["correlation_id"] == 8) {
      memcpy_seen = true;
      EXPECT_EQ(e["args"]["phase"], "(none)");
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
  }
  EXPECT_TRUE(graph_kernel);
  EXPECT_TRUE(memcpy_seen);
  for (const auto& e : p.x_by_track.at("GPU 0 stream 13")) EXPECT_EQ(e["args"]["phase"], "(none)");
  // Phase ranges at their device projection; the replayed one says so.
  int replays = 0;
  for (const auto& e : p.x_by_track.at("Phases")) {
    if (e["name"] == "step" && e["args"]["step"] == 0) {
      EXPECT_EQ(ns_of(e["ts"]), 1000);
      EXPECT_EQ(ns_of(e["dur"]), 3509);
      EXPECT_EQ(ns_of(e["args"]["host_dur_us"]), 10000);
    }
    if (e["args"].contains("graph_replay")) {
      ++replays;
      EXPECT_EQ(e["name"], "ffn.topk");
    }
  }
  EXPECT_EQ(replays, 1);

  // Counters: one series per category, the live bytes.
  std::vector<std::pair<std::int64_t, std::int64_t>> act;
  int counters = 0;
  for (const auto& e : p.doc["traceEvents"])
    if (e["ph"] == "C") {
      ++counters;
      EXPECT_EQ(e["name"], "memory");
      ASSERT_EQ(e["args"].size(), 1u);
      if (e["args"].contains("activations")) {
        act.emplace_back(ns_of(e["ts"]), e["args"]["activations"].get<std::int64_t>());
      } else {
        EXPECT_EQ(e["args"]["weights"], 4096);
      }
    }
  EXPECT_EQ(counters, 4);
  EXPECT_EQ(act, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {1500, 1024}, {2000, 0}}));

  // Flows: one s / f pair per launched op (correlation ids 1..8), from inside its API call to inside the op.
  std::map<std::int64_t, json> starts, finishes;
  for (const auto& e : p.doc["traceEvents"]) {
    if (e["ph"] == "s") {
      EXPECT_TRUE(starts.emplace(e["id"].get<std::int64_t>(), e).second);
    }
    if (e["ph"] == "f") {
      EXPECT_EQ(e["bp"], "e");
      EXPECT_TRUE(finishes.emplace(e["id"].get<std::int64_t>(), e).second);
    }
  }
  ASSERT_EQ(starts.size(), 8u);
  ASSERT_EQ(finishes.size(), 8u);
  auto inside = [&](const json& ev, const std::string& track) -> const json* {
    const std::int64_t ts = ns_of(ev["ts"]);
    for (const auto& x : p.x_by_track.at(track))
      if (ns_of(x["ts"]) < ts && ts < ns_of(x["ts"]) + ns_of(x["dur"])) return &x;
    return nullptr;
  };
  std::set<std::int64_t> corr;
  for (const auto& [id, s] : starts) {
    ASSERT_TRUE(finishes.count(id)) << "flow " << id << " has no end";
    const json& f = finishes.at(id);
    EXPECT_EQ(s["cat"], f["cat"]);
    EXPECT_EQ(s["name"], f["name"]);
    EXPECT_EQ(p.threads.at({s["pid"].get<int>(), s["tid"].get<int>()}), "CUDA API");
    const json* call = inside(s, "CUDA API");
    ASSERT_NE(call, nullptr) << "flow start strictly inside its API call";
    const std::string op_track = p.threads.at({f["pid"].get<int>(), f["tid"].get<int>()});
    const json* op = inside(f, op_track);
    ASSERT_NE(op, nullptr) << "flow end strictly inside its op";
    EXPECT_EQ((*call)["args"]["correlation_id"], (*op)["args"]["correlation_id"]);
    corr.insert((*op)["args"]["correlation_id"].get<std::int64_t>());
  }
  EXPECT_EQ(corr, (std::set<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(Perfetto, OverlappingCpuOpsGoToAnOverflowTrackAndPointsAreProcesses) {
  ProfileTrace cpu;
  cpu.source = "cpu";
  cpu.steps = 1;
  cpu.start_ns = 1000;
  cpu.end_ns = 2000;
  auto op = [](const std::string& n, std::int64_t s, std::int64_t e) {
    prof::KernelRecord k;
    k.name = k.short_name = n;
    k.start_ns = s, k.end_ns = e;
    return k;
  };
  // Inclusive times: A [0,100) and B [50,150) overlap partially: B goes to an overflow track; C [120,130)
  // fits the main one again after A; D [0,100) equals A: nested inside it.
  cpu.kernels = {op("A", 1000, 1100), op("B", 1050, 1150), op("C", 1120, 1130), op("D", 1000, 1100)};
  cpu.ranges = {range(1, -1, "step", 0, 0, 1000, 1200, 1000, 1200, 4),
                range(2, 1, "layer.0", 1, 0, 1000, 1200, 1000, 1200, 4)};
  const ProfileTrace gpu = sample_trace(0);
  {
    // Exclusive (the default): the slices are [own, end) -- A [0,100), D nothing, B [100,150), C nothing --
    // and never overlap: one track.
    const Parsed ex = parse_trace({{0, "point 0: cpu", &cpu}});
    ASSERT_EQ(ex.x_by_track.count("CPU ops"), 1u);
    EXPECT_EQ(ex.x_by_track.count("CPU ops (overlap 1)"), 0u);
    EXPECT_EQ(ex.x_by_track.at("CPU ops").size(), 4u);
    for (const auto& e : ex.x_by_track.at("CPU ops"))
      if (e["name"] == "B") {
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.05);
        EXPECT_DOUBLE_EQ(e["args"]["wait_us"].get<double>(), 0.05);
        EXPECT_DOUBLE_EQ(e["args"]["inclusive_dur_us"].get<double>(), 0.1);
      }
    expect_nested(ex);
  }
  const Parsed p = parse_trace({{0, "point 0: cpu", &cpu}, {2, "point 2: gpu", &gpu}}, prof::TimeMode::inclusive);
  EXPECT_EQ(p.processes, (std::map<int, std::string>{{1, "point 0: cpu"}, {3, "point 2: gpu"}}));
  std::set<int> tids;
  std::vector<std::string> cpu_threads;
  for (const auto& [k, n] : p.threads) {
    EXPECT_TRUE(tids.insert(k.second).second) << "thread ids are unique in the file";
    if (k.first == 1) cpu_threads.push_back(n);
  }
  std::sort(cpu_threads.begin(), cpu_threads.end());
  EXPECT_EQ(cpu_threads, (std::vector<std::string>{"CPU ops", "CPU ops (overlap 1)", "Phases"}));
  EXPECT_EQ(p.x_by_track.at("CPU ops").size(), 3u);
  ASSERT_EQ(p.x_by_track.at("CPU ops (overlap 1)").size(), 1u);
  EXPECT_EQ(p.x_by_track.at("CPU ops (overlap 1)")[0]["name"], "B");
  EXPECT_EQ(p.x_by_track.at("CPU ops (overlap 1)")[0]["cat"], "cpu_op");
  EXPECT_FALSE(p.x_by_track.at("CPU ops (overlap 1)")[0]["args"].contains("grid")) << "CPU ops have no launch config";
  expect_nested(p);
  // Equal intervals: the outer range first (Perfetto nests the later one inside).
  std::vector<std::string> phase_order;
  for (const auto& e : p.doc["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 1 && e["cat"] == "phase") phase_order.push_back(e["name"]);
  EXPECT_EQ(phase_order, (std::vector<std::string>{"step", "layer.0"}));
  // No API records: no flows in the CPU point (the GPU point has its own).
  int cpu_flows = 0, gpu_flows = 0;
  for (const auto& e : p.doc["traceEvents"])
    if (e["ph"] == "s") ++(e["pid"] == 1 ? cpu_flows : gpu_flows);
  EXPECT_EQ(cpu_flows, 0);
  EXPECT_EQ(gpu_flows, 8);
}

}  // namespace
}  // namespace moc

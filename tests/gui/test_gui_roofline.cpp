// The Roofline view's data and the Timeline's % of floor colouring, without a window: a synthetic profile whose
// every number is computed here by hand (markers, roofs, ridge, the 0-FLOP placement, no ceilings, table order,
// colour scale), and the real fixture's run, whose rows must be `mocbench stats --report roofline`'s.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "gui/model/roofline.h"
#include "gui/model/store.h"
#include "gui/model/sweep.h"
#include "tests/gui/gui_fixture.h"

namespace moc::gui {
namespace {

const prof::RooflineRow& row_of(const RooflinePlot& p, const std::string& kernel) {
  for (const auto& r : p.roofline.rows)
    if (r.kernel == kernel) return r;
  throw std::runtime_error("no row " + kernel);
}

const RooflineMarker* marker_of(const RooflinePlot& p, const std::string& kernel) {
  for (const auto& m : p.markers)
    if (p.roofline.rows[m.row].kernel == kernel) return &m;
  return nullptr;
}

// synthetic_roofline_trace: 2 steps; copy 1000 GB/s = 1000 bytes/ns, GEMM 100 TFLOP/s = 1e5 FLOP/ns.
TEST(GuiRoofline, RowsMarkersRoofsAndRidgeOfASyntheticProfileByHand) {
  const prof::ProfileTrace t = synthetic_roofline_trace();
  const RooflinePlot p = build_roofline(t, synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  ASSERT_TRUE(p.has_ceilings());
  EXPECT_DOUBLE_EQ(p.ridge_intensity, 100.0) << "1000 x 100 TFLOP/s / 1000 GB/s";
  EXPECT_DOUBLE_EQ(p.memory_roof(p.ridge_intensity), p.compute_roof()) << "the roofs meet at the ridge";
  EXPECT_DOUBLE_EQ(p.memory_roof(1.0), 1.0) << "1000 GB/s x 1 FLOP/byte = 1 TFLOP/s";
  EXPECT_DOUBLE_EQ(p.compute_roof(), 100.0);
  EXPECT_EQ(p.roofline.steps, 2);
  ASSERT_EQ(p.roofline.rows.size(), 6u);
  EXPECT_EQ(p.declared_rows, 5u);
  EXPECT_EQ(p.undeclared_rows, 1u);
  EXPECT_EQ(p.unplotted, 0u);
  std::vector<std::string> order;
  for (const auto& r : p.roofline.rows) order.push_back(r.kernel);
  EXPECT_EQ(order, (std::vector<std::string>{"k_gemm", "k_norm", "k_copy", "k_reduce", "k_split", "k_mystery"}))
      << "declared by lost time (10, 6, 1, 0, 0 us; ties by name), then the undeclared";

  struct Want {
    const char* kernel;
    double time, bytes, flops, gbps, tflops, floor, pct_bw, pct_peak, pct_floor;
  };
  const Want want[] = {
      // 1 GFLOP in 20 us: 50 TFLOP/s = 50% of peak; 1 MB in 20 us = 50 GB/s = 5%; floor = 1e9 / 1e5 = 10 us.
      {"k_gemm", 20000, 1e6, 1e9, 50, 50, 10000, 5, 50, 50},
      // 4 MB in 5 us = 800 GB/s = 80%; no FLOP; floor 4 us.
      {"k_copy", 5000, 4e6, 0, 800, 0, 4000, 80, 0, 80},
      // 2 MB and 1 MFLOP in 8 us: 250 GB/s, 0.125 TFLOP/s; floor = 2 us (bandwidth).
      {"k_norm", 8000, 2e6, 1e6, 250, 0.125, 2000, 25, 0.125, 25},
      // One declaration (1 MB, 0.4 GFLOP) split 3:1 by time: 0.75 MB, 0.3 GFLOP in 3 us = 100 TFLOP/s, at the floor.
      {"k_split", 3000, 7.5e5, 3e8, 250, 100, 3000, 25, 100, 100},
      {"k_reduce", 1000, 2.5e5, 1e8, 250, 100, 1000, 25, 100, 100},
  };
  for (const Want& w : want) {
    SCOPED_TRACE(w.kernel);
    const prof::RooflineRow& r = row_of(p, w.kernel);
    EXPECT_TRUE(r.declared);
    EXPECT_EQ(r.instances, 2);
    EXPECT_DOUBLE_EQ(r.time_ns, w.time) << "per step";
    EXPECT_DOUBLE_EQ(r.bytes, w.bytes);
    EXPECT_DOUBLE_EQ(r.flops, w.flops);
    EXPECT_NEAR(r.GBps(), w.gbps, 1e-9 * w.gbps);
    EXPECT_NEAR(r.tflops(), w.tflops, 1e-9 * std::max(1.0, w.tflops));
    EXPECT_NEAR(r.floor_ns, w.floor, 1e-6);
    EXPECT_NEAR(r.lost_ns, w.time - w.floor, 1e-6);
    EXPECT_NEAR(p.pct_bandwidth(r), w.pct_bw, 1e-9);
    EXPECT_NEAR(p.pct_peak(r), w.pct_peak, 1e-9);
    EXPECT_NEAR(p.pct_floor(r), w.pct_floor, 1e-9);
    EXPECT_DOUBLE_EQ(p.pct_floor(r), std::max(p.pct_bandwidth(r), p.pct_peak(r))) << "% of floor = the nearer ceiling";
  }
  const prof::RooflineRow& mystery = row_of(p, "k_mystery");
  EXPECT_FALSE(mystery.declared);
  EXPECT_DOUBLE_EQ(mystery.time_ns, 3000);
  EXPECT_TRUE(std::isnan(p.pct_floor(mystery)));
  EXPECT_TRUE(std::isnan(p.pct_bandwidth(mystery)));
  EXPECT_DOUBLE_EQ(p.roofline.time_ns, 40000);
  EXPECT_DOUBLE_EQ(p.roofline.declared_ns, 37000);
  EXPECT_NEAR(p.roofline.floor_ns, 20000, 1e-6);

  // Markers: every declared row, at (intensity, TFLOP/s), the biggest first; sizes by sqrt(time / 20 us).
  ASSERT_EQ(p.markers.size(), 5u);
  EXPECT_EQ(p.roofline.rows[p.markers.front().row].kernel, "k_gemm");
  for (std::size_t i = 1; i < p.markers.size(); ++i) EXPECT_GE(p.markers[i - 1].size, p.markers[i].size);
  const RooflineMarker* gemm = marker_of(p, "k_gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_DOUBLE_EQ(gemm->x, 1000);
  EXPECT_DOUBLE_EQ(gemm->y, 50);
  EXPECT_DOUBLE_EQ(gemm->size, 1.0);
  EXPECT_FALSE(gemm->zero_flops);
  EXPECT_DOUBLE_EQ(marker_of(p, "k_norm")->x, 0.5);
  EXPECT_DOUBLE_EQ(marker_of(p, "k_reduce")->size, std::sqrt(1000.0 / 20000.0));
  EXPECT_DOUBLE_EQ(marker_of(p, "k_split")->y, p.compute_roof()) << "at the floor: on the compute roof";
  // Every marker and the ridge inside the axes.
  for (const auto& m : p.markers) {
    EXPECT_GT(m.x, p.x_min);
    EXPECT_LT(m.x, p.x_max);
    EXPECT_GT(m.y, p.y_min);
    EXPECT_LT(m.y, p.y_max);
  }
  EXPECT_LT(p.ridge_intensity, p.x_max);
  EXPECT_LT(p.compute_roof(), p.y_max);

  // No PDL overlap in this trace: inclusive time gives the same rows.
  const RooflinePlot inc = build_roofline(t, synthetic_roofline_ceilings(), prof::TimeMode::inclusive);
  EXPECT_DOUBLE_EQ(inc.roofline.time_ns, p.roofline.time_ns);
  EXPECT_EQ(inc.roofline.mode, prof::TimeMode::inclusive);
}

// A 0-FLOP kernel has intensity 0, which no log axis holds: it stands at a fixed small intensity, left of every
// real one, at the height its bandwidth gives there -- so its distance below the memory roof is its % of bandwidth.
TEST(GuiRoofline, ZeroFlopKernelsStandLeftOfEveryRealIntensityAtTheirBandwidthsHeight) {
  prof::ProfileTrace t = synthetic_roofline_trace();
  const RooflinePlot p = build_roofline(t, synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  const RooflineMarker* copy = marker_of(p, "k_copy");
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->zero_flops);
  EXPECT_DOUBLE_EQ(p.zero_flop_intensity, 0.01) << "the smallest real intensity is 0.5";
  EXPECT_DOUBLE_EQ(copy->x, 0.01);
  EXPECT_DOUBLE_EQ(copy->y, 800 * 0.01 / 1000) << "800 GB/s x 0.01 FLOP/byte";
  EXPECT_NEAR(copy->y / p.memory_roof(copy->x), 0.80, 1e-12) << "80% of the roof there: its share of the bandwidth";

  // A real intensity under 0.05 (k_norm: 2 kFLOP on 2 MB = 0.001) pushes the 0-FLOP column a decade below it.
  for (auto& k : t.kernels)
    if (k.short_name == "k_norm") k.op_flops = 2000;
  const RooflinePlot low = build_roofline(t, synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  EXPECT_DOUBLE_EQ(marker_of(low, "k_norm")->x, 0.001);
  EXPECT_DOUBLE_EQ(low.zero_flop_intensity, 1e-4);
  EXPECT_LT(marker_of(low, "k_copy")->x, marker_of(low, "k_norm")->x);
  EXPECT_GT(marker_of(low, "k_copy")->x, low.x_min);

  // Without any 0-FLOP kernel there is no such column.
  prof::ProfileTrace no_copy = synthetic_roofline_trace();
  std::erase_if(no_copy.kernels, [](const prof::KernelRecord& k) { return k.short_name == "k_copy"; });
  EXPECT_EQ(build_roofline(no_copy, synthetic_roofline_ceilings(), prof::TimeMode::exclusive).zero_flop_intensity, 0.0);

  // A declared kernel that ran entirely under an earlier one owns no exclusive time: no marker (counted as
  // unplotted), but one under inclusive time.
  prof::ProfileTrace hidden = synthetic_roofline_trace();
  prof::KernelRecord h = hidden.kernels.front();  // inside k_gemm of step 0
  h.name = h.short_name = "k_hidden";
  h.start_ns += 100;
  h.end_ns = h.start_ns + 500;
  h.stream_id = 8;
  h.op_call = 9;
  hidden.kernels.push_back(h);
  const RooflinePlot ex = build_roofline(hidden, synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  const RooflinePlot in = build_roofline(hidden, synthetic_roofline_ceilings(), prof::TimeMode::inclusive);
  EXPECT_EQ(ex.unplotted, 1u);
  EXPECT_EQ(marker_of(ex, "k_hidden"), nullptr);
  EXPECT_EQ(in.unplotted, 0u);
  EXPECT_NE(marker_of(in, "k_hidden"), nullptr);
}

// An older file: no ceilings. The achieved rates are still plotted (same places), with no roofs, ridge or floor.
TEST(GuiRoofline, WithoutCeilingsAchievedRatesArePlottedWithNoRoofsAndNoFloor) {
  const prof::ProfileTrace t = synthetic_roofline_trace();
  const RooflinePlot with = build_roofline(t, synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  const RooflinePlot p = build_roofline(t, std::nullopt, prof::TimeMode::exclusive);
  EXPECT_FALSE(p.has_ceilings());
  EXPECT_EQ(p.ridge_intensity, 0.0);
  EXPECT_EQ(p.memory_roof(1.0), 0.0);
  EXPECT_EQ(p.compute_roof(), 0.0);
  EXPECT_EQ(p.roofline.floor_ns, 0.0);
  ASSERT_EQ(p.markers.size(), with.markers.size());
  for (const auto& m : p.markers) {
    const prof::RooflineRow& r = p.roofline.rows[m.row];
    const RooflineMarker* w = marker_of(with, r.kernel);
    ASSERT_NE(w, nullptr);
    EXPECT_DOUBLE_EQ(m.x, w->x) << r.kernel;
    EXPECT_DOUBLE_EQ(m.y, w->y) << r.kernel;
    EXPECT_TRUE(std::isnan(p.pct_floor(r)));
    EXPECT_TRUE(std::isnan(p.pct_bandwidth(r)));
    EXPECT_TRUE(std::isnan(p.pct_peak(r)));
    EXPECT_GT(m.y, p.y_min);
    EXPECT_LT(m.y, p.y_max);
  }
  // Ceilings of another device do not apply.
  db::CeilingsRecord cpu = synthetic_roofline_ceilings();
  cpu.device_id = -1;
  EXPECT_FALSE(ceilings_for_trace({cpu}, t).has_value());
  EXPECT_FALSE(ceilings_for_trace({}, t).has_value());
  const auto both = ceilings_for_trace({cpu, synthetic_roofline_ceilings()}, t);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->device_id, 0) << "a GPU profile takes its GPU's";
  prof::ProfileTrace on_cpu = t;
  on_cpu.source = "cpu";
  EXPECT_EQ(ceilings_for_trace({synthetic_roofline_ceilings(), cpu}, on_cpu)->device_id, -1) << "a CPU profile the CPU's";
}

TEST(GuiRoofline, TableOrderSortsTheDeclaredRowsAndKeepsTheUndeclaredLast) {
  const RooflinePlot p = build_roofline(synthetic_roofline_trace(), synthetic_roofline_ceilings(), prof::TimeMode::exclusive);
  auto names = [&](RooflineColumn c, bool desc) {
    std::vector<std::string> out;
    for (std::size_t i : roofline_order(p, c, desc)) out.push_back(p.roofline.rows[i].kernel);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(RooflineColumn::lost, true), (V{"k_gemm", "k_norm", "k_copy", "k_reduce", "k_split", "k_mystery"}));
  EXPECT_EQ(names(RooflineColumn::time, true), (V{"k_gemm", "k_norm", "k_copy", "k_split", "k_reduce", "k_mystery"}))
      << "k_mystery (3 us) stays below k_split (3 us) and k_reduce (1 us): undeclared rows go last";
  EXPECT_EQ(names(RooflineColumn::pct_floor, false), (V{"k_norm", "k_gemm", "k_copy", "k_reduce", "k_split", "k_mystery"}));
  EXPECT_EQ(names(RooflineColumn::gbps, true), (V{"k_copy", "k_norm", "k_reduce", "k_split", "k_gemm", "k_mystery"}))
      << "ties (250 GB/s) by lost time";
  EXPECT_EQ(names(RooflineColumn::kernel, false), (V{"k_copy", "k_gemm", "k_norm", "k_reduce", "k_split", "k_mystery"}));
  EXPECT_EQ(names(RooflineColumn::kernel, true), (V{"k_split", "k_reduce", "k_norm", "k_gemm", "k_copy", "k_mystery"}));
  EXPECT_EQ(names(RooflineColumn::op, false).front(), "k_copy") << "copy < gemm < gemm_splitk < rmsnorm";
}

// Red (0%) through yellow (50%) to green (100% and above), grey where there is no % of floor; the Timeline's
// buckets are 5% wide and take the colours of their centres.
TEST(GuiRoofline, FloorColourRunsFromRedThroughYellowToGreenAndGreyWhereUndeclared) {
  const Rgb red = floor_colour(0), yellow = floor_colour(50), green = floor_colour(100);
  EXPECT_GT(red.r, 2 * red.g) << "0%: red";
  EXPECT_GT(yellow.r, 0.8f);
  EXPECT_GT(yellow.g, 0.7f) << "50%: yellow";
  EXPECT_GT(green.g, 2 * green.r) << "100%: green";
  EXPECT_EQ(floor_colour(250), green) << "above the measured ceilings: as green as at them";
  EXPECT_EQ(floor_colour(-3), red);
  EXPECT_EQ(floor_colour(std::nan("")), kUndeclaredRgb);
  for (int pct = 0; pct < 50; pct += 5) EXPECT_LT(floor_colour(pct).g, floor_colour(pct + 5).g) << pct << "%: greener";
  for (int pct = 50; pct < 100; pct += 5) EXPECT_GT(floor_colour(pct).r, floor_colour(pct + 5).r) << pct << "%: less red";

  EXPECT_EQ(floor_bucket(0), 0);
  EXPECT_EQ(floor_bucket(100), kFloorBuckets - 1);
  EXPECT_EQ(floor_bucket(180), kFloorBuckets - 1);
  EXPECT_EQ(floor_bucket(52), 10);
  EXPECT_EQ(floor_bucket(53), 11);
  EXPECT_EQ(floor_bucket(std::nan("")), -1);
  EXPECT_EQ(floor_bucket_colour(10), floor_colour(50));
  EXPECT_EQ(floor_bucket_colour(-1), kUndeclaredRgb);

  // Each kernel of the synthetic profile in its bucket: 50%, 80%, 25%, 100%, 100%, undeclared.
  const prof::ProfileTrace t = synthetic_roofline_trace();
  const auto pct = prof::kernel_floor_pct(t, to_ceilings(synthetic_roofline_ceilings()), prof::TimeMode::exclusive);
  ASSERT_EQ(pct.size(), t.kernels.size());
  const std::map<std::string, int> want = {{"k_gemm", 10}, {"k_copy", 16}, {"k_norm", 5}, {"k_split", 20}, {"k_reduce", 20}, {"k_mystery", -1}};
  for (std::size_t i = 0; i < t.kernels.size(); ++i) EXPECT_EQ(floor_bucket(pct[i]), want.at(t.kernels[i].short_name)) << t.kernels[i].short_name;
  // No ceilings: every kernel grey.
  for (double v : prof::kernel_floor_pct(t, to_ceilings(std::nullopt), prof::TimeMode::exclusive)) EXPECT_EQ(floor_bucket(v), -1);
}

// The fixture's real run (CPU backend) recorded its ceilings and its ops' costs: the view's rows are exactly the
// rows `mocbench stats --report roofline` prints for the same point.
TEST(GuiRoofline, TheFixturesRowsAreStatsRooflineRows) {
  Store s;
  s.open(test::fixture_db());
  ASSERT_FALSE(s.any_error());
  const RunRef run = s.runs()[0].ref;
  const auto& ceilings = s.ceilings(run);
  ASSERT_EQ(ceilings.size(), 1u) << "the CPU backend's";
  EXPECT_EQ(ceilings[0].device_id, -1);
  EXPECT_GT(ceilings[0].copy_GBps, 0);
  EXPECT_GT(ceilings[0].gemm_tflops, 0);
  const db::PointRecord* train = nullptr;
  for (const auto& p : s.points(run))
    if (p.mode == "train" && !train) train = &p;
  ASSERT_NE(train, nullptr);
  const auto trace = s.profile(run, train->id);
  ASSERT_NE(trace, nullptr);
  const auto c = ceilings_for_trace(ceilings, *trace);
  ASSERT_TRUE(c.has_value());
  const RooflinePlot p = build_roofline(*trace, c, prof::TimeMode::exclusive);
  ASSERT_TRUE(p.has_ceilings());
  EXPECT_GT(p.declared_rows, 5u);
  EXPECT_FALSE(p.markers.empty());
  EXPECT_GT(p.zero_flop_intensity, 0) << "fills and copies do no arithmetic";

  const std::string csv = test::temp_dir() + "/roofline_stats.csv";
  ASSERT_EQ(test::run_command(std::string(MOCBENCH_BIN) + " stats " + std::to_string(run.run_id) + " --db " + test::fixture_db() +
                              " --point " + std::to_string(train->index) + " --report roofline --format csv > " + csv + " 2>&1"),
            0);
  std::ifstream in(csv);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "a header";
  std::size_t n = 0;
  while (std::getline(in, line) && !line.empty()) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    ASSERT_GE(cells.size(), 15u) << line;
    ASSERT_LT(n, p.roofline.rows.size());
    const prof::RooflineRow& r = p.roofline.rows[n++];
    EXPECT_EQ(cells[14], r.kernel) << line;
    EXPECT_EQ(cells[12], r.phase) << line;
    EXPECT_EQ(cells[13].rfind(r.declared ? r.op : "(undeclared)", 0), 0u) << line;
    auto num = [&](std::size_t i) { return cells[i].empty() ? std::nan("") : std::stod(cells[i]); };
    auto near = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); };
    EXPECT_TRUE(near(num(2), r.time_ns)) << line;
    if (!r.declared) continue;
    EXPECT_TRUE(near(num(5), r.GBps())) << line;
    EXPECT_TRUE(near(num(6), p.pct_bandwidth(r))) << line;
    EXPECT_TRUE(near(num(7), r.tflops())) << line;
    EXPECT_TRUE(near(num(8), p.pct_peak(r))) << line;
    EXPECT_TRUE(near(num(9), r.floor_ns)) << line;
    EXPECT_TRUE(near(num(10), p.pct_floor(r))) << line;
    EXPECT_TRUE(near(num(11), r.lost_ns)) << line;
  }
  EXPECT_EQ(n, p.roofline.rows.size()) << "every row, in the same order";
}

}  // namespace
}  // namespace moc::gui

// The stage stamps of a multi-stage stamped kernel in the dashboard's model: their Timeline lane (under the
// kernel's stream, coloured by stage, level of detail) and the Stages view's table, which must print what
// `mocbench stats RUN --report stage_sum` prints for the same profile. The profile (synthetic_stage_trace) is
// shaped as older databases hold the retired persistent decode step's k_step -- many stages per launch, per
// layer, with barrier waits -- which the dashboard must still show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "db/results_db.h"
#include "gui/model/stage_stats.h"
#include "gui/model/timeline.h"
#include "tests/gui/gui_fixture.h"

namespace moc::gui {
namespace {

// A stamped kernel's stage stamps stand on a lane right under its stream's lane, one item per stage of each
// launch, coloured by the stage's name whatever the layer, inside their kernel record; they are not device
// work of their own (the sums stay the records').
TEST(GuiTimeline, StampedStagesStandOnALaneUnderTheirKernelsStreamColouredByStage) {
  const std::uint32_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  const int steps = 2, layers = 3;
  const auto trace = std::make_shared<const prof::ProfileTrace>(synthetic_stage_trace(steps, layers, seed));
  const auto& t = *trace;
  ASSERT_EQ(t.stages.size(), static_cast<std::size_t>(steps * (3 + 7 * layers)));
  const Timeline tl = build_timeline(trace);
  ASSERT_EQ(tl.lanes.size(), 3u);
  EXPECT_EQ(tl.lanes[0].label, "GPU 0 stream 7");
  EXPECT_FALSE(tl.lanes[0].stages);
  const TimelineLane& lane = tl.lanes[1];
  EXPECT_TRUE(lane.stages) << "right under the stream lane";
  EXPECT_EQ(lane.label, "k_step stages");
  EXPECT_TRUE(tl.lanes[2].phases);
  ASSERT_EQ(lane.items.size(), t.stages.size());
  EXPECT_EQ(lane.rows(), 1) << "a launch's stages tile it: no overlap";
  ASSERT_EQ(tl.stage_kernel.size(), t.stages.size());
  std::map<std::string, std::int32_t> color_of_stage;
  std::map<int, double> share_of_step;
  for (const TimelineItem& it : lane.items) {
    ASSERT_EQ(it.kind, ItemKind::stage);
    const prof::StageRecord& g = t.stages[static_cast<std::size_t>(it.index)];
    EXPECT_EQ(it.start, g.start_ns);
    EXPECT_EQ(it.end, g.end_ns);
    EXPECT_EQ(it.wait_ns(), 0) << "a barrier wait is not a leading overlap: never hatched";
    EXPECT_EQ(tl.phases[static_cast<std::size_t>(it.color)], "stage: " + g.stage);
    auto [c, fresh] = color_of_stage.emplace(g.stage, it.color);
    EXPECT_EQ(c->second, it.color) << g.stage << ": one colour in every layer";
    const std::ptrdiff_t k = tl.stage_kernel[static_cast<std::size_t>(it.index)];
    ASSERT_GE(k, 0);
    const prof::KernelRecord& rec = t.kernels[static_cast<std::size_t>(k)];
    EXPECT_EQ(rec.short_name, "k_step");
    EXPECT_EQ(rec.step, g.step);
    EXPECT_LE(rec.start_ns, it.start);
    EXPECT_LE(it.end, rec.end_ns);
    EXPECT_DOUBLE_EQ(tl.stage_share(it), static_cast<double>(it.end - it.start) / static_cast<double>(rec.end_ns - rec.start_ns));
    share_of_step[g.step] += tl.stage_share(it);
  }
  EXPECT_EQ(color_of_stage.size(), 10u) << "start, 7 per layer, head, output";
  std::set<std::int32_t> distinct;
  for (const auto& [name, c] : color_of_stage) distinct.insert(c);
  EXPECT_EQ(distinct.size(), color_of_stage.size()) << "one colour class per stage name";
  for (const auto& k : t.kernels) {
    if (k.short_name != "k_step") continue;  // the stages start 300 ns after the record
    EXPECT_NEAR(share_of_step[k.step], 1.0 - 300.0 / static_cast<double>(k.end_ns - k.start_ns), 1e-12);
  }
  EXPECT_EQ(tl.exclusive_sum_ns, prof::busy_ns(t)) << "stages are not counted as device work again";
  std::int64_t inclusive = 0;
  for (const auto& k : t.kernels) inclusive += k.end_ns - k.start_ns;
  EXPECT_EQ(tl.inclusive_sum_ns, inclusive);
  // Labels: "qkv L2"; outside the layers the name alone. Hover finds the stage under the pointer.
  EXPECT_EQ(stage_label(t.stages[1]), "qkv L0");
  EXPECT_EQ(stage_label(t.stages[1 + 7 * 2]), "qkv L2");
  EXPECT_EQ(stage_label(t.stages[0]), "start");
  const TimelineItem& mid = lane.items[5];
  EXPECT_EQ(item_at(lane, 0, (mid.start + mid.end) / 2, 0), 5);
}

// A stage whose launch has no kernel record (a record CUPTI dropped) is kept, on a lane of its own after the
// stream lanes, with no share.
TEST(GuiTimeline, StagesWithoutAKernelRecordGoOnTheirOwnLane) {
  prof::ProfileTrace t = synthetic_stage_trace(2, 2);
  for (auto& g : t.stages)
    if (g.step == 1) g.launch = 1;  // step 1 has one k_step record: launch 1 has none
  const Timeline tl = build_timeline(std::make_shared<const prof::ProfileTrace>(t));
  ASSERT_EQ(tl.lanes.size(), 4u);
  EXPECT_EQ(tl.lanes[1].label, "k_step stages");
  EXPECT_EQ(tl.lanes[2].label, "k_step stages (no kernel record)");
  EXPECT_TRUE(tl.lanes[2].stages);
  EXPECT_EQ(tl.lanes[1].items.size() + tl.lanes[2].items.size(), t.stages.size());
  for (const auto& it : tl.lanes[2].items) {
    EXPECT_EQ(t.stages[static_cast<std::size_t>(it.index)].step, 1);
    EXPECT_EQ(tl.stage_kernel[static_cast<std::size_t>(it.index)], -1);
    EXPECT_EQ(tl.stage_share(it), 0);
  }
  EXPECT_TRUE(tl.lanes[3].phases);
}

// Level of detail on a stage lane: zoomed out, runs of narrow stages merge within the pixel budget and every
// stage is covered once; zoomed in, each stands alone.
TEST(GuiTimeline, StageLanesMergeNarrowStagesWhenZoomedOut) {
  const Timeline tl = build_timeline(std::make_shared<const prof::ProfileTrace>(synthetic_stage_trace(20, 40, test::fresh_seed())));
  const TimelineLane& lane = tl.lanes[1];
  ASSERT_TRUE(lane.stages);
  const double px = 300, min_px = 2;
  std::vector<VisibleSpan> spans;
  visible_spans(lane, 0, tl.start_ns, tl.end_ns, static_cast<double>(tl.end_ns - tl.start_ns) / px, min_px, &spans);
  EXPECT_LE(spans.size(), static_cast<std::size_t>(px));
  EXPECT_LT(spans.size(), lane.items.size() / 10) << "merged";
  std::size_t covered = 0;
  for (const auto& sp : spans) {
    EXPECT_EQ(static_cast<std::size_t>(sp.first), covered) << "in order, none twice";
    covered += static_cast<std::size_t>(sp.count);
  }
  EXPECT_EQ(covered, lane.items.size());
  // One launch at 100 ns per pixel: every stage (300 ns or more) is wider than 2 px.
  const TimelineItem& first = lane.items.front();
  std::int64_t launch_end = first.end;
  std::size_t in_launch = 0;
  for (const auto& it : lane.items)
    if (tl.trace->stages[static_cast<std::size_t>(it.index)].step == 0) {
      launch_end = it.end;
      ++in_launch;
    }
  spans.clear();
  visible_spans(lane, 0, first.start, launch_end, 100.0, min_px, &spans);
  ASSERT_EQ(spans.size(), in_launch);
  for (const auto& sp : spans) EXPECT_EQ(sp.count, 1);
}

// The Stages view's table, per (kernel, stage): instances, time and barrier wait per step, share of the
// kernel's stamped time, mean and max -- exactly what `mocbench stats RUN --report stage_sum` prints for the
// same profile stored in a database.
TEST(GuiStageStats, PerStageTimeShareAndWaitAreStatsStageSumsNumbers) {
  const std::uint32_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  const int steps = 3, layers = 4;
  const prof::ProfileTrace t = synthetic_stage_trace(steps, layers, seed);
  const StageTable tb = stage_table(t);
  ASSERT_EQ(tb.rows.size(), 10u);
  std::vector<std::string> order;
  for (const auto& r : tb.rows) order.push_back(r.stage);
  EXPECT_EQ(order, (std::vector<std::string>{"start", "qkv", "attention", "o", "gate", "top-K", "up", "down", "head", "output"}))
      << "the order of a step";
  double share = 0, kernel_total = 0;
  for (const auto& g : t.stages) kernel_total += static_cast<double>(g.end_ns - g.start_ns);
  for (const auto& r : tb.rows) {
    EXPECT_EQ(r.kernel, "k_step");
    double total = 0, wait = 0, max = 0, n = 0;
    for (const auto& g : t.stages)
      if (g.stage == r.stage) {
        total += static_cast<double>(g.end_ns - g.start_ns);
        wait += static_cast<double>(g.wait_ns);
        max = std::max(max, static_cast<double>(g.end_ns - g.start_ns));
        ++n;
      }
    EXPECT_EQ(r.instances_per_step, r.stage == "start" || r.stage == "head" || r.stage == "output" ? 1.0 : layers) << r.stage;
    EXPECT_DOUBLE_EQ(r.time_per_step_ns, total / steps);
    EXPECT_DOUBLE_EQ(r.wait_per_step_ns, wait / steps);
    EXPECT_DOUBLE_EQ(r.share_pct, 100.0 * total / kernel_total);
    EXPECT_DOUBLE_EQ(r.mean_ns, total / n);
    EXPECT_EQ(r.max_ns, max);
    share += r.share_pct;
  }
  EXPECT_NEAR(share, 100.0, 1e-9);
  EXPECT_EQ(tb.launches, static_cast<std::size_t>(steps));
  double record_total = 0;
  for (const auto& k : t.kernels)
    if (k.short_name == "k_step") record_total += static_cast<double>(k.end_ns - k.start_ns);
  EXPECT_DOUBLE_EQ(tb.coverage_pct, 100.0 * kernel_total / record_total);
  EXPECT_EQ(tb.unmatched, 0u);
  EXPECT_TRUE(stage_table(synthetic_trace(100, 1)).rows.empty()) << "no stamps, no rows";

  // The same profile in a database, through the command line.
  const std::string path = test::temp_dir() + "/stages_" + std::to_string(seed) + ".db";
  std::int64_t run = 0;
  {
    auto w = db::ResultsDb::open(path, db::OpenMode::read_write);
    db::RunRecord r;
    r.scenario_name = "stages";
    r.device_kind = "cuda";
    run = w.begin_run(r);
    db::PointRecord p;
    p.run_id = run;
    p.mode = "decode";
    p.status = "ok";
    p.axes = {{"mode", "decode"}, {"decode_impl", "persistent"}};  // as a run recorded before the retirement
    w.add_point(p, {}, {}, &t);
    w.finish_run(run, "ok", 1);
  }
  const std::string csv = path + ".csv";
  ASSERT_EQ(test::run_command(std::string(MOCBENCH_BIN) + " stats " + std::to_string(run) + " --db " + path +
                              " --report stage_sum --format csv > " + csv + " 2>&1"),
            0);
  std::ifstream in(csv);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "a header";
  std::size_t row = 0;
  while (std::getline(in, line) && !line.empty()) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 10u) << line;  // point, report, then the table's 8 columns
    ASSERT_LT(row, tb.rows.size());
    const StageRow& r = tb.rows[row++];
    EXPECT_EQ(cells[2], r.kernel);
    EXPECT_EQ(cells[3], r.stage);
    const double want[] = {r.instances_per_step, r.time_per_step_ns, r.share_pct, r.wait_per_step_ns, r.mean_ns, r.max_ns};
    for (std::size_t c = 0; c < 6; ++c) EXPECT_NEAR(std::stod(cells[4 + c]), want[c], 1e-9 * std::max(1.0, std::fabs(want[c]))) << line;
  }
  EXPECT_EQ(row, tb.rows.size()) << "every row, in the same order";
}

}  // namespace
}  // namespace moc::gui

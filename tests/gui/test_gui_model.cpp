// The dashboard's data model without a window: what it reads from a database made by a real `mocbench run`,
// what it derives for each view, the timeline's level of detail, live pick-up of a second process's writes,
// and refusals of files that are not (current, whole) mocbench databases.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "gui/model/breakdown.h"
#include "gui/model/compare.h"
#include "gui/model/kernel_stats.h"
#include "gui/model/memory.h"
#include "gui/model/series.h"
#include "gui/model/store.h"
#include "gui/model/sweep.h"
#include "gui/model/timeline.h"
#include "gui/model/units.h"
#include "tests/gui/gui_fixture.h"

namespace moc::gui {
namespace {

using test::fixture_db;

const db::PointRecord* find_point(const std::vector<db::PointRecord>& pts, const std::string& mode) {
  for (const auto& p : pts)
    if (p.mode == mode) return &p;
  return nullptr;
}

TEST(GuiStore, ReadsRunsPointsMetricsProfilesAndMemoryOfARealRun) {
  Store s;
  s.open(fixture_db());
  ASSERT_FALSE(s.any_error()) << s.sources()[0].error;
  ASSERT_EQ(s.runs().size(), 1u);
  const RunRow& row = s.runs()[0];
  EXPECT_EQ(row.run.scenario_name, "gui_fixture");
  EXPECT_EQ(row.run.status, "ok");
  EXPECT_EQ(row.run.device_kind, "cpu");
  EXPECT_EQ(row.points, 12);
  EXPECT_EQ(row.ok_points, 12);
  EXPECT_EQ(row.profiled_points, 12);
  EXPECT_EQ(row.modes, "train, ffn-decode, decode");
  const auto& pts = s.points(row.ref);
  ASSERT_EQ(pts.size(), 12u);
  const db::PointRecord* train = find_point(pts, "train");
  ASSERT_NE(train, nullptr);
  EXPECT_GT(metric_of(*train, "tokens_per_s"), 0);
  EXPECT_GT(metric_of(*train, "peak_bytes"), 0);
  const auto prof = s.profile(row.ref, train->id);
  ASSERT_NE(prof, nullptr);
  EXPECT_EQ(prof->source, "cpu");
  EXPECT_GT(prof->kernels.size(), 10u);
  EXPECT_GT(prof->ranges.size(), 5u);
  EXPECT_FALSE(s.memory_events(row.ref, train->id).empty());
  // A kernel's statistics over the run: one row per profiled point that ran it.
  const std::string name = kernel_name(prof->kernels.front());
  const auto stats = s.kernel_summary(row.ref, name);
  ASSERT_FALSE(stats.empty());
  for (const auto& r : stats) {
    EXPECT_GT(r.count, 0);
    EXPECT_LE(r.min_ns, r.max_ns);
    EXPECT_GE(r.total_ns, r.max_ns);
  }
  EXPECT_NE(s.run_label(row.ref).find("fixture.db #1 gui_fixture"), std::string::npos) << s.run_label(row.ref);
}

TEST(GuiStore, PicksUpRunsAndPointsThatAnotherProcessWritesMeanwhile) {
  const std::string path = test::fixture_copy("live.db");
  Store s;
  s.open(path);
  ASSERT_FALSE(s.any_error());
  EXPECT_FALSE(s.refresh()) << "nothing changed yet";
  const auto gen = s.generation();
  // A second process starts a run, commits one point, then (after we looked) a second one.
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  // Whatever fails below, the writer never outlives the test (it may be blocked on the pipe).
  struct Reaper {
    pid_t pid;
    bool reaped = false;
    ~Reaper() {
      if (!reaped && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};
  if (pid == 0) {
    char c = 0;
    try {
      auto w = db::ResultsDb::open(path, db::OpenMode::read_write);
      db::RunRecord r;
      r.scenario_name = "live";
      r.started_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
      r.device_kind = "cpu";
      const auto run = w.begin_run(r);
      db::PointRecord p;
      p.run_id = run;
      p.mode = "train";
      p.status = "ok";
      p.axes = {{"batch", "1"}};
      p.metrics = {{"median_ms", 1.0}};
      w.add_point(p, {}, {});
      if (write(to_parent[1], "1", 1) != 1) _exit(3);
      if (read(to_child[0], &c, 1) != 1) _exit(4);
      p.index = 1;
      p.axes = {{"batch", "2"}};
      w.add_point(p, {}, {});
      if (write(to_parent[1], "2", 1) != 1) _exit(3);
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  auto wait_for = [&](std::size_t runs, std::size_t points) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      s.refresh();
      if (s.runs().size() == runs && s.points(s.runs().front().ref).size() == points) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  char c = 0;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  ASSERT_TRUE(wait_for(2, 1)) << "the new run and its first point appear";
  EXPECT_GT(s.generation(), gen);
  EXPECT_EQ(s.runs().front().run.scenario_name, "live") << "newest first";
  EXPECT_EQ(s.runs().front().run.status, "running");
  ASSERT_EQ(write(to_child[1], "go", 1), 1);
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  ASSERT_TRUE(wait_for(2, 2)) << "the second point appears";
  int status = 0;
  waitpid(pid, &status, 0);
  reaper.reaped = true;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(GuiStore, RunWhoseProcessIsKilledTurnsAbandonedThoughTheFileDoesNotChange) {
  const std::string path = test::temp_dir() + "/abandoned.db";
  std::remove(path.c_str());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto w = db::ResultsDb::open(path, db::OpenMode::read_write);
      db::RunRecord r;
      r.scenario_name = "killed";
      w.begin_run(r);
      if (write(ready[1], "1", 1) != 1) _exit(3);
    } catch (...) {
      _exit(2);
    }
    for (;;) pause();  // until killed
  }
  struct Reaper {  // the writer never outlives the test
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the writer could not begin its run";
  close(ready[0]);
  Store s;
  s.open(path);
  ASSERT_EQ(s.runs().size(), 1u);
  EXPECT_EQ(s.runs()[0].run.status, "running");
  EXPECT_FALSE(s.refresh()) << "its process is alive";
  kill(pid, SIGKILL);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  reaper.pid = 0;
  EXPECT_TRUE(s.refresh()) << "the dead writer is noticed without a commit";
  EXPECT_EQ(s.runs()[0].run.status, "abandoned");
  EXPECT_FALSE(s.refresh()) << "and only once";
}

TEST(GuiStore, ForeignNewerCorruptAndMissingFilesAreErrorsNotCrashes) {
  struct Case {
    std::string path, expected;
  } cases[] = {{test::foreign_db(), "not a mocbench results database"},
               {test::newer_db(), "schema version 99"},
               {test::corrupt_db(), "corrupt or truncated"},
               {test::temp_dir() + "/missing.db", "no such results database"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    Store s;
    s.open(c.path);
    ASSERT_TRUE(s.any_error());
    EXPECT_NE(s.sources()[0].error.find(c.expected), std::string::npos) << s.sources()[0].error;
    EXPECT_TRUE(s.runs().empty());
    s.refresh();  // still an error, still no crash
    EXPECT_TRUE(s.any_error());
  }
  // A file that did not exist when opened is picked up once a run creates it.
  const std::string later = test::temp_dir() + "/later.db";
  Store s;
  s.open(later);
  ASSERT_TRUE(s.any_error());
  std::filesystem::copy_file(fixture_db(), later);
  EXPECT_TRUE(s.refresh());
  EXPECT_FALSE(s.any_error());
  EXPECT_EQ(s.runs().size(), 1u);
}

// Issue 27: a file damaged in the middle opens (what it still holds is worth seeing) but is marked damaged
// (SQLite's quick check), counts as an error, and a run whose points cannot be read says so instead of
// looking like a run of no points.
TEST(GuiStore, ADamagedFileIsMarkedAndItsUnreadableRunSaysSo) {
  Store s;
  s.open(test::damaged_db());
  ASSERT_TRUE(s.sources()[0].error.empty()) << s.sources()[0].error;
  EXPECT_FALSE(s.sources()[0].damage.empty());
  EXPECT_TRUE(s.any_error());
  ASSERT_EQ(s.runs().size(), 1u);
  EXPECT_FALSE(s.runs()[0].read_error.empty()) << "shown as a run of " << s.runs()[0].points << " points";
  EXPECT_EQ(s.runs()[0].points, 0);
  s.refresh();
  EXPECT_FALSE(s.sources()[0].damage.empty());
  // A run with a point whose noise never met the target says so in its row (issue #27), not only in Sweep.
  const std::string noisy = test::fixture_copy("noisy.db");
  test::sql(noisy, "DELETE FROM metrics WHERE name = 'noise_met'; "
                   "INSERT INTO metrics (point_id, name, value) SELECT id, 'noise_met', 1 FROM points; "
                   "UPDATE metrics SET value = 0 WHERE name = 'noise_met' AND point_id = (SELECT MIN(id) FROM points);");
  Store n;
  n.open(noisy);
  ASSERT_EQ(n.runs().size(), 1u);
  EXPECT_EQ(n.runs()[0].noisy_points, 1);
  // A sound file has no damage.
  Store ok;
  ok.open(fixture_db());
  EXPECT_TRUE(ok.sources()[0].damage.empty()) << ok.sources()[0].damage;
  EXPECT_FALSE(ok.any_error());
}

TEST(GuiSweep, OneSeriesPerCombinationOfTheOtherAxesSortedByTheChosenAxis) {
  Store s;
  s.open(fixture_db());
  const auto& pts = s.points(s.runs()[0].ref);
  const auto axes = varying_axes(pts);
  EXPECT_EQ(axes, (std::vector<std::string>{"mode", "ffn", "batch"}));
  EXPECT_EQ(default_metric(pts), "latency_us");
  const SweepPlot plot = build_sweep(pts, "median_ms", "batch");
  EXPECT_TRUE(plot.x_numeric);
  std::set<std::string> labels;
  for (const auto& series : plot.series) {
    if (series.floor) continue;
    labels.insert(series.label);
    ASSERT_EQ(series.x, (std::vector<double>{2, 4})) << series.label;
    for (std::size_t i = 0; i < series.y.size(); ++i) {
      EXPECT_GT(series.y[i], 0);
      EXPECT_GE(series.err[i], 0) << "noise of a timed metric";
    }
  }
  EXPECT_EQ(labels.size(), 6u) << "mode x ffn";
  EXPECT_TRUE(labels.count("mode=decode ffn=moc"));
  // A non-numeric axis becomes categories.
  const SweepPlot by_ffn = build_sweep(pts, "median_ms", "ffn");
  EXPECT_FALSE(by_ffn.x_numeric);
  EXPECT_EQ(by_ffn.categories, (std::vector<std::string>{"dense", "moc"}));
  // latency_us of the FFN layer comes with its byte floor, dashed, after each series.
  const SweepPlot lat = build_sweep(pts, "latency_us", "batch");
  ASSERT_GE(lat.series.size(), 2u);
  EXPECT_FALSE(lat.series[0].floor);
  EXPECT_TRUE(lat.series[1].floor);
  EXPECT_NE(lat.series[1].label.find("byte floor"), std::string::npos);
  // A point whose noise never met the target (issue #27) is flagged for the view; unflagged points are not.
  auto flagged = pts;  // (the fixture's own points carry the flag their measurement set: set it here)
  for (auto& p : flagged) {
    std::erase_if(p.metrics, [](const auto& m) { return m.first == "noise_met"; });
    p.metrics.push_back({"noise_met", &p == &flagged[0] ? 0.0 : 1.0});
  }
  std::size_t marked = 0, total = 0;
  for (const auto& series : build_sweep(flagged, "median_ms", "batch").series)
    for (std::size_t i = 0; i < series.not_final.size(); ++i) {
      ++total;
      if (series.not_final[i]) {
        ++marked;
        EXPECT_EQ(series.point_ids[i], flagged[0].id);
      }
    }
  EXPECT_EQ(marked, 1u);
  EXPECT_GT(total, 1u);
}

TEST(GuiBreakdown, PartsFromKernelRecordsOrTimedPhasesAndPhaseTimesOfSteps) {
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const auto& pts = s.points(r);
  const BreakdownData d = build_breakdown(pts, [&](std::int64_t id) { return s.profile(r, id); });
  ASSERT_EQ(d.groups.size(), 3u);
  for (const auto& g : d.groups) {
    SCOPED_TRACE(g.mode);
    EXPECT_EQ(g.bars.size(), 4u);
    for (const auto& b : g.bars) {
      double sum = 0;
      for (double v : b.parts) {
        EXPECT_GE(v, 0);
        sum += v;
      }
      EXPECT_GT(sum, 0);
    }
    if (g.mode == "train") {
      EXPECT_EQ(g.unit, "ms");
      EXPECT_TRUE(g.bars[0].from_profile) << "training ops carry ffn.* ranges";
      EXPECT_GT(g.bars[0].parts[0], 0) << "gate";
      EXPECT_GT(g.bars[0].parts[1], 0) << "up & down";
    }
    if (g.mode == "ffn-decode") {
      EXPECT_EQ(g.unit, "us");
      // The CPU backend's FFN decode is one fused op: its timed parts tell gate and up & down apart.
      EXPECT_FALSE(g.bars[0].from_profile);
      EXPECT_GT(g.bars[0].parts[0], 0);
    }
  }
  // Phase bars: the phases that partition a step, "other" last, one value per point.
  ASSERT_FALSE(d.phases.empty());
  for (const auto& pb : d.phases) {
    EXPECT_EQ(pb.phases.back(), "other");
    for (const auto& row : pb.ms) EXPECT_EQ(row.size(), pb.labels.size());
    EXPECT_EQ(std::count(pb.phases.begin(), pb.phases.end(), "ffn.decode") +
                  std::count(pb.phases.begin(), pb.phases.end(), "ffn"),
              1)
        << "ffn.decode is inside ffn: never both";
  }
}

TEST(GuiMemory, TimelineReachesThePointsPeakAndSplitsActivationsByModule) {
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const auto& pts = s.points(r);
  for (const auto& p : pts) {
    if (p.mode != "train") continue;
    SCOPED_TRACE(p.index);
    const MemoryTimeline m = build_memory(s.memory_events(r, p.id), p);
    ASSERT_FALSE(m.empty());
    // Rebuilt from the repetition's events over starting levels taken from per-category peaks: within 1% of the
    // allocator's own peak (a few hundred bytes of the tiny model's workspace peaked outside the repetition).
    EXPECT_NEAR(m.peak_bytes, metric_of(p, "peak_bytes"), 0.01 * m.peak_bytes) << "the allocator's peak";
    double at_peak = 0;
    for (double v : m.at_peak) at_peak += v;
    EXPECT_NEAR(at_peak, m.peak_bytes, 1e-6 * m.peak_bytes);
    EXPECT_EQ(m.classes.front(), "weights");
    EXPECT_NE(std::find(m.classes.begin(), m.classes.end(), "activations: ffn"), m.classes.end());
    EXPECT_NE(std::find(m.classes.begin(), m.classes.end(), "optimizer_state"), m.classes.end());
    for (std::size_t c = 1; c < m.classes.size(); ++c)
      for (std::size_t i = 0; i < m.t_ms.size(); ++i) ASSERT_GE(m.top[c][i], m.top[c - 1][i]) << "stacked";
    EXPECT_GT(m.paper_activation, 0);
    EXPECT_GT(m.model_activation, 0);
    PeakBars bars;
    add_peak_bar(&bars, "x", p.id, m);
    double sum = 0;
    for (const auto& row : bars.bytes) sum += row[0];
    EXPECT_NEAR(sum, m.peak_bytes, 1e-6 * m.peak_bytes);
  }
}

// Whether events fall before the folded idle gap depends on scheduling (a loaded machine stretches any gap):
// a transient level reached before the fold is still the timeline's peak, standing at the fold (t = 0).
TEST(GuiMemory, APeakBeforeAFoldedIdleGapIsStillThePeak) {
  db::PointRecord p;
  p.mode = "train";
  p.status = "ok";
  p.metrics = {{"peak_weights_bytes", 1000}, {"peak_activations_bytes", 300}, {"peak_bytes", 1300}};
  const std::vector<db::MemEventRecord> ev = {
      {0, "activations", "ffn", 0, 300},        {1000, "activations", "ffn", 0, -300},
      {2000, "activations", "ffn", 0, 100},     {1000000000, "activations", "attention", 0, 50},
      {1000001000, "activations", "attention", 0, -50}, {1000002000, "activations", "ffn", 0, -100}};
  const MemoryTimeline m = build_memory(ev, p);
  ASSERT_EQ(m.folded_events, 3) << "the one-second gap is folded";
  EXPECT_DOUBLE_EQ(m.peak_bytes, 1300);
  EXPECT_DOUBLE_EQ(m.peak_t_ms, 0);
  double at_peak = 0;
  for (double v : m.at_peak) at_peak += v;
  EXPECT_DOUBLE_EQ(at_peak, 1300);
  // What is drawn starts after the fold: weights plus the 100 bytes still live.
  EXPECT_DOUBLE_EQ(m.top.back().front(), 1100);
}

TEST(GuiTimeline, LanesPerStreamAndPerPhaseDepthFromARealProfile) {
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const auto* train = find_point(s.points(r), "train");
  const Timeline tl = build_timeline(s.profile(r, train->id));
  ASSERT_GE(tl.lanes.size(), 2u);
  EXPECT_EQ(tl.lanes[0].label, "CPU ops");
  EXPECT_EQ(tl.lanes[0].items.size(), tl.trace->kernels.size());
  EXPECT_TRUE(tl.lanes[1].phases);
  EXPECT_LT(tl.start_ns, tl.end_ns);
  for (const auto& lane : tl.lanes)
    for (std::size_t i = 1; i < lane.items.size(); ++i) ASSERT_LE(lane.items[i - 1].start, lane.items[i].start);
  EXPECT_NE(std::find(tl.phases.begin(), tl.phases.end(), "ffn.gate"), tl.phases.end());
}

// The level-of-detail query: every item in the window is drawn exactly once, alone or in a merged span; at
// any zoom the number of spans is bounded by the pixels, not by the items.
TEST(GuiTimeline, VisibleSpansCoverEveryItemOnceAndStayWithinThePixelBudget) {
  const auto trace = std::make_shared<const prof::ProfileTrace>(synthetic_trace(200000, 1));
  const Timeline tl = build_timeline(trace);
  const TimelineLane& lane = tl.lanes[0];
  ASSERT_EQ(lane.items.size(), 200000u);
  const double px = 1200, min_px = 3;
  for (double zoom : {1.0, 1e-2, 1e-4}) {
    SCOPED_TRACE(zoom);
    const double width = static_cast<double>(tl.end_ns - tl.start_ns) * zoom;
    const auto t0 = tl.start_ns + static_cast<std::int64_t>((static_cast<double>(tl.end_ns - tl.start_ns) - width) / 2);
    const auto t1 = t0 + static_cast<std::int64_t>(width);
    const double ns_per_px = width / px;
    std::vector<VisibleSpan> spans;
    visible_spans(lane, 0, t0, t1, ns_per_px, min_px, &spans);
    ASSERT_FALSE(spans.empty());
    EXPECT_LE(spans.size(), static_cast<std::size_t>(px)) << "bounded by pixels";
    std::size_t expected_first = static_cast<std::size_t>(spans.front().first);
    std::size_t covered = 0;
    for (const auto& sp : spans) {
      ASSERT_EQ(static_cast<std::size_t>(sp.first), expected_first) << "contiguous, in order, none twice";
      expected_first += static_cast<std::size_t>(sp.count);
      covered += static_cast<std::size_t>(sp.count);
      EXPECT_EQ(sp.start, lane.items[static_cast<std::size_t>(sp.first)].start);
      EXPECT_GE(sp.end, lane.items[static_cast<std::size_t>(sp.first + sp.count - 1)].end);
      if (sp.count > 1) {
        for (int k = 0; k < sp.count; ++k) {
          const auto& it = lane.items[static_cast<std::size_t>(sp.first + k)];
          ASSERT_LT(static_cast<double>(it.end - it.start), min_px * ns_per_px) << "only narrow items merge";
        }
      }
    }
    // Every item overlapping the window is covered.
    std::size_t in_window = 0;
    for (const auto& it : lane.items) in_window += it.end >= t0 && it.start < t1;
    EXPECT_EQ(covered, in_window);
    if (zoom == 1.0) {
      EXPECT_LT(spans.size(), 2 * static_cast<std::size_t>(px / min_px)) << "merged when zoomed out";
    }
    if (zoom == 1e-4) {
      for (const auto& sp : spans) EXPECT_EQ(sp.count, 1) << "every kernel alone when zoomed in";
    }
  }
  // item_at: the item under a time, none in a gap.
  const auto& it = lane.items[1234];
  EXPECT_EQ(item_at(lane, 0, (it.start + it.end) / 2, 0), 1234);
  EXPECT_EQ(item_at(lane, 0, it.end + 100, 0), -1) << "the 200 ns gap after it";
}

TEST(GuiCompare, MatchesPointsByAxesAndJudgesOnlyDifferencesBeyondNoise) {
  EXPECT_EQ(judge("latency_us", 100, 99, 0.02, 0.02), Verdict::same) << "within both sides' noise";
  EXPECT_EQ(judge("latency_us", 100, 80, 0.02, 0.02), Verdict::better);
  EXPECT_EQ(judge("latency_us", 100, 120, 0.02, 0.02), Verdict::worse);
  EXPECT_EQ(judge("tokens_per_s", 100, 120, 0.02, 0.02), Verdict::better) << "higher is better";
  EXPECT_EQ(judge("peak_bytes", 100, 101, 0.5, 0.5), Verdict::worse) << "bytes are exact: no noise";
  EXPECT_EQ(judge("latency_us", 100, std::nan(""), 0.02, 0.02), Verdict::missing);

  Store s;
  s.open(fixture_db());
  auto a = s.points(s.runs()[0].ref);
  // The fixture's medians come from two repetitions on a shared machine: fix their noise at 1% so the verdicts
  // do not depend on how busy the machine was.
  for (auto& p : a)
    for (auto& [name, v] : p.metrics)
      if (name == "noise") v = 0.01;
  auto b = a;
  b.pop_back();
  for (auto& p : b)
    for (auto& [name, v] : p.metrics)
      if (name == "latency_us") v *= 0.5;
  const CompareTable t = build_compare(a, b);
  EXPECT_EQ(t.rows.size(), 11u);
  EXPECT_EQ(t.only_a, 1);
  EXPECT_EQ(t.only_b, 0);
  ASSERT_FALSE(t.metrics.empty());
  const auto lat = static_cast<std::size_t>(std::find(t.metrics.begin(), t.metrics.end(), "latency_us") - t.metrics.begin());
  ASSERT_LT(lat, t.metrics.size());
  int better = 0;
  for (const auto& row : t.rows) {
    const auto& c = row.cells[lat];
    if (c.verdict == Verdict::better) {
      ++better;
      EXPECT_NEAR(c.ratio, 0.5, 1e-12);
    }
    for (std::size_t i = 0; i < t.metrics.size(); ++i)
      if (i != lat && row.cells[i].verdict != Verdict::missing) {
        EXPECT_EQ(row.cells[i].verdict, Verdict::same) << t.metrics[i];
      }
  }
  EXPECT_EQ(better, 4) << "the four ffn-decode points";
}

TEST(GuiSeries, CurvesPerPointAndGateHistogramsOfATextRun) {
  Store store;
  store.open(test::text_fixture_db());
  ASSERT_EQ(store.runs().size(), 1u);
  const RunRef a = store.runs()[0].ref;
  const auto names = curve_names(store, a);
  ASSERT_GE(names.size(), 5u);
  EXPECT_EQ(names[0], "val_ppl");  // the main ones first
  EXPECT_EQ(names[2], "train_loss");
  for (const auto& n : names) EXPECT_EQ(n.find("_hist"), std::string::npos) << "histograms are not curves: " << n;
  const CurvePlot ppl = build_curves(store, a, "val_ppl");
  ASSERT_EQ(ppl.lines.size(), 2u);
  EXPECT_EQ(ppl.lines[0].label, "ffn=dense");
  EXPECT_EQ(ppl.lines[1].label, "ffn=moc");
  EXPECT_EQ(ppl.lines[0].x, (std::vector<double>{0, 5, 10, 15, 20}));
  EXPECT_NEAR(ppl.lines[1].y.front(), 512, 100) << "untrained: about the vocabulary";
  EXPECT_LT(ppl.lines[1].y.back(), 0.75 * ppl.lines[1].y.front()) << "20 steps of learning";
  EXPECT_EQ(build_curves(store, a, "train_loss").lines[0].x.size(), 20u);
  // Gate histograms: one per layer (tiny has 2), the MoC point's threshold inside the histogram.
  const auto& pts = store.points(a);
  const auto layers = gate_layers(store, a, pts[1].id);
  ASSERT_EQ(layers.size(), 2u);
  for (const auto& g : layers) {
    EXPECT_EQ(g.pre_x.size(), 80u);
    EXPECT_EQ(g.overlap_x.size(), 20u);
    ASSERT_TRUE(std::isfinite(g.threshold_pre));
    EXPECT_GT(g.threshold_pre, g.pre_x.front());
    EXPECT_LT(g.threshold_pre, g.pre_x.back());
  }
  EXPECT_TRUE(gate_layers(store, a, pts[1].id + 1000).empty());
}

// Greedy packing puts overlapping records on sub-rows: on a row nothing overlaps, and there are exactly as many
// rows as records overlap at the busiest instant (the fewest possible).
TEST(GuiTimeline, OverlappingRecordsGoOnTheFewestSubRowsWithNoOverlapOnARow) {
  std::vector<TimelineItem> items;
  for (auto [s, e] : {std::pair{0, 10}, {5, 15}, {12, 20}, {14, 30}, {16, 18}}) items.push_back({s, e, s, 0, 0, ItemKind::kernel, 0});
  EXPECT_EQ(pack_rows(&items), 3);
  std::vector<int> rows;
  for (const auto& it : items) rows.push_back(it.row);
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 0, 2, 1})) << "each on the lowest row free at its start";

  const std::uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    std::uniform_int_distribution<int> start(0, 10000), len(1, 800);
    items.clear();
    for (int i = 0; i < 300; ++i) {
      const int s = start(rng);
      items.push_back({s, s + len(rng), s, 0, i, ItemKind::kernel, 0});
    }
    const int n_rows = pack_rows(&items);
    int busiest = 0;  // the most records covering one instant (every instant of interest is some start)
    for (const auto& a : items) {
      int n = 0;
      for (const auto& b : items) n += b.start <= a.start && a.start < b.end;
      busiest = std::max(busiest, n);
    }
    EXPECT_EQ(n_rows, busiest);
    for (const auto& a : items)
      for (const auto& b : items)
        if (&a != &b && a.row == b.row) {
          ASSERT_TRUE(a.end <= b.start || b.end <= a.start) << "overlap on row " << a.row;
        }
  }
}

// Under programmatic dependent launch a kernel starts before its predecessor ends: its lane gets a second
// sub-row, the waiting part [start, own) is where it overlapped, and the exclusive times sum to the busy time.
TEST(GuiTimeline, PdlKernelsStandOnASecondSubRowWithTheirWaitingPart) {
  const auto trace = std::make_shared<const prof::ProfileTrace>(synthetic_trace(3000, 1, true));
  const Timeline tl = build_timeline(trace);
  const TimelineLane& lane = tl.lanes[0];
  ASSERT_EQ(lane.items.size(), 3000u);
  ASSERT_EQ(lane.rows(), 2);
  ASSERT_EQ(lane.row_begin.size(), 3u);
  EXPECT_EQ(lane.row_begin[0], 0u);
  EXPECT_EQ(lane.row_begin[1], 2000u) << "two of three kernels start after their predecessor ends";
  EXPECT_EQ(lane.row_begin[2], 3000u);
  for (int r = 0; r < 2; ++r)
    for (std::size_t i = lane.row_begin[static_cast<std::size_t>(r)] + 1; i < lane.row_begin[static_cast<std::size_t>(r) + 1]; ++i) {
      ASSERT_EQ(lane.items[i].row, r);
      ASSERT_LE(lane.items[i - 1].end, lane.items[i].start) << "by start, none overlapping, on a row";
    }
  for (std::size_t i = lane.row_begin[1]; i < lane.items.size(); ++i) {
    const TimelineItem& it = lane.items[i];
    EXPECT_EQ(trace->kernels[static_cast<std::size_t>(it.index)].start_ns, it.start);
    ASSERT_EQ(it.wait_ns(), 500) << "it waited where it overlapped its predecessor";
    ASSERT_EQ(it.exclusive_ns(), it.inclusive_ns() - 500);
    EXPECT_EQ(it.duration_ns(prof::TimeMode::exclusive), it.exclusive_ns());
    EXPECT_EQ(it.duration_ns(prof::TimeMode::inclusive), it.inclusive_ns());
  }
  for (std::size_t i = 0; i < lane.row_begin[1]; ++i) ASSERT_EQ(lane.items[i].wait_ns(), 0);
  EXPECT_EQ(tl.exclusive_sum_ns, prof::busy_ns(*trace));
  EXPECT_EQ(tl.inclusive_sum_ns, tl.exclusive_sum_ns + 1000 * 500);
  // The level-of-detail query and the hit test work per sub-row.
  const TimelineItem& late = lane.items[lane.row_begin[1] + 10];
  EXPECT_EQ(item_at(lane, 1, (late.start + late.end) / 2, 0), static_cast<int>(lane.row_begin[1] + 10));
  EXPECT_EQ(item_at(lane, 1, late.end + 300, 0), -1) << "a gap on row 1";
  std::vector<VisibleSpan> spans;
  visible_spans(lane, 1, tl.start_ns, tl.end_ns + 1, 1.0, 2.0, &spans);
  ASSERT_EQ(spans.size(), 1000u) << "1 ns per pixel: every kernel alone";
  EXPECT_EQ(static_cast<std::size_t>(spans.front().first), lane.row_begin[1]);
  // A real profile's CPU ops run one at a time: one row.
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const Timeline real = build_timeline(s.profile(r, find_point(s.points(r), "train")->id));
  EXPECT_EQ(real.lanes[0].rows(), 1);
  EXPECT_EQ(real.exclusive_sum_ns, prof::busy_ns(*real.trace));
}

// Ruler ticks fall on round values -- multiples of 1, 2 or 5 x 10^n ns -- and read as such ("200 us").
TEST(GuiTimeline, TicksAreRoundMultiplesOfAOneTwoFiveStepWithRoundLabels) {
  EXPECT_EQ(tick_step(0.2), 1);
  EXPECT_EQ(tick_step(1), 1);
  EXPECT_EQ(tick_step(3), 5);
  EXPECT_EQ(tick_step(150), 200);
  EXPECT_EQ(tick_step(199.9e3), 200e3);
  EXPECT_EQ(tick_step(1000), 1000);
  EXPECT_EQ(tick_step(5001), 10000);
  std::vector<std::string> labels;
  for (const auto& t : time_ticks(-30e3, 1.05e6, 1.5e5)) labels.push_back(t.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"0", "200 us", "400 us", "600 us", "800 us", "1.0 ms"}));
  labels.clear();
  for (const auto& t : time_ticks(123456, 123620, 40)) labels.push_back(t.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"123.50 us", "123.55 us", "123.60 us"}));
  EXPECT_EQ(format_tick(350, 50), "350 ns");
  EXPECT_EQ(format_tick(2.5e9, 5e8), "2.5 s");

  const std::uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 500; ++trial) {
    const double t0 = std::pow(10, 9 * u(rng)) * (u(rng) < 0.2 ? -1 : 1);
    const double span = std::pow(10, 1 + 8 * u(rng));
    const double min_step = span / (5 + 10 * u(rng));  // a step of at most half the span: two ticks or more
    const auto ticks = time_ticks(t0, t0 + span, min_step);
    const double step = tick_step(min_step);
    ASSERT_GE(step, min_step);
    ASSERT_LT(step, 2.5 * min_step + 1) << "the smallest round step that is wide enough";
    const double mantissa = step / std::pow(10, std::floor(std::log10(step) + 1e-9));
    ASSERT_TRUE(std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 || std::fabs(mantissa - 5) < 1e-9) << step;
    ASSERT_FALSE(ticks.empty());
    for (std::size_t i = 0; i < ticks.size(); ++i) {
      const double k = ticks[i].ns / step;
      ASSERT_EQ(k, std::round(k)) << ticks[i].ns << " is a multiple of " << step;
      ASSERT_GE(ticks[i].ns, t0);
      ASSERT_LE(ticks[i].ns, t0 + span);
      if (i) {
        ASSERT_NEAR(ticks[i].ns - ticks[i - 1].ns, step, 1e-6 * step);
      }
      // The label reads back as the tick's value.
      char unit[8] = {};
      double v = 0;
      if (ticks[i].ns == 0) {
        ASSERT_EQ(ticks[i].label, "0");
        continue;
      }
      ASSERT_EQ(std::sscanf(ticks[i].label.c_str(), "%lf %7s", &v, unit), 2) << ticks[i].label;
      const double scale = std::string(unit) == "ns" ? 1 : std::string(unit) == "us" ? 1e3 : std::string(unit) == "ms" ? 1e6 : 1e9;
      ASSERT_NEAR(v * scale, ticks[i].ns, 1e-6 * step) << ticks[i].label;
    }
  }
}

TEST(GuiTimeline, PhaseLanesAreNamedByTheRangesTheyHold) {
  EXPECT_EQ(phase_lane_label({"step"}), "step");
  EXPECT_EQ(phase_lane_label({"attention", "ffn", "head"}), "attention / ffn / head");
  EXPECT_EQ(phase_lane_label({"attention", "ffn", "head", "loss"}), "attention / ffn / head ...");
  const Timeline tl = build_timeline(std::make_shared<const prof::ProfileTrace>(synthetic_trace(600, 1)));
  std::vector<std::string> labels;
  for (const auto& l : tl.lanes)
    if (l.phases) labels.push_back(l.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"step", "layer", "attention / ffn.gate / ffn.topk ..."}));
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const Timeline real = build_timeline(s.profile(r, find_point(s.points(r), "train")->id));
  for (const auto& l : real.lanes) {
    if (!l.phases) continue;
    EXPECT_FALSE(l.label.empty());
    EXPECT_EQ(l.label.find("phases"), std::string::npos) << l.label;
    EXPECT_EQ(l.label.find("layer."), std::string::npos) << "layer.N merged: " << l.label;
  }
  EXPECT_EQ(real.lanes[1].label.rfind("step", 0), 0u) << real.lanes[1].label;
}

// The traced bar counts each op's device time as the toggle says: exclusive sums to the busy time, inclusive
// counts a PDL kernel's wait again.
TEST(GuiBreakdown, TracedBarsSumToTheBusyTimeExclusiveAndCountWaitsInclusive) {
  const prof::ProfileTrace t = synthetic_trace(600, 1, true);
  db::PointRecord p;
  p.mode = "train";
  p.status = "ok";
  p.metrics = {{"median_ms", 1.0}};
  BreakdownBar ex, in;
  ASSERT_TRUE(breakdown_bar(p, &t, &ex));  // exclusive by default
  ASSERT_TRUE(breakdown_bar(p, &t, &in, prof::TimeMode::inclusive));
  ASSERT_TRUE(ex.from_profile);
  double ex_sum = 0, in_sum = 0, raw = 0;
  for (int i = 0; i < prof::kPaperParts; ++i) {
    ex_sum += ex.parts[static_cast<std::size_t>(i)];
    in_sum += in.parts[static_cast<std::size_t>(i)];
    EXPECT_LE(ex.parts[static_cast<std::size_t>(i)], in.parts[static_cast<std::size_t>(i)]);
  }
  for (const auto& k : t.kernels) raw += static_cast<double>(k.end_ns - k.start_ns);
  // other holds the idle time between ops too: exclusive bars are the steps' span.
  const double idle = static_cast<double>(prof::step_span_ns(t) - prof::busy_ns(t));
  EXPECT_NEAR(ex_sum, static_cast<double>(prof::step_span_ns(t)) / 1e6, 1e-9) << "ms per step";
  EXPECT_NEAR(in_sum, (raw + idle) / 1e6, 1e-9);
  EXPECT_NEAR(in_sum - ex_sum, 200 * 500 / 1e6, 1e-9) << "200 PDL kernels waited 500 ns each";
  // The run's breakdown carries its mode; the CPU backend's ops never overlap, so both modes agree there.
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  auto profile_of = [&](std::int64_t id) { return s.profile(r, id); };
  const BreakdownData dex = build_breakdown(s.points(r), profile_of);
  const BreakdownData din = build_breakdown(s.points(r), profile_of, prof::TimeMode::inclusive);
  EXPECT_EQ(dex.mode, prof::TimeMode::exclusive);
  EXPECT_EQ(din.mode, prof::TimeMode::inclusive);
  ASSERT_EQ(dex.groups.size(), din.groups.size());
  for (std::size_t g = 0; g < dex.groups.size(); ++g)
    for (std::size_t b = 0; b < dex.groups[g].bars.size(); ++b)
      for (int i = 0; i < prof::kPaperParts; ++i)
        EXPECT_NEAR(dex.groups[g].bars[b].parts[static_cast<std::size_t>(i)], din.groups[g].bars[b].parts[static_cast<std::size_t>(i)],
                    1e-12);
}

// 24 bars over three swept axes: grouped by the first (named once per group), labelled by the others' values.
TEST(GuiBreakdown, ManyBarsAreGroupedByTheOutermostAxisAndLabelledByTheRest) {
  std::vector<db::PointRecord> pts;
  int index = 0;
  for (const char* seq : {"128", "256"})
    for (const char* batch : {"1", "2", "4", "8"})
      for (const char* ffn : {"dense", "moc", "moc_gcp"}) {  // the group axis varies fastest: bars come interleaved
        db::PointRecord p;
        p.id = index + 1;
        p.index = index++;
        p.mode = "train";
        p.status = "ok";
        p.axes = {{"ffn", ffn}, {"batch", batch}, {"seq", seq}};
        p.metrics = {{"median_ms", 10.0}, {"gate_ms", 1.0}, {"up_down_ms", 2.0}, {"topk_ms", 0.5}};
        pts.push_back(p);
      }
  const BreakdownData d = build_breakdown(pts, nullptr);
  EXPECT_EQ(d.group_axis, "ffn");
  EXPECT_EQ(d.label_axes, (std::vector<std::string>{"batch", "seq"}));
  ASSERT_EQ(d.groups.size(), 1u);
  const auto& bars = d.groups[0].bars;
  ASSERT_EQ(bars.size(), 24u);
  std::vector<std::string> order;
  for (const auto& b : bars)
    if (order.empty() || order.back() != b.group) order.push_back(b.group);
  EXPECT_EQ(order, (std::vector<std::string>{"ffn=dense", "ffn=moc", "ffn=moc_gcp"})) << "each group's bars together";
  EXPECT_EQ(bars[0].label, "1\n128");
  EXPECT_EQ(bars[1].label, "2\n128") << "sweep order within a group";
  for (const auto& b : bars) EXPECT_EQ(b.label.find('='), std::string::npos) << "values only: " << b.label;
}

TEST(GuiKernelStats, CountTotalMeanMedianMinMaxUnderEitherMode) {
  const DurationStats odd = duration_stats({5, 1, 3});
  EXPECT_EQ(odd.count, 3u);
  EXPECT_EQ(odd.total_ns, 9);
  EXPECT_EQ(odd.mean_ns, 3);
  EXPECT_EQ(odd.median_ns, 3);
  EXPECT_EQ(odd.min_ns, 1);
  EXPECT_EQ(odd.max_ns, 5);
  EXPECT_EQ(duration_stats({4, 1, 2, 10}).median_ns, 3) << "even count: the mean of the middle two";
  EXPECT_EQ(duration_stats({}).count, 0u);

  const auto trace = std::make_shared<const prof::ProfileTrace>(synthetic_trace(600, 1, true));
  const auto ex = kernel_table(*trace, prof::TimeMode::exclusive);
  const auto in = kernel_table(*trace, prof::TimeMode::inclusive);
  ASSERT_EQ(ex.size(), 6u) << "six kernel names";
  double ex_total = 0, in_total = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < ex.size(); ++i) {
    EXPECT_EQ(ex[i].stats.count, 100u);
    EXPECT_EQ(ex[i].durations_ns.size(), 100u);
    EXPECT_TRUE(std::is_sorted(ex[i].durations_ns.begin(), ex[i].durations_ns.end()));
    if (i) {
      EXPECT_GE(ex[i - 1].stats.total_ns, ex[i].stats.total_ns) << "largest total first";
    }
    ex_total += ex[i].stats.total_ns;
    in_total += in[i].stats.total_ns;
    count += ex[i].stats.count;
  }
  EXPECT_EQ(count, 600u);
  EXPECT_EQ(ex_total, static_cast<double>(prof::busy_ns(*trace)));
  EXPECT_EQ(in_total - ex_total, 200.0 * 500);
  // k_updown is every sixth kernel from the third: each one a PDL kernel that waited 500 ns.
  auto row_of = [](const std::vector<KernelRow>& rows, const std::string& name) {
    for (const auto& r : rows)
      if (r.name == name) return r;
    return KernelRow{};
  };
  EXPECT_EQ(row_of(in, "k_updown").stats.mean_ns - row_of(ex, "k_updown").stats.mean_ns, 500);
  EXPECT_EQ(row_of(in, "k_gate").stats.total_ns, row_of(ex, "k_gate").stats.total_ns) << "k_gate never overlaps";

  // Over a run: one row per profiled point that ran the kernel, as many instances as its profile holds.
  Store s;
  s.open(fixture_db());
  const RunRef r = s.runs()[0].ref;
  const auto& pts = s.points(r);
  const auto prof = s.profile(r, find_point(pts, "train")->id);
  const std::string name = kernel_name(prof->kernels.front());
  const auto rows = kernel_over_run(pts, [&](std::int64_t id) { return s.profile(r, id); }, name, prof::TimeMode::exclusive);
  ASSERT_FALSE(rows.empty());
  const auto sql = s.kernel_summary(r, name);
  ASSERT_EQ(rows.size(), sql.size()) << "the same points as the database's own summary";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].point_id, sql[i].point_id);
    EXPECT_EQ(static_cast<std::int64_t>(rows[i].stats.count), sql[i].count);
    EXPECT_EQ(rows[i].steps, sql[i].steps);
    EXPECT_LE(rows[i].stats.total_ns, static_cast<double>(sql[i].total_ns)) << "exclusive never exceeds end - start";
  }
}

TEST(GuiUnits, HumanUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  EXPECT_EQ(format_ns(1500), "1.5 us");
  EXPECT_EQ(format_ns(2.5e6), "2.5 ms");
  EXPECT_EQ(better_direction("mfu_pct"), Better::higher);
  EXPECT_EQ(better_direction("peak_activation_bytes"), Better::lower);
  EXPECT_EQ(better_direction("ms_per_token"), Better::lower);
  EXPECT_TRUE(is_timed_metric("ms_per_token"));
  EXPECT_FALSE(is_timed_metric("peak_bytes"));
  EXPECT_FALSE(is_timed_metric("profile_traced_ms")) << "the profile pass is not the timed median";
}

}  // namespace
}  // namespace moc::gui

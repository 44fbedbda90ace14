// The metric registry (db/metrics.h) against what real CPU runs store, and `mocbench compare` against the
// dashboard's Compare model on the same two runs: the same matched points, metrics and verdicts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "db/metrics.h"
#include "gui/model/compare.h"
#include "gui/model/store.h"
#include "gui_fixture.h"

namespace moc::gui {
namespace {

// Runs a command, returning its stdout (stderr goes to the test's log) and exit code.
std::pair<std::string, int> capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {out, -1};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  return {out, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1};
}

// Two runs of scenarios/smoke_cpu.toml (every mode, dense vs MoC) in one database: runs 1 and 2.
std::string two_smoke_runs_db() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/smoke2.db";
    for (int i = 0; i < 2; ++i) {
      const std::string cmd = std::string(MOCBENCH_BIN) + " run " + MOCBENCH_SOURCE_DIR +
                              "/scenarios/smoke_cpu.toml --no-profile --quiet --db " + p + " > " + test::temp_dir() +
                              "/smoke2.log 2>&1";
      if (test::run_command(cmd) != 0) throw std::runtime_error("making the smoke runs failed: " + cmd);
    }
    return p;
  }();
  return path;
}

// A data-parallel training point (gpus = 2: two worker processes meeting in shared memory on the CPU) after
// its one-rank twin: the ranks' own values, the communication and the scaling efficiency.
std::string data_parallel_db() {
  const std::string dir = test::temp_dir() + "/dp";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/dp.toml") << "name = \"dp\"\nmode = \"train\"\ndevice = \"cpu\"\n[model]\npreset = \"tiny\"\n"
                                     "[measure]\nwarmup = 1\nmin_reps = 2\nmax_reps = 2\n[axes]\nffn = [\"moc\"]\n"
                                     "gpus = [1, 2]\n";
  const std::string p = dir + "/dp.db";
  const std::string cmd = std::string(MOCBENCH_BIN) + " run " + dir + "/dp.toml --quiet --db " + p + " > " + dir +
                          "/dp.log 2>&1";
  if (test::run_command(cmd) != 0) throw std::runtime_error("the data-parallel run failed: " + cmd);
  return p;
}

TEST(MetricRegistry, EveryMetricOfRealCpuRunsHasAUnitDirectionAndLabel) {
  // Every mode (smoke_cpu), profiled points (the fixture), training on text with the gate analysis (the text
  // fixture) and data-parallel training.
  std::set<std::string> seen;
  for (const auto& path : {two_smoke_runs_db(), test::fixture_db(), test::text_fixture_db(), data_parallel_db()}) {
    auto store = db::ResultsDb::open(path, db::OpenMode::read_only);
    for (const auto& run : store.runs())
      for (const auto& p : store.points(run.id))
        for (const auto& [name, v] : p.metrics) {
          seen.insert(name);
          const metrics::MetricInfo* m = metrics::find(name);
          ASSERT_NE(m, nullptr) << name << " (" << path << ") has no registry entry: add it to db/metrics.cpp";
          EXPECT_FALSE(m->unit.empty()) << name;
          EXPECT_FALSE(m->label.empty()) << name;
          // A noisy metric's noise is stored beside it on every ok point that has it.
          if (!m->noise.empty() && p.status == "ok") {
            EXPECT_TRUE(std::any_of(p.metrics.begin(), p.metrics.end(),
                                    [&](const auto& kv) { return kv.first == m->noise; }))
                << name << " names " << m->noise << ", which point " << p.index << " lacks";
          }
        }
  }
  for (const char* m : {"latency_us", "tokens_per_s", "peak_bytes", "profile_kernels", "val_ppl", "rows_per_s",
                        "prefill_ms", "union_b1", "gate_threshold_pre.L0", "rank1_step_ms", "scaling_efficiency_pct"})
    EXPECT_TRUE(seen.count(m)) << m << ": the runs did not cover the mode that writes it";
}

TEST(MetricRegistry, DirectionsUnitsAndPatterns) {
  using metrics::Direction;
  // The ones the dashboard used to leave uncoloured (their names said nothing).
  EXPECT_EQ(metrics::direction("achieved_GBps"), Direction::higher);
  EXPECT_EQ(metrics::direction("scaling_efficiency_pct"), Direction::higher);
  EXPECT_EQ(metrics::direction("comm_busbw_GBps"), Direction::higher);
  // Patterns and a rank's own values.
  EXPECT_EQ(metrics::unit("phase_ffn.gate_ms"), "ms");
  EXPECT_TRUE(metrics::noisy("phase_ffn.gate_ms"));
  EXPECT_EQ(metrics::direction("peak_optimizer_state_bytes"), Direction::lower);
  EXPECT_FALSE(metrics::noisy("peak_optimizer_state_bytes")) << "bytes are exact";
  EXPECT_EQ(metrics::direction("rank1_step_ms"), Direction::lower);
  EXPECT_EQ(metrics::label("rank1_step_ms"), "rank1: training step");
  EXPECT_EQ(metrics::noise_metric("prefill_ms"), "prefill_noise");
  // References and counts are no verdict; the profile pass is not the timed median.
  EXPECT_EQ(metrics::direction("floor_us"), Direction::neither);
  EXPECT_EQ(metrics::direction("reps"), Direction::neither);
  EXPECT_FALSE(metrics::noisy("profile_traced_ms"));
  EXPECT_EQ(metrics::find("no_such_metric"), nullptr);
  EXPECT_EQ(metrics::find("peak__bytes"), nullptr) << "'*' stands for at least one character";
  EXPECT_EQ(metrics::direction("no_such_metric"), Direction::neither);
  // Every default compare metric is in the registry with a direction.
  for (const auto& m : metrics::default_compare_metrics()) {
    ASSERT_NE(metrics::find(m), nullptr) << m;
    EXPECT_NE(metrics::direction(m), Direction::neither) << m;
  }
  // GB/s is judged within noise, bytes exactly.
  EXPECT_EQ(judge("achieved_GBps", 100, 101, 0.01, 0.01), Verdict::same);
  EXPECT_EQ(judge("achieved_GBps", 100, 110, 0.01, 0.01), Verdict::better);
}

// (point, metric) -> verdict, for the cells where either side has a value.
using Cells = std::map<std::pair<std::string, std::string>, std::string>;

Cells cli_cells(const nlohmann::json& rows) {
  Cells out;
  for (const auto& r : rows) {
    if (r["status_a"] == "missing" || r["status_b"] == "missing") continue;  // unmatched: not in the view
    if (r["a"].is_null() && r["b"].is_null()) continue;
    out[{r["point"].get<std::string>(), r["metric"].get<std::string>()}] = r["verdict"].get<std::string>();
  }
  return out;
}

Cells gui_cells(const CompareTable& t) {
  Cells out;
  for (const auto& row : t.rows)
    for (std::size_t i = 0; i < t.metrics.size(); ++i) {
      const auto& c = row.cells[i];
      if (std::isnan(c.a) && std::isnan(c.b)) continue;
      out[{row.label, t.metrics[i]}] = metrics::verdict_name(c.verdict);
    }
  return out;
}

void expect_same_comparison(const std::string& db, const std::string& extra, const std::vector<std::string>& names) {
  SCOPED_TRACE("compare" + extra);
  const auto [out, rc] = capture(std::string(MOCBENCH_BIN) + " compare 1 2 --format json --db " + db + extra);
  ASSERT_EQ(rc, 0) << out;
  const auto rows = nlohmann::json::parse(out);
  Store s;
  s.open(db);
  RunRef a, b;
  for (const auto& r : s.runs()) (r.run.id == 1 ? a : b) = r.ref;
  ASSERT_TRUE(a.valid() && b.valid());
  const CompareTable t = build_compare(s.points(a), s.points(b), names);
  ASSERT_FALSE(t.rows.empty());
  // The same matched points.
  std::set<std::string> cli_points, gui_points;
  int cli_only_a = 0, cli_only_b = 0;
  std::set<std::string> only_a_seen, only_b_seen;
  for (const auto& r : rows) {
    const std::string point = r["point"];
    if (r["status_b"] == "missing") only_a_seen.insert(point);
    else if (r["status_a"] == "missing") only_b_seen.insert(point);
    else cli_points.insert(point);
  }
  cli_only_a = static_cast<int>(only_a_seen.size());
  cli_only_b = static_cast<int>(only_b_seen.size());
  for (const auto& row : t.rows) gui_points.insert(row.label);
  EXPECT_EQ(cli_points, gui_points);
  EXPECT_EQ(cli_only_a, t.only_a);
  EXPECT_EQ(cli_only_b, t.only_b);
  // The same metrics, and the same verdict on every cell.
  std::set<std::string> cli_metrics;
  for (const auto& r : rows) cli_metrics.insert(r["metric"].get<std::string>());
  EXPECT_EQ(cli_metrics, std::set<std::string>(t.metrics.begin(), t.metrics.end()));
  const Cells cli = cli_cells(rows), gui = gui_cells(t);
  EXPECT_EQ(cli, gui);
  EXPECT_GT(cli.size(), t.rows.size()) << "more than one metric per point";
  std::string latency_rows;  // said on failure
  for (const auto& r : rows)
    if (r["metric"] == "latency_us") latency_rows += "\n  " + r.dump();
  EXPECT_TRUE(std::any_of(gui.begin(), gui.end(), [](const auto& kv) {
    return kv.first.second == "latency_us" && kv.second == "better";
  })) << "B's latencies set to half of A's; the CLI's latency_us rows:" << latency_rows;
  // The view draws (and copies) compare_tables: the shared table model, with the same values, ratios and
  // verdicts as the CLI's rows, every matched point once.
  std::size_t table_rows = 0;
  for (const auto& tb : compare_tables(t)) {
    table_rows += tb.rows.size();
    for (std::size_t r = 0; r < tb.rows.size(); ++r) {
      const std::string point = tb.cell(r, 0).text;
      for (std::size_t c = 1; c + 3 < tb.columns.size() + 1; c += 4) {
        const std::string metric = tb.columns[c].key.substr(0, tb.columns[c].key.size() - 2);
        const std::string verdict = tb.cell(r, c + 3).text;
        const bool any = tb.cell(r, c).value || tb.cell(r, c + 1).value;
        if (!any) continue;
        ASSERT_TRUE(cli.count({point, metric})) << point << " " << metric;
        EXPECT_EQ(cli.at({point, metric}), verdict) << point << " " << metric;
        for (const auto& row : rows)
          if (row["point"] == point && row["metric"] == metric) {
            if (row["a"].is_null()) EXPECT_FALSE(tb.cell(r, c).value);
            else EXPECT_DOUBLE_EQ(*tb.cell(r, c).value, row["a"].get<double>());
            if (row["ratio_b_over_a"].is_null()) EXPECT_FALSE(tb.cell(r, c + 2).value);
            else EXPECT_DOUBLE_EQ(*tb.cell(r, c + 2).value, row["ratio_b_over_a"].get<double>());
          }
      }
    }
  }
  EXPECT_EQ(table_rows, t.rows.size());
}

TEST(CompareCliAndDashboard, SameMatchedPointsMetricsAndVerdictsOnTwoRuns) {
  const std::string db = test::temp_dir() + "/cmp.db";
  std::filesystem::copy_file(two_smoke_runs_db(), db, std::filesystem::copy_options::overwrite_existing);
  // Every median's noise at 1% (two repetitions on a busy machine can be noisier than any change); every
  // latency of run 2 half of run 1's (set, not scaled: on a loaded 2-core CI machine the CPU backend's threads
  // wait for each other's time slices, and run 2's raw latencies came out 2x and then over 1000x run 1's, so
  // neither halving nor a thousandfold cut left a cell `better`), and one point gone, so the verdicts are not
  // all `same` and each side has a point the other lacks (run 1 loses another).
  test::sql(db, "PRAGMA foreign_keys = ON;"
                "UPDATE metrics SET value = 0.01 WHERE name = 'noise';"
                "UPDATE metrics SET value = 2.0 WHERE name = 'latency_us' AND point_id IN "
                "(SELECT id FROM points WHERE run_id = 1);"
                "UPDATE metrics SET value = 1.0 WHERE name = 'latency_us' AND point_id IN "
                "(SELECT id FROM points WHERE run_id = 2);"
                "DELETE FROM points WHERE id = (SELECT MAX(id) FROM points WHERE run_id = 2);"
                "DELETE FROM points WHERE id = (SELECT MIN(id) FROM points WHERE run_id = 1);");
  expect_same_comparison(db, "", {});
  expect_same_comparison(db, " --metric latency_us --metric peak_bytes --metric achieved_GBps",
                         {"latency_us", "peak_bytes", "achieved_GBps"});
}

}  // namespace
}  // namespace moc::gui

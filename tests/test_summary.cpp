// The run summary (`mocbench run`'s closing tables, `mocbench show`): units in headers, speedups and memory
// against the dense twin, noise, non-ok points, and the four printers, on a database with known values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "app/report/summary.h"
#include "db/results_db.h"

namespace moc {
namespace {

namespace fs = std::filesystem;
using db::PointRecord;
using db::ResultsDb;
using db::RunRecord;

RunRecord run_record(const std::string& name, const std::string& path, const std::string& hash,
                     const std::string& device_kind, const std::string& device_name) {
  RunRecord r;
  r.scenario_name = name;
  r.scenario_path = path;
  r.scenario_hash = hash;
  r.config_json = r.overrides_json = r.machine_json = "{}";
  r.device_kind = device_kind;
  r.device_name = device_name;
  r.mocbench_version = "test";
  r.started_unix_ms = 1'700'000'000'000;
  return r;
}

class Summary : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("mocbench_summary_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db"))
                .string();
    fs::remove(path_);
    auto store = ResultsDb::open(path_, db::OpenMode::read_write);
    run_ = store.begin_run(run_record("decode_bs1_4", "scenarios/decode_bs1_4.toml", "sha256:0", "cuda",
                                      "NVIDIA H100 80GB HBM3"));
    int index = 0;
    // ffn-decode: dense 30 µs, moc 20 µs (1.5x), moc_2:8 40 µs (0.75x) at batch 1; moc at batch 2 is oom.
    auto ffn = [&](const std::string& f, int batch, const char* status, double us, double noise) {
      PointRecord p;
      p.run_id = run_;
      p.index = index++;
      p.mode = "ffn-decode";
      p.status = status;
      p.axes = {{"mode", "ffn-decode"}, {"ffn", f}, {"batch", std::to_string(batch)}};
      if (p.status == "ok")
        p.metrics = {{"latency_us", us}, {"noise", noise}, {"achieved_GBps", 2500.0}, {"floor_us", 20.0},
                     {"pct_of_floor", 100.0 * 20.0 / us}, {"union_channels", 1024}, {"peak_bytes", 3.0 * (1 << 30)}};
      else p.error = "out of memory";
      store.add_point(p, {}, {}, nullptr);
    };
    ffn("dense", 1, "ok", 30.0, 0.012);
    ffn("moc", 1, "ok", 20.0, 0.034);
    ffn("moc_2:8", 1, "ok", 40.0, 0.0);
    ffn("dense", 2, "ok", 32.0, 0.01);
    ffn("moc", 2, "oom", 0, 0);
    // train: the memory comparison (MoC's peak 0.75 of dense's).
    auto train = [&](const std::string& f, double step_ms, double peak_gib) {
      PointRecord p;
      p.run_id = run_;
      p.index = index++;
      p.mode = "train";
      p.status = "ok";
      p.axes = {{"mode", "train"}, {"ffn", f}, {"batch", "64"}};
      p.metrics = {{"step_ms", step_ms}, {"noise", 0.005}, {"tokens_per_s", 64 * 256 / step_ms * 1e3},
                   {"mfu_pct", 46.04}, {"peak_bytes", peak_gib * (1 << 30)}, {"peak_activations_bytes", 1.5 * (1 << 30)}};
      store.add_point(p, {}, {}, nullptr);
    };
    train("dense", 400.0, 40.0);
    train("moc", 380.0, 30.0);
    store.finish_run(run_, "ok", 1'700'000'100'000);
  }
  void TearDown() override {
    std::error_code ec;
    for (const char* ext : {"", "-wal", "-shm"}) fs::remove(path_ + ext, ec);
  }
  RunSummary summary() const {
    auto store = ResultsDb::open(path_, db::OpenMode::read_only);
    return summarize_run(store, run_);
  }
  std::string printed(SummaryFormat f) const {
    std::ostringstream o;
    print_summary(summary(), f, o, false);
    return o.str();
  }
  static const SummaryColumn& column(const SummaryTable& t, const std::string& key, std::size_t* at = nullptr) {
    for (std::size_t i = 0; i < t.columns.size(); ++i)
      if (t.columns[i].key == key) {
        if (at) *at = i;
        return t.columns[i];
      }
    throw std::runtime_error("no column " + key);
  }

  std::string path_;
  std::int64_t run_ = 0;
};

// A CPU run's heading names its GEMM library and threading (recorded in the machine description since
// 2026-11-28); a GPU run's and an older CPU run's do not.
TEST(SummaryHeading, ACpuRunNamesItsBlasAndItsThreading) {
  const std::string path =
      (fs::temp_directory_path() / ("mocbench_summary_blas_" + std::to_string(::getpid()) + ".db")).string();
  fs::remove(path);
  {
    auto store = ResultsDb::open(path, db::OpenMode::read_write);
    RunRecord cpu = run_record("smoke", "s.toml", "sha256:0", "cpu", "AMD EPYC");
    cpu.machine_json = R"({"cpu":"AMD EPYC","threads":2,"backend":"cpu","blas":{"config":)"
                       R"("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP Haswell MAX_THREADS=64",)"
                       R"("threading":"OpenMP","threads":2}})";
    store.begin_run(cpu);
    store.begin_run(run_record("smoke", "s.toml", "sha256:0", "cpu", "AMD EPYC"));  // machine_json "{}"
    RunRecord odd = run_record("smoke", "s.toml", "sha256:0", "cpu", "AMD EPYC");  // a hand-edited description
    odd.machine_json = R"({"blas":{"config":5,"threading":["OpenMP"],"threads":"2"}})";
    store.begin_run(odd);
    RunRecord gpu = run_record("smoke", "s.toml", "sha256:0", "cuda", "NVIDIA H200");
    gpu.machine_json = cpu.machine_json;
    store.begin_run(gpu);
  }
  auto store = ResultsDb::open(path, db::OpenMode::read_only);
  const std::string heading = summarize_run(store, 1).heading;
  EXPECT_EQ(heading.rfind("run 1: smoke on cpu AMD EPYC (OpenBLAS 0.3.21, OpenMP, 2 threads), ", 0), 0u) << heading;
  EXPECT_EQ(summarize_run(store, 2).heading.find("OpenBLAS"), std::string::npos);
  EXPECT_NE(summarize_run(store, 3).heading.find("AMD EPYC (BLAS), "), std::string::npos)
      << "fields of other types are left out, not an error: " << summarize_run(store, 3).heading;
  EXPECT_EQ(summarize_run(store, 4).heading.find("OpenBLAS"), std::string::npos);
  fs::remove(path);
}

TEST_F(Summary, OneTablePerModeWithUnitsInTheHeaders) {
  const auto s = summary();
  ASSERT_EQ(s.tables.size(), 2u);
  EXPECT_EQ(s.tables[0].id, "ffn-decode");
  EXPECT_EQ(s.tables[1].id, "train");
  EXPECT_NE(s.heading.find("NVIDIA H100 80GB HBM3"), std::string::npos) << s.heading;
  const auto& t = s.tables[0];
  EXPECT_EQ(column(t, "latency_us").title, "latency (µs)");
  EXPECT_EQ(column(t, "latency_us").unit, "us");
  EXPECT_EQ(column(t, "GBps").unit, "GB/s");
  EXPECT_TRUE(column(t, "ffn").text);
  EXPECT_TRUE(column(t, "batch").text);
  EXPECT_EQ(column(s.tables[1], "peak_GiB").title, "peak (GiB)");
  // A value that does not vary (batch 64 in train) is not a column.
  EXPECT_THROW(column(s.tables[1], "batch"), std::runtime_error);
}

TEST_F(Summary, SpeedupAndNoiseAreAgainstTheDenseTwinWithTheSameOtherAxes) {
  const auto s = summary();
  const auto& t = s.tables[0];
  std::size_t sp = 0, lat = 0, noise = 0, st = 0, gb = 0;
  column(t, "speedup_vs_dense", &sp);
  column(t, "latency_us", &lat);
  column(t, "noise_pct", &noise);
  column(t, "status", &st);
  column(t, "GBps", &gb);
  ASSERT_EQ(t.rows.size(), 5u);
  EXPECT_DOUBLE_EQ(*t.rows[0][sp].value, 1.0);
  EXPECT_DOUBLE_EQ(*t.rows[1][sp].value, 1.5);
  EXPECT_EQ(t.rows[1][sp].text, "1.50x");
  EXPECT_DOUBLE_EQ(*t.rows[2][sp].value, 0.75);
  EXPECT_EQ(t.rows[1][lat].text, "20.0");
  EXPECT_EQ(t.rows[1][noise].text, "3.4");
  EXPECT_DOUBLE_EQ(*t.rows[1][gb].value, 2500.0);
  // The oom point shows its status and no numbers.
  EXPECT_EQ(t.rows[4][st].text, "oom");
  EXPECT_FALSE(t.rows[4][lat].value);
  EXPECT_EQ(t.rows[4][sp].text, "-");
  ASSERT_EQ(t.notes.size(), 2u);
  EXPECT_NE(t.notes[0].find("moc vs dense: 1.50x (batch=1)"), std::string::npos) << t.notes[0];
  EXPECT_NE(t.notes[1].find("moc_2:8 vs dense: 0.75x"), std::string::npos) << t.notes[1];
  // Training also compares memory: MoC's peak is 0.75 of dense's.
  const auto& tr = s.tables[1];
  std::size_t mem = 0, peak = 0;
  column(tr, "memory_vs_dense", &mem);
  column(tr, "peak_GiB", &peak);
  EXPECT_DOUBLE_EQ(*tr.rows[1][mem].value, 0.75);
  EXPECT_EQ(tr.rows[1][peak].text, "30.00");
}

// A median whose noise never met the scenario's target (the repetitions stopped at a bound) is marked, in
// every printer, and the table says what that means; points stored without the flag are not marked.
TEST_F(Summary, AMedianThatNeverMetTheNoiseTargetIsMarkedNotFinal) {
  std::int64_t run = 0;
  {
    auto store = ResultsDb::open(path_, db::OpenMode::read_write);
    run = store.begin_run(run_record("noisy", "noisy.toml", "sha256:1", "cpu", "cpu"));
    int index = 0;
    for (const auto& [batch, noise, met] : {std::tuple{1, 0.011, 1.0}, std::tuple{2, 0.87, 0.0}, std::tuple{3, 0.5, -1.0}}) {
      PointRecord p;
      p.run_id = run;
      p.index = index++;
      p.mode = "decode";
      p.status = "ok";
      p.axes = {{"mode", "decode"}, {"ffn", "dense"}, {"batch", std::to_string(batch)}};
      p.metrics = {{"ms_per_token", 20.0}, {"noise", noise}};
      if (met >= 0) p.metrics.push_back({"noise_met", met});
      store.add_point(p, {}, {}, nullptr);
    }
    store.finish_run(run, "ok", 1'700'000'100'000);
  }
  auto store = ResultsDb::open(path_, db::OpenMode::read_only);
  const auto s = summarize_run(store, run);
  ASSERT_EQ(s.tables.size(), 1u);
  const auto& t = s.tables[0];
  std::size_t noise = 0;
  column(t, "noise_pct", &noise);
  EXPECT_EQ(t.rows[0][noise].text, "1.1");
  EXPECT_EQ(t.rows[1][noise].text, "87.0!");
  EXPECT_DOUBLE_EQ(*t.rows[1][noise].value, 87.0);
  EXPECT_EQ(t.rows[2][noise].text, "50.0");  // stored before the flag existed: unknown, not marked
  bool said = false;
  for (const auto& h : t.notes) said = said || (h.find("1 point stopped") != std::string::npos &&
                                                    h.find("not final") != std::string::npos);
  EXPECT_TRUE(said);
  std::size_t met = 0;
  column(t, "noise_met", &met);  // the machine-readable printers carry the flag itself
  EXPECT_DOUBLE_EQ(*t.rows[1][met].value, 0.0);
  EXPECT_DOUBLE_EQ(*t.rows[0][met].value, 1.0);
  EXPECT_FALSE(t.rows[2][met].value);
  for (auto f : {SummaryFormat::table, SummaryFormat::markdown}) {
    std::ostringstream o;
    print_summary(s, f, o, false);
    EXPECT_NE(o.str().find("87.0!"), std::string::npos) << o.str();
  }
  std::ostringstream csv;
  print_summary(s, SummaryFormat::csv, csv, false);
  EXPECT_NE(csv.str().find("noise_met"), std::string::npos) << csv.str();
}

TEST_F(Summary, MarkdownCsvAndJsonCarryTheSameTable) {
  const std::string md = printed(SummaryFormat::markdown);
  EXPECT_NE(md.find("| ffn | batch | status | latency (µs) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| moc | 1 | ok | 20.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("|---|---|---|---:|"), std::string::npos) << md;

  const std::string csv = printed(SummaryFormat::csv);
  std::istringstream lines(csv);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("run,mode,ffn,batch,status,latency_us,noise_pct,GBps", 0), 0u) << header;
  int rows = 0;
  for (std::string l; std::getline(lines, l);) ++rows;
  EXPECT_EQ(rows, 7);

  const auto j = nlohmann::json::parse(printed(SummaryFormat::json));
  EXPECT_EQ(j["run"], run_);
  ASSERT_EQ(j["tables"].size(), 2u);
  EXPECT_EQ(j["tables"][0]["rows"][1]["latency_us"], 20.0);
  EXPECT_EQ(j["tables"][0]["rows"][1]["speedup_vs_dense"], 1.5);
  EXPECT_TRUE(j["tables"][0]["rows"][4]["latency_us"].is_null());
  EXPECT_EQ(j["tables"][0]["columns"][3]["unit"], "us");
}

TEST_F(Summary, ColoursOnlyWhenAskedFor) {
  std::ostringstream plain, coloured;
  print_summary(summary(), SummaryFormat::table, plain, false);
  print_summary(summary(), SummaryFormat::table, coloured, true);
  EXPECT_EQ(plain.str().find('\033'), std::string::npos);
  EXPECT_NE(coloured.str().find("\033[32m"), std::string::npos);
  EXPECT_NE(plain.str().find("latency (µs)"), std::string::npos) << plain.str();
  EXPECT_THROW(parse_summary_format("xml"), std::invalid_argument);
}

TEST(SummaryJson, ANonFiniteValueIsNullAndTheEnvironmentIsCarried) {
  RunSummary s;
  s.run_id = 7;
  s.heading = "run 7: \"quoted\"";
  s.environment = {"MOCBENCH_ATTN=own"};
  SummaryTable t;
  t.id = "decode";
  t.title = "decode";
  t.columns = {{"ffn", "ffn", "", true}, {"speedup_vs_dense", "vs dense", "x"}};
  t.rows = {{"moc", {std::numeric_limits<double>::infinity(), "inf"}},
            {"dense", {std::nan(""), "nan"}},
            {"moc_2:8", {1.25, "1.25"}}};
  s.tables.push_back(t);
  std::ostringstream o;
  print_summary(s, SummaryFormat::json, o);
  const auto j = nlohmann::json::parse(o.str());  // throws on a bare inf or nan
  EXPECT_EQ(j["heading"], "run 7: \"quoted\"");
  EXPECT_EQ(j["environment"][0], "MOCBENCH_ATTN=own");
  EXPECT_TRUE(j["tables"][0]["rows"][0]["speedup_vs_dense"].is_null());
  EXPECT_TRUE(j["tables"][0]["rows"][1]["speedup_vs_dense"].is_null());
  EXPECT_DOUBLE_EQ(j["tables"][0]["rows"][2]["speedup_vs_dense"].get<double>(), 1.25);
  EXPECT_EQ(j["tables"][0]["rows"][2]["ffn"], "moc_2:8");
}

TEST(RunJsonLine, NonFiniteMetricsAreNullAndTheLineParses) {
  const std::string line =
      run_json_line(3, "decode", "ok", {{"ffn", "moc"}, {"batch", "2"}},
                    {{"ms_per_token", 1.25},
                     {"noise", std::nan("")},
                     {"up", std::numeric_limits<double>::infinity()},
                     {"down", -std::numeric_limits<double>::infinity()}},
                    "");
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per point";
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["index"], 3);
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_EQ(j["ffn"], "moc");
  EXPECT_EQ(j["batch"], "2");
  EXPECT_DOUBLE_EQ(j["ms_per_token"].get<double>(), 1.25);
  EXPECT_TRUE(j["noise"].is_null());
  EXPECT_TRUE(j["up"].is_null());
  EXPECT_TRUE(j["down"].is_null());
  EXPECT_FALSE(j.contains("error"));
  // An error with quotes, a newline and bytes that are not UTF-8 still gives one valid line.
  const std::string bad = run_json_line(0, "train", "failed", {}, {}, "said \"no\"\nthen \xff");
  EXPECT_EQ(bad.find('\n'), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(bad)["status"], "failed");
}

}  // namespace
}  // namespace moc

// The command line end to end on the CPU, through the real executable: run -> list -> show -> export CSV
// (parsed back) -> compare; an out-of-memory point is stored and the sweep goes on; Ctrl-C (a real SIGINT
// to the child process) stores the current point as interrupted and keeps the earlier ones.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "db/results_db.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {
namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;
};

// Runs the executable with arguments (no shell quoting needed for the paths used here); stdout captured.
Result mocbench(const std::string& args) {
  const std::string cmd = std::string(MOCBENCH_BIN) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mocbench_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  fs::path dir_;
};

// RFC 4180: quoted cells may hold commas, quotes ("") and newlines.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += '"', ++i;
      else if (c == '"') quoted = false;
      else cell += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      rows.back().push_back(cell);
      cell.clear();
      rows.emplace_back();
    } else {
      cell += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

const std::string kSmoke = std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/smoke_cpu.toml";

TEST_F(Cli, RunListShowExportCompare) {
  const std::string db = path("r.db");
  auto r1 = mocbench("run " + kSmoke + " --db " + db);
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r1.out.find("run 1 ok: 10 ok, 0 oom, 0 failed of 10 points"), std::string::npos) << r1.out;
  ASSERT_EQ(mocbench("run " + kSmoke + " --quiet --db " + db).code, 0);

  auto list = mocbench("list --db " + db);
  ASSERT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("smoke_cpu"), std::string::npos);
  EXPECT_NE(list.out.find("\n2 "), std::string::npos) << list.out;

  auto show = mocbench("show 1 --db " + db);
  ASSERT_EQ(show.code, 0);
  EXPECT_NE(show.out.find("mode=ffn-decode ffn=moc"), std::string::npos) << show.out;

  const std::string csv = path("out.csv");
  ASSERT_EQ(mocbench("export --all --format csv -o " + csv + " --db " + db).code, 0);
  std::stringstream ss;
  ss << std::ifstream(csv).rdbuf();
  const auto rows = parse_csv(ss.str());
  ASSERT_EQ(rows.size(), 21u) << "header + 2 runs x 10 points";
  const auto& h = rows[0];
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < h.size(); ++i) col[h[i]] = i;
  for (const char* c : {"run", "scenario", "device_kind", "device_name", "mocbench_version", "point", "status",
                        "mode", "ffn", "batch", "seq", "median_ms", "tokens_per_s", "peak_bytes", "latency_us"})
    EXPECT_TRUE(col.count(c)) << "missing column " << c;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    ASSERT_EQ(rows[r].size(), h.size()) << "row " << r;
    EXPECT_EQ(rows[r][col["status"]], "ok");
    EXPECT_EQ(rows[r][col["device_kind"]], "cpu");
    EXPECT_EQ(rows[r][col["scenario"]], "smoke_cpu");
    EXPECT_GT(std::stod(rows[r][col["median_ms"]]), 0.0);
    EXPECT_EQ(rows[r][col["run"]], r <= 10 ? "1" : "2");
    const std::string mode = rows[r][col["mode"]];
    if (mode == "ffn-decode") {
      EXPECT_GT(std::stod(rows[r][col["latency_us"]]), 0.0);
    }
    if (mode == "train") {
      EXPECT_TRUE(rows[r][col["latency_us"]].empty()) << "a train point has no latency_us";
    }
  }
  auto json = mocbench("export 2 --format json --db " + db);
  ASSERT_EQ(json.code, 0);
  EXPECT_EQ(json.out.rfind("[", 0), 0u);
  EXPECT_NE(json.out.find("\"metrics\": {\"step_ms\""), std::string::npos);

  auto cmp = mocbench("compare 1 2 --db " + db);
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  EXPECT_NE(cmp.out.find("10 points matched"), std::string::npos) << cmp.out;
  auto cmp_csv = mocbench("compare " + db + ":1 " + db + " --metric median_ms --format csv");
  ASSERT_EQ(cmp_csv.code, 0) << cmp_csv.out;
  const auto crow = parse_csv(cmp_csv.out);
  ASSERT_EQ(crow.size(), 11u);
  EXPECT_EQ(crow[0][4], "ratio_b_over_a");
  for (std::size_t r = 1; r < crow.size(); ++r) EXPECT_GT(std::stod(crow[r][4]), 0.0);

  // Bad references are refused with exit code 2 and nothing is written.
  EXPECT_EQ(mocbench("show 9 --db " + db).code, 2);
  EXPECT_EQ(mocbench("export 9 --db " + db + " -o " + path("none.csv")).code, 2);
  EXPECT_FALSE(fs::exists(path("none.csv")));
  EXPECT_EQ(mocbench("export --db " + db).code, 2);
  EXPECT_EQ(mocbench("frobnicate").code, 2);
  // --only runs a subset and keeps each point's sweep index.
  auto only = mocbench("run " + kSmoke + " --quiet --only mode=topk --db " + db);
  ASSERT_EQ(only.code, 0) << only.out;
  {
    auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
    const auto pts = store.points(store.runs().front().id);
    ASSERT_EQ(pts.size(), 1u);
    EXPECT_EQ(pts[0].index, 8) << "topk/moc is the ninth point of the sweep";
  }
  EXPECT_EQ(mocbench("run " + kSmoke + " --only mode=nothing --db " + db).code, 2);
  EXPECT_EQ(mocbench("--help").code, 0);
}

TEST_F(Cli, OutOfMemoryPointIsStoredAndTheSweepGoesOn) {
  const std::string sc = write("oom.toml", R"(name = "oom_study"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 0
min_reps = 1
max_reps = 1
[axes]
mode = ["ffn-train"]
batch = [1, 512, 2]
seq = [16]
)");
  const std::string db = path("o.db");
  // 2 MiB: batch 1 and 2 fit, batch 512 x 16 rows of d_ffn 85 does not.
  auto r = mocbench("run " + sc + " --db " + db + " --cpu-memory-limit-mib 2");
  EXPECT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].status, "ok");
  EXPECT_EQ(pts[1].status, "oom");
  EXPECT_NE(pts[1].error.find("limit"), std::string::npos) << pts[1].error;
  EXPECT_EQ(pts[2].status, "ok") << "the sweep goes on after an OOM point";
  EXPECT_EQ(store.run(1)->status, "ok");
}

TEST_F(Cli, SigintStoresTheCurrentPointAsInterrupted) {
  // Twenty points that take about a second each: the signal lands in the middle of the sweep.
  const std::string sc = write("slow.toml", R"(name = "slow"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 0
min_reps = 2
max_reps = 1000000
time_bound_s = 1.0
target_noise = 1e-9
[axes]
mode = ["ffn-train"]
batch = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
seq = [8]
)");
  const std::string db = path("s.db");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    execl(MOCBENCH_BIN, MOCBENCH_BIN, "run", sc.c_str(), "--db", db.c_str(), "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until two points are committed (readers work while the run writes), then press Ctrl-C.
  std::size_t committed = 0;
  for (int i = 0; i < 600 && committed < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(db)) continue;
    try {
      auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
      if (store.run(1)) committed = store.points(1).size();
    } catch (const db::DbError&) {
    }
  }
  if (committed < 2) kill(pid, SIGKILL);
  ASSERT_GE(committed, 2u) << "the run never committed two points";
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 130);
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  EXPECT_EQ(store.run(1)->status, "interrupted");
  const auto pts = store.points(1);
  ASSERT_GE(pts.size(), 3u);
  ASSERT_LT(pts.size(), 20u);
  for (std::size_t i = 0; i + 1 < pts.size(); ++i) {
    EXPECT_EQ(pts[i].status, "ok") << "point " << i;
    EXPECT_GT(pts[i].metrics.size(), 5u);
  }
  EXPECT_EQ(pts.back().status, "interrupted");
}

}  // namespace
}  // namespace moc
#endif

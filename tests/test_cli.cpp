// The command line end to end on the CPU, through the real executable: run -> list -> show -> export CSV
// (parsed back) -> compare; an out-of-memory point is stored and the sweep goes on; Ctrl-C (a real SIGINT
// to the child process) stores the current point as interrupted and keeps the earlier ones; `stats` and
// `export --format perfetto` over a database written through ResultsDb (profiles with known answers), the
// export's mode column for new and old points, and their refusals (exit 2).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include "db/results_db.h"
#include "shell_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {
namespace fs = std::filesystem;

using Result = moc::test::ShellResult;

// Runs the executable with arguments (no shell quoting needed for the paths used here); stdout captured.
// env: "NAME=value ..." set for this command only ("" for none).
Result mocbench_env(const std::string& env, const std::string& args) {
  return moc::test::shell((env.empty() ? std::string() : "env " + env + " ") + std::string(MOCBENCH_BIN) + " " + args);
}

Result mocbench(const std::string& args) { return mocbench_env("", args); }

class Cli : public moc::test::ScratchDirTest {};

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
  EXPECT_NE(r1.out.find("run 1 ok: 12 ok, 0 oom, 0 failed of 12 points"), std::string::npos) << r1.out;
  ASSERT_EQ(mocbench("run " + kSmoke + " --quiet --db " + db).code, 0);

  auto list = mocbench("list --db " + db);
  ASSERT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("smoke_cpu"), std::string::npos);
  EXPECT_NE(list.out.find("\n2 "), std::string::npos) << list.out;

  // run ends with the summary; show prints it again, and as Markdown.
  EXPECT_NE(r1.out.find("vs dense (speed)"), std::string::npos) << r1.out;
  auto show = mocbench("show 1 --db " + db);
  ASSERT_EQ(show.code, 0);
  EXPECT_NE(show.out.find("ffn-decode: one FFN layer"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("latency (µs)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("moc vs dense: "), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find('\033'), std::string::npos) << "no colours off a terminal";
  EXPECT_NE(r1.out.find(show.out), std::string::npos) << "run prints what show prints";
  auto md = mocbench("show 1 --format markdown --db " + db);
  ASSERT_EQ(md.code, 0);
  EXPECT_NE(md.out.find("| ffn |"), std::string::npos) << md.out;
  EXPECT_EQ(mocbench("show 1 --format xml --db " + db).code, 2);

  const std::string csv = path("out.csv");
  ASSERT_EQ(mocbench("export --all --format csv -o " + csv + " --db " + db).code, 0);
  std::stringstream ss;
  ss << std::ifstream(csv).rdbuf();
  const auto rows = parse_csv(ss.str());
  ASSERT_EQ(rows.size(), 25u) << "header + 2 runs x 12 points";
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
    EXPECT_EQ(rows[r][col["run"]], r <= 12 ? "1" : "2");
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

  // The CPU points' profiles (the recording decorator): stats and a Perfetto trace whose tracks nest.
  auto st = mocbench("stats 1 --db " + db);
  ASSERT_EQ(st.code, 0) << st.out;
  EXPECT_NE(st.out.find(" ** CPU Op Summary (cuda_gpu_kern_sum):"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("point 11: "), std::string::npos) << "every point of smoke_cpu is profiled";
  auto pf = mocbench("export 1 --format perfetto --db " + db);
  ASSERT_EQ(pf.code, 0);
  {
    const auto doc = nlohmann::json::parse(pf.out);
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
    std::size_t cpu_ops = 0;
    std::map<std::pair<int, int>, std::string> names;
    for (const auto& e : doc["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name") names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
      if (e["ph"] != "X") continue;
      const double ts = e["ts"].get<double>() * 1000, dur = e["dur"].get<double>() * 1000;
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(std::round(ts), std::round(ts + dur));
      if (e["cat"] == "cpu_op") ++cpu_ops;
    }
    EXPECT_GT(cpu_ops, 10u);
    for (auto& [key, v] : tracks) {
      std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
      std::vector<double> open;
      for (const auto& [b, e] : v) {
        while (!open.empty() && open.back() <= b) open.pop_back();
        EXPECT_TRUE(open.empty() || e <= open.back()) << names[key] << " does not nest";
        open.push_back(e);
      }
    }
  }
  ASSERT_EQ(mocbench("run " + kSmoke + " --quiet --no-profile --only mode=topk --db " + path("np.db")).code, 0);
  EXPECT_EQ(mocbench("stats 1 --db " + path("np.db")).code, 2) << "--no-profile: nothing to report";

  auto cmp = mocbench("compare 1 2 --db " + db);
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  EXPECT_NE(cmp.out.find("12 points matched"), std::string::npos) << cmp.out;
  auto cmp_csv = mocbench("compare " + db + ":1 " + db + " --metric median_ms --format csv");
  ASSERT_EQ(cmp_csv.code, 0) << cmp_csv.out;
  const auto crow = parse_csv(cmp_csv.out);
  ASSERT_EQ(crow.size(), 13u);
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
    EXPECT_EQ(pts[0].index, 10) << "topk/moc is the eleventh point of the sweep";
  }
  EXPECT_EQ(mocbench("run " + kSmoke + " --only mode=nothing --db " + db).code, 2);
  EXPECT_EQ(mocbench("--help").code, 0);
  EXPECT_EQ(mocbench("run --help").code, 0);
  // A word that is no command is refused as such, with or without --help (not the main help, exit 0).
  // (`eval` was the example until it became a command, issue #29.)
  for (const std::string args : {"frobnicate --help", "frobnicate", "evaluate x.db"}) {
    const auto r = mocbench(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("is not a command"), std::string::npos) << args << ": " << r.out;
    EXPECT_NE(r.out.find("run, "), std::string::npos) << "the hint lists the commands: " << r.out;
  }
}

// `mocbench keys`: every section's keys from the declaration the parser uses; one section as README markdown;
// an unknown section refused with the list.
// The run record's JSON fields (written through nlohmann-json) parse and say what they hold: the overrides
// applied, the machine (with the CPU backend's GEMM library and its threading), the run's configuration; a name with quotes and a backslash survives.
TEST_F(Cli, TheRunRecordsJsonFieldsParseAndHoldWhatRan) {
  const std::string sc = write("json.toml",
                               "name = \"say \\\"hi\\\" \\\\ there\"\nmode = \"topk\"\ndevice = \"cpu\"\n[model]\n"
                               "preset = \"tiny\"\nffn = \"moc\"\n[measure]\nwarmup = 0\nmin_reps = 2\nmax_reps = 2\n"
                               "[profile]\nkernels = false\n[overrides.cpu]\nmeasure = { max_reps = 3 }\n");
  const std::string db = path("json.db");
  const auto r = mocbench("run " + sc + " --db " + db + " --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto run = store.runs().at(0);
  EXPECT_EQ(run.scenario_name, "say \"hi\" \\ there");
  const auto ov = nlohmann::json::parse(run.overrides_json);
  ASSERT_TRUE(ov.is_array());
  ASSERT_EQ(ov.size(), 1u) << ov.dump();
  EXPECT_EQ(ov[0]["section"], "measure");
  EXPECT_EQ(ov[0]["key"], "max_reps");
  EXPECT_EQ(ov[0]["value"], "3");
  const auto machine = nlohmann::json::parse(run.machine_json);
  EXPECT_EQ(machine["backend"], "cpu");
  EXPECT_GT(machine["threads"].get<int>(), 0);
  EXPECT_TRUE(machine["cpu"].is_string());
  // The CPU backend's GEMMs run on its own OpenMP team: the binary links OpenBLAS's OpenMP build (its pthread build
  // kept a second pool that fought the team for the cores: CMakeLists.txt).
  EXPECT_EQ(machine["blas"]["threading"], "OpenMP") << machine.dump();
  EXPECT_EQ(machine["blas"]["config"].get<std::string>().rfind("OpenBLAS", 0), 0u) << machine.dump();
  EXPECT_GT(machine["blas"]["threads"].get<int>(), 0);
  EXPECT_TRUE(nlohmann::json::parse(run.config_json).is_object());
}

// `mocbench eval` refuses what it cannot evaluate, saying what (tests/test_gguf_oracle.cpp checks its numbers).
TEST_F(Cli, EvalRefusesAFileThatIsNoGgufAndIdsThatAreNoIds) {
  const std::string notes = write("notes.txt", "not a model\n");
  const auto r = mocbench("eval " + notes + " --ids '1 2 3'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not a GGUF file"), std::string::npos) << r.out;
  const auto bad = mocbench("eval " + notes + " --ids '1 two'");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("'two' (id 1 of --ids) is not a token id"), std::string::npos) << bad.out;
  const auto none = mocbench("eval " + notes);
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("give the token ids"), std::string::npos) << none.out;
}

TEST_F(Cli, KeysListsTheScenarioKeysBySection) {
  const auto all = mocbench("keys");
  ASSERT_EQ(all.code, 0) << all.out;
  for (const char* k : {"[measure]", "min_reps", "[profile]", "[data]", "eval_every", "[axes]", "topk_position"})
    EXPECT_NE(all.out.find(k), std::string::npos) << k;
  const auto md = mocbench("keys measure --format md");
  ASSERT_EQ(md.code, 0) << md.out;
  EXPECT_NE(md.out.find("| `cold` | true |"), std::string::npos) << md.out;
  EXPECT_EQ(md.out.find("[data]"), std::string::npos) << "one section only";
  const auto bad = mocbench("keys mesure");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("sections: top, model, measure"), std::string::npos) << bad.out;
}

// Three ffn-train points on the tiny preset: batch 1 and 2 fit in 2 MiB, batch 512 x 16 rows of d_ffn 85 does not.
// A CPU scenario of `points` ffn-train points (batch 1..points) that each measure for about a second (a
// noise target never met, bounded by time_bound_s): a sweep long enough to interrupt or lock mid-way.
std::string one_second_points(const std::string& name, int points) {
  std::string batches;
  for (int b = 1; b <= points; ++b) batches += (b > 1 ? ", " : "") + std::to_string(b);
  return "name = \"" + name + R"("
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
batch = [)" + batches + R"(]
seq = [8]
)";
}

constexpr const char* kOomScenario = R"(name = "oom_study"
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
)";

// Issue 15: `gpus = N` starts N worker processes of mocbench itself, which meet through the launch contract
// (environment variables) and, on the CPU backend, shared memory; rank 0 stores the point with every rank's
// metrics and the runner copies it into the database. Ends in CI what NCCL does on GPU machines.
const char* kDataParallelScenario = R"(name = "dp"
mode = "train"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 1
min_reps = 3
max_reps = 4
[axes]
ffn = ["dense", "moc"]
zero1 = [false, true]
gpus = [1, 2]
[[exclude]]
gpus = 1
zero1 = true
)";

TEST_F(Cli, DataParallelPointsRunAsWorkerProcessesAndStoreEveryRank) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string db = path("dp.db");
  auto r = mocbench("run " + sc + " --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("6 ok, 0 oom, 0 failed of 6 points"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scaling (%)"), std::string::npos) << "the summary shows the multi-GPU columns\n" << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 6u);
  auto metric = [](const db::PointRecord& p, const std::string& name) {
    for (const auto& [k, v] : p.metrics)
      if (k == name) return v;
    return -1.0;
  };
  auto axis = [](const db::PointRecord& p, const std::string& name) {
    for (const auto& [k, v] : p.axes)
      if (k == name) return v;
    return std::string();
  };
  for (const auto& p : pts) {
    SCOPED_TRACE(p.index);
    EXPECT_EQ(p.status, "ok") << p.error;
    if (axis(p, "gpus") == "1") {
      EXPECT_EQ(metric(p, "ranks"), -1.0);
      continue;
    }
    EXPECT_EQ(metric(p, "ranks"), 2.0);
    EXPECT_EQ(metric(p, "rank0_loss_last"), metric(p, "rank1_loss_last")) << "both ranks report the mean loss";
    EXPECT_NEAR(metric(p, "tokens_per_s"), metric(p, "rank0_tokens_per_s") + metric(p, "rank1_tokens_per_s"), 1e-6 * metric(p, "tokens_per_s"));
    EXPECT_GT(metric(p, "scaling_efficiency_pct"), 0.0) << "against the gpus = 1 point before it";
    EXPECT_GT(metric(p, "comm_bytes_per_step"), 0.0);
    EXPECT_GE(metric(p, "comm_ms"), 0.0);
    EXPECT_FALSE(store.ranges(p.id).empty()) << "rank 0's phase ranges come along";
    EXPECT_FALSE(store.memory_events(p.id).empty()) << "and its memory timeline";
    const double opt0 = metric(p, "rank0_peak_optimizer_state_bytes"), opt1 = metric(p, "rank1_peak_optimizer_state_bytes");
    if (axis(p, "zero1") == "true") {
      // Each rank holds about half of the AdamW state; the gpus = 1 twin holds all of it.
      double single = 0;
      for (const auto& q : pts)
        if (axis(q, "gpus") == "1" && axis(q, "ffn") == axis(p, "ffn")) single = metric(q, "peak_optimizer_state_bytes");
      EXPECT_NEAR(opt0 + opt1, single, 0.01 * single);
      EXPECT_LT(opt0, 0.6 * single);
    } else {
      EXPECT_EQ(opt0, opt1);
    }
  }
  // The same point with --gpus from the command line; a worker that fails (here: OOM under a tiny memory
  // limit) ends the others, and the point is stored with its rank's message while the sweep goes on.
  std::string big = kDataParallelScenario;
  big.replace(big.find("[axes]\n"), 7, "[axes]\nbatch = [64]\nseq = [128]\n");
  const std::string sc_big = write("dp_big.toml", big);
  auto oom = mocbench("run " + sc_big + " --db " + db + " --only ffn=dense --only zero1=false --cpu-memory-limit-mib 1");
  EXPECT_EQ(oom.code, 0) << oom.out;
  const auto o = store.points(2);
  ASSERT_EQ(o.size(), 2u);
  for (const auto& p : o) {
    EXPECT_EQ(p.status, "oom") << p.error;
  }
  EXPECT_NE(o[1].error.find("rank "), std::string::npos) << o[1].error;
}

// Issue 27: workers outlived a killed launcher, and every killed launch left its scratch directory (16 MiB of
// shared memory for the CPU ranks) in the temp folder. Workers now die with their launcher, and the next
// launch removes the directories of launchers that are gone.
TEST_F(Cli, WorkersDieWithTheirLauncherAndTheNextLaunchRemovesItsScratch) {
  const std::string sc = write("dp_slow.toml", R"(name = "dp_slow"
mode = "train"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 0
min_reps = 2
max_reps = 1000000
time_bound_s = 60.0
target_noise = 1e-9
[axes]
gpus = [2]
)");
  const std::string db = path("k.db");
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    execl(MOCBENCH_BIN, MOCBENCH_BIN, "run", sc.c_str(), "--db", db.c_str(), "--quiet", "--no-profile",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // The launcher's children: its two workers.
  auto children_of = [](pid_t parent) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "stat");
      std::string line;
      if (!std::getline(f, line)) continue;
      std::istringstream rest(line.substr(line.rfind(')') + 1));
      char state = 0;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
  };
  std::vector<pid_t> workers;
  for (int i = 0; i < 600 && workers.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers = children_of(launcher);
  }
  ASSERT_EQ(workers.size(), 2u) << "the launcher started its workers";
  // Its scratch directory, named by the launcher file in it.
  fs::path scratch;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    std::ifstream f(e.path() / "launcher");
    std::string host, boot, ns;
    long long pid = 0;
    if (std::getline(f, host) && std::getline(f, boot) && std::getline(f, ns) && (f >> pid) && pid == launcher)
      scratch = e.path();
  }
  ASSERT_FALSE(scratch.empty()) << "the point directory names its launcher";
  ::kill(launcher, SIGKILL);
  ASSERT_EQ(waitpid(launcher, nullptr, 0), launcher);
  // Gone (or a zombie waiting for a reaper) within 10 s.
  auto dead = [](pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) return true;
    const char state = line.substr(line.rfind(')') + 2, 1)[0];
    return state == 'Z' || state == 'X';
  };
  bool all_dead = false;
  for (int i = 0; i < 200 && !all_dead; ++i) {
    all_dead = dead(workers[0]) && dead(workers[1]);
    if (!all_dead) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(all_dead) << "the workers outlived their launcher";
  // A SIGKILLed launcher cannot clean up itself: the next multi-rank launch removes its folder (a launch of a
  // test running beside this one may already have).
  std::string quick = kDataParallelScenario;
  quick.replace(quick.find("[axes]\n"), 7, "[axes]\nbatch = [1]\n");
  const std::string sc_quick = write("dp_quick.toml", quick);
  auto r = mocbench("run " + sc_quick + " --db " + path("q.db") + " --only ffn=dense --only zero1=false --only gpus=2 --no-profile");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(scratch)) << scratch;
}

// Issue 27: workers re-read the scenario by its path, so a scenario edited during the sweep was measured as
// the new text and stored under the old one, and a scenario given as `<(...)` failed its multi-rank points.
// Workers now run the text the launcher read.
TEST_F(Cli, WorkersRunTheScenarioTextTheLauncherRead) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string cmd = "bash -c \"'" + std::string(MOCBENCH_BIN) + "' run <(cat '" + sc + "') --db '" +
                          path("p.db") + "' --only ffn=dense --only zero1=false --only gpus=2 --no-profile\"";
  const auto r = moc::test::shell(cmd);
  EXPECT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(path("p.db"), db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].status, "ok") << pts[0].error;
}

TEST_F(Cli, LaunchContractMistakesAreRefusedBeforeAnyWork) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string db = path("c.db");
  // A rank without its world size.
  auto r = mocbench_env("MOCBENCH_RANK=0", "run " + sc + " --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("MOCBENCH_WORLD_SIZE is missing"), std::string::npos) << r.out;
  // A launch of 2 ranks with points that are not gpus = 2.
  r = mocbench_env("MOCBENCH_RANK=0 MOCBENCH_WORLD_SIZE=2 MOCBENCH_LOCAL_RANK=0 MOCBENCH_NCCL_ID_FILE=" + path("id"),
                   "run " + sc + " --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("every point must train with gpus = 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--only gpus=2"), std::string::npos) << r.out;
  // --gpus on text training ([data]), which is single-GPU.
  r = mocbench("run " + std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/quality_small.toml --device cpu --gpus 2 --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("trains on [data] text, which runs on one GPU"), std::string::npos) << r.out;
  // Outside mocbench's launcher the CPU backend has no shared memory to meet in.
  r = mocbench_env("MOCBENCH_RANK=0 MOCBENCH_WORLD_SIZE=2 MOCBENCH_LOCAL_RANK=0 MOCBENCH_NCCL_ID_FILE=" + path("id"),
                   "run " + sc + " --db " + db + " --only gpus=2 --only zero1=false --only ffn=dense");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("mocbench's own launcher"), std::string::npos) << r.out << r.out;
  EXPECT_FALSE(fs::exists(db) && db::ResultsDb::open(db, db::OpenMode::read_only).points(1).size() > 0 &&
               db::ResultsDb::open(db, db::OpenMode::read_only).points(1)[0].status == "ok");
}

TEST_F(Cli, OutOfMemoryPointIsStoredAndTheSweepGoesOn) {
  const std::string sc = write("oom.toml", kOomScenario);
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

// Issue 16: without --cpu-memory-limit-mib the CPU backend's limit is the host memory available less a
// margin, so a point that cannot fit is an `oom` point, not a process the OOM killer ends. The available
// memory is made artificially small (258 MiB less the 256 MiB margin: 2 MiB); nothing here allocates the
// machine's memory.
// run --json: one JSON object per point and line, every line valid JSON (an OOM point carries its error).
TEST_F(Cli, RunJsonPrintsOneParsableObjectPerPoint) {
  const std::string sc = write("oom.toml", kOomScenario);
  auto r = mocbench("run " + sc + " --json --db " + path("j.db") + " --cpu-memory-limit-mib 2");
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> points;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') points.push_back(nlohmann::json::parse(line));  // throws on bare nan
  ASSERT_EQ(points.size(), 3u) << r.out;
  for (std::size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(points[i]["index"], i);
    EXPECT_EQ(points[i]["mode"], "ffn-train");
  }
  EXPECT_EQ(points[0]["status"], "ok");
  EXPECT_GT(points[0]["fwd_bwd_ms"].get<double>(), 0.0);
  EXPECT_EQ(points[1]["status"], "oom");
  EXPECT_NE(points[1]["error"].get<std::string>().find("limit"), std::string::npos);
  EXPECT_EQ(points[1]["batch"], "512");
}

// An environment switch that changes which kernels run is part of the run's record, and show says so; a run
// without one shows no environment line.
TEST_F(Cli, EnvironmentSwitchesAreStoredWithTheRunAndShown) {
  const std::string sc = write("oom.toml", kOomScenario);
  const std::string db = path("env.db");
  ASSERT_EQ(mocbench_env("MOCBENCH_ATTN=own MOCBENCH_SKINNY=TC", "run " + sc + " --db " + db + " --quiet").code, 0);
  ASSERT_EQ(mocbench("run " + sc + " --db " + db + " --quiet").code, 0);
  const auto with = mocbench("show 1 --db " + db);
  EXPECT_NE(with.out.find("environment: MOCBENCH_ATTN=own MOCBENCH_SKINNY=TC"), std::string::npos) << with.out;
  const auto without = mocbench("show 2 --db " + db);
  EXPECT_EQ(without.out.find("environment:"), std::string::npos) << without.out;
  const auto j = nlohmann::json::parse(mocbench("show 1 --format json --db " + db).out);
  ASSERT_EQ(j["environment"].size(), 2u);
  EXPECT_EQ(j["environment"][0], "MOCBENCH_ATTN=own");
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  EXPECT_EQ(nlohmann::json::parse(store.run(1)->config_json)["env"]["MOCBENCH_SKINNY"], "TC");
  EXPECT_TRUE(nlohmann::json::parse(store.run(2)->config_json)["env"].empty());
}

TEST_F(Cli, PointBeyondTheAvailableHostMemoryIsStoredAsOomByDefault) {
  const std::string sc = write("oom_host.toml", kOomScenario);
  const std::string db = path("h.db");
  auto r = mocbench_env("MOCBENCH_HOST_MEMORY_MIB=258", "run " + sc + " --db " + db);
  EXPECT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].status, "ok");
  EXPECT_EQ(pts[1].status, "oom");
  EXPECT_NE(pts[1].error.find("host memory limit of 2.00 MiB"), std::string::npos) << pts[1].error;
  EXPECT_NE(pts[1].error.find("258 MiB available per MOCBENCH_HOST_MEMORY_MIB"), std::string::npos) << pts[1].error;
  EXPECT_EQ(pts[2].status, "ok") << "the sweep goes on";
  // An explicit limit wins over the default.
  const std::string db2 = path("h2.db");
  r = mocbench_env("MOCBENCH_HOST_MEMORY_MIB=258", "run " + sc + " --db " + db2 + " --cpu-memory-limit-mib 64");
  EXPECT_EQ(r.code, 0) << r.out;
  const auto pts2 = db::ResultsDb::open(db2, db::OpenMode::read_only).points(1);
  ASSERT_EQ(pts2.size(), 3u);
  EXPECT_EQ(pts2[1].status, "ok") << pts2[1].error;
}

// Starts `mocbench run SC --db DB --quiet` as a child (stdout discarded, stderr into ERR), with
// MOCBENCH_LOCK_WAIT_S set when lock_wait is given; returns its pid.
pid_t spawn_run(const std::string& sc, const std::string& db, const std::string& err, const char* lock_wait = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    const int errfd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(devnull, STDOUT_FILENO);
    dup2(errfd, STDERR_FILENO);
    if (lock_wait) setenv("MOCBENCH_LOCK_WAIT_S", lock_wait, 1);
    execl(MOCBENCH_BIN, MOCBENCH_BIN, "run", sc.c_str(), "--db", db.c_str(), "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Issue 27: another process holding the results file's write lock longer than the busy timeout (10 s) made
// `run` drop the point it had just measured, stop, and leave the run "running". The point is now kept, the
// run waits for the lock and goes on: every point stored, the run ok.
TEST_F(Cli, AMeasuredPointWaitsForALockedResultsFileInsteadOfBeingLost) {
  const std::string sc = write("locked.toml", one_second_points("locked", 3));
  const std::string db = path("l.db"), err = path("stderr.txt");
  const pid_t pid = spawn_run(sc, db, err);
  ASSERT_GE(pid, 0);
  // Once the first point is committed, another connection takes the write lock and holds it until the run
  // says it is waiting for it (past its 10 s busy timeout; a fixed hold failed on a loaded machine).
  std::size_t committed = 0;
  for (int i = 0; i < 600 && committed < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(db)) continue;
    try {
      auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
      if (store.run(1)) committed = store.points(1).size();
    } catch (const db::DbError&) {
    }
  }
  ASSERT_GE(committed, 1u);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  sqlite3_busy_timeout(other, 10'000);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(other);
  auto said_now = [&] {
    std::ifstream ef(err);
    return std::string((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  };
  for (int i = 0; i < 1200 && said_now().find("is locked by another process") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  const std::string said = said_now();
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << said;
  EXPECT_NE(said.find("is locked by another process"), std::string::npos) << said;
  EXPECT_NE(said.find("stored"), std::string::npos) << said;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 3u);
  for (const auto& p : pts) EXPECT_EQ(p.status, "ok") << p.index;
  EXPECT_EQ(store.run(1)->status, "ok");
}

// ... and when the lock does not free within the wait (MOCBENCH_LOCK_WAIT_S, 10 minutes by default), the
// measured point is saved to a side file named on stderr -- never silently dropped -- and the run ends failed.
TEST_F(Cli, APointTheLockedFileNeverTakesIsSavedToASideFile) {
  // One point of about a second: the lock is taken while it is being measured.
  const std::string sc = write("locked2.toml", one_second_points("locked2", 1));
  const std::string db = path("l2.db");
  ASSERT_EQ(mocbench("run " + sc + " --db " + db + " --quiet").code, 0) << "the file exists, with one run";
  // (Held from before the run, the lock would fail begin_run itself: it is taken once the run has begun.)
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  sqlite3_busy_timeout(other, 10'000);  // the run may be committing its own record at that moment
  const std::string err = path("stderr2.txt");
  const pid_t pid = spawn_run(sc, db, err, "1");
  ASSERT_GE(pid, 0);
  bool begun = false;
  for (int i = 0; i < 600 && !begun; ++i) {
    try {
      auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
      begun = store.run(2).has_value();
    } catch (const db::DbError&) {
    }
    if (!begun) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(begun);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(other);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  std::ifstream ef(err);
  const std::string said((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_NE(WEXITSTATUS(st), 0) << said;
  const std::string side = db + ".unstored-run2-point0.json";
  EXPECT_NE(said.find("saved in " + side), std::string::npos) << said;
  std::ifstream sf(side);
  ASSERT_TRUE(sf.good()) << side;
  const auto j = nlohmann::json::parse(sf);
  EXPECT_EQ(j["run"], 2);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_GT(j["metrics"]["fwd_bwd_ms"].get<double>(), 0.0) << j.dump();
}

TEST_F(Cli, SigintStoresTheCurrentPointAsInterrupted) {
  // Twenty points that take about a second each: the signal lands in the middle of the sweep.
  const std::string sc = write("slow.toml", one_second_points("slow", 20));
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


// ---- stats and the Perfetto export over a database written through ResultsDb

prof::ProfileTrace small_trace(int steps) {
  prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = steps;
  t.start_ns = 1'000'000;
  t.end_ns = 1'100'000;
  t.ranges = {{1, -1, "step", 0, 0, 1'001'000, 1'004'000, 1'000'500, 1'010'500, 3},
              {2, 1, "layer.0", 1, 0, 1'001'000, 1'004'000, 1'000'600, 1'005'600, 3},
              {3, 2, "ffn.gate", 2, 0, 1'001'000, 1'002'000, 1'000'700, 1'001'700, 1}};
  auto k = [](const char* name, std::int64_t s, std::int64_t e, std::int64_t range, std::uint32_t corr) {
    prof::KernelRecord r;
    r.name = std::string("moc::") + name + "<bf16>(int)";
    r.short_name = name;
    r.start_ns = s, r.end_ns = e;
    r.device_id = 0, r.stream_id = 7, r.correlation_id = corr;
    r.grid_x = r.grid_y = r.grid_z = 1, r.block_x = 128, r.block_y = r.block_z = 1;
    r.range_id = range;
    return r;
  };
  // gemv 1000 ns (ffn.gate) and 2000 ns (layer.0); one memcpy of 500 ns outside every range.
  t.kernels = {k("gemv", 1'001'000, 1'002'000, 3, 1), k("gemv", 1'002'000, 1'004'000, 2, 2)};
  prof::MemcpyRecord m;
  m.start_ns = 1'005'000, m.end_ns = 1'005'500, m.stream_id = 7, m.bytes = 64, m.copy_kind = "DtoH";
  t.memcpys = {m};
  t.api = {{"cudaLaunchKernel", "runtime", 1'000'800, 1'000'900, 1, 9, 0},
           {"cudaLaunchKernel", "runtime", 1'000'950, 1'000'990, 2, 9, 0}};
  t.allocator = {{1'000'000, "weights", "", -1, 0, 1 << 20}};
  return t;
}

// Run 1: points 0 (train, profiled), 1 (decode, not profiled), 2 (ffn-decode, profiled); run 2: an old
// run (no mode stored, the scenario's top-level mode line), no profiles; run 3: no mode stored, a mode axis.
std::string write_profiled_db(const std::string& path) {
  auto store = db::ResultsDb::open(path, db::OpenMode::read_write);
  auto run = [&](const std::string& name, const std::string& text) {
    db::RunRecord r;
    r.scenario_name = name;
    r.scenario_path = "scenarios/" + name + ".toml";
    r.scenario_text = text;
    r.scenario_hash = "sha256:" + name;
    r.device_kind = "cuda";
    r.device_name = "NVIDIA H100 80GB HBM3";
    r.mocbench_version = "test";
    r.started_unix_ms = 1'700'000'000'000;
    return store.begin_run(r);
  };
  auto point = [](std::int64_t run_id, int index, const std::string& mode, std::vector<std::pair<std::string, std::string>> axes,
                  std::vector<std::pair<std::string, double>> metrics) {
    db::PointRecord p;
    p.run_id = run_id;
    p.index = index;
    p.mode = mode;
    p.status = "ok";
    p.axes = std::move(axes);
    p.metrics = std::move(metrics);
    return p;
  };
  const auto r1 = run("profiled", "name = \"profiled\"\n[axes]\nmode = [\"train\", \"decode\", \"ffn-decode\"]\n");
  const auto t0 = small_trace(1), t2 = small_trace(2);
  store.add_point(point(r1, 0, "train", {{"mode", "train"}, {"batch", "2"}},
                        {{"median_ms", 0.01}, {"gate_ms", 0.002}, {"up_down_ms", 0.0}, {"topk_ms", 0.0},
                         {"profile_kernels", 2}, {"profile_gpu_busy_ms", 0.0035}}),
                  {}, {}, &t0);
  store.add_point(point(r1, 1, "decode", {{"mode", "decode"}, {"batch", "2"}}, {{"median_ms", 0.5}}), {}, {});
  store.add_point(point(r1, 2, "ffn-decode", {{"mode", "ffn-decode"}, {"batch", "2"}},
                        {{"median_ms", 0.004}, {"latency_us", 4}, {"gate_us", 1}, {"topk_us", 0.5}, {"up_down_us", 2},
                         {"other_us", 0.5}, {"weight_copies", 1}, {"profile_kernels", 1}, {"profile_gpu_busy_ms", 0.00175}}),
                  {}, {}, &t2);
  store.finish_run(r1, "ok", 1'700'000'001'000);
  const auto r2 = run("old", "name = \"old\"\nmode = \"topk\"   # fixed\n[model]\npreset = \"tiny\"\n[[include]]\nmode = \"train\"\n");
  store.add_point(point(r2, 0, "", {{"batch", "1"}}, {{"median_ms", 1}}), {}, {});
  store.finish_run(r2, "ok", 1'700'000'001'000);
  const auto r3 = run("axis", "name = \"axis\"\n[axes]\nmode = [\"decode\"]\n");
  store.add_point(point(r3, 0, "", {{"mode", "decode"}, {"batch", "1"}}, {{"median_ms", 1}}), {}, {});
  store.finish_run(r3, "ok", 1'700'000'001'000);
  return path;
}

TEST_F(Cli, StatsPrintsEveryReportOfEveryProfiledPoint) {
  const std::string db = write_profiled_db(path("p.db"));
  auto r = mocbench("stats 1 --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("point 0: mode=train batch=2 (mode train; cupti profile, 1 step(s), 2.0 kernels per step; exclusive device time)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("point 2: mode=ffn-decode batch=2 (mode ffn-decode; cupti profile, 2 step(s), 1.0 kernels per step; exclusive device time)"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("point 1:"), std::string::npos) << "point 1 has no profile";
  for (const char* title : {" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):", " ** CUDA GPU MemOps Summary (by Time) (cuda_gpu_mem_time_sum):",
                            " ** NVTX Range Summary (nvtx_sum):", " ** Phase Summary (each op in its innermost range, layers merged) (phase_sum):",
                            " ** Latency Breakdown (profiled vs timed) (phase_sum_breakdown):"})
    EXPECT_NE(r.out.find(title), std::string::npos) << title << "\n" << r.out;
  EXPECT_EQ(r.out.find("nvtx_gpu_proj_sum"), std::string::npos) << "on request only";
  EXPECT_EQ(r.out.find("(stage_sum)"), std::string::npos) << "no stage stamps in these profiles";
  // gemv: 1000 + 2000 ns, all of the kernel time.
  EXPECT_NE(r.out.find("    100.0            3,000          2   1,500.0   1,500.0     1,000     2,000        707.1  moc::gemv<bf16>(int)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[CUDA memcpy Device-to-Host]"), std::string::npos);
  // Point 0's phases per step: layer 0.002 ms, ffn.gate 0.001 ms, (none) 0.0005 ms of 3500 ns busy, and 1000 ns
  // idle between the ops: shares of the 4500 ns step.
  auto row_of = [&](const std::string& phase) {
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(" " + phase + " ", 0) == 0) {
        std::istringstream cells(line.substr(phase.size() + 1));
        std::vector<std::string> v;
        for (std::string c; cells >> c;) v.push_back(c);
        return v;
      }
    return std::vector<std::string>{};
  };
  EXPECT_EQ(row_of("layer"), (std::vector<std::string>{"1.0", "0.002", "44.4"})) << r.out;
  EXPECT_EQ(row_of("(none)"), (std::vector<std::string>{"0.0", "0.001", "11.1"})) << r.out;
  EXPECT_EQ(row_of("(idle between ops)"), (std::vector<std::string>{"0.0", "0.001", "22.2"})) << r.out;

  auto one = mocbench("stats 1 --point 2 --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum --db " + db);
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.out.find("point 0:"), std::string::npos);
  EXPECT_LT(one.out.find("(nvtx_gpu_proj_sum)"), one.out.find("(cuda_gpu_kern_sum)")) << "reports in the order asked";
  EXPECT_NE(one.out.find("Total Proj Time"), std::string::npos);
}

// `devices --measure` measures and caches the ceilings; a run records them (from the cache) with its
// profile's declared costs, and `stats --report roofline` sets each op against its floor on them.
TEST_F(Cli, DevicesMeasureCachesCeilingsThatRunsRecordAndTheRooflineUses) {
  const std::string cache = path("cache");
  const std::string env = "MOCBENCH_CACHE_DIR=" + cache;
  auto dev = mocbench_env(env, "devices --measure");
  ASSERT_EQ(dev.code, 0) << dev.out;
  EXPECT_NE(dev.out.find("cpu ceilings: copy"), std::string::npos) << dev.out;
  ASSERT_TRUE(fs::exists(cache + "/ceilings.tsv"));
  const std::string db = path("roof.db");
  auto run = mocbench_env(env, "run " + kSmoke + " --quiet --only mode=decode --only ffn=moc --db " + db);
  ASSERT_EQ(run.code, 0) << run.out;
  {
    auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
    const auto c = store.ceilings(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].device_id, -1);
    EXPECT_EQ(c[0].source, "cache") << "measured once by devices --measure";
    EXPECT_GT(c[0].copy_GBps, 0);
    EXPECT_EQ(c[0].gemm_dtype, "f32");
    const auto p = store.points(1);
    ASSERT_EQ(p.size(), 1u);
    const auto t = store.profile(p[0].id);
    ASSERT_TRUE(t.has_value());
    for (const auto& k : t->kernels) EXPECT_GE(k.op_bytes, 0) << k.name << " declared nothing";
  }
  auto roof = mocbench("stats 1 --report roofline --format csv --db " + db);
  ASSERT_EQ(roof.code, 0) << roof.out;
  const auto rows = parse_csv(roof.out);
  ASSERT_GE(rows.size(), 2u) << roof.out;
  const auto& head = rows[0];
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  ASSERT_LT(col("Of floor (%)"), head.size()) << roof.out;
  ASSERT_LT(col("Name"), head.size());
  bool ffn = false;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_FALSE(rows[i][col("Of floor (%)")].empty()) << "every op has a floor: " << rows[i][col("Name")];
    ffn = ffn || rows[i][col("Name")] == "ffn_decode";
  }
  EXPECT_TRUE(ffn) << roof.out;
  // Without a cache, a run measures its own ceilings.
  auto fresh = mocbench_env("MOCBENCH_CACHE_DIR=" + path("cache2"),
                            "run " + kSmoke + " --quiet --no-profile --only mode=topk --db " + path("fresh.db"));
  ASSERT_EQ(fresh.code, 0) << fresh.out;
  auto store = db::ResultsDb::open(path("fresh.db"), db::OpenMode::read_only);
  ASSERT_EQ(store.ceilings(1).size(), 1u);
  EXPECT_EQ(store.ceilings(1)[0].source, "measured");
}

// A finished run `name` of one ok decode point (median 0.003 ms) profiled as `t`; returns the file's path.
std::string write_one_point_db(const std::string& file, const std::string& name, const prof::ProfileTrace& t) {
  auto store = db::ResultsDb::open(file, db::OpenMode::read_write);
  db::RunRecord r;
  r.scenario_name = name;
  r.scenario_path = "scenarios/" + name + ".toml";
  r.scenario_text = "name = \"" + name + "\"\nmode = \"decode\"\n";
  r.scenario_hash = "sha256:" + name;
  r.device_kind = "cuda";
  r.started_unix_ms = 1'700'000'000'000;
  const auto run = store.begin_run(r);
  db::PointRecord p;
  p.run_id = run;
  p.index = 0;
  p.mode = "decode";
  p.status = "ok";
  p.metrics = {{"median_ms", 0.003}};
  store.add_point(p, {}, {}, &t);
  store.finish_run(run, "ok", 1'700'000'001'000);
  return file;
}

// A PDL pair: the second gemv's record starts 600 ns before the first ends (it waits for it). Default:
// exclusive times (1000 + 2000 ns, the busy time); --time inclusive: CUPTI's 1000 + 2600 ns. The Perfetto
// export draws the exclusive part and carries the wait.
TEST_F(Cli, StatsAndPerfettoCountExclusiveTimeByDefault) {
  auto t = small_trace(1);
  t.kernels[1].start_ns = 1'001'400;
  const std::string db = write_one_point_db(path("pdl.db"), "pdl", t);
  auto ex = mocbench("stats 1 --report cuda_gpu_kern_sum --format csv --db " + db);
  ASSERT_EQ(ex.code, 0) << ex.out;
  auto rows = parse_csv(ex.out);
  ASSERT_GE(rows.size(), 2u) << ex.out;
  EXPECT_EQ(rows[1][3], "3000") << ex.out;
  EXPECT_EQ(rows[1][8], "2000") << "Max: the second gemv's own time";
  auto in = mocbench("stats 1 --report cuda_gpu_kern_sum --format csv --time inclusive --db " + db);
  ASSERT_EQ(in.code, 0) << in.out;
  rows = parse_csv(in.out);
  ASSERT_GE(rows.size(), 2u) << in.out;
  EXPECT_EQ(rows[1][3], "3600") << in.out;
  auto text = mocbench("stats 1 --report cuda_gpu_kern_sum --db " + db);
  EXPECT_NE(text.out.find("device times are exclusive"), std::string::npos) << text.out;
  auto text_in = mocbench("stats 1 --report cuda_gpu_kern_sum --time inclusive --db " + db);
  EXPECT_NE(text_in.out.find("device times are inclusive"), std::string::npos) << text_in.out;
  auto bad = mocbench("stats 1 --time self --db " + db);
  EXPECT_EQ(bad.code, 2) << bad.out;

  auto pf = mocbench("export 1 --format perfetto --db " + db);
  ASSERT_EQ(pf.code, 0) << pf.out;
  const auto doc = nlohmann::json::parse(pf.out.substr(pf.out.find('{')));
  int kernels = 0;
  for (const auto& e : doc["traceEvents"])
    if (e.value("cat", "") == "kernel") {
      ++kernels;
      if (e["args"]["wait_us"].get<double>() > 0) {
        EXPECT_DOUBLE_EQ(e["args"]["wait_us"].get<double>(), 0.6);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.0);
        EXPECT_DOUBLE_EQ(e["args"]["inclusive_dur_us"].get<double>(), 2.6);
      }
    }
  EXPECT_EQ(kernels, 2);
  auto pf_in = mocbench("export 1 --format perfetto --time inclusive --db " + db);
  ASSERT_EQ(pf_in.code, 0) << pf_in.out;
  EXPECT_EQ(pf_in.out.find("wait_us"), std::string::npos);
  auto csv_time = mocbench("export 1 --format csv --time inclusive --db " + db);
  EXPECT_EQ(csv_time.code, 2) << csv_time.out;
}

// A point whose profile has stage stamps gets stage_sum among the default reports.
TEST_F(Cli, StatsShowsStageStampsByDefaultWhereAPointHasThem) {
  auto t = small_trace(1);
  t.stages = {{0, "gemv", 0, 3, 0, "qkv", 1'001'000, 1'001'600, 50}, {0, "gemv", 0, 3, -1, "head", 1'001'600, 1'002'000, 0}};
  const std::string db = write_one_point_db(path("stages.db"), "stages", t);
  auto out = mocbench("stats 1 --db " + db);
  ASSERT_EQ(out.code, 0) << out.out;
  EXPECT_NE(out.out.find(" ** Kernel Stage Summary (device-side stamps, layers merged) (stage_sum):"), std::string::npos)
      << out.out;
  EXPECT_NE(out.out.find("qkv"), std::string::npos);
  auto only = mocbench("stats 1 --report cuda_gpu_kern_sum --db " + db);
  EXPECT_EQ(only.out.find("(stage_sum)"), std::string::npos) << "reports named: those only";
}

TEST_F(Cli, StatsCsvAndJson) {
  const std::string db = write_profiled_db(path("p.db"));
  auto csv = mocbench("stats 1 --point 0 --report cuda_gpu_kern_sum --report phase_sum --format csv --db " + db);
  ASSERT_EQ(csv.code, 0) << csv.out;
  const auto rows = parse_csv(csv.out);
  // kern_sum: header + 1 row; blank line; phase_sum: header + 3 phases + idle; blank; breakdown: header + 5 parts.
  ASSERT_EQ(rows.size(), 2u + 1 + 5 + 1 + 6) << csv.out;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"point", "report", "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)",
                                               "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"}));
  ASSERT_EQ(rows[1].size(), 11u);
  EXPECT_EQ(rows[1][0], "0");
  EXPECT_EQ(rows[1][1], "cuda_gpu_kern_sum");
  EXPECT_EQ(rows[1][3], "3000");
  EXPECT_EQ(rows[1][6], "1500");
  EXPECT_EQ(rows[1][10], "moc::gemv<bf16>(int)");
  EXPECT_EQ(rows[3], (std::vector<std::string>{"point", "report", "Phase", "Kernels per step", "GPU time per step (ms)",
                                               "Share of step (%)"}));
  EXPECT_EQ(rows[4][1], "phase_sum");
  EXPECT_EQ(rows[4][2], "layer");
  EXPECT_EQ(rows[4][4], "0.002");
  EXPECT_EQ(rows[7][2], "(idle between ops)");
  EXPECT_EQ(rows[7][4], "0.001");
  EXPECT_EQ(rows[8], std::vector<std::string>{""}) << "a blank line between tables";
  EXPECT_EQ(rows[9][2], "Part");
  EXPECT_EQ(rows[10][1], "phase_sum_breakdown");
  EXPECT_EQ(rows[10][2], "gate");
  EXPECT_EQ(rows[10][3], "0.001");  // profiled: ffn.gate's 1000 ns
  EXPECT_EQ(rows[10][4], "0.002");  // timed: gate_ms

  auto js = mocbench("stats 1 --format json --db " + db);
  ASSERT_EQ(js.code, 0) << js.out;
  const auto doc = nlohmann::json::parse(js.out);
  EXPECT_EQ(doc["run"], 1);
  ASSERT_EQ(doc["points"].size(), 2u);
  const auto& p2 = doc["points"][1];
  EXPECT_EQ(p2["point"], 2);
  EXPECT_EQ(p2["mode"], "ffn-decode");
  EXPECT_EQ(p2["axes"]["batch"], "2");
  EXPECT_EQ(p2["steps"], 2);
  ASSERT_EQ(p2["reports"].size(), 5u) << "four default reports, phase_sum with two tables";
  const auto& bd = p2["reports"][4];
  EXPECT_EQ(bd["id"], "phase_sum_breakdown");
  EXPECT_EQ(bd["rows"][0]["Part"], "gate");
  EXPECT_DOUBLE_EQ(bd["rows"][0]["Profiled (us)"].get<double>(), 0.5) << "1000 ns over 2 steps x 1 copy";
  EXPECT_DOUBLE_EQ(bd["rows"][0]["Timed (us)"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(bd["rows"][4]["Timed (us)"].get<double>(), 4.0);
}

TEST_F(Cli, StatsRefusesUnknownReportsRunsPointsAndUnprofiledRuns) {
  const std::string db = write_profiled_db(path("p.db"));
  auto bad = mocbench("stats 1 --report cuda_gpu_trace --db " + db);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("unknown report 'cuda_gpu_trace'; reports: cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, "
                         "cuda_api_sum, cuda_kern_exec_sum, nvtx_sum, nvtx_gpu_proj_sum, phase_sum, stage_sum"),
            std::string::npos) << bad.out;
  auto run = mocbench("stats 9 --db " + db);
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.out.find("no run 9"), std::string::npos) << run.out;
  auto pt = mocbench("stats 1 --point 7 --db " + db);
  EXPECT_EQ(pt.code, 2);
  EXPECT_NE(pt.out.find("run 1 has no point 7; its points: 0, 1, 2"), std::string::npos) << pt.out;
  auto unprof = mocbench("stats 1 --point 1 --db " + db);
  EXPECT_EQ(unprof.code, 2);
  EXPECT_NE(unprof.out.find("point 1 of run 1 was not profiled; profiled points: 0, 2"), std::string::npos) << unprof.out;
  auto none = mocbench("stats 2 --db " + db);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.out.find("run 2 has no profiled points"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("--no-profile"), std::string::npos) << "the hint says how to profile: " << none.out;
  EXPECT_EQ(mocbench("stats 1 --format xml --db " + db).code, 2);
  EXPECT_EQ(mocbench("stats --db " + db).code, 2);
}

TEST_F(Cli, ExportPerfettoWritesOneProcessPerProfiledPoint) {
  const std::string db = write_profiled_db(path("p.db"));
  const std::string out = path("trace.json");
  auto r = mocbench("export 1 --format perfetto -o " + out + " --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  const auto doc = nlohmann::json::parse(ss.str());
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  std::map<int, std::string> procs;
  std::map<int, std::multiset<std::string>> threads;
  int x = 0, flows = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") procs[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["pid"].get<int>()].insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") ++x;
    if (e["ph"] == "s") ++flows;
  }
  EXPECT_EQ(procs, (std::map<int, std::string>{{1, "point 0: mode=train batch=2"}, {3, "point 2: mode=ffn-decode batch=2"}}));
  EXPECT_EQ(threads[1], (std::multiset<std::string>{"Phases", "CUDA API", "GPU 0 stream 7"}));
  EXPECT_EQ(x, 2 * (3 + 2 + 3)) << "per point: 3 ranges, 2 API calls, 2 kernels + 1 copy";
  EXPECT_EQ(flows, 2 * 2);

  auto one = mocbench("export 1 --format perfetto --point 2 --db " + db);  // to standard output
  ASSERT_EQ(one.code, 0) << one.out;
  const auto d1 = nlohmann::json::parse(one.out);
  std::set<int> pids;
  for (const auto& e : d1["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{3}));

  const std::string none = path("none.json");
  EXPECT_EQ(mocbench("export 2 --format perfetto -o " + none + " --db " + db).code, 2) << "no profiles";
  EXPECT_EQ(mocbench("export 1 2 --format perfetto -o " + none + " --db " + db).code, 2) << "one run only";
  EXPECT_EQ(mocbench("export --all --format perfetto -o " + none + " --db " + db).code, 2);
  EXPECT_EQ(mocbench("export 1 --format perfetto --point 1 -o " + none + " --db " + db).code, 2) << "not profiled";
  EXPECT_EQ(mocbench("export 1 --format csv --point 0 -o " + none + " --db " + db).code, 2);
  EXPECT_FALSE(fs::exists(none));
  EXPECT_FALSE(fs::exists(none + ".tmp"));
}

std::string file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// An export never writes over a database -- the one it reads, or any other SQLite file -- and leaves no
// temporary file behind, whether it succeeds, is refused or fails.
TEST_F(Cli, ExportNeverWritesOverADatabaseAndLeavesNothingBehind) {
  const std::string db = write_profiled_db(path("p.db"));
  const std::string other = write_profiled_db(path("other.db"));
  const std::string before = file_bytes(db), other_before = file_bytes(other);
  for (const std::string& args : {"export 1 -o " + db, "export --all --format json -o " + db, "export 1 -o " + other,
                                  "export 1 --format perfetto -o " + db}) {
    auto r = mocbench(args + " --db " + db);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("refusing to write the export over"), std::string::npos) << r.out;
  }
  EXPECT_EQ(file_bytes(db), before) << "the results file is untouched";
  EXPECT_EQ(file_bytes(other), other_before);
  EXPECT_EQ(mocbench("list --db " + db).code, 0);
  // A plain file is replaced, readable as any file the user writes.
  const std::string out = path("out.csv");
  { std::ofstream(out) << "old"; }
  auto ok = mocbench("export 1 -o " + out + " --db " + db);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(file_bytes(out).find("status"), std::string::npos);
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::others_read, fs::perms::others_read);
  // A device (or a pipe) is written as it is: nothing is renamed over it.
  auto dev = mocbench("export 1 -o /dev/stdout --db " + db);
  EXPECT_EQ(dev.code, 0) << dev.out;
  EXPECT_NE(dev.out.find("status"), std::string::npos) << dev.out;
  EXPECT_TRUE(fs::is_symlink("/dev/stdout") || fs::is_character_file("/dev/stdout"));
  // A target folder that does not exist: a runtime failure, and nothing left anywhere.
  auto bad = mocbench("export 1 -o " + path("no-such-dir") + "/x.csv --db " + db);
  EXPECT_EQ(bad.code, 1) << bad.out;
  std::set<std::string> names;  // (SQLite's own -wal / -shm beside a database a reader opened aside)
  for (const auto& e : fs::directory_iterator(path(""))) {
    const std::string n = e.path().filename().string();
    if (!n.ends_with("-wal") && !n.ends_with("-shm")) names.insert(n);
  }
  EXPECT_EQ(names, (std::set<std::string>{"p.db", "other.db", "out.csv"})) << "no temporary file left";
}

// A disk that fills up during an export (issue #27: its temporary file was left behind): exit 1 with the
// reason, and nothing but what was there before. On a small tmpfs, filled up first; skipped where one
// cannot be mounted (not root).
TEST_F(Cli, ExportOnAFullDiskFailsAndLeavesNothingBehind) {
  const std::string db = write_profiled_db(path("p.db"));
  const std::string full = path("full");
  fs::create_directories(full);
  if (moc::test::shell("mount -t tmpfs -o size=64k tmpfs " + full).code != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root): the full-disk export is not checked";
  struct Unmount {
    std::string p;
    ~Unmount() { moc::test::shell("umount " + p); }
  } unmount{full};
  moc::test::shell("dd if=/dev/zero of=" + full + "/filler bs=1k count=64 2>/dev/null");
  for (const char* fmt : {"csv", "json", "perfetto"}) {
    SCOPED_TRACE(fmt);
    auto r = mocbench(std::string("export 1 --format ") + fmt + " -o " + full + "/x." + fmt + " --db " + db);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(full)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, (std::set<std::string>{"filler"})) << "no temporary file, no partial export";
  }
}

// A results path beyond SQLite's limit gets that reason, not a guess at the folder.
TEST_F(Cli, AResultsPathTooLongForSqliteSaysSo) {
  std::string dir = path("");
  while (dir.size() < 560) dir += "/" + std::string(120, 'd');
  fs::create_directories(dir);
  auto r = mocbench("run " + kSmoke + " --quiet --only mode=topk --db " + dir + "/x.db");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("at SQLite's limit of 512"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("does its folder exist"), std::string::npos) << r.out;
}

// A memory limit that is negative, zero or beyond 2^40 MiB is refused before any work (it once wrapped
// silently into another limit).
TEST_F(Cli, CpuMemoryLimitOutOfRangeIsRefused) {
  for (const char* v : {"-5", "0", "18446744073709551615", "1099511627777", "lots"}) {
    auto r = mocbench("run " + kSmoke + " --db " + path("m.db") + " --cpu-memory-limit-mib " + v);
    EXPECT_EQ(r.code, 2) << v << ": " << r.out;
    EXPECT_NE(r.out.find("--cpu-memory-limit-mib"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(path("m.db"))) << "refused before any work";
  EXPECT_EQ(mocbench("run " + kSmoke + " --dry-run --cpu-memory-limit-mib 64").code, 0);
}

// JSON has no inf or nan: a metric that is not finite exports as null, and the export parses.
TEST_F(Cli, JsonExportsWriteNonFiniteMetricsAsNull) {
  const std::string db = path("inf.db");
  {
    auto store = db::ResultsDb::open(db, db::OpenMode::read_write);
    db::RunRecord r;
    r.scenario_name = "inf";
    r.scenario_text = "name = \"inf\"\n";
    r.device_kind = "cpu";
    r.started_unix_ms = 1'700'000'000'000;
    const auto run = store.begin_run(r);
    db::PointRecord p;
    p.run_id = run;
    p.mode = "topk";
    p.status = "ok";
    p.metrics = {{"median_ms", 0.5},
                 {"up", std::numeric_limits<double>::infinity()},
                 {"down", -std::numeric_limits<double>::infinity()}};
    store.add_point(p, {}, {});
    store.finish_run(run, "ok", 1'700'000'001'000);
  }
  auto ex = mocbench("export 1 --format json --db " + db);
  ASSERT_EQ(ex.code, 0) << ex.out;
  const auto doc = nlohmann::json::parse(ex.out);  // throws on a bare inf
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_DOUBLE_EQ(doc[0]["metrics"]["median_ms"].get<double>(), 0.5);
  EXPECT_TRUE(doc[0]["metrics"]["up"].is_null());
  EXPECT_TRUE(doc[0]["metrics"]["down"].is_null());
  auto cmp = mocbench("compare 1 1 --metric up --metric median_ms --format json --db " + db);
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  const auto c = nlohmann::json::parse(cmp.out.substr(cmp.out.find('[')));
  bool saw_up = false;
  for (const auto& row : c)
    if (row["metric"] == "up") {
      saw_up = true;
      EXPECT_TRUE(row["a"].is_null());
      EXPECT_TRUE(row["ratio_b_over_a"].is_null());
    }
  EXPECT_TRUE(saw_up) << cmp.out;
}

TEST_F(Cli, ExportCarriesTheModeRightAfterTheStatus) {
  const std::string db = write_profiled_db(path("p.db"));
  auto r = mocbench("export 1 2 3 --format csv --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 1u + 3 + 1 + 1);
  const auto& h = rows[0];
  const auto status = std::find(h.begin(), h.end(), "status") - h.begin();
  ASSERT_LT(status + 1, static_cast<long>(h.size()));
  EXPECT_EQ(h[static_cast<std::size_t>(status) + 1], "mode");
  EXPECT_EQ(std::count(h.begin(), h.end(), "mode"), 1) << "the mode axis is not repeated";
  std::vector<std::string> modes;
  for (std::size_t i = 1; i < rows.size(); ++i) modes.push_back(rows[i][static_cast<std::size_t>(status) + 1]);
  EXPECT_EQ(modes, (std::vector<std::string>{"train", "decode", "ffn-decode", "topk", "decode"}))
      << "stored mode; an old run's top-level mode line (not its [[include]]); an old point's mode axis";
  EXPECT_NE(std::find(h.begin(), h.end(), "profile_kernels"), h.end());

  auto js = mocbench("export 2 3 --format json --db " + db);
  ASSERT_EQ(js.code, 0) << js.out;
  const auto doc = nlohmann::json::parse(js.out);
  ASSERT_EQ(doc.size(), 2u);
  EXPECT_EQ(doc[0]["mode"], "topk");
  EXPECT_EQ(doc[1]["mode"], "decode");
  EXPECT_EQ(doc[1]["axes"]["mode"], "decode");
  // The mode key comes right after the status key.
  const auto pos_status = js.out.find("\"status\": \"ok\""), pos_mode = js.out.find("\"mode\": \"topk\"");
  ASSERT_NE(pos_status, std::string::npos);
  EXPECT_EQ(pos_mode, pos_status + std::string("\"status\": \"ok\", ").size());
}

TEST_F(Cli, ShowHasKernelsPerStepAndBusyTimeColumns) {
  const std::string db = write_profiled_db(path("p.db"));
  auto r = mocbench("show 1 --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("kernels/step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU busy (ms)"), std::string::npos) << r.out;
  // One table per mode; the profiled train point shows 2 kernels and 0.0035 ms busy per step, the decode
  // point (no profile) has no such columns.
  std::istringstream lines(r.out);
  std::string line, section;
  std::map<std::string, std::string> row_of;  // mode -> its one row
  while (std::getline(lines, line)) {
    if (line.find(": ") != std::string::npos && line.find("run ") != 0) section = line.substr(0, line.find(':'));
    if (line.rfind("ok ", 0) == 0) row_of[section] = line;
  }
  ASSERT_EQ(row_of.size(), 3u) << r.out;
  EXPECT_NE(row_of["train"].find("  2.0  "), std::string::npos) << row_of["train"];
  EXPECT_EQ(row_of["train"].substr(row_of["train"].size() - 6), "0.0035") << row_of["train"];
  EXPECT_EQ(row_of["ffn-decode"].substr(row_of["ffn-decode"].size() - 6, 5), "0.001") << row_of["ffn-decode"];
  EXPECT_EQ(row_of["decode"].find("0.00"), std::string::npos) << row_of["decode"];
}

// Issue 14 end to end: a scenario trains on real text (the Python tutorial's sources) and saves checkpoints;
// a decode scenario that names them is refused before any point until they exist, then decodes on trained
// and random weights with the channel unions measured; `mocbench data` tokenizes and round-trips a text.
TEST_F(Cli, TrainOnTextSaveCheckpointsThenDecodeFromThem) {
  const fs::path tutorial = "/usr/share/doc/python3.11/html/_sources/tutorial";
  ASSERT_TRUE(fs::is_directory(tutorial)) << "install Debian's python3.11-doc (scripts/setup.sh does)";
  fs::copy(tutorial, dir_ / "corpus");
  const std::string head = "[model]\npreset = \"tiny\"\nvocab = 512\n[data]\ncorpus = \"corpus\"\nval_fraction = 0.2\n"
                           "seed = 2\n";
  write("train.toml", "name = \"text\"\ndescription = \"t\"\nmode = \"train\"\ndevice = \"cpu\"\n" + head +
                          "steps = 30\neval_every = 10\neval_windows = 16\nlr = 0.003\nwarmup = 3\n"
                          "save = \"ck/{ffn}.safetensors\"\n[axes]\nbatch = [4]\nseq = [32]\nffn = [\"dense\", \"moc\"]\n"
                          "[profile]\nkernels = false\n");
  write("decode.toml", "name = \"dec\"\ndescription = \"d\"\nmode = \"decode\"\ndevice = \"cpu\"\n" + head +
                           "[measure]\nprompt = 24\ngenerate = 24\nwarmup = 1\nmin_reps = 2\nmax_reps = 3\n"
                           "time_bound_s = 0.2\n[axes]\nweights = [\"random\", \"ck/{ffn}.safetensors\"]\n"
                           "ffn = [\"dense\", \"moc\"]\nbatch = [1, 3]\n[profile]\nkernels = false\n");
  const std::string in_dir = "cd '" + dir_.string() + "' && " + std::string(MOCBENCH_BIN) + " ";
  // The checkpoints do not exist yet: refused before any point, nothing recorded.
  auto r = moc::test::shell(in_dir + "run decode.toml --db r.db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no file 'ck/dense.safetensors'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run that first"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("r.db")));

  r = moc::test::shell(in_dir + "run train.toml --db r.db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("val ppl"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(path("ck/dense.safetensors")));
  EXPECT_TRUE(fs::is_regular_file(path("ck/moc.safetensors")));
  {
    auto db = db::ResultsDb::open(path("r.db"), db::OpenMode::read_only);
    const auto pts = db.points(db.runs().at(0).id);
    ASSERT_EQ(pts.size(), 2u);
    for (const auto& p : pts) {
      ASSERT_EQ(p.status, "ok") << p.error;
      std::map<std::string, double> m(p.metrics.begin(), p.metrics.end());
      EXPECT_LT(m.at("val_loss"), m.at("val_loss_initial") - 0.5);
      std::map<std::string, std::size_t> n;
      for (const auto& sr : db.series(p.id)) n[sr.name] = sr.x.size();
      EXPECT_EQ(n["train_loss"], 30u);
      EXPECT_EQ(n["val_ppl"], 4u);  // steps 0, 10, 20, 30
      EXPECT_EQ(n["gate_pre_hist.L0"], 80u);
      EXPECT_EQ(n["union_by_batch"], 4u);
    }
  }
  // eval points on the saved checkpoints and the corpus's validation split (issue #29's `eval --corpus` as a
  // scenario): the same windows as training validated on, so the loss training ended with.
  write("eval.toml", "name = \"ev\"\nmode = \"eval\"\ndevice = \"cpu\"\n" + head +
                         "eval_windows = 16\n[measure]\nwarmup = 0\nmin_reps = 1\nmax_reps = 1\n[axes]\n"
                         "weights = [\"ck/{ffn}.safetensors\"]\nffn = [\"dense\", \"moc\"]\nbatch = [4]\nseq = [32]\n");
  r = moc::test::shell(in_dir + "run eval.toml --db e.db --no-profile");
  ASSERT_EQ(r.code, 0) << r.out;
  {
    auto trained = db::ResultsDb::open(path("r.db"), db::OpenMode::read_only);
    auto evald = db::ResultsDb::open(path("e.db"), db::OpenMode::read_only);
    const auto tp = trained.points(trained.runs().at(0).id), ep = evald.points(evald.runs().at(0).id);
    ASSERT_EQ(ep.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(ep[i].status, "ok") << ep[i].error;
      std::map<std::string, double> t(tp[i].metrics.begin(), tp[i].metrics.end()), e(ep[i].metrics.begin(), ep[i].metrics.end());
      EXPECT_NEAR(e.at("eval_loss"), t.at("val_loss"), 1e-6 * t.at("val_loss")) << "point " << i;
      EXPECT_DOUBLE_EQ(e.at("eval_tokens"), t.at("val_tokens_evaluated"));
    }
  }
  r = moc::test::shell(in_dir + "run decode.toml --db r.db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("channels read"), std::string::npos) << r.out;
  {
    auto db = db::ResultsDb::open(path("r.db"), db::OpenMode::read_only);
    const auto pts = db.points(db.runs().at(0).id);
    ASSERT_EQ(pts.size(), 8u);
    for (const auto& p : pts) {
      ASSERT_EQ(p.status, "ok") << p.error;
      std::map<std::string, std::string> ax(p.axes.begin(), p.axes.end());
      std::map<std::string, double> m(p.metrics.begin(), p.metrics.end());
      if (ax["ffn"] != "moc") continue;
      // One token reads its K channels; three tokens at least as many, at most 3 K.
      const double u = m.at("union_channels"), K = m.at("kept_channels");
      if (ax["batch"] == "1") EXPECT_EQ(u, K);
      else EXPECT_TRUE(u >= K && u <= 3 * K) << u;
    }
  }
  r = moc::test::shell(in_dir + "data --corpus corpus --vocab 512 --val-fraction 0.2 --seed 2 --encode 'Hello, world'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(cached)"), std::string::npos) << r.out;  // the runs made it
  EXPECT_NE(r.out.find("decoded      Hello, world"), std::string::npos) << r.out;
  EXPECT_EQ(moc::test::shell(in_dir + "data --corpus nowhere").code, 2);
}
}  // namespace
}  // namespace moc
#endif

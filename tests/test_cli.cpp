// The command line end to end on the CPU, through the real executable: run -> list -> show -> export CSV
// (parsed back) -> compare; the run record's JSON fields; eval and keys; an out-of-memory point is stored and the
// sweep goes on; environment switches; bad paths and limits; training on text, checkpoints, decoding from them.
// The other test_cli_*.cpp: data-parallel workers, a locked file and Ctrl-C, stats and the exports (shared helpers:
// cli_test_util.h).
#include <gtest/gtest.h>

#include "cli_test_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {

using namespace clitest;

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
  // Values of one axis are alternatives (a comma list, or the axis again); different axes must all match.
  {
    auto points_of = [&](const std::string& filters) {
      const auto r = mocbench("run " + kSmoke + " --dry-run " + filters);
      EXPECT_EQ(r.code, 0) << filters << ": " << r.out;
      std::vector<std::string> ids;
      std::istringstream in(r.out);
      for (std::string line; std::getline(in, line);)
        if (line.rfind('#', 0) == 0) ids.push_back(line.substr(0, line.find(' ')));
      return ids;
    };
    const std::vector<std::string> decode_topk{"#2", "#3", "#10"};  // decode dense / moc, topk moc
    EXPECT_EQ(points_of("--only mode=decode,topk"), decode_topk);
    EXPECT_EQ(points_of("--only mode=decode --only mode=topk"), decode_topk);
    EXPECT_EQ(points_of("--only mode=decode,topk --only ffn=moc"), (std::vector<std::string>{"#3", "#10"}));
    EXPECT_EQ(points_of("--only mode=decode --only ffn=moc,dense --only batch=2"),
              (std::vector<std::string>{"#2", "#3"}));
    EXPECT_EQ(mocbench("run " + kSmoke + " --dry-run --only mode=decode --only ffn=moc_2:8").code, 2)
        << "different axes must all match: no decode point is 2:8";
    EXPECT_EQ(mocbench("run " + kSmoke + " --dry-run --only mode=").code, 2) << "no value";
  }
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

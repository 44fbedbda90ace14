// `stats` and `export` (CSV, JSON, Perfetto) over databases written through ResultsDb (profiles with known
// answers): every report, exclusive time, stage stamps, devices --measure's ceilings in the roofline, refusals (exit
// 2); exports never write over a database and leave nothing behind on failure; the mode column; show's columns.
#include <gtest/gtest.h>

#include "cli_test_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {

using namespace clitest;

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

}  // namespace
}  // namespace moc
#endif

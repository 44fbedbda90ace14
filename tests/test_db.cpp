// The results database: round trips (profiles included), WAL and concurrent readers, all-or-nothing points,
// a writer killed mid-run, stale runs (a writer whose process is gone reads as abandoned), migration of
// hand-made version 1, 2 and 3 files, and refusal (file untouched) of what is not ours.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace {

namespace fs = std::filesystem;
using moc::db::DbError;
using moc::db::DeviceRecord;
using moc::db::GpuInfoRecord;
using moc::db::MemEventRecord;
using moc::db::OpenMode;
using moc::db::PointRecord;
using moc::db::RangeRecord;
using moc::db::ResultsDb;
using moc::db::RunRecord;
using moc::prof::ProfileTrace;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Raw C API access, to craft fixture files (an old schema, another application's file) and to look at
// a file the way a third party would.
class RawDb {
 public:
  explicit RawDb(const fs::path& p) {
    if (sqlite3_open_v2(p.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
      throw std::runtime_error("sqlite3_open_v2 " + p.string() + ": " + sqlite3_errmsg(db_));
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err != nullptr ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(msg + " in: " + sql);
    }
  }
  // The first column of every row, as text.
  std::vector<std::string> column(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    std::vector<std::string> out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const auto* t = sqlite3_column_text(s, 0);
      out.emplace_back(t != nullptr ? reinterpret_cast<const char*>(t) : "");
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    return out;
  }
  std::int64_t integer(const std::string& sql) { return std::stoll(column(sql).at(0)); }

 private:
  sqlite3* db_ = nullptr;
};

// A fresh folder per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mocbench_db_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
                                        "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

using ResultsDbStore = TempDirTest;
using ResultsDbOpen = TempDirTest;
using ResultsDbMigration = TempDirTest;
using ResultsDbRefusal = TempDirTest;
using ResultsDbStaleRuns = TempDirTest;

RunRecord sample_run(const std::string& scenario = "decode_bs1_4", std::int64_t started = 1'700'000'000'000) {
  RunRecord r;
  r.scenario_name = scenario;
  r.scenario_path = "scenarios/" + scenario + ".toml";
  r.scenario_text = "[model]\npreset = \"tiny\"\n# unicode: \xc3\xa9\n";
  r.scenario_hash = "sha256:0123abcd";
  r.config_json = R"({"preset":"tiny","batch":[1,4]})";
  r.overrides_json = R"({"cuda":{"k":0.2}})";
  r.machine_json = R"({"cpu":"EPYC","threads":16})";
  r.device_kind = "cuda";
  r.device_name = "NVIDIA H100 80GB HBM3";
  r.mocbench_version = "v0.1.0-3-gabcdef";
  r.started_unix_ms = started;
  return r;
}

PointRecord sample_point(std::int64_t run_id, int index) {
  PointRecord p;
  p.run_id = run_id;
  p.index = index;
  p.mode = index % 2 == 0 ? "decode" : "ffn-train";
  p.status = "ok";
  // Deliberately not alphabetical: the order is the sweep's, and must come back as it went in.
  p.axes = {{"seq", std::to_string(128 * (index + 1))}, {"batch", std::to_string(index + 1)}, {"ffn", "moc"}};
  p.metrics = {{"tokens_per_s", 1000.5 + index}, {"median_us", 12.25}, {"peak_bytes", 3.0e9}};
  return p;
}

// A profile with every field of every record set, none at its default: n kernels over 7 distinct names
// (beyond 32 bits, unsigned ids at their extremes), and one or more of every other record.
ProfileTrace sample_trace(int n = 3) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 2;
  t.start_ns = 5'000'000'000'000;  // beyond 32 bits on purpose
  t.end_ns = t.start_ns + 1'000'000;
  t.dropped_records = 0xFFFF'FFFF'FFFF'FFF0ull;  // beyond int64: stored as its two's complement
  static const char* const kNames[] = {"void moc::topk_kernel<__nv_bfloat16, 128>(const __nv_bfloat16*, int*)",
                                       "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
                                       "void moc::rmsnorm<float>(float*)",
                                       "flash_fwd_kernel",
                                       "void at::native::elementwise_kernel<128, 2>()",
                                       "softmax \xc3\xa9",  // not ASCII
                                       "cpu: matmul"};
  static const char* const kShort[] = {"topk_kernel", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
                                       "rmsnorm", "flash_fwd_kernel", "elementwise_kernel", "softmax \xc3\xa9",
                                       "cpu: matmul"};
  for (int i = 0; i < n; ++i) {
    moc::prof::KernelRecord k;
    k.name = kNames[i % 7];
    k.short_name = kShort[i % 7];
    k.start_ns = t.start_ns + 1000 * i;
    k.end_ns = k.start_ns + 750 + i % 13;
    k.device_id = i % 7 == 6 ? -1 : i % 2;
    k.context_id = 1 + i % 3;
    k.stream_id = 7 + i % 2;
    k.correlation_id = 0xFFFF'FF00u + static_cast<std::uint32_t>(i % 200);
    k.grid_x = 132 + i % 5, k.grid_y = 2, k.grid_z = 3, k.block_x = 256, k.block_y = 4, k.block_z = 5;
    k.registers_per_thread = 96, k.static_shared_bytes = 1024, k.dynamic_shared_bytes = 49152 + i % 3;
    k.graph_id = i % 4 == 0 ? 0 : 0xFFFF'FFFEu;
    k.graph_node_id = i % 4 == 0 ? 0 : 0x8000'0000'0000'0001ull + static_cast<std::uint64_t>(i);
    k.range_id = i % 5 == 4 ? -1 : i % 3;
    k.step = i % 2;
    if (i % 3 != 2) {  // declared costs (the roofline); every third kernel undeclared
      k.op = i % 2 ? "gemm" : "ffn_decode.gate";
      k.op_bytes = 1'000'000'000'000LL + i;  // beyond 32 bits
      k.op_flops = 2LL * i;
      k.op_call = i / 2;
      k.op_bound = i % 4 == 1;
    }
    t.kernels.push_back(k);
  }
  t.memcpys.push_back({t.start_ns + 10, t.start_ns + 90, 0, 1, 7, 0xFFFF'FFFFu, 1 << 20, "HtoD", "pinned", "device",
                       3, 0xFFFF'FFFF'FFFF'FFFFull, 0, 0});
  t.memcpys.push_back({t.start_ns + 100, t.start_ns + 190, 1, 2, 8, 17, 4096, "DtoD", "device", "device", 0, 0, -1, 1});
  t.memsets.push_back({t.start_ns + 200, t.start_ns + 210, 0, 1, 7, 18, 8192, 255, "device", 4, 99, 1, 1});
  t.api.push_back({"cudaLaunchKernel", "runtime", t.start_ns - 50, t.start_ns - 20, 0xFFFF'FF00u, 4242, 0});
  t.api.push_back({"cuLaunchKernelEx", "driver", t.start_ns - 10, t.start_ns - 5, 0xFFFF'FF01u, 4242, 700});
  t.api.push_back({"cudaLaunchKernel", "runtime", t.start_ns + 5, t.start_ns + 9, 19, 4243, 0});
  t.device_memory.push_back({t.start_ns + 1, 0, 1, 7, 20, 0x7F00'0000'0000ull, 1 << 30, true, "device"});
  t.device_memory.push_back({t.start_ns + 2, 1, 2, 0, 21, 0xFFFF'0000'0000'0000ull, 1 << 30, false, "managed"});
  // Ranges: a root, a child, a grandchild, and a graph replay (host times 0).
  t.ranges.push_back({0, -1, "step", 0, 0, t.start_ns, t.end_ns, t.start_ns - 100, t.end_ns + 100, n + 3});
  t.ranges.push_back({1, 0, "layer.0", 1, 0, t.start_ns + 10, t.start_ns + 500, t.start_ns, t.start_ns + 400, n});
  t.ranges.push_back({2, 1, "ffn.topk", 2, 1, t.start_ns + 20, t.start_ns + 30, t.start_ns + 15, t.start_ns + 25, 1});
  t.ranges.push_back({7, 1, "ffn.topk", 2, 1, t.start_ns + 40, t.start_ns + 50, 0, 0, 2});
  t.allocator.push_back({t.start_ns, "activations", "ffn", 0, 0, 4096});
  t.allocator.push_back({t.start_ns + 3, "workspace", "none", -1, 1 << 20, (1 << 20) + 8});
  t.allocator.push_back({t.start_ns + 4, "activations", "ffn", 0, -4096, 0});
  // Stage stamps of one launch of a multi-stage kernel, as older databases hold the retired persistent decode
  // step's k_step (names shared with the kernel names' StringIds on purpose).
  t.stages.push_back({0, "k_step", 0, 0, -1, "start", t.start_ns + 100, t.start_ns + 150, 7});
  t.stages.push_back({0, "k_step", 0, 0, 0, "qkv", t.start_ns + 150, t.start_ns + 400, 0});
  t.stages.push_back({1, "k_step", 1, -1, 23, "gate & up", t.start_ns + 400, t.start_ns + 401, 1'000'000'000'000});
  t.stages.push_back({1, "k_step", 1, -1, -1, "rmsnorm", t.start_ns + 401, t.start_ns + 500, 0});
  t.dropped_stamps = 3;
  return t;
}

std::vector<RangeRecord> sample_ranges() {
  return {{"step", 100, 900, 0}, {"layer.0", 120, 500, 1}, {"ffn.topk", 130, 200, 2}};
}

std::vector<MemEventRecord> sample_mem() {
  return {{10, "activations", "ffn", 0, 4096}, {20, "workspace", "none", -1, 1 << 20}, {30, "activations", "ffn", 0, -4096}};
}

// Opening in either mode must fail with a message containing `expected`, leaving the file byte-identical.
void expect_refused(const std::string& path, const std::string& expected) {
  const std::string before = read_bytes(path);
  for (const auto mode : {OpenMode::read_only, OpenMode::read_write}) {
    SCOPED_TRACE(mode == OpenMode::read_only ? "read_only" : "read_write");
    try {
      ResultsDb::open(path, mode);
      ADD_FAILURE() << "opened " << path;
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the message names the file: " << e.what();
    }
    EXPECT_EQ(read_bytes(path), before) << "a refused open changed the file";
  }
}

// "table.column" of every table and "index:name" of every index: the shape of a schema.
std::vector<std::string> schema_shape(const std::string& path) {
  RawDb raw(path);
  auto shape = raw.column(
      "SELECT m.name || '.' || c.name FROM sqlite_master m JOIN pragma_table_info(m.name) c "
      "WHERE m.type = 'table' ORDER BY m.name, c.cid");
  for (auto& i : raw.column("SELECT 'index:' || name FROM sqlite_master WHERE type = 'index' ORDER BY name"))
    shape.push_back(i);
  return shape;
}

TEST_F(ResultsDbStore, RoundTripKeepsARunWithTwoPointsAndEverythingRecordedAtThem) {
  const auto path = file("results.db");
  const auto run_in = sample_run();
  const std::vector<DeviceRecord> devices_in = {{"cuda", "NVIDIA H100 80GB HBM3", R"({"sm":"9.0","mem_gib":80})"},
                                                {"cpu", "AMD EPYC 9654", R"({"threads":16})"}};
  PointRecord p0 = sample_point(0, 0), p1 = sample_point(0, 1);
  p1.status = "oom";
  p1.error = "out of memory: 80.0 GiB requested";
  std::int64_t run_id = 0;
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
    EXPECT_EQ(db.path(), path);
    run_id = db.begin_run(run_in);
    for (const auto& d : devices_in) db.add_device(run_id, d);
    p0.run_id = p1.run_id = run_id;
    const auto trace = sample_trace();
    p0.id = db.add_point(p0, sample_ranges(), sample_mem(), &trace);
    p1.id = db.add_point(p1, {}, {});
    db.finish_run(run_id, "ok", run_in.started_unix_ms + 4321);
  }

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  auto run_out = run_in;
  run_out.id = run_id;
  run_out.status = "ok";
  run_out.finished_unix_ms = run_in.started_unix_ms + 4321;
  run_out.writer = moc::db::this_process();
  ASSERT_EQ(db.runs().size(), 1u);
  EXPECT_EQ(db.runs()[0], run_out);
  EXPECT_EQ(db.run(run_id), run_out);
  EXPECT_FALSE(db.run(run_id + 1).has_value());
  EXPECT_EQ(db.devices(run_id), devices_in);

  const auto points = db.points(run_id);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0], p0);
  EXPECT_EQ(points[1], p1);
  EXPECT_EQ(points[0].axes[0].first, "seq") << "axes keep the sweep's order";
  EXPECT_EQ(points[0].mode, "decode");
  EXPECT_EQ(points[1].mode, "ffn-train");
  EXPECT_EQ(db.profile(p0.id), sample_trace());
  EXPECT_EQ(db.ranges(p0.id), sample_ranges());
  EXPECT_EQ(db.memory_events(p0.id), sample_mem());
  EXPECT_FALSE(db.profile(p1.id).has_value()) << "a point without a profile";
  EXPECT_FALSE(db.profile(p1.id + 100).has_value()) << "no such point";
  EXPECT_TRUE(db.ranges(p1.id).empty());
  EXPECT_TRUE(db.memory_events(p1.id).empty());
}

TEST(RunEnvironment, TheSwitchesARunRecordedInItsConfigInRecordedOrder) {
  RunRecord r;
  r.config_json = R"({"backend":"cuda","points":4,"env":{"MOCBENCH_SKINNY":"TC:2","MOCBENCH_ATTN":"own"}})";
  EXPECT_EQ(run_environment(r), (std::vector<std::string>{"MOCBENCH_SKINNY=TC:2", "MOCBENCH_ATTN=own"}));
  r.config_json = R"({"backend":"cpu","points":1,"env":{}})";
  EXPECT_TRUE(run_environment(r).empty());
  r.config_json = R"({"backend":"cpu","points":1})";  // recorded before the environment was stored
  EXPECT_TRUE(run_environment(r).empty());
  r.config_json = "{not json";  // opaque to the store: nothing to show, no throw
  EXPECT_TRUE(run_environment(r).empty());
}

TEST_F(ResultsDbStore, RunsAreListedNewestFirst) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto old_run = db.begin_run(sample_run("old", 1000));
  const auto new_run = db.begin_run(sample_run("new", 2000));
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, new_run);
  EXPECT_EQ(runs[1].id, old_run);
  EXPECT_EQ(runs[0].status, "running");
  EXPECT_EQ(runs[0].finished_unix_ms, 0);
}

TEST_F(ResultsDbStore, NanAndInfiniteMetricsRoundTrip) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  auto p = sample_point(run, 0);
  p.metrics = {{"loss", std::numeric_limits<double>::quiet_NaN()},
               {"ratio", std::numeric_limits<double>::infinity()},
               {"neg", -std::numeric_limits<double>::infinity()}};
  db.add_point(p, {}, {});
  const auto m = db.points(run).at(0).metrics;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(std::isnan(m[0].second));
  EXPECT_EQ(m[1].second, std::numeric_limits<double>::infinity());
  EXPECT_EQ(m[2].second, -std::numeric_limits<double>::infinity());
}

TEST_F(ResultsDbStore, FileIsInWalModeWithMocbenchsApplicationIdAndSchemaVersion) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  RawDb raw(path);
  EXPECT_EQ(raw.column("PRAGMA journal_mode").at(0), "wal");
  EXPECT_EQ(raw.integer("PRAGMA application_id"), moc::db::kApplicationId);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), moc::db::kSchemaVersion);
}

TEST_F(ResultsDbStore, ReaderSeesCommittedPointsWhileAWriterHoldsTheFileOpen) {
  const auto path = file("results.db");
  auto writer = ResultsDb::open(path, OpenMode::read_write);
  const auto run = writer.begin_run(sample_run());
  const auto trace = sample_trace();
  writer.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
  writer.add_point(sample_point(run, 1), sample_ranges(), sample_mem(), &trace);

  const auto reader = ResultsDb::open(path, OpenMode::read_only);
  EXPECT_EQ(reader.run(run)->status, "running");
  EXPECT_EQ(reader.points(run).size(), 2u);

  writer.add_point(sample_point(run, 2), sample_ranges(), sample_mem(), &trace);
  const auto points = reader.points(run);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(reader.profile(points[2].id), trace);
  writer.finish_run(run, "ok", 1);
  EXPECT_EQ(reader.run(run)->status, "ok");
}

// Row counts of every table, to see that nothing partial was left.
std::vector<std::int64_t> row_counts(const std::string& path) {
  RawDb raw(path);
  std::vector<std::int64_t> n;
  for (const char* t : {"runs", "points", "point_axes", "metrics", "ranges", "memory_events", "devices", "StringIds",
                        "profiles", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS",
                        "NVTX_EVENTS", "ALLOCATOR_EVENTS", "TARGET_INFO_GPU", "point_series"})
    n.push_back(raw.integer(std::string("SELECT count(*) FROM ") + t));
  return n;
}

TEST_F(ResultsDbStore, SeriesRoundTripByNameInOrderAndABadOneLeavesNothing) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<moc::db::SeriesRecord> series = {
      {"val_ppl", {0, 100, 200}, {8192, 310.5, 97.25}},
      {"train_loss", {1, 2, 3, 4}, {9.0, 8.5, nan, 7.75}},
      {"gate_pre_hist.L0", {-1.5, -0.5, 0.5}, {0.25, 0.5, 0.25}},
  };
  const auto id = db.add_point(sample_point(run, 0), {}, {}, nullptr, series);
  const auto back = db.series(id);
  ASSERT_EQ(back.size(), 3u);  // by name
  EXPECT_EQ(back[0].name, "gate_pre_hist.L0");
  EXPECT_EQ(back[0], series[2]);
  EXPECT_EQ(back[1].name, "train_loss");
  EXPECT_EQ(back[1].x, series[1].x);
  EXPECT_TRUE(std::isnan(back[1].y[2]));
  EXPECT_EQ(back[1].y[3], 7.75);
  EXPECT_EQ(back[2], series[0]);
  EXPECT_TRUE(db.series(id + 100).empty());
  // x and y of different lengths: refused, and the point is not half-written.
  const auto before = row_counts(path);
  EXPECT_THROW(db.add_point(sample_point(run, 1), {}, {}, nullptr, {{"bad", {1, 2}, {1}}}), DbError);
  EXPECT_EQ(row_counts(path), before);
  EXPECT_EQ(db.points(run).size(), 1u);
}

TEST_F(ResultsDbStore, AddPointWithADuplicateIndexLeavesNoPartialRows) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto first = sample_point(run, 0);
  const auto trace = sample_trace();
  db.add_point(first, sample_ranges(), sample_mem(), &trace);
  const auto before = row_counts(path);

  auto dup = sample_point(run, 0);
  dup.axes = {{"other", "1"}};
  auto other_trace = sample_trace(5);
  other_trace.kernels[0].name = "a name no point had before";
  try {
    db.add_point(dup, sample_ranges(), sample_mem(), &other_trace);
    FAIL() << "a second point 0 was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("UNIQUE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("point 0 of run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  auto kept = db.points(run);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(db.profile(kept[0].id), trace);
  kept[0].id = 0;
  EXPECT_EQ(kept[0], first);
  // The connection is usable again: no transaction was left open.
  EXPECT_NO_THROW(db.add_point(sample_point(run, 1), {}, {}));
}

TEST_F(ResultsDbStore, AddPointFailingAfterPartialWritesRollsBackEverything) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto before = row_counts(path);

  // The metrics are written last: the point, its axes, ranges, memory events and profile are in by then.
  auto p = sample_point(run, 0);
  p.metrics.emplace_back("median_us", 13.0);
  const auto trace = sample_trace(50);
  try {
    db.add_point(p, sample_ranges(), sample_mem(), &trace);
    FAIL() << "a duplicated metric was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("metric 'median_us'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  EXPECT_TRUE(db.points(run).empty());
  p.metrics.pop_back();
  EXPECT_NO_THROW(db.add_point(p, sample_ranges(), sample_mem(), &trace));
  ASSERT_EQ(db.points(run).size(), 1u);
  EXPECT_EQ(db.profile(db.points(run)[0].id), trace);
}

TEST_F(ResultsDbStore, AddPointFailingInsideItsProfileRollsBackEverything) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto before = row_counts(path);

  // Kernels (with new StringIds), memcpys and memsets are in when the second API call fails.
  auto bad_domain = sample_trace(50);
  bad_domain.api[1].domain = "kernel";
  try {
    db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &bad_domain);
    FAIL() << "an API call of domain 'kernel' was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("API call 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CHECK"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);

  // Two phase ranges with one id: the second one is refused, and nothing of the point stays.
  auto dup_range = sample_trace(50);
  dup_range.ranges[3].id = dup_range.ranges[1].id;
  try {
    db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &dup_range);
    FAIL() << "two ranges with one id were accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("phase range 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  EXPECT_TRUE(db.points(run).empty());
}

TEST_F(ResultsDbStore, StringIdsAreSharedByThePointsOfAFile) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(100);
  const auto a = db.add_point(sample_point(run, 0), {}, {}, &trace);
  {
    auto db2 = ResultsDb::open(path, OpenMode::read_write);  // another connection: nothing cached
    db2.add_point(sample_point(run, 1), {}, {}, &trace);
  }
  const auto b = db.add_point(sample_point(run, 2), {}, {}, &trace);
  // 7 kernel names, 3 more short names (the other 4 kernels are their own short names), 2 API names, 4
  // stage-stamp names (k_step, start, qkv, gate & up; the stage "rmsnorm" is a short name already), 2 declared
  // op names (gemm, ffn_decode.gate).
  RawDb raw(path);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM StringIds"), 7 + 3 + 2 + 4 + 2);
  EXPECT_EQ(raw.integer("SELECT count(DISTINCT value) FROM StringIds"), 7 + 3 + 2 + 4 + 2);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 300);
  EXPECT_EQ(db.profile(a), trace);
  EXPECT_EQ(db.profile(b), trace);
}

TEST_F(ResultsDbStore, HundredThousandKernelsRoundTrip) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(100'000);
  const auto id = db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
  const auto back = db.profile(id);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->kernels.size(), 100'000u);
  EXPECT_TRUE(*back == trace);  // not EXPECT_EQ: a failure would print 100k records
}

TEST_F(ResultsDbStore, ProfileTablesKeepNsightSystemsNamesAndMeanings) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(7);
  const auto id = db.add_point(sample_point(run, 0), {}, {}, &trace);
  RawDb raw(path);
  const std::string of = " WHERE point_id = " + std::to_string(id);
  // nsys-style SQL: names through StringIds, kernels joined to their NVTX range.
  EXPECT_EQ(raw.column("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName" + of +
                       " ORDER BY k.id LIMIT 1"),
            std::vector<std::string>{"topk_kernel"});
  EXPECT_EQ(raw.column("SELECT n.text FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN NVTX_EVENTS n ON n.point_id = k.point_id "
                       "AND n.rangeId = k.rangeId WHERE k.point_id = " +
                       std::to_string(id) + " ORDER BY k.id LIMIT 3"),
            (std::vector<std::string>{"step", "layer.0", "ffn.topk"}));
  EXPECT_EQ(raw.column("SELECT DISTINCT eventType FROM NVTX_EVENTS" + of), std::vector<std::string>{"59"});
  EXPECT_EQ(raw.integer("SELECT count(*) FROM NVTX_EVENTS" + of +
                        " AND textId IS NULL AND globalTid = 0 AND domainId = 0"),
            4);
  EXPECT_EQ(raw.column("SELECT s.value || ':' || r.domain FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON "
                       "s.id = r.nameId ORDER BY r.id"),
            (std::vector<std::string>{"cudaLaunchKernel:runtime", "cuLaunchKernelEx:driver",
                                      "cudaLaunchKernel:runtime"}));
  EXPECT_EQ(raw.column("SELECT memoryOperationType FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY id"),
            (std::vector<std::string>{"alloc", "free"}));
  EXPECT_EQ(raw.column("SELECT copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY id"),
            (std::vector<std::string>{"HtoD", "DtoD"}));
  EXPECT_EQ(raw.column("SELECT source || ' ' || steps FROM profiles"), std::vector<std::string>{"cupti 2"});
  // Deleting the point deletes its profile (ON DELETE CASCADE); StringIds stay.
  raw.exec("PRAGMA foreign_keys = ON; DELETE FROM points WHERE id = " + std::to_string(id));
  for (const char* t : {"profiles", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS",
                        "NVTX_EVENTS", "ALLOCATOR_EVENTS"})
    EXPECT_EQ(raw.integer(std::string("SELECT count(*) FROM ") + t), 0) << t;
  EXPECT_GT(raw.integer("SELECT count(*) FROM StringIds"), 0);
}

TEST_F(ResultsDbStore, TargetInfoRoundTrips) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto other = db.begin_run(sample_run("other", 2));
  const GpuInfoRecord g1{1, "NVIDIA H200", 9, 0, 132, 52'428'800, 150'012'000'256, 1'980'000, 3'201'000, 6144};
  const GpuInfoRecord g0{0, "NVIDIA H100 80GB HBM3", 9, 0, 132, 52'428'800, 85'028'896'768, 1'980'000, 2'619'000, 5120};
  db.add_gpu_info(run, g1);  // out of order: read back by ordinal
  db.add_gpu_info(run, g0);
  db.add_gpu_info(other, g0);
  EXPECT_EQ(db.gpu_info(run), (std::vector<GpuInfoRecord>{g0, g1}));
  EXPECT_EQ(db.gpu_info(other), (std::vector<GpuInfoRecord>{g0}));
  // The device ceilings of the roofline, by ordinal (the CPU backend's -1 first).
  const moc::db::CeilingsRecord c0{0, "NVIDIA H100 80GB HBM3", 2990.5, 786.25, "bf16", 1764000000000, "measured"};
  const moc::db::CeilingsRecord cpu{-1, "AMD EPYC", 12.5, 0.1, "f32", 1764000000001, "cache"};
  db.add_ceilings(run, c0);
  db.add_ceilings(run, cpu);
  EXPECT_EQ(db.ceilings(run), (std::vector<moc::db::CeilingsRecord>{cpu, c0}));
  EXPECT_TRUE(db.ceilings(other).empty());
  EXPECT_THROW(db.add_ceilings(run, c0), DbError) << "one row per device and run";
  EXPECT_TRUE(db.gpu_info(other + 1).empty());
  try {
    db.add_gpu_info(run, g0);
    FAIL() << "GPU 0 of the run was recorded twice";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("add_gpu_info"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_gpu_info(other + 1, g0), DbError);  // no such run
  EXPECT_THROW(ResultsDb::open(path, OpenMode::read_only).add_gpu_info(run, g0), DbError);
}

TEST_F(ResultsDbStore, PointOfAnUnknownRunIsRefusedByTheForeignKey) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  try {
    db.add_point(sample_point(42, 0), {}, {});
    FAIL() << "a point of run 42 was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("FOREIGN KEY"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_device(42, {"cpu", "x", "{}"}), DbError);
}

TEST_F(ResultsDbStore, UnknownStatusesAndRunsAreRefusedWithTheAllowedValues) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  try {
    db.finish_run(run, "done", 1);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("ok, interrupted, failed"), std::string::npos) << e.what();
  }
  auto p = sample_point(run, 0);
  p.status = "fine";
  try {
    db.add_point(p, {}, {});
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("ok, oom, interrupted, failed"), std::string::npos) << e.what();
  }
  try {
    db.finish_run(run + 1, "ok", 1);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("no such run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(db.run(run)->status, "running");
}

TEST_F(ResultsDbStore, ReadOnlyHandleRefusesWrites) {
  const auto path = file("results.db");
  ResultsDb::open(path, OpenMode::read_write);
  auto db = ResultsDb::open(path, OpenMode::read_only);
  try {
    db.begin_run(sample_run());
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("read_write"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_point(sample_point(1, 0), {}, {}), DbError);
  EXPECT_THROW(db.finish_run(1, "ok", 1), DbError);
  EXPECT_THROW(db.add_device(1, {}), DbError);
}

TEST_F(ResultsDbStore, MovedHandleKeepsWorking) {
  auto a = ResultsDb::open(file("results.db"), OpenMode::read_write);
  ResultsDb b = std::move(a);
  const auto run = b.begin_run(sample_run());
  a = std::move(b);
  EXPECT_EQ(a.run(run)->status, "running");
}

// Issue 16: N processes creating the same new file at the same moment all succeed (the WAL switch and the
// schema setup wait for each other instead of failing with "database is locked").
TEST_F(ResultsDbStore, ConcurrentCreatorsOfOneNewFileAllSucceed) {
  constexpr int kProcs = 8;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto path = file("race" + std::to_string(round) + ".db");
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> kids;
    for (int k = 0; k < kProcs; ++k) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c = 0;
        if (::read(go[0], &c, 1) != 0) ::_exit(3);  // released together when the parent closes the pipe
        int code = 0;
        try {
          auto db = ResultsDb::open(path, OpenMode::read_write);
          db.begin_run(sample_run());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "creator %d: %s\n", k, e.what());
          code = 1;
        }
        ::_exit(code);
      }
      kids.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);  // go
    for (pid_t pid : kids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a creator failed (its message is above)";
    }
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    EXPECT_EQ(db.runs().size(), static_cast<std::size_t>(kProcs));
  }
}

TEST_F(ResultsDbStore, WriterKilledMidRunLeavesTheRunReadableWithItsCommittedPoints) {
  const auto path = file("results.db");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: a run writing points until it is killed; one byte down the pipe per committed point.
    ::close(fds[0]);
    int code = 0;
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      const auto run = db.begin_run(sample_run());
      const auto trace = sample_trace(20);
      for (int i = 0;; ++i) {
        db.add_point(sample_point(run, i), sample_ranges(), sample_mem(), &trace);
        const char byte = 'p';
        if (::write(fds[1], &byte, 1) != 1) break;
      }
    } catch (...) {
      code = 1;
    }
    ::_exit(code);  // never back into the test runner
  }
  ::close(fds[1]);
  int committed = 0;
  char byte = 0;
  while (committed < 3 && ::read(fds[0], &byte, 1) == 1) ++committed;
  ::kill(pid, SIGKILL);  // lands wherever the writer is, most likely inside the next point's transaction
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fds[0]);
  ASSERT_EQ(committed, 3) << "the writer failed before committing three points";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer ended by itself";

  {
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    const auto runs = db.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "abandoned") << "its process is gone";
    EXPECT_EQ(runs[0].finished_unix_ms, 0);
    const auto points = db.points(runs[0].id);
    ASSERT_GE(points.size(), 3u);
    for (std::size_t i = 0; i < points.size(); ++i) {
      SCOPED_TRACE("point " + std::to_string(i));
      auto expected = sample_point(runs[0].id, static_cast<int>(i));
      expected.id = points[i].id;
      EXPECT_EQ(points[i], expected);
      EXPECT_EQ(db.profile(points[i].id), sample_trace(20));
      EXPECT_EQ(db.ranges(points[i].id), sample_ranges());
      EXPECT_EQ(db.memory_events(points[i].id), sample_mem());
    }
  }
  // A later writer closes the dead run in the file.
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(RawDb(path).column("SELECT status FROM runs"), std::vector<std::string>{"abandoned"});
}

// ---- stale runs: a "running" run whose process is gone reads as abandoned; the next writer marks it so

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The stored status of every run, as a third party reading the file sees it.
std::vector<std::string> stored_statuses(const std::string& path) {
  return RawDb(path).column("SELECT status FROM runs ORDER BY id");
}

// A child process that begins a run with one point, says so down a pipe, then waits to be killed. Returns
// its pid once the run is committed.
pid_t start_run_in_child(const std::string& path) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      const auto run = db.begin_run(sample_run());
      db.add_point(sample_point(run, 0), sample_ranges(), sample_mem());
      const char byte = 'r';
      if (::write(fds[1], &byte, 1) != 1) ::_exit(1);
    } catch (...) {
      ::_exit(1);
    }
    for (;;) ::pause();  // never back into the test runner
  }
  ::close(fds[1]);
  char byte = 0;
  const bool ready = pid > 0 && ::read(fds[0], &byte, 1) == 1;
  ::close(fds[0]);
  if (pid > 0 && !ready) ::waitpid(pid, nullptr, 0);
  return ready ? pid : -1;
}

TEST_F(ResultsDbStaleRuns, RunOfAChildKilledBySigkillReadsAbandonedAndTheNextWriterMarksIt) {
  const auto path = file("results.db");
  const pid_t pid = start_run_in_child(path);
  ASSERT_GT(pid, 0) << "the child could not begin its run";
  {
    // While the child lives, its run is running, to readers and to another writer alike.
    auto writer = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(writer.runs().at(0).status, "running");
    EXPECT_EQ(writer.runs().at(0).writer.pid, pid);
    EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  {
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    const auto runs = db.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "abandoned");
    EXPECT_EQ(runs[0].finished_unix_ms, 0) << "a reader does not know when it ended";
    EXPECT_NE(runs[0].error.find("process " + std::to_string(pid)), std::string::npos) << runs[0].error;
    EXPECT_EQ(db.run(runs[0].id), runs[0]);
    EXPECT_EQ(db.points(runs[0].id).size(), 1u) << "its committed point stays";
  }
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"}) << "a reader changes nothing";

  const auto before = now_unix_ms();
  const auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto after = now_unix_ms();
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"abandoned"});
  const auto run = db.runs().at(0);
  EXPECT_EQ(run.status, "abandoned");
  EXPECT_GE(run.finished_unix_ms, before);
  EXPECT_LE(run.finished_unix_ms, after);
  EXPECT_NE(run.error.find("process " + std::to_string(pid)), std::string::npos) << run.error;
}

TEST_F(ResultsDbStaleRuns, LiveRunOfThisProcessStaysRunning) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto other_writer = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(other_writer.run(run)->status, "running");
  EXPECT_EQ(other_writer.run(run)->writer, moc::db::this_process());
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "running");
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
  EXPECT_EQ(moc::db::writer_state(moc::db::this_process(), moc::db::this_process()), moc::db::WriterState::alive);
}

TEST_F(ResultsDbStaleRuns, RunOfAnExitedButUnreapedChildIsAbandoned) {
  const auto path = file("results.db");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      db.begin_run(sample_run());
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);  // without finish_run
  }
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);  // a zombie now, not reaped
  ASSERT_EQ(info.si_status, 0);
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "abandoned");
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
}

TEST_F(ResultsDbStaleRuns, LivePidWithAnotherStartTimeIsAReusedPid) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  RawDb(path).exec("UPDATE runs SET process_start_ticks = process_start_ticks + 1");  // this pid, another process
  EXPECT_EQ(db.run(run)->status, "abandoned");
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"abandoned"});
}

TEST_F(ResultsDbStaleRuns, RunFromBeforeARebootOfThisHostIsAbandoned) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  RawDb(path).exec("UPDATE runs SET boot_id = 'an-earlier-boot'");
  EXPECT_EQ(db.run(run)->status, "abandoned");
  EXPECT_NE(db.run(run)->error.find("restarted"), std::string::npos) << db.run(run)->error;
}

TEST_F(ResultsDbStaleRuns, RunOfAnotherHostCannotBeCheckedAndStaysRunning) {
  const auto path = file("results.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  // The pid of a process that is surely gone, on a host that is not this one (a file from the GPU machine).
  RawDb(path).exec("UPDATE runs SET host = 'gpu-node-7', boot_id = 'its-boot', pid = 2147483000");
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "running");
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
}

TEST_F(ResultsDbStaleRuns, FinishedRunsAreNeverAbandoned) {
  const auto path = file("results.db");
  const pid_t pid = start_run_in_child(path);
  ASSERT_GT(pid, 0);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.finish_run(db.runs().at(0).id, "ok", 5);  // closed by someone before its process died
  }
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"ok"});
}

TEST_F(ResultsDbStaleRuns, FailedRunKeepsItsError) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  db.finish_run(run, "failed", 7, "'results.db': add_point: recording point 3 of run 1: database or disk is full");
  EXPECT_EQ(db.run(run)->status, "failed");
  EXPECT_EQ(db.run(run)->finished_unix_ms, 7);
  EXPECT_EQ(db.run(run)->error, "'results.db': add_point: recording point 3 of run 1: database or disk is full");
}

TEST_F(ResultsDbOpen, MissingFileIsAnErrorForReadingAndIsCreatedForWriting) {
  const auto path = file("new.db");
  try {
    ResultsDb::open(path, OpenMode::read_only);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("no such results database"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path)) << "reading created the file";
  { auto db = ResultsDb::open(path, OpenMode::read_write); }
  EXPECT_TRUE(fs::exists(path));
  const auto db = ResultsDb::open(path, OpenMode::read_only);
  EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
  EXPECT_TRUE(db.runs().empty());
}

TEST_F(ResultsDbOpen, MissingFolderIsAnErrorForWriting) {
  try {
    ResultsDb::open(file("no/such/folder/results.db"), OpenMode::read_write);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("folder"), std::string::npos) << e.what();
  }
}

TEST_F(ResultsDbOpen, EmptyFileBecomesADatabaseForWritingButIsRefusedForReading) {
  const auto path = file("empty.db");
  write_bytes(path, "");
  try {
    ResultsDb::open(path, OpenMode::read_only);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("is empty"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::file_size(path), 0u);
  auto db = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
  EXPECT_TRUE(db.runs().empty());
}

// The version 1 schema as shipped; frozen here on purpose, independent of the library's migration list.
constexpr const char* kVersion1Schema = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  scenario_name TEXT NOT NULL,
  scenario_path TEXT NOT NULL,
  scenario_text TEXT NOT NULL,
  scenario_hash TEXT NOT NULL,
  config_json TEXT NOT NULL,
  overrides_json TEXT NOT NULL,
  machine_json TEXT NOT NULL,
  device_kind TEXT NOT NULL,
  device_name TEXT NOT NULL,
  mocbench_version TEXT NOT NULL,
  started_unix_ms INTEGER NOT NULL,
  finished_unix_ms INTEGER,
  status TEXT NOT NULL
);
CREATE TABLE points (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  sweep_index INTEGER NOT NULL,
  status TEXT NOT NULL,
  error TEXT NOT NULL,
  UNIQUE (run_id, sweep_index)
);
CREATE TABLE point_axes (
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (point_id, position),
  UNIQUE (point_id, name)
);
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  value REAL,
  UNIQUE (point_id, name)
);
CREATE TABLE ops (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  kind TEXT NOT NULL, name TEXT NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  device_id INTEGER NOT NULL, stream_id INTEGER NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  registers_per_thread INTEGER NOT NULL, static_shared_bytes INTEGER NOT NULL, dynamic_shared_bytes INTEGER NOT NULL,
  range_name TEXT NOT NULL
);
CREATE INDEX ops_point ON ops(point_id);
CREATE TABLE ranges (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  name TEXT NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, depth INTEGER NOT NULL
);
CREATE INDEX ranges_point ON ranges(point_id);
CREATE TABLE memory_events (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  t_ns INTEGER NOT NULL, category TEXT NOT NULL, module TEXT NOT NULL, layer INTEGER NOT NULL, bytes INTEGER NOT NULL
);
CREATE INDEX memory_events_point ON memory_events(point_id);
)sql";

// A file as mocbench with schema version 1 left it: one finished run with one point.
void make_version1_file(const std::string& path) {
  RawDb raw(path);
  raw.exec("PRAGMA journal_mode = WAL");
  raw.exec(std::string("BEGIN;") + kVersion1Schema +
           "INSERT INTO runs VALUES (7, 'v1_scenario', 's.toml', 'text', 'h', '{}', '{}', '{\"cpu\":\"x\"}', 'cuda', "
           "'NVIDIA H200', 'v0.0.9', 1000, 2000, 'ok');"
           "INSERT INTO points VALUES (70, 7, 0, 'ok', '');"
           "INSERT INTO point_axes VALUES (70, 0, 'batch', '4'), (70, 1, 'seq', '256');"
           "INSERT INTO metrics (point_id, name, value) VALUES (70, 'median_us', 42.5);"
           "INSERT INTO ops VALUES (1, 70, 'kernel', 'gemm', 10, 20, 0, 1, 8, 1, 1, 128, 1, 1, 64, 0, 0, 'ffn.up');"
           "INSERT INTO ranges VALUES (1, 70, 'step', 5, 25, 0);"
           "INSERT INTO memory_events VALUES (1, 70, 3, 'weights', 'none', -1, 1024);"
           "PRAGMA application_id = 1297040194;"  // 0x4D4F4342, "MOCB"
           "PRAGMA user_version = 1;"
           "COMMIT;");
}

// A migrated file has exactly the shape of a new one.
void expect_shape_of_a_new_file(const std::string& migrated, const std::string& fresh) {
  ResultsDb::open(fresh, OpenMode::read_write);
  EXPECT_EQ(schema_shape(migrated), schema_shape(fresh));
}

TEST_F(ResultsDbMigration, Version1FileIsMigratedToTheCurrentVersionKeepingItsRun) {
  const auto path = file("v1.db");
  make_version1_file(path);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
  }
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), moc::db::kSchemaVersion);

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, 7);
  EXPECT_EQ(runs[0].scenario_name, "v1_scenario");
  EXPECT_EQ(runs[0].machine_json, R"({"cpu":"x"})");
  EXPECT_EQ(runs[0].status, "ok");
  EXPECT_EQ(runs[0].finished_unix_ms, 2000);
  const auto points = db.points(7);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].id, 70);
  EXPECT_EQ(points[0].mode, "") << "the point had no mode axis";
  EXPECT_EQ(points[0].axes, (std::vector<std::pair<std::string, std::string>>{{"batch", "4"}, {"seq", "256"}}));
  EXPECT_EQ(points[0].metrics, (std::vector<std::pair<std::string, double>>{{"median_us", 42.5}}));
  // Version 3 moved the op into the point's profile, its range name into an NVTX range.
  const auto profile = db.profile(70);
  ASSERT_TRUE(profile.has_value());
  ASSERT_EQ(profile->kernels.size(), 1u);
  EXPECT_EQ(profile->kernels[0].name, "gemm");
  ASSERT_EQ(profile->ranges.size(), 1u);
  EXPECT_EQ(profile->ranges[0].name, "ffn.up");
  EXPECT_EQ(profile->kernels[0].range_id, profile->ranges[0].id);
  EXPECT_EQ(db.ranges(70), (std::vector<RangeRecord>{{"step", 5, 25, 0}}));
  EXPECT_EQ(db.memory_events(70), (std::vector<MemEventRecord>{{3, "weights", "none", -1, 1024}}));
  // Version 2's devices table is back-filled from the device the version 1 run named.
  EXPECT_EQ(db.devices(7), (std::vector<DeviceRecord>{{"cuda", "NVIDIA H200", "{}"}}));
  EXPECT_TRUE(db.gpu_info(7).empty());

  expect_shape_of_a_new_file(path, file("fresh.db"));
}

// Version 2 added the devices table to version 1; frozen here as shipped.
constexpr const char* kVersion2Addition = R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL, name TEXT NOT NULL, properties_json TEXT NOT NULL
);
CREATE INDEX devices_run ON devices(run_id);
)sql";

// A file as mocbench with schema version 2 left it: two runs; points with and without a mode axis, with
// and without ops of every kind (kernel, cpu_op, memcpy, memset), in ranges and outside any.
void make_version2_file(const std::string& path) {
  RawDb raw(path);
  raw.exec("PRAGMA journal_mode = WAL");
  raw.exec(std::string("BEGIN;") + kVersion1Schema + kVersion2Addition +
           "INSERT INTO runs VALUES (7, 'v2_scenario', 's.toml', 'text', 'h', '{}', '{}', '{}', 'cuda', 'NVIDIA H200', "
           "'v0.1.0', 1000, 2000, 'ok');"
           "INSERT INTO runs VALUES (8, 'v2_cpu', 's.toml', 'text', 'h', '{}', '{}', '{}', 'cpu', 'host', "
           "'v0.1.0', 3000, NULL, 'running');"
           "INSERT INTO devices VALUES (1, 7, 'cuda', 'NVIDIA H200', '{\"sm\":\"9.0\"}');"
           "INSERT INTO points VALUES (70, 7, 0, 'ok', ''), (71, 7, 1, 'oom', 'out of memory'), (80, 8, 0, 'ok', '');"
           "INSERT INTO point_axes VALUES (70, 0, 'mode', 'decode'), (70, 1, 'batch', '4'), (71, 0, 'batch', '8'),"
           " (80, 0, 'batch', '1'), (80, 1, 'mode', 'ffn-train');"
           "INSERT INTO metrics (point_id, name, value) VALUES (70, 'median_us', 42.5);"
           // id, point, kind, name, start, end, device, stream, grid xyz, block xyz, regs, static, dynamic, range
           "INSERT INTO ops VALUES"
           " (1, 70, 'kernel', 'gemm', 10, 20, 0, 1, 8, 2, 1, 128, 1, 1, 64, 512, 1024, 'ffn.up'),"
           " (2, 70, 'memcpy', '[CUDA memcpy Host-to-Device]', 1, 4, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, ''),"
           " (3, 70, 'kernel', 'softmax', 31, 35, 0, 1, 4, 1, 1, 256, 1, 1, 32, 0, 0, 'attention'),"
           " (4, 70, 'kernel', 'gemm', 22, 30, 0, 1, 16, 1, 1, 128, 1, 1, 64, 512, 2048, 'ffn.up'),"
           " (5, 70, 'memset', 'Memset', 5, 6, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'ffn.up'),"
           " (6, 70, 'kernel', 'bias', 36, 37, 0, 2, 1, 1, 1, 32, 1, 1, 8, 0, 0, ''),"
           " (7, 80, 'cpu_op', 'ffn.gate', 100, 200, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'ffn.gate'),"
           " (8, 80, 'cpu_op', 'gemm', 210, 300, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'ffn.up');"
           "INSERT INTO ranges VALUES (1, 70, 'step', 0, 40, 0), (2, 80, 'step', 90, 310, 0);"
           "INSERT INTO memory_events VALUES (1, 70, 3, 'weights', 'none', -1, 1024);"
           "PRAGMA application_id = 1297040194;"
           "PRAGMA user_version = 2;"
           "COMMIT;");
}

// What the migration makes of a version 2 file's ops: a kernel (deviceId -1 for a CPU op, no context,
// correlation or graph: version 2 did not record them).
moc::prof::KernelRecord migrated_kernel(const std::string& name, std::int64_t start, std::int64_t end, int device,
                                        std::uint32_t stream, std::array<int, 6> launch, std::array<int, 3> regs_smem,
                                        std::int64_t range) {
  moc::prof::KernelRecord k;
  k.name = k.short_name = name;
  k.start_ns = start, k.end_ns = end, k.device_id = device, k.stream_id = stream;
  k.grid_x = launch[0], k.grid_y = launch[1], k.grid_z = launch[2];
  k.block_x = launch[3], k.block_y = launch[4], k.block_z = launch[5];
  k.registers_per_thread = regs_smem[0], k.static_shared_bytes = regs_smem[1], k.dynamic_shared_bytes = regs_smem[2];
  k.range_id = range;
  return k;
}

TEST_F(ResultsDbMigration, Version2FileWithOpsIsMigratedIntoProfiles) {
  const auto path = file("v2.db");
  make_version2_file(path);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
  }
  RawDb raw(path);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), moc::db::kSchemaVersion);
  EXPECT_TRUE(raw.column("SELECT name FROM sqlite_master WHERE name LIKE 'ops%'").empty()) << "ops is dropped";

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  const auto points = db.points(7);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].mode, "decode") << "from the point's mode axis";
  EXPECT_EQ(points[0].axes, (std::vector<std::pair<std::string, std::string>>{{"mode", "decode"}, {"batch", "4"}}));
  EXPECT_EQ(points[1].mode, "");
  EXPECT_EQ(points[1].status, "oom");
  EXPECT_EQ(db.points(8).at(0).mode, "ffn-train");
  EXPECT_EQ(db.devices(7), (std::vector<DeviceRecord>{{"cuda", "NVIDIA H200", "{\"sm\":\"9.0\"}"}}));
  EXPECT_EQ(db.ranges(70), (std::vector<RangeRecord>{{"step", 0, 40, 0}}));
  EXPECT_EQ(db.memory_events(70), (std::vector<MemEventRecord>{{3, "weights", "none", -1, 1024}}));

  // Point 70: its range names become root ranges numbered by their first op (ffn.up 0, attention 1), each
  // spanning its ops (host times = device projection), every op keeps name, times, device, stream, launch.
  ProfileTrace want;
  want.source = "v2-ops";
  want.steps = 1;
  want.start_ns = 1;
  want.end_ns = 37;
  want.kernels = {migrated_kernel("gemm", 10, 20, 0, 1, {8, 2, 1, 128, 1, 1}, {64, 512, 1024}, 0),
                  migrated_kernel("softmax", 31, 35, 0, 1, {4, 1, 1, 256, 1, 1}, {32, 0, 0}, 1),
                  migrated_kernel("gemm", 22, 30, 0, 1, {16, 1, 1, 128, 1, 1}, {64, 512, 2048}, 0),
                  migrated_kernel("bias", 36, 37, 0, 2, {1, 1, 1, 32, 1, 1}, {8, 0, 0}, -1)};
  want.memcpys = {{1, 4, 0, 0, 3, 0, 0, "HtoD", "unknown", "unknown", 0, 0, -1, 0}};
  want.memsets = {{5, 6, 0, 0, 1, 0, 0, 0, "unknown", 0, 0, 0, 0}};
  want.ranges = {{0, -1, "ffn.up", 0, 0, 5, 30, 5, 30, 3}, {1, -1, "attention", 0, 0, 31, 35, 31, 35, 1}};
  EXPECT_EQ(db.profile(70), want);
  EXPECT_FALSE(db.profile(71).has_value()) << "a point without ops has no profile";

  // Point 80 (another run, CPU ops): its range ids start again at 0; "gemm" is one StringIds row.
  ProfileTrace cpu;
  cpu.source = "v2-ops";
  cpu.steps = 1;
  cpu.start_ns = 100;
  cpu.end_ns = 300;
  cpu.kernels = {migrated_kernel("ffn.gate", 100, 200, -1, 0, {0, 0, 0, 0, 0, 0}, {0, 0, 0}, 0),
                 migrated_kernel("gemm", 210, 300, -1, 0, {0, 0, 0, 0, 0, 0}, {0, 0, 0}, 1)};
  cpu.ranges = {{0, -1, "ffn.gate", 0, 0, 100, 200, 100, 200, 1}, {1, -1, "ffn.up", 0, 0, 210, 300, 210, 300, 1}};
  EXPECT_EQ(db.profile(80), cpu);
  EXPECT_EQ(raw.column("SELECT value FROM StringIds ORDER BY id"),
            (std::vector<std::string>{"gemm", "softmax", "bias", "ffn.gate"}));

  expect_shape_of_a_new_file(path, file("fresh.db"));
}

TEST_F(ResultsDbMigration, MigratedFileTakesNewRunsAndPoints) {
  for (const bool v2 : {false, true}) {
    SCOPED_TRACE(v2 ? "version 2" : "version 1");
    const auto path = file(v2 ? "v2.db" : "v1.db");
    if (v2)
      make_version2_file(path);
    else
      make_version1_file(path);
    auto db = ResultsDb::open(path, OpenMode::read_write);
    const auto run = db.begin_run(sample_run("after", 5000));
    db.add_device(run, {"cpu", "host", "{}"});
    db.add_gpu_info(run, {0, "NVIDIA H200", 9, 0, 132, 1, 2, 3, 4, 5});
    const auto trace = sample_trace(20);
    const auto id = db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
    EXPECT_EQ(db.runs()[0].id, run);
    EXPECT_EQ(db.points(run).size(), 1u);
    EXPECT_EQ(db.devices(run).size(), 1u);
    EXPECT_EQ(db.gpu_info(run).size(), 1u);
    EXPECT_EQ(db.profile(id), trace);
  }
}

// A file as mocbench with schema version 3 left it: a new file less what version 4 added to runs and the
// table version 5 added, with a finished run and one still "running" (its process unknown to version 3).
// A trace as a file before version 7 holds it: no declared costs.
ProfileTrace without_costs(ProfileTrace t) {
  for (auto& k : t.kernels) {
    k.op.clear();
    k.op_bytes = k.op_flops = k.op_call = -1;
    k.op_bound = false;
  }
  return t;
}

// Undoes version 7 in a file written now (the declared costs on kernels, the device ceilings).
void drop_version7(RawDb& raw) {
  raw.exec("DROP TABLE DEVICE_CEILINGS");
  for (const char* column : {"opName", "opBytes", "opFlops", "opCall", "opBound"})
    raw.exec(std::string("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN ") + column);
}

void make_version3_file(const std::string& path) {
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    const auto done = db.begin_run(sample_run("v3_done", 1000));
    db.add_point(sample_point(done, 0), sample_ranges(), sample_mem());
    db.finish_run(done, "ok", 2000);
    db.begin_run(sample_run("v3_running", 3000));
  }
  RawDb raw(path);
  drop_version7(raw);
  for (const char* column : {"error", "host", "boot_id", "pid_namespace", "pid", "process_start_ticks"})
    raw.exec(std::string("ALTER TABLE runs DROP COLUMN ") + column);
  raw.exec("DROP TABLE point_series");
  raw.exec("DROP TABLE STAGE_STAMPS");
  raw.exec("ALTER TABLE profiles DROP COLUMN droppedStamps");
  raw.exec("PRAGMA user_version = 3");
}

TEST_F(ResultsDbMigration, Version4FileGainsSeriesAndKeepsItsRuns) {
  const auto path = file("v4.db");
  std::int64_t run = 0;
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    run = db.begin_run(sample_run("v4", 1000));
    db.add_point(sample_point(run, 0), sample_ranges(), sample_mem());
    db.finish_run(run, "ok", 2000);
  }
  {
    RawDb raw(path);
    drop_version7(raw);
    raw.exec("DROP TABLE point_series");
    raw.exec("DROP TABLE STAGE_STAMPS");
    raw.exec("ALTER TABLE profiles DROP COLUMN droppedStamps");
    raw.exec("PRAGMA user_version = 4");
  }
  auto db = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), moc::db::kSchemaVersion);
  ASSERT_EQ(db.points(run).size(), 1u);
  EXPECT_TRUE(db.series(db.points(run)[0].id).empty());
  const auto id = db.add_point(sample_point(run, 1), {}, {}, nullptr, {{"val_ppl", {0, 10}, {100, 50}}});
  EXPECT_EQ(db.series(id).at(0).y, (std::vector<double>{100, 50}));
  expect_shape_of_a_new_file(path, file("fresh.db"));
}

// A version 5 file with a profile: read-only, it is read as it is (no stages); opened for writing, it gains
// STAGE_STAMPS and profiles.droppedStamps; its profile reads back whole with no stages and 0 dropped stamps;
// a new profile stores its stages.
TEST_F(ResultsDbMigration, Version5FileGainsStageStampsAndKeepsItsProfiles) {
  const auto path = file("v5.db");
  std::int64_t run = 0, point = 0;
  ProfileTrace old = without_costs(sample_trace());
  old.stages.clear();
  old.dropped_stamps = 0;
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    run = db.begin_run(sample_run("v5", 1000));
    point = db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &old);
    db.finish_run(run, "ok", 2000);
  }
  {
    RawDb raw(path);
    drop_version7(raw);
    raw.exec("DROP TABLE STAGE_STAMPS");
    raw.exec("ALTER TABLE profiles DROP COLUMN droppedStamps");
    raw.exec("PRAGMA user_version = 5");
  }
  {
    // Read-only (a shared or read-only results file): read as it is, not migrated, not a byte changed.
    const std::string before = read_bytes(path);
    auto ro = ResultsDb::open(path, OpenMode::read_only);
    EXPECT_EQ(ro.schema_version(), 5);
    EXPECT_EQ(ro.profile(point), old);
    EXPECT_EQ(ro.points(run).size(), 1u);
    EXPECT_EQ(read_bytes(path), before);
  }
  auto db = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), moc::db::kSchemaVersion);
  EXPECT_EQ(db.profile(point), old);
  const ProfileTrace fresh = sample_trace();
  const auto id = db.add_point(sample_point(run, 1), {}, {}, &fresh);
  EXPECT_EQ(db.profile(id), fresh);
  expect_shape_of_a_new_file(path, file("fresh.db"));
}

TEST_F(ResultsDbMigration, Version6FileGainsDeclaredCostsAndCeilingsAndReadsAsItIs) {
  const auto path = file("v6.db");
  std::int64_t run = 0, point = 0;
  const ProfileTrace old = without_costs(sample_trace());  // what version 6 can hold
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    run = db.begin_run(sample_run("v6", 1000));
    point = db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &old);
    db.finish_run(run, "ok", 2000);
  }
  {
    RawDb raw(path);
    drop_version7(raw);
    raw.exec("PRAGMA user_version = 6");
  }
  {
    const std::string before = read_bytes(path);
    auto ro = ResultsDb::open(path, OpenMode::read_only);
    EXPECT_EQ(ro.schema_version(), 6);
    EXPECT_EQ(ro.profile(point), old);
    EXPECT_TRUE(ro.ceilings(run).empty());
    EXPECT_EQ(read_bytes(path), before);
  }
  auto db = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(db.profile(point), old) << "migrated kernels read as undeclared";
  db.add_ceilings(run, {0, "H100", 2990.0, 786.0, "bf16", 5, "measured"});
  ASSERT_EQ(db.ceilings(run).size(), 1u);
  EXPECT_EQ(db.ceilings(run)[0].copy_GBps, 2990.0);
  expect_shape_of_a_new_file(path, file("fresh.db"));
}

TEST_F(ResultsDbMigration, Version3FileIsMigratedKeepingItsRunsReadable) {
  const auto path = file("v3.db");
  make_version3_file(path);
  const std::string before = read_bytes(path);
  EXPECT_THROW(ResultsDb::open(path, OpenMode::read_only), DbError) << "read-only asks for a writer, as before";
  EXPECT_EQ(read_bytes(path), before);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
  }
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), moc::db::kSchemaVersion);

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].scenario_name, "v3_running");
  EXPECT_EQ(runs[0].status, "running") << "no process was recorded: it cannot be checked and is left as it was";
  EXPECT_EQ(runs[0].writer, moc::db::RunWriter{});
  EXPECT_EQ(runs[1].scenario_name, "v3_done");
  EXPECT_EQ(runs[1].status, "ok");
  EXPECT_EQ(runs[1].finished_unix_ms, 2000);
  EXPECT_EQ(runs[1].error, "");
  auto point = sample_point(runs[1].id, 0);
  point.id = db.points(runs[1].id).at(0).id;
  EXPECT_EQ(db.points(runs[1].id), std::vector<PointRecord>{point});
  EXPECT_EQ(db.ranges(point.id), sample_ranges());

  expect_shape_of_a_new_file(path, file("fresh.db"));
}

TEST_F(ResultsDbMigration, ReadOnlyOpenOfAVersion1FileAsksForAWriterAndChangesNothing) {
  const auto path = file("v1.db");
  make_version1_file(path);
  const std::string before = read_bytes(path);
  try {
    ResultsDb::open(path, OpenMode::read_only);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("migrate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), 1);
}

// A results file with one run of one profiled point (the files the refusal tests then damage or cut).
void write_one_profiled_point(const std::string& path) {
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(2000);
  db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
}

TEST_F(ResultsDbRefusal, NewerSchemaIsRefusedNamingItsVersionAndFileIsUntouched) {
  const auto path = file("newer.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  RawDb(path).exec("PRAGMA user_version = " + std::to_string(moc::db::kSchemaVersion + 1));
  expect_refused(path, "schema version " + std::to_string(moc::db::kSchemaVersion + 1));
  expect_refused(path, "Upgrade mocbench");
}

// Found by fuzzing: opened for writing, a negative version was "migrated" from, indexing the migrations out
// of bounds. It is refused as corrupt in both modes, the file untouched.
TEST_F(ResultsDbRefusal, NegativeSchemaVersionIsRefusedAsCorruptAndFileIsUntouched) {
  const auto path = file("negative.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  RawDb(path).exec("PRAGMA user_version = -1");
  expect_refused(path, "corrupt or truncated (its schema version is -1");
}

TEST_F(ResultsDbRefusal, TextFileIsRefusedAndUntouched) {
  const auto path = file("scenario.toml");
  write_bytes(path, "[model]\npreset = \"tiny\"\nbatch = [1, 4]\n# a scenario, not a results database\n"
                    "seq = [128, 256, 512, 1024, 2048, 4096]\nffn = [\"dense\", \"moc\"]\n");
  expect_refused(path, "not a mocbench results database");
}

TEST_F(ResultsDbRefusal, SqliteFileOfAnotherApplicationIsRefusedAndUntouched) {
  const auto path = file("other.db");
  {
    RawDb raw(path);
    raw.exec("PRAGMA application_id = 305419896; CREATE TABLE runs (x); INSERT INTO runs VALUES (1);");
  }
  expect_refused(path, "another application");
}

TEST_F(ResultsDbRefusal, SqliteFileWithUnrelatedTablesIsRefusedAndUntouched) {
  const auto path = file("unrelated.db");
  RawDb(path).exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL); INSERT INTO invoices VALUES (1, 9.5);");
  expect_refused(path, "not a mocbench results database");
  expect_refused(path, "invoices");
}

TEST_F(ResultsDbRefusal, GarbageBytesAreRefusedAndUntouched) {
  const auto path = file("garbage.db");
  std::string bytes(8192, '\0');
  std::uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_bytes(path, bytes);
  expect_refused(path, "not a mocbench results database");
}

// Issue 27: damage in the middle of a file whose header and schema are intact. A writer measured and then
// wrote a new run into it; now opening it for writing is refused (quick_check), the file untouched, while a
// reader still opens it.
TEST_F(ResultsDbRefusal, DamageInTheMiddleIsRefusedForWritingAndTheFileStaysReadable) {
  const auto path = file("damaged.db");
  write_one_profiled_point(path);
  std::string bytes = read_bytes(path);
  const std::size_t page = 4096;
  ASSERT_GT(bytes.size(), 8 * page);
  // A page in the middle overwritten with noise: the header (page 1) and the schema stay intact.
  const std::size_t at = (bytes.size() / page / 2) * page;
  std::uint32_t x = 777;
  for (std::size_t i = at; i < at + page; ++i) bytes[i] = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_bytes(path, bytes);
  try {
    ResultsDb::open(path, OpenMode::read_write);
    ADD_FAILURE() << "opened a damaged file for writing";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("is damaged"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(path), bytes) << "a refused open changed the file";
  EXPECT_NO_THROW(ResultsDb::open(path, OpenMode::read_only));
  EXPECT_EQ(read_bytes(path), bytes);
}

// Issue 27: two writers through two hard links of one file both "stored run 2" and one run was lost (each
// name gets its own -wal). A file with several names is refused for writing, untouched; readers open it.
TEST_F(ResultsDbRefusal, AFileWithSeveralNamesIsRefusedForWritingAndReadThroughAny) {
  const auto path = file("one.db"), second = file("two.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  std::filesystem::create_hard_link(path, second);
  const std::string before = read_bytes(path);
  for (const auto& name : {path, second}) {
    SCOPED_TRACE(name);
    try {
      ResultsDb::open(name, OpenMode::read_write);
      ADD_FAILURE() << "opened a file with two names for writing";
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find("2 names (hard links)"), std::string::npos) << e.what();
    }
    auto r = ResultsDb::open(name, OpenMode::read_only);
    EXPECT_EQ(r.runs().size(), 1u);
  }
  EXPECT_EQ(read_bytes(path), before);
  std::filesystem::remove(second);
  EXPECT_NO_THROW(ResultsDb::open(path, OpenMode::read_write)) << "one name again: writable";
}

// Issue 27: a results file in a folder the reader cannot write (a read-only share or mount, another user's
// folder) could not be listed, shown or opened by the dashboard: SQLite could not create the -shm a WAL
// reader needs. It now opens read-only as it is. Checked as another user when the tests run as root (root
// writes everywhere), else with the folder made read-only.
TEST_F(ResultsDbRefusal, AFileInAFolderTheReaderCannotWriteOpensReadOnly) {
  const std::filesystem::path dir = file("shared");
  std::filesystem::create_directory(dir);
  const std::string path = (dir / "results.db").string();
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  ASSERT_FALSE(std::filesystem::exists(path + "-shm")) << "a closed writer leaves no -shm";
  auto read_as_reader = [&]() -> int {
    try {
      auto r = ResultsDb::open(path, OpenMode::read_only);
      return r.runs().size() == 1 ? 0 : 3;
    } catch (const DbError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 4;
    }
  };
  const std::string before = read_bytes(path);
  if (::geteuid() == 0) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                          std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                          std::filesystem::perms::others_exec);
    ::chmod(path.c_str(), 0644);
    // The temp folder's parents must be searchable by that user too (they are: /tmp is world-searchable).
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(5);
      _exit(read_as_reader());
    }
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0) << "the reader (uid 65534) could not open the file";
  } else {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_EQ(read_as_reader(), 0);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-shm")) << "nothing was created beside it";
}

TEST_F(ResultsDbRefusal, TruncatedFileIsRefusedAndUntouched) {
  const auto path = file("results.db");
  write_one_profiled_point(path);
  const std::string whole = read_bytes(path);
  const std::size_t page = 4096;
  ASSERT_GT(whole.size(), 8 * page) << "the fixture should span many pages";
  const std::vector<std::pair<std::string, std::size_t>> cuts = {
      {"mid-page", whole.size() / 2 + 100}, {"at a page boundary", (whole.size() / page / 2) * page}, {"in the header", 60}};
  for (const auto& [where, size] : cuts) {
    SCOPED_TRACE(where);
    write_bytes(path, whole.substr(0, size));
    expect_refused(path, "corrupt or truncated");
  }
}

}  // namespace

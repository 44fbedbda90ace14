// Opening results files: missing, in a missing folder, empty; and hand-made files of schema versions 1-6
// migrated to the current one, keeping their runs readable.
#include <gtest/gtest.h>

#include "db_test_util.h"

namespace {

using namespace moc::dbtest;

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

}  // namespace

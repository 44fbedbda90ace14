// The results database: round trips, WAL and concurrent readers, all-or-nothing points, a writer killed
// mid-run, migration of a hand-made version 1 file, and refusal (file untouched) of what is not ours.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
using moc::db::MemEventRecord;
using moc::db::OpenMode;
using moc::db::OpRecord;
using moc::db::PointRecord;
using moc::db::RangeRecord;
using moc::db::ResultsDb;
using moc::db::RunRecord;

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
  p.status = "ok";
  // Deliberately not alphabetical: the order is the sweep's, and must come back as it went in.
  p.axes = {{"seq", std::to_string(128 * (index + 1))}, {"batch", std::to_string(index + 1)}, {"ffn", "moc"}};
  p.metrics = {{"tokens_per_s", 1000.5 + index}, {"median_us", 12.25}, {"peak_bytes", 3.0e9}};
  return p;
}

std::vector<OpRecord> sample_ops(int n = 2) {
  std::vector<OpRecord> ops;
  for (int i = 0; i < n; ++i) {
    OpRecord o;
    o.kind = i % 2 == 0 ? "kernel" : "memcpy";
    o.name = "moc_topk_kernel<bf16, 128>#" + std::to_string(i);
    o.start_ns = 5'000'000'000'000 + 1000 * i;  // beyond 32 bits on purpose
    o.end_ns = o.start_ns + 750;
    o.device_id = 0;
    o.stream = 7;
    o.grid_x = 132, o.grid_y = 2, o.grid_z = 1, o.block_x = 256, o.block_y = 1, o.block_z = 1;
    o.registers_per_thread = 96, o.static_shared_bytes = 1024, o.dynamic_shared_bytes = 49152;
    o.range = i % 2 == 0 ? "ffn.topk" : "";
    ops.push_back(o);
  }
  return ops;
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
    p0.id = db.add_point(p0, sample_ops(), sample_ranges(), sample_mem());
    p1.id = db.add_point(p1, {}, {}, {});
    db.finish_run(run_id, "ok", run_in.started_unix_ms + 4321);
  }

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  auto run_out = run_in;
  run_out.id = run_id;
  run_out.status = "ok";
  run_out.finished_unix_ms = run_in.started_unix_ms + 4321;
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
  EXPECT_EQ(db.ops(p0.id), sample_ops());
  EXPECT_EQ(db.ranges(p0.id), sample_ranges());
  EXPECT_EQ(db.memory_events(p0.id), sample_mem());
  EXPECT_TRUE(db.ops(p1.id).empty());
  EXPECT_TRUE(db.ranges(p1.id).empty());
  EXPECT_TRUE(db.memory_events(p1.id).empty());
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
  db.add_point(p, {}, {}, {});
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
  writer.add_point(sample_point(run, 0), sample_ops(), sample_ranges(), sample_mem());
  writer.add_point(sample_point(run, 1), sample_ops(), sample_ranges(), sample_mem());

  const auto reader = ResultsDb::open(path, OpenMode::read_only);
  EXPECT_EQ(reader.run(run)->status, "running");
  EXPECT_EQ(reader.points(run).size(), 2u);

  writer.add_point(sample_point(run, 2), sample_ops(), sample_ranges(), sample_mem());
  const auto points = reader.points(run);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(reader.ops(points[2].id), sample_ops());
  writer.finish_run(run, "ok", 1);
  EXPECT_EQ(reader.run(run)->status, "ok");
}

// Row counts of every table, to see that nothing partial was left.
std::vector<std::int64_t> row_counts(const std::string& path) {
  RawDb raw(path);
  std::vector<std::int64_t> n;
  for (const char* t : {"runs", "points", "point_axes", "metrics", "ops", "ranges", "memory_events", "devices"})
    n.push_back(raw.integer(std::string("SELECT count(*) FROM ") + t));
  return n;
}

TEST_F(ResultsDbStore, AddPointWithADuplicateIndexLeavesNoPartialRows) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto first = sample_point(run, 0);
  db.add_point(first, sample_ops(), sample_ranges(), sample_mem());
  const auto before = row_counts(path);

  auto dup = sample_point(run, 0);
  dup.axes = {{"other", "1"}};
  try {
    db.add_point(dup, sample_ops(5), sample_ranges(), sample_mem());
    FAIL() << "a second point 0 was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("UNIQUE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("point 0 of run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  auto kept = db.points(run);
  ASSERT_EQ(kept.size(), 1u);
  kept[0].id = 0;
  EXPECT_EQ(kept[0], first);
  // The connection is usable again: no transaction was left open.
  EXPECT_NO_THROW(db.add_point(sample_point(run, 1), {}, {}, {}));
}

TEST_F(ResultsDbStore, AddPointFailingAfterPartialWritesRollsBackEverything) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto before = row_counts(path);

  // The metrics are written last: the point, its axes, ops, ranges and memory events are in by then.
  auto p = sample_point(run, 0);
  p.metrics.emplace_back("median_us", 13.0);
  try {
    db.add_point(p, sample_ops(50), sample_ranges(), sample_mem());
    FAIL() << "a duplicated metric was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("metric 'median_us'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  EXPECT_TRUE(db.points(run).empty());
  p.metrics.pop_back();
  EXPECT_NO_THROW(db.add_point(p, sample_ops(50), sample_ranges(), sample_mem()));
  EXPECT_EQ(db.points(run).size(), 1u);
}

TEST_F(ResultsDbStore, PointOfAnUnknownRunIsRefusedByTheForeignKey) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  try {
    db.add_point(sample_point(42, 0), {}, {}, {});
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
    db.add_point(p, {}, {}, {});
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
  EXPECT_THROW(db.add_point(sample_point(1, 0), {}, {}, {}), DbError);
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
      for (int i = 0;; ++i) {
        db.add_point(sample_point(run, i), sample_ops(20), sample_ranges(), sample_mem());
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
    EXPECT_EQ(runs[0].status, "running");
    EXPECT_EQ(runs[0].finished_unix_ms, 0);
    const auto points = db.points(runs[0].id);
    ASSERT_GE(points.size(), 3u);
    for (std::size_t i = 0; i < points.size(); ++i) {
      SCOPED_TRACE("point " + std::to_string(i));
      auto expected = sample_point(runs[0].id, static_cast<int>(i));
      expected.id = points[i].id;
      EXPECT_EQ(points[i], expected);
      EXPECT_EQ(db.ops(points[i].id), sample_ops(20));
      EXPECT_EQ(db.ranges(points[i].id), sample_ranges());
      EXPECT_EQ(db.memory_events(points[i].id), sample_mem());
    }
  }
  // A later writer can close the dead run.
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.runs().at(0).id;
  db.finish_run(run, "interrupted", 2);
  EXPECT_EQ(db.run(run)->status, "interrupted");
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

TEST_F(ResultsDbMigration, Version1FileIsMigratedToVersion2KeepingItsRun) {
  const auto path = file("v1.db");
  make_version1_file(path);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), 2);
  }
  EXPECT_EQ(RawDb(path).integer("PRAGMA user_version"), 2);

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
  EXPECT_EQ(points[0].axes, (std::vector<std::pair<std::string, std::string>>{{"batch", "4"}, {"seq", "256"}}));
  EXPECT_EQ(points[0].metrics, (std::vector<std::pair<std::string, double>>{{"median_us", 42.5}}));
  ASSERT_EQ(db.ops(70).size(), 1u);
  EXPECT_EQ(db.ops(70)[0].name, "gemm");
  EXPECT_EQ(db.ops(70)[0].range, "ffn.up");
  EXPECT_EQ(db.ranges(70), (std::vector<RangeRecord>{{"step", 5, 25, 0}}));
  EXPECT_EQ(db.memory_events(70), (std::vector<MemEventRecord>{{3, "weights", "none", -1, 1024}}));
  // Version 2's devices table is back-filled from the device the version 1 run named.
  EXPECT_EQ(db.devices(7), (std::vector<DeviceRecord>{{"cuda", "NVIDIA H200", "{}"}}));

  // A migrated file has exactly the shape of a new one.
  const auto fresh = file("fresh.db");
  ResultsDb::open(fresh, OpenMode::read_write);
  EXPECT_EQ(schema_shape(path), schema_shape(fresh));
}

TEST_F(ResultsDbMigration, MigratedFileTakesNewRunsAndPoints) {
  const auto path = file("v1.db");
  make_version1_file(path);
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run("after", 5000));
  db.add_device(run, {"cpu", "host", "{}"});
  db.add_point(sample_point(run, 0), sample_ops(), sample_ranges(), sample_mem());
  EXPECT_EQ(db.runs().size(), 2u);
  EXPECT_EQ(db.runs()[0].id, run);
  EXPECT_EQ(db.points(run).size(), 1u);
  EXPECT_EQ(db.devices(run).size(), 1u);
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

TEST_F(ResultsDbRefusal, NewerSchemaIsRefusedNamingItsVersionAndFileIsUntouched) {
  const auto path = file("newer.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  RawDb(path).exec("PRAGMA user_version = 3");
  expect_refused(path, "schema version 3");
  expect_refused(path, "Upgrade mocbench");
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

TEST_F(ResultsDbRefusal, TruncatedFileIsRefusedAndUntouched) {
  const auto path = file("results.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    const auto run = db.begin_run(sample_run());
    db.add_point(sample_point(run, 0), sample_ops(1000), sample_ranges(), sample_mem());
  }
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

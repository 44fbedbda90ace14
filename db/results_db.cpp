// The results database on the SQLite C API. Conventions: prepared statements with every value bound (the
// only SQL built with numbers in it are PRAGMA assignments of this file's own constants, which SQLite
// cannot bind); every return code is checked; errors name the file, the operation and SQLite's message.
#include "db/results_db.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace moc::db {
namespace {

// Readers wait this long for a writer's lock (a checkpoint, a migration) instead of failing at once.
constexpr int kBusyTimeoutMs = 10'000;
// A read-only open reads a file of this version or newer as it is (no migration: it may be on a read-only
// mount); the readers skip what later versions added. Older files must be migrated by a writer first.
constexpr int kOldestReadableAsIs = 5;

// kMigrations[i] migrates schema version i to i + 1; a new file runs them all, so new and migrated files
// are the same. Append only: a step that shipped is never edited, since files in the wild went through
// it. Document every version in db/README.md.
constexpr std::array<const char*, kSchemaVersion> kMigrations = {
    // 0 -> 1: runs, points with their axis values and metrics, and what was recorded at each point.
    R"sql(
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
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  device_id INTEGER NOT NULL,
  stream_id INTEGER NOT NULL,
  grid_x INTEGER NOT NULL,
  grid_y INTEGER NOT NULL,
  grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL,
  block_y INTEGER NOT NULL,
  block_z INTEGER NOT NULL,
  registers_per_thread INTEGER NOT NULL,
  static_shared_bytes INTEGER NOT NULL,
  dynamic_shared_bytes INTEGER NOT NULL,
  range_name TEXT NOT NULL
);
CREATE INDEX ops_point ON ops(point_id);
CREATE TABLE ranges (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  depth INTEGER NOT NULL
);
CREATE INDEX ranges_point ON ranges(point_id);
CREATE TABLE memory_events (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  t_ns INTEGER NOT NULL,
  category TEXT NOT NULL,
  module TEXT NOT NULL,
  layer INTEGER NOT NULL,
  bytes INTEGER NOT NULL
);
CREATE INDEX memory_events_point ON memory_events(point_id);
)sql",
    // 1 -> 2: every device a run used (a run may use several GPUs), with its properties.
    R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  properties_json TEXT NOT NULL
);
CREATE INDEX devices_run ON devices(run_id);
-- Runs recorded before version 2 named their one device on the run row: give each its devices row.
INSERT INTO devices (run_id, kind, name, properties_json)
  SELECT id, device_kind, device_name, '{}' FROM runs WHERE device_kind <> '' ORDER BY id;
)sql",
    // 2 -> 3: a point's profile (prof::ProfileTrace) in tables named after Nsight Systems' SQLite export
    // (`nsys export --type sqlite`), the point's mode, each run's GPUs; the ops table moves into them.
    R"sql(
ALTER TABLE points ADD COLUMN mode TEXT NOT NULL DEFAULT '';
UPDATE points SET mode = (SELECT a.value FROM point_axes a WHERE a.point_id = points.id AND a.name = 'mode')
  WHERE EXISTS (SELECT 1 FROM point_axes a WHERE a.point_id = points.id AND a.name = 'mode');
CREATE TABLE StringIds (
  id INTEGER PRIMARY KEY,
  value TEXT NOT NULL UNIQUE
);
CREATE TABLE profiles (
  point_id INTEGER PRIMARY KEY REFERENCES points(id) ON DELETE CASCADE,
  source TEXT NOT NULL,
  steps INTEGER NOT NULL,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  droppedRecords INTEGER NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL,
  correlationId INTEGER NOT NULL,
  demangledName INTEGER NOT NULL REFERENCES StringIds(id),
  shortName INTEGER NOT NULL REFERENCES StringIds(id),
  gridX INTEGER NOT NULL,
  gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL,
  blockX INTEGER NOT NULL,
  blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL,
  registersPerThread INTEGER NOT NULL,
  staticSharedMemory INTEGER NOT NULL,
  dynamicSharedMemory INTEGER NOT NULL,
  graphId INTEGER NOT NULL,
  graphNodeId INTEGER NOT NULL,
  rangeId INTEGER NOT NULL,
  step INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_KERNEL_point ON CUPTI_ACTIVITY_KIND_KERNEL(point_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL,
  correlationId INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  copyKind TEXT NOT NULL,
  srcKind TEXT NOT NULL,
  dstKind TEXT NOT NULL,
  graphId INTEGER NOT NULL,
  graphNodeId INTEGER NOT NULL,
  rangeId INTEGER NOT NULL,
  step INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMCPY_point ON CUPTI_ACTIVITY_KIND_MEMCPY(point_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL,
  correlationId INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  value INTEGER NOT NULL,
  memKind TEXT NOT NULL,
  graphId INTEGER NOT NULL,
  graphNodeId INTEGER NOT NULL,
  rangeId INTEGER NOT NULL,
  step INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMSET_point ON CUPTI_ACTIVITY_KIND_MEMSET(point_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  nameId INTEGER NOT NULL REFERENCES StringIds(id),
  domain TEXT NOT NULL CHECK (domain IN ('runtime', 'driver')),
  correlationId INTEGER NOT NULL,
  globalTid INTEGER NOT NULL,
  returnValue INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_RUNTIME_point ON CUPTI_ACTIVITY_KIND_RUNTIME(point_id);
CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL,
  correlationId INTEGER NOT NULL,
  address INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  memoryOperationType TEXT NOT NULL CHECK (memoryOperationType IN ('alloc', 'free')),
  memKind TEXT NOT NULL
);
CREATE INDEX CUDA_GPU_MEMORY_USAGE_EVENTS_point ON CUDA_GPU_MEMORY_USAGE_EVENTS(point_id);
CREATE TABLE NVTX_EVENTS (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  eventType INTEGER NOT NULL,
  rangeId INTEGER NOT NULL,
  text TEXT NOT NULL,
  textId INTEGER,
  globalTid INTEGER NOT NULL,
  domainId INTEGER NOT NULL,
  parentId INTEGER NOT NULL,
  depth INTEGER NOT NULL,
  step INTEGER NOT NULL,
  projStart INTEGER NOT NULL,
  projEnd INTEGER NOT NULL,
  numGpuOps INTEGER NOT NULL
);
CREATE UNIQUE INDEX NVTX_EVENTS_point ON NVTX_EVENTS(point_id, rangeId);
CREATE TABLE ALLOCATOR_EVENTS (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  start INTEGER NOT NULL,
  category TEXT NOT NULL,
  module TEXT NOT NULL,
  layer INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  categoryLiveBytes INTEGER NOT NULL
);
CREATE INDEX ALLOCATOR_EVENTS_point ON ALLOCATOR_EVENTS(point_id);
CREATE TABLE TARGET_INFO_GPU (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  id INTEGER NOT NULL,
  name TEXT NOT NULL,
  computeMajor INTEGER NOT NULL,
  computeMinor INTEGER NOT NULL,
  smCount INTEGER NOT NULL,
  l2CacheSize INTEGER NOT NULL,
  totalMemory INTEGER NOT NULL,
  clockRate INTEGER NOT NULL,
  memoryClockRate INTEGER NOT NULL,
  busWidth INTEGER NOT NULL,
  PRIMARY KEY (run_id, id)
);
-- The ops of version 2 move into the profile tables. Each (point, non-empty range name) becomes a root
-- NVTX range spanning its ops (rangeId 0, 1, ... by first op), so no op loses its range.
INSERT INTO NVTX_EVENTS (point_id, start, end, eventType, rangeId, text, textId, globalTid, domainId, parentId,
                         depth, step, projStart, projEnd, numGpuOps)
  SELECT point_id, min(start_ns), max(end_ns), 59, row_number() OVER (PARTITION BY point_id ORDER BY min(id)) - 1,
         range_name, NULL, 0, 0, -1, 0, 0, min(start_ns), max(end_ns), count(*)
  FROM ops WHERE range_name <> '' GROUP BY point_id, range_name ORDER BY point_id, min(id);
INSERT INTO StringIds (value)
  SELECT name FROM ops WHERE kind NOT IN ('memcpy', 'memset') GROUP BY name ORDER BY min(id);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (point_id, start, end, deviceId, contextId, streamId, correlationId,
    demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory,
    dynamicSharedMemory, graphId, graphNodeId, rangeId, step)
  SELECT o.point_id, o.start_ns, o.end_ns, CASE WHEN o.kind = 'cpu_op' THEN -1 ELSE o.device_id END, 0, o.stream_id,
         0, s.id, s.id, o.grid_x, o.grid_y, o.grid_z, o.block_x, o.block_y, o.block_z, o.registers_per_thread,
         o.static_shared_bytes, o.dynamic_shared_bytes, 0, 0, coalesce(n.rangeId, -1), 0
  FROM ops o JOIN StringIds s ON s.value = o.name
       LEFT JOIN NVTX_EVENTS n ON n.point_id = o.point_id AND n.text = o.range_name
  WHERE o.kind NOT IN ('memcpy', 'memset') ORDER BY o.id;
-- Version 2 named a copy, not its kind: the kind is read from the name (nsys names copies
-- "[CUDA memcpy Host-to-Device]", CUPTI HtoD, ...).
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (point_id, start, end, deviceId, contextId, streamId, correlationId, bytes,
    copyKind, srcKind, dstKind, graphId, graphNodeId, rangeId, step)
  SELECT o.point_id, o.start_ns, o.end_ns, o.device_id, 0, o.stream_id, 0, 0,
         CASE WHEN o.name LIKE '%HtoD%' OR o.name LIKE '%Host-to-Device%' THEN 'HtoD'
              WHEN o.name LIKE '%DtoH%' OR o.name LIKE '%Device-to-Host%' THEN 'DtoH'
              WHEN o.name LIKE '%DtoD%' OR o.name LIKE '%Device-to-Device%' THEN 'DtoD'
              WHEN o.name LIKE '%HtoH%' OR o.name LIKE '%Host-to-Host%' THEN 'HtoH'
              WHEN o.name LIKE '%PtoP%' OR o.name LIKE '%Peer-to-Peer%' THEN 'PtoP'
              ELSE 'unknown' END,
         'unknown', 'unknown', 0, 0, coalesce(n.rangeId, -1), 0
  FROM ops o LEFT JOIN NVTX_EVENTS n ON n.point_id = o.point_id AND n.text = o.range_name
  WHERE o.kind = 'memcpy' ORDER BY o.id;
INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (point_id, start, end, deviceId, contextId, streamId, correlationId, bytes,
    value, memKind, graphId, graphNodeId, rangeId, step)
  SELECT o.point_id, o.start_ns, o.end_ns, o.device_id, 0, o.stream_id, 0, 0, 0, 'unknown', 0, 0,
         coalesce(n.rangeId, -1), 0
  FROM ops o LEFT JOIN NVTX_EVENTS n ON n.point_id = o.point_id AND n.text = o.range_name
  WHERE o.kind = 'memset' ORDER BY o.id;
INSERT INTO profiles (point_id, source, steps, start, end, droppedRecords)
  SELECT point_id, 'v2-ops', 1, min(start_ns), max(end_ns), 0 FROM ops GROUP BY point_id ORDER BY point_id;
DROP TABLE ops;
)sql",
    // 3 -> 4: the process that records each run (host, boot, pid namespace, pid and its start time), so a
    // run whose process died reads as "abandoned"; why a run failed or was abandoned. Runs recorded before
    // keep pid 0: their process is unknown, and they stay as they were.
    R"sql(
ALTER TABLE runs ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN pid_namespace TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN process_start_ticks INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4 -> 5: time series of a point (a training run's loss curve and validation perplexity by step, the
    // histograms of its trained activations): (x, y) pairs in order under a name. y NULL is NaN.
    R"sql(
CREATE TABLE point_series (
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  idx INTEGER NOT NULL,
  x REAL NOT NULL,
  y REAL,
  PRIMARY KEY (point_id, name, idx)
) WITHOUT ROWID;
)sql",
    // 5 -> 6: device-side stage stamps of multi-stage kernels (then the persistent decode step), one row per stage
    // of a launch, on the trace clock; stamped launches the device buffer could not hold.
    R"sql(
CREATE TABLE STAGE_STAMPS (
  id INTEGER PRIMARY KEY,
  point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  kernel INTEGER NOT NULL REFERENCES StringIds(id),
  launch INTEGER NOT NULL,
  rangeId INTEGER NOT NULL,
  layer INTEGER NOT NULL,
  stage INTEGER NOT NULL REFERENCES StringIds(id),
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  waitNs INTEGER NOT NULL
);
CREATE INDEX STAGE_STAMPS_point ON STAGE_STAMPS(point_id);
ALTER TABLE profiles ADD COLUMN droppedStamps INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6 -> 7: the roofline. What each kernel's op declared (kernels/op_cost.h): its name, the bytes it must move,
    // its FLOPs, the declaration it shares with the op's other kernels in the step, whether the bytes are an
    // upper bound (-1 / NULL: nothing declared); and each run's measured device ceilings.
    R"sql(
ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN opName INTEGER REFERENCES StringIds(id);
ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN opBytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN opFlops INTEGER NOT NULL DEFAULT -1;
ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN opCall INTEGER NOT NULL DEFAULT -1;
ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN opBound INTEGER NOT NULL DEFAULT 0;
CREATE TABLE DEVICE_CEILINGS (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  deviceId INTEGER NOT NULL,
  device TEXT NOT NULL,
  copyGBps REAL NOT NULL,
  gemmTflops REAL NOT NULL,
  gemmDtype TEXT NOT NULL,
  measuredUnixMs INTEGER NOT NULL,
  source TEXT NOT NULL,
  PRIMARY KEY (run_id, deviceId)
);
)sql",
};

// The tables a file of the current version must have.
constexpr std::array<std::string_view, 20> kTables = {
    "runs", "points", "point_axes", "metrics", "ranges", "memory_events", "devices", "TARGET_INFO_GPU", "StringIds",
    "point_series", "STAGE_STAMPS", "DEVICE_CEILINGS",
    "profiles", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS", "NVTX_EVENTS", "ALLOCATOR_EVENTS"};

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

// A failed SQLite call, with its result code so open() can tell a corrupt file from other failures.
class SqliteError : public DbError {
 public:
  SqliteError(const std::string& message, int code)
      : DbError(message, (code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED), code_(code) {}
  int primary_code() const { return code_ & 0xff; }

 private:
  int code_;
};

[[noreturn]] void fail(sqlite3* db, const std::string& path, std::string_view what) {
  throw SqliteError(in_quotes(path) + ": " + std::string(what) + ": " + sqlite3_errmsg(db),
                    sqlite3_extended_errcode(db));
}

// One prepared statement; `what` names the operation in error messages.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, const char* sql, std::string what)
      : db_(db), path_(path), what_(std::move(what)) {
    if (sqlite3_prepare_v2(db_, sql, -1, &s_, nullptr) != SQLITE_OK) fail(db_, path_, what_);
  }
  ~Stmt() { sqlite3_finalize(s_); }  // its code repeats the last step's, which was checked
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
  Stmt& bind(int i, int v) { return check(sqlite3_bind_int(s_, i, v)); }
  Stmt& bind_null(int i) { return check(sqlite3_bind_null(s_, i)); }
  // SQLite would store NaN as NULL anyway; doing it here makes that explicit (column() maps it back).
  Stmt& bind(int i, double v) {
    return check(std::isnan(v) ? sqlite3_bind_null(s_, i) : sqlite3_bind_double(s_, i, v));
  }
  Stmt& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }

  // true: a row is ready; false: done.
  bool step(std::string_view item = {}) {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, path_, item.empty() ? what_ : what_ + " (" + std::string(item) + ")");
  }
  // Runs the statement to completion and readies it for new bindings. `item` says which row failed.
  void exec(std::string_view item = {}) {
    while (step(item)) {
    }
    reset();
  }
  // exec() for one of many rows: the message (built only on failure) says "<noun> <index>".
  void exec_row(const char* noun, std::size_t index) {
    int rc;
    while ((rc = sqlite3_step(s_)) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) fail(db_, path_, what_ + " (" + noun + " " + std::to_string(index) + ")");
    reset();
  }
  // Readies a statement stepped part-way (or to the end) for new bindings.
  void reset() {
    if (sqlite3_reset(s_) != SQLITE_OK) fail(db_, path_, what_);
  }

  std::int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  int i32(int c) const { return sqlite3_column_int(s_, c); }
  bool is_null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  double f64(int c) const {
    return is_null(c) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(s_, c);
  }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    if (p == nullptr) {
      if (sqlite3_errcode(db_) == SQLITE_NOMEM) fail(db_, path_, what_);
      return {};
    }
    return {p, static_cast<std::size_t>(sqlite3_column_bytes(s_, c))};
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail(db_, path_, what_ + " (binding a value)");
    return *this;
  }
  sqlite3* db_;
  const std::string& path_;
  std::string what_;
  sqlite3_stmt* s_ = nullptr;
};

// SQLite integers are signed 64-bit: unsigned CUPTI ids are stored as their int64 value (uint64 ids above
// 2^63 as negative numbers) and read back by the inverse conversion, so they round-trip exactly.
std::int64_t u32(std::uint32_t v) { return static_cast<std::int64_t>(v); }
std::int64_t u64(std::uint64_t v) { return static_cast<std::int64_t>(v); }
std::uint32_t to_u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
std::uint64_t to_u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// BEGIN ... COMMIT, rolled back when left without commit() (an exception).
class Transaction {
 public:
  // begin_sql: "BEGIN IMMEDIATE" to write (takes the write lock now, so the transaction cannot fail
  // half-way for lack of it), "BEGIN" for a consistent snapshot across several reads.
  Transaction(sqlite3* db, const std::string& path, const char* begin_sql, std::string what)
      : db_(db), path_(path), what_(std::move(what)) {
    Stmt(db_, path_, begin_sql, "starting a transaction for " + what_).exec();
  }
  ~Transaction() {
    // Cannot throw here. Some errors roll back by themselves (hence the autocommit test); should
    // ROLLBACK itself fail, the next BEGIN fails with a DbError saying a transaction is open.
    if (!committed_ && sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    Stmt(db_, path_, "COMMIT", "committing " + what_).exec();
    committed_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  std::string what_;
  bool committed_ = false;
};

void exec_script(sqlite3* db, const std::string& path, const char* sql, const std::string& what) {
  while (sql != nullptr && *sql != '\0') {
    sqlite3_stmt* s = nullptr;
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, &tail) != SQLITE_OK) fail(db, path, what);
    if (s != nullptr) {  // null for trailing whitespace or comments
      int rc;
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      }
      sqlite3_finalize(s);
      if (rc != SQLITE_DONE) fail(db, path, what);
    }
    sql = tail;
  }
}

[[noreturn]] void refuse_not_ours(const std::string& path, const std::string& why) {
  throw DbError(in_quotes(path) + " is not a mocbench results database (" + why +
                "); nothing was changed. Pass the path of a results database, or a path that does not "
                "exist yet to create one.");
}

// PRAGMA quick_check(max): "ok", or its findings "; "-separated (an error while checking is a finding too).
std::string quick_check_verdict(sqlite3* raw, const std::string& path, int max) {
  std::string verdict;
  try {
    const std::string sql = "PRAGMA quick_check(" + std::to_string(std::max(1, max)) + ")";
    Stmt qc(raw, path, sql.c_str(), "checking the file for damage");
    while (qc.step()) verdict += (verdict.empty() ? "" : "; ") + qc.text(0);
  } catch (const SqliteError& e) {
    verdict = sqlite3_errstr(e.primary_code());  // the check itself stopped: what stopped it
  }
  return verdict.empty() ? std::string("no answer from quick_check") : verdict;
}

[[noreturn]] void refuse_corrupt(const std::string& path, const std::string& why) {
  throw DbError(in_quotes(path) + " is corrupt or truncated (" + why +
                "); nothing was changed. Restore it from a copy, or pass another path.");
}

[[noreturn]] void refuse_newer(const std::string& path, int version) {
  throw DbError(in_quotes(path) + " was written by a newer mocbench (schema version " + std::to_string(version) +
                "; this mocbench knows versions up to " + std::to_string(kSchemaVersion) +
                "); nothing was changed. Upgrade mocbench to read it.");
}

// What SQLite would find late or never: a file that is not SQLite at all, or one cut short (SQLite
// reads a file shorter than one page as an empty database, which a writer would then initialise).
void check_file_header(const std::string& path, std::uintmax_t size) {
  if (size == 0) return;  // an empty file is an empty SQLite database: it becomes a new results database
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 100> h{};
  in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size()));
  const auto got = in.gcount();
  if (!in && !in.eof()) throw DbError(in_quotes(path) + ": cannot be read (check its permissions)");
  static constexpr char kMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};
  if (got < 16 || std::memcmp(h.data(), kMagic, sizeof kMagic) != 0)
    refuse_not_ours(path, "it is not an SQLite file: it does not start with the SQLite header");
  if (got < 100) refuse_corrupt(path, "it is shorter than the 100-byte SQLite header");
  std::uint32_t page = (static_cast<std::uint32_t>(h[16]) << 8) | h[17];
  if (page == 1) page = 65536;
  if (page < 512 || page > 65536 || (page & (page - 1)) != 0)
    refuse_corrupt(path, "its header names an impossible page size");
  // SQLite only ever writes whole pages, WAL mode included.
  if (size % page != 0)
    refuse_corrupt(path, std::to_string(size) + " bytes is not a whole number of " + std::to_string(page) +
                             "-byte pages");
}

struct FileState {
  std::int32_t application_id = 0;
  int version = 0;
  std::vector<std::string> tables;
  bool blank() const { return application_id == 0 && version == 0 && tables.empty(); }
};

FileState inspect(sqlite3* db, const std::string& path) {
  // One snapshot for the three reads (unless the caller's transaction is one already): between two separate
  // reads another process creating the file could commit its schema, and a half-made file would look
  // foreign (tables but no application id yet).
  std::optional<Transaction> tx;
  if (sqlite3_get_autocommit(db) != 0) tx.emplace(db, path, "BEGIN", "reading the file's identity");
  FileState s;
  {
    Stmt q(db, path, "PRAGMA application_id", "reading the application id");
    if (q.step()) s.application_id = q.i32(0);
  }
  {
    Stmt q(db, path, "PRAGMA user_version", "reading the schema version");
    if (q.step()) s.version = q.i32(0);
  }
  Stmt q(db, path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
         "listing the tables");
  while (q.step()) s.tables.push_back(q.text(0));
  q.reset();
  if (tx) tx->commit();
  return s;
}

std::string hex32(std::int32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}

// Refuses what this build must not write or read; returns normally for a blank file or one of ours.
void check_ours(const std::string& path, const FileState& s, OpenMode mode) {
  if (s.blank()) {
    if (mode == OpenMode::read_only)
      throw DbError(in_quotes(path) + " is empty: no run was recorded into it yet (nothing was changed)");
    return;
  }
  if (s.application_id == 0) {
    std::string names;
    for (const auto& t : s.tables) names += (names.empty() ? "" : ", ") + t;
    refuse_not_ours(path, "an SQLite file without mocbench's application id" +
                              (names.empty() ? std::string() : ", with tables " + names));
  }
  if (s.application_id != kApplicationId)
    refuse_not_ours(path, "an SQLite file of another application: application_id " + hex32(s.application_id) +
                              ", mocbench's is " + hex32(kApplicationId) + " \"MOCB\"");
  if (s.version > kSchemaVersion) refuse_newer(path, s.version);
  // No mocbench wrote a negative version; migrating from one would index the migrations out of bounds.
  if (s.version < 0) refuse_corrupt(path, "its schema version is " + std::to_string(s.version));
  if (s.version < kSchemaVersion) {
    // Version 5 lacks only what version 6 added (the stage stamps): read as it is, without them.
    if (mode == OpenMode::read_only && s.version >= kOldestReadableAsIs) {
      for (const auto t : kTables) {
        if (t == "STAGE_STAMPS" && s.version < 6) continue;
        if (t == "DEVICE_CEILINGS") continue;
        bool found = false;
        for (const auto& have : s.tables) found = found || have == t;
        if (!found) refuse_corrupt(path, "table " + std::string(t) + " is missing");
      }
      return;
    }
    if (mode == OpenMode::read_only)
      throw DbError(in_quotes(path) + " has schema version " + std::to_string(s.version) + " and this mocbench reads version " +
                    std::to_string(kSchemaVersion) +
                    "; nothing was changed. Open it once for writing (any mocbench command that records into it) "
                    "to migrate it in place.");
    return;
  }
  for (const auto t : kTables) {
    bool found = false;
    for (const auto& have : s.tables) found = found || have == t;
    if (!found) refuse_corrupt(path, "table " + std::string(t) + " is missing");
  }
}

// Brings a blank or older file to kSchemaVersion in one transaction.
void migrate(sqlite3* db, const std::string& path) {
  Transaction tx(db, path, "BEGIN IMMEDIATE", "the schema migration");
  // Look again under the write lock: another writer may have migrated the file since.
  const FileState s = inspect(db, path);
  if (!s.blank()) check_ours(path, s, OpenMode::read_write);
  if (s.version == kSchemaVersion) return;  // done by someone else; nothing to commit
  for (int v = s.version; v < kSchemaVersion; ++v)
    exec_script(db, path, kMigrations[static_cast<std::size_t>(v)],
                "migrating schema version " + std::to_string(v) + " to " + std::to_string(v + 1));
  // PRAGMA arguments cannot be bound; these are constants of this file.
  exec_script(db, path, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str(),
              "setting the application id");
  exec_script(db, path, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str(),
              "setting the schema version");
  tx.commit();
}

void check_one_of(const std::string& path, const std::string& value, std::initializer_list<std::string_view> allowed,
                  const std::string& what) {
  std::string list;
  for (const auto a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw DbError(in_quotes(path) + ": " + what + " '" + value + "' is not one of " + list);
}

RunWriter read_writer(const Stmt& q, int first_column) {
  RunWriter w;
  w.host = q.text(first_column);
  w.boot_id = q.text(first_column + 1);
  w.pid_namespace = q.text(first_column + 2);
  w.pid = q.i64(first_column + 3);
  w.start_ticks = q.i64(first_column + 4);
  return w;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why a run of `w` is abandoned (writer_state(w, here) == gone), for RunRecord::error.
std::string abandoned_because(const RunWriter& w, const RunWriter& here) {
  const std::string process = "process " + std::to_string(w.pid) + " on " + w.host;
  if (w.boot_id != here.boot_id) return process + " ended when the host restarted, before finishing the run";
  return process + " ended without finishing the run (killed, out of memory, or crashed)";
}

// A "running" run whose process is gone reads as abandoned. `here` is looked up on first need.
void report_abandoned(RunRecord& r, std::optional<RunWriter>& here) {
  if (r.status != "running" || r.writer.pid == 0) return;
  if (!here) here = this_process();
  if (writer_state(r.writer, *here) != WriterState::gone) return;
  r.status = "abandoned";
  r.error = abandoned_because(r.writer, *here);
}

// The next writer records what readers infer, so the file itself says so (to a copy read on another host
// too). Once gone a process never comes back, so looking before the write lock is safe; a run finished
// meanwhile is left alone.
void mark_abandoned(sqlite3* db, const std::string& path) {
  std::vector<std::pair<std::int64_t, std::string>> dead;  // run id, why
  {
    Stmt q(db, path,
           "SELECT id, host, boot_id, pid_namespace, pid, process_start_ticks FROM runs "
           "WHERE status = 'running' AND pid <> 0 ORDER BY id",
           "looking for runs whose process is gone");
    std::optional<RunWriter> here;
    while (q.step()) {
      const RunWriter w = read_writer(q, 1);
      if (!here) here = this_process();
      if (writer_state(w, *here) == WriterState::gone) dead.emplace_back(q.i64(0), abandoned_because(w, *here));
    }
  }
  if (dead.empty()) return;
  Transaction tx(db, path, "BEGIN IMMEDIATE", "marking abandoned runs");
  Stmt u(db, path,
         "UPDATE runs SET status = 'abandoned', finished_unix_ms = ?, error = ? WHERE id = ? AND status = 'running'",
         "marking abandoned runs");
  const std::int64_t now = now_unix_ms();
  for (const auto& [id, why] : dead) u.bind(1, now).bind(2, why).bind(3, id).exec("run " + std::to_string(id));
  tx.commit();
}

constexpr const char* kRunColumns =
    "id, scenario_name, scenario_path, scenario_text, scenario_hash, config_json, overrides_json, machine_json, "
    "device_kind, device_name, mocbench_version, started_unix_ms, finished_unix_ms, status, error, "
    "host, boot_id, pid_namespace, pid, process_start_ticks";

RunRecord read_run(const Stmt& q) {
  RunRecord r;
  r.id = q.i64(0);
  r.scenario_name = q.text(1);
  r.scenario_path = q.text(2);
  r.scenario_text = q.text(3);
  r.scenario_hash = q.text(4);
  r.config_json = q.text(5);
  r.overrides_json = q.text(6);
  r.machine_json = q.text(7);
  r.device_kind = q.text(8);
  r.device_name = q.text(9);
  r.mocbench_version = q.text(10);
  r.started_unix_ms = q.i64(11);
  r.finished_unix_ms = q.is_null(12) ? 0 : q.i64(12);
  r.status = q.text(13);
  r.error = q.text(14);
  r.writer = read_writer(q, 15);
  return r;
}

// StringIds while a point is written: each distinct name is looked up (or inserted) once per point, then
// served from memory (kernel names repeat millions of times). Keys view the caller's strings, which outlive
// it. Per point on purpose: a point rolled back takes its new StringIds rows with it.
class StringIdWriter {
 public:
  StringIdWriter(sqlite3* db, const std::string& path, const std::string& of)
      : db_(db),
        find_(db, path, "SELECT id FROM StringIds WHERE value = ?", "add_point: looking up a name" + of),
        insert_(db, path, "INSERT INTO StringIds (value) VALUES (?)", "add_point: recording a name" + of) {}
  std::int64_t id(const std::string& value) {
    if (const auto it = ids_.find(value); it != ids_.end()) return it->second;
    find_.bind(1, value);
    std::int64_t id = 0;
    if (find_.step(value)) {
      id = find_.i64(0);
      find_.reset();
    } else {
      find_.reset();
      insert_.bind(1, value).exec(value);
      id = sqlite3_last_insert_rowid(db_);
    }
    ids_.emplace(std::string_view(value), id);
    return id;
  }

 private:
  sqlite3* db_;
  Stmt find_, insert_;
  std::unordered_map<std::string_view, std::int64_t> ids_;
};

// StringIds while a profile is read: each id is read once.
class StringIdReader {
 public:
  StringIdReader(sqlite3* db, const std::string& path, const std::string& of)
      : path_(path),
        q_(db, path, "SELECT value FROM StringIds WHERE id = ?", "profile: reading a name" + of),
        of_(of) {}
  const std::string& value(std::int64_t id) {
    if (const auto it = values_.find(id); it != values_.end()) return it->second;
    q_.bind(1, id);
    if (!q_.step())
      throw DbError(in_quotes(path_) + ": profile: a record" + of_ + " names string id " + std::to_string(id) +
                    ", which StringIds does not have");
    std::string v = q_.text(0);
    q_.reset();
    return values_.emplace(id, std::move(v)).first->second;
  }

 private:
  const std::string& path_;
  Stmt q_;
  std::string of_;
  std::unordered_map<std::int64_t, std::string> values_;
};

// nsys's NVTX_EVENTS.eventType of a push/pop range (NvtxPushPopRange).
constexpr int kNvtxPushPopRange = 59;

void write_trace(sqlite3* db, const std::string& path, std::int64_t point_id, const prof::ProfileTrace& t,
                 const std::string& of) {
  Stmt(db, path,
       "INSERT INTO profiles (point_id, source, steps, start, end, droppedRecords, droppedStamps) "
       "VALUES (?, ?, ?, ?, ?, ?, ?)",
       "add_point: recording the profile" + of)
      .bind(1, point_id)
      .bind(2, t.source)
      .bind(3, t.steps)
      .bind(4, t.start_ns)
      .bind(5, t.end_ns)
      .bind(6, u64(t.dropped_records))
      .bind(7, u64(t.dropped_stamps))
      .exec();
  StringIdWriter names(db, path, of);
  {
    Stmt q(db, path,
           "INSERT INTO STAGE_STAMPS (point_id, step, kernel, launch, rangeId, layer, stage, start, end, waitNs) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the stage stamps" + of);
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      const auto& g = t.stages[i];
      q.bind(1, point_id).bind(2, g.step).bind(3, names.id(g.kernel)).bind(4, g.launch).bind(5, g.range_id);
      q.bind(6, g.layer).bind(7, names.id(g.stage)).bind(8, g.start_ns).bind(9, g.end_ns).bind(10, g.wait_ns);
      q.exec_row("stage stamp", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (point_id, start, end, deviceId, contextId, streamId, "
           "correlationId, "
           "demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
           "staticSharedMemory, dynamicSharedMemory, graphId, graphNodeId, rangeId, step, opName, opBytes, "
           "opFlops, opCall, opBound) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the kernels" + of);
    for (std::size_t i = 0; i < t.kernels.size(); ++i) {
      const auto& k = t.kernels[i];
      const std::int64_t name = names.id(k.name), short_name = names.id(k.short_name);
      q.bind(1, point_id).bind(2, k.start_ns).bind(3, k.end_ns).bind(4, k.device_id).bind(5, u32(k.context_id));
      q.bind(6, u32(k.stream_id)).bind(7, u32(k.correlation_id)).bind(8, name).bind(9, short_name);
      q.bind(10, k.grid_x).bind(11, k.grid_y).bind(12, k.grid_z).bind(13, k.block_x).bind(14, k.block_y);
      q.bind(15, k.block_z).bind(16, k.registers_per_thread).bind(17, k.static_shared_bytes);
      q.bind(18, k.dynamic_shared_bytes).bind(19, u32(k.graph_id)).bind(20, u64(k.graph_node_id));
      q.bind(21, k.range_id).bind(22, k.step);
      if (k.op.empty()) q.bind_null(23);
      else q.bind(23, names.id(k.op));
      q.bind(24, k.op_bytes).bind(25, k.op_flops).bind(26, k.op_call).bind(27, k.op_bound ? 1 : 0);
      q.exec_row("kernel", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (point_id, start, end, deviceId, contextId, streamId, "
           "correlationId, "
           "bytes, copyKind, srcKind, dstKind, graphId, graphNodeId, rangeId, step) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the memcpys" + of);
    for (std::size_t i = 0; i < t.memcpys.size(); ++i) {
      const auto& m = t.memcpys[i];
      q.bind(1, point_id).bind(2, m.start_ns).bind(3, m.end_ns).bind(4, m.device_id).bind(5, u32(m.context_id));
      q.bind(6, u32(m.stream_id)).bind(7, u32(m.correlation_id)).bind(8, m.bytes).bind(9, m.copy_kind);
      q.bind(10, m.src_kind).bind(11, m.dst_kind).bind(12, u32(m.graph_id)).bind(13, u64(m.graph_node_id));
      q.bind(14, m.range_id).bind(15, m.step).exec_row("memcpy", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (point_id, start, end, deviceId, contextId, streamId, "
           "correlationId, "
           "bytes, value, memKind, graphId, graphNodeId, rangeId, step) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the memsets" + of);
    for (std::size_t i = 0; i < t.memsets.size(); ++i) {
      const auto& m = t.memsets[i];
      q.bind(1, point_id).bind(2, m.start_ns).bind(3, m.end_ns).bind(4, m.device_id).bind(5, u32(m.context_id));
      q.bind(6, u32(m.stream_id)).bind(7, u32(m.correlation_id)).bind(8, m.bytes).bind(9, m.value);
      q.bind(10, m.mem_kind).bind(11, u32(m.graph_id)).bind(12, u64(m.graph_node_id)).bind(13, m.range_id);
      q.bind(14, m.step).exec_row("memset", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (point_id, start, end, nameId, domain, correlationId, globalTid, "
           "returnValue) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the CUDA API calls" + of);
    for (std::size_t i = 0; i < t.api.size(); ++i) {
      const auto& a = t.api[i];
      const std::int64_t name = names.id(a.name);
      q.bind(1, point_id).bind(2, a.start_ns).bind(3, a.end_ns).bind(4, name).bind(5, a.domain);
      q.bind(6, u32(a.correlation_id)).bind(7, u32(a.thread_id)).bind(8, a.return_value).exec_row("API call", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (point_id, start, deviceId, contextId, streamId, correlationId, "
           "address, bytes, memoryOperationType, memKind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the device memory events" + of);
    const std::string alloc = "alloc", free = "free";
    for (std::size_t i = 0; i < t.device_memory.size(); ++i) {
      const auto& m = t.device_memory[i];
      q.bind(1, point_id).bind(2, m.t_ns).bind(3, m.device_id).bind(4, u32(m.context_id)).bind(5, u32(m.stream_id));
      q.bind(6, u32(m.correlation_id)).bind(7, u64(m.address)).bind(8, m.bytes).bind(9, m.is_alloc ? alloc : free);
      q.bind(10, m.mem_kind).exec_row("device memory event", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO NVTX_EVENTS (point_id, start, end, eventType, rangeId, text, textId, globalTid, domainId, "
           "parentId, depth, step, projStart, projEnd, numGpuOps) "
           "VALUES (?, ?, ?, ?, ?, ?, NULL, 0, 0, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the phase ranges" + of);
    for (std::size_t i = 0; i < t.ranges.size(); ++i) {
      const auto& r = t.ranges[i];
      q.bind(1, point_id).bind(2, r.host_start_ns).bind(3, r.host_end_ns).bind(4, kNvtxPushPopRange).bind(5, r.id);
      q.bind(6, r.name).bind(7, r.parent_id).bind(8, r.depth).bind(9, r.step).bind(10, r.start_ns).bind(11, r.end_ns);
      q.bind(12, r.ops).exec_row("phase range", i);
    }
  }
  {
    Stmt q(db, path,
           "INSERT INTO ALLOCATOR_EVENTS (point_id, start, category, module, layer, bytes, categoryLiveBytes) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)",
           "add_point: recording the allocator events" + of);
    for (std::size_t i = 0; i < t.allocator.size(); ++i) {
      const auto& e = t.allocator[i];
      q.bind(1, point_id).bind(2, e.t_ns).bind(3, e.category).bind(4, e.module).bind(5, e.layer).bind(6, e.bytes);
      q.bind(7, e.category_live_bytes).exec_row("allocator event", i);
    }
  }
}

// /proc/<pid>/stat: the process's state (field 3) and start time (field 22, clock ticks since boot).
struct ProcStat {
  char state = '?';
  std::int64_t start_ticks = 0;
};

std::optional<ProcStat> proc_stat(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // Field 2 is the command name in parentheses, which may itself hold spaces and ')': fields 3... follow
  // the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcStat st;
  std::string skip;
  fields >> st.state;
  for (int field = 4; field < 22; ++field) fields >> skip;
  fields >> st.start_ticks;
  if (!fields) return std::nullopt;
  return st;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

RunWriter this_process() {
  RunWriter w;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) w.host = host.data();
  w.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  std::error_code ec;
  w.pid_namespace = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  w.pid = ::getpid();
  if (const auto st = proc_stat(w.pid)) w.start_ticks = st->start_ticks;
  return w;
}

WriterState writer_state(const RunWriter& w, const RunWriter& here) {
  // Only a process of this host can be looked up; a run from another host (a file copied from the GPU
  // machine) keeps its status.
  if (w.pid <= 0 || w.host.empty() || w.host != here.host) return WriterState::unknown;
  if (!w.boot_id.empty() && !here.boot_id.empty() && w.boot_id != here.boot_id) return WriterState::gone;
  // Pids name processes within one boot and one pid namespace (a container sharing the host's name does not
  // see the host's pids); without a start time a reused pid cannot be told from the writer.
  if (w.boot_id.empty() || w.boot_id != here.boot_id || w.pid_namespace != here.pid_namespace ||
      w.start_ticks == 0 || w.pid > std::numeric_limits<pid_t>::max())
    return WriterState::unknown;
  // kill(pid, 0) sees a process even where /proc hides other users' (hidepid); EPERM means it exists.
  if (::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH) return WriterState::gone;
  const auto st = proc_stat(w.pid);
  if (!st) return WriterState::unknown;  // hidden by /proc, or it ended just now (the next look tells)
  // Another start time: the pid was reused. A zombie (killed, not yet reaped) writes nothing more.
  if (st->start_ticks != w.start_ticks || st->state == 'Z' || st->state == 'X') return WriterState::gone;
  return WriterState::alive;
}

void ResultsDb::Closer::operator()(sqlite3* db) const noexcept {
  // close_v2 cannot fail for a valid handle (it defers while statements are alive; ours are all scoped).
  sqlite3_close_v2(db);
}

ResultsDb::ResultsDb(std::unique_ptr<sqlite3, Closer> db, std::string path, OpenMode mode, int version)
    : db_(std::move(db)), path_(std::move(path)), mode_(mode), schema_version_(version) {}
ResultsDb::~ResultsDb() = default;
ResultsDb::ResultsDb(ResultsDb&&) noexcept = default;
ResultsDb& ResultsDb::operator=(ResultsDb&&) noexcept = default;

ResultsDb ResultsDb::open(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  const bool writing = mode == OpenMode::read_write;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  const bool exists = st.type() != fs::file_type::not_found;
  if (exists && ec) throw DbError(in_quotes(path) + ": cannot be inspected: " + ec.message());
  if (!exists && !writing)
    throw DbError(in_quotes(path) + ": no such results database (check the path; a run creates the file)");
  if (exists) {
    if (!fs::is_regular_file(st)) throw DbError(in_quotes(path) + " is not a regular file");
    const auto size = fs::file_size(path, ec);
    if (ec) throw DbError(in_quotes(path) + ": cannot be inspected: " + ec.message());
    check_file_header(path, size);
    // SQLite keeps a -wal and -shm beside each *name* of a file: two writers reaching one file through two
    // hard links do not see each other's locks or log, and one run is lost with the file reading as whole.
    const auto links = fs::hard_link_count(path, ec);
    if (writing && !ec && links > 1)
      throw DbError(in_quotes(path) + " has " + std::to_string(links) +
                    " names (hard links): SQLite locks each name apart, so writers through two names would lose "
                    "runs; nothing was changed. Write through one name (replace the others by symbolic links), "
                    "or give the run another file; reading through any name works.");
  }

  sqlite3* raw = nullptr;
  // NOMUTEX: a ResultsDb is used from one thread at a time (results_db.h), so SQLite need not lock the
  // connection around every call (a million-kernel profile makes tens of millions of them).
  int flags = (writing ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READONLY) | SQLITE_OPEN_NOMUTEX;
  // A reader of a WAL file needs its -shm (and -wal) beside it, created if missing: in a folder this process
  // cannot write (a read-only share or mount, another user's folder) that fails with "unable to open
  // database file". Without those files no writer is at work, so the file is opened as immutable (read as it
  // is, no lock files). Where they exist, SQLite reads them as they are.
  std::string target = path;
  if (!writing && exists) {
    const fs::path dir = fs::absolute(path, ec).parent_path();
    const bool dir_writable = !ec && ::access(dir.c_str(), W_OK) == 0;
    if (!dir_writable && (!fs::exists(path + "-shm", ec) || !fs::exists(path + "-wal", ec))) {
      std::string uri = "file:";
      for (const unsigned char c : fs::absolute(path, ec).string()) {
        if (std::isalnum(c) || std::strchr("/-_.~", c) != nullptr) {
          uri += static_cast<char>(c);
        } else {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02X", c);
          uri += hex;
        }
      }
      target = uri + "?immutable=1";
      flags |= SQLITE_OPEN_URI;
    }
  }
  const int rc = sqlite3_open_v2(target.c_str(), &raw, flags, nullptr);
  std::unique_ptr<sqlite3, Closer> db(raw);  // closed on every path out, failure included
  if (rc != SQLITE_OK) {
    // SQLite's own limit on a path (SQLITE_MAX_PATHNAME, 512 bytes by default, which its "-journal" / "-wal"
    // names must fit too): name it rather than guess at the folder.
    const std::size_t full = std::filesystem::absolute(path).string().size();
    const bool too_long = full >= 500;
    throw DbError(in_quotes(path) + ": cannot " + (writing ? "open or create" : "open") + " the database: " +
                  (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)) +
                  (too_long ? " (its full path is " + std::to_string(full) +
                                  " bytes, at SQLite's limit of 512 with its -journal / -wal names: use a shorter path)"
                   : writing ? " (does its folder exist, and is it writable?)"
                             : ""));
  }
  if (sqlite3_extended_result_codes(raw, 1) != SQLITE_OK) fail(raw, path, "enabling extended result codes");
  // A refused open must leave the file as it was: a WAL left by another process (a writer that died) is
  // not checkpointed into it when this connection closes, until the file is known to be ours. Without
  // such a WAL there is nothing to checkpoint, and closing normally tidies up the -wal/-shm files.
  const bool foreign_wal = exists && fs::file_size(path + "-wal", ec) > 0 && !ec;
  if (foreign_wal && sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr) != SQLITE_OK)
    fail(raw, path, "configuring the connection");
  if (sqlite3_busy_timeout(raw, kBusyTimeoutMs) != SQLITE_OK) fail(raw, path, "setting the busy timeout");
  if (writing && sqlite3_db_readonly(raw, "main") == 1)
    throw DbError(in_quotes(path) + " cannot be written (check its permissions); open it read-only to read it");

  FileState state;
  try {
    state = inspect(raw, path);
  } catch (const SqliteError& e) {
    if (e.primary_code() == SQLITE_CORRUPT || e.primary_code() == SQLITE_NOTADB)
      refuse_corrupt(path, sqlite3_errstr(e.primary_code()));
    throw;
  }
  check_ours(path, state, mode);
  // Damage inside a file whose header and schema are intact (a bad sector, a copy cut and patched, bytes
  // overwritten) is found only where SQLite reads it: a writer would measure for hours and then add a run on
  // top of it. Before writing, SQLite's quick check reads every page (its cost: about a second per GB).
  // Readers skip it: a damaged file stays readable where it still can be.
  if (writing && !state.blank()) {
    const std::string verdict = quick_check_verdict(raw, path, 3);
    if (verdict != "ok")
      throw DbError(in_quotes(path) + " is damaged (SQLite's quick_check: " + verdict +
                    "); nothing was changed, and nothing will be written to it. Its runs may still be read "
                    "(`mocbench list` / `show` open it read-only); record new runs in another file.");
  }

  // From here on the file is blank or ours: changing it is allowed.
  if (writing) {
    // Switching to WAL needs an exclusive lock, and SQLite does not call the busy handler where waiting could
    // deadlock: processes creating one new file at the same moment see "database is locked". Retry (with a
    // growing, jittered pause) for as long as the busy timeout.
    std::string journal;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    for (int attempt = 0;; ++attempt) {
      try {
        Stmt wal(raw, path, "PRAGMA journal_mode = WAL", "switching to WAL mode");
        journal = wal.step() ? wal.text(0) : std::string();
        break;
      } catch (const SqliteError& e) {  // the statement is finalized: it would block the migration's COMMIT
        if (e.primary_code() != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline) throw;
        const int pause_us = (500 << std::min(attempt, 5)) + static_cast<int>(::getpid() % 7) * 150;
        std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
      }
    }
    if (journal != "wal")
      throw DbError(in_quotes(path) + ": cannot switch to WAL mode (journal mode stays '" + journal +
                    "'); WAL needs a local filesystem with shared memory, not a network share");
    Stmt(raw, path, "PRAGMA foreign_keys = ON", "enabling foreign keys").exec();
    if (state.blank() || state.version < kSchemaVersion) migrate(raw, path);
    mark_abandoned(raw, path);
    if (foreign_wal && sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr) != SQLITE_OK)
      fail(raw, path, "configuring the connection");
  }
  return ResultsDb(std::move(db), path, mode, writing || state.blank() ? kSchemaVersion : state.version);
}

void ResultsDb::require_writable(const char* operation) const {
  if (mode_ != OpenMode::read_write)
    throw DbError(in_quotes(path_) + ": " + operation + " needs the database opened with OpenMode::read_write");
}

std::int64_t ResultsDb::begin_run(const RunRecord& r) {
  require_writable("begin_run");
  Stmt q(db_.get(), path_,
         "INSERT INTO runs (scenario_name, scenario_path, scenario_text, scenario_hash, config_json, overrides_json, "
         "machine_json, device_kind, device_name, mocbench_version, started_unix_ms, finished_unix_ms, status, "
         "host, boot_id, pid_namespace, pid, process_start_ticks) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)",
         "begin_run: recording run '" + r.scenario_name + "'");
  q.bind(1, r.scenario_name).bind(2, r.scenario_path).bind(3, r.scenario_text).bind(4, r.scenario_hash);
  q.bind(5, r.config_json).bind(6, r.overrides_json).bind(7, r.machine_json).bind(8, r.device_kind);
  q.bind(9, r.device_name).bind(10, r.mocbench_version).bind(11, r.started_unix_ms).bind(12, std::string("running"));
  const RunWriter w = this_process();
  q.bind(13, w.host).bind(14, w.boot_id).bind(15, w.pid_namespace).bind(16, w.pid).bind(17, w.start_ticks);
  q.exec();
  return sqlite3_last_insert_rowid(db_.get());
}

void ResultsDb::finish_run(std::int64_t run_id, const std::string& status, std::int64_t finished_unix_ms,
                           const std::string& error) {
  require_writable("finish_run");
  check_one_of(path_, status, {"ok", "interrupted", "failed"}, "finish_run: status");
  const std::string what = "finish_run: closing run " + std::to_string(run_id);
  Stmt q(db_.get(), path_, "UPDATE runs SET status = ?, finished_unix_ms = ?, error = ? WHERE id = ?", what);
  q.bind(1, status).bind(2, finished_unix_ms).bind(3, error).bind(4, run_id).exec();
  if (sqlite3_changes(db_.get()) != 1) throw DbError(in_quotes(path_) + ": " + what + ": there is no such run");
}

void ResultsDb::add_device(std::int64_t run_id, const DeviceRecord& d) {
  require_writable("add_device");
  Stmt q(db_.get(), path_, "INSERT INTO devices (run_id, kind, name, properties_json) VALUES (?, ?, ?, ?)",
         "add_device: recording device '" + d.name + "' of run " + std::to_string(run_id));
  q.bind(1, run_id).bind(2, d.kind).bind(3, d.name).bind(4, d.properties_json).exec();
}

void ResultsDb::add_gpu_info(std::int64_t run_id, const GpuInfoRecord& g) {
  require_writable("add_gpu_info");
  Stmt q(db_.get(), path_,
         "INSERT INTO TARGET_INFO_GPU (run_id, id, name, computeMajor, computeMinor, smCount, l2CacheSize, "
         "totalMemory, clockRate, memoryClockRate, busWidth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
         "add_gpu_info: recording GPU " + std::to_string(g.id) + " '" + g.name + "' of run " + std::to_string(run_id));
  q.bind(1, run_id).bind(2, g.id).bind(3, g.name).bind(4, g.compute_major).bind(5, g.compute_minor);
  q.bind(6, g.sm_count).bind(7, g.l2_cache_size).bind(8, g.total_memory).bind(9, g.clock_rate_khz);
  q.bind(10, g.memory_clock_rate_khz).bind(11, g.bus_width_bits).exec();
}

std::int64_t ResultsDb::add_point(const PointRecord& p, const std::vector<RangeRecord>& ranges,
                                  const std::vector<MemEventRecord>& mem, const prof::ProfileTrace* trace,
                                  const std::vector<SeriesRecord>& series) {
  require_writable("add_point");
  check_one_of(path_, p.status, {"ok", "oom", "interrupted", "failed"}, "add_point: point status");
  sqlite3* db = db_.get();
  const std::string point = "point " + std::to_string(p.index) + " of run " + std::to_string(p.run_id);
  const std::string of = " of " + point;
  Transaction tx(db, path_, "BEGIN IMMEDIATE", "add_point: " + point);

  Stmt(db, path_, "INSERT INTO points (run_id, sweep_index, mode, status, error) VALUES (?, ?, ?, ?, ?)",
       "add_point: recording " + point)
      .bind(1, p.run_id)
      .bind(2, p.index)
      .bind(3, p.mode)
      .bind(4, p.status)
      .bind(5, p.error)
      .exec();
  const std::int64_t id = sqlite3_last_insert_rowid(db);

  {
    Stmt q(db, path_, "INSERT INTO point_axes (point_id, position, name, value) VALUES (?, ?, ?, ?)",
           "add_point: recording the axes" + of);
    for (std::size_t i = 0; i < p.axes.size(); ++i)
      q.bind(1, id).bind(2, static_cast<int>(i)).bind(3, p.axes[i].first).bind(4, p.axes[i].second).exec("axis '" + p.axes[i].first + "'");
  }
  {
    Stmt q(db, path_, "INSERT INTO ranges (point_id, name, start_ns, end_ns, depth) VALUES (?, ?, ?, ?, ?)",
           "add_point: recording the ranges" + of);
    for (const auto& r : ranges) q.bind(1, id).bind(2, r.name).bind(3, r.start_ns).bind(4, r.end_ns).bind(5, r.depth).exec();
  }
  {
    Stmt q(db, path_,
           "INSERT INTO memory_events (point_id, t_ns, category, module, layer, bytes) VALUES (?, ?, ?, ?, ?, ?)",
           "add_point: recording the memory events" + of);
    for (const auto& e : mem)
      q.bind(1, id).bind(2, e.t_ns).bind(3, e.category).bind(4, e.module).bind(5, e.layer).bind(6, e.bytes).exec();
  }
  if (trace != nullptr) write_trace(db, path_, id, *trace, of);
  {
    Stmt q(db, path_, "INSERT INTO point_series (point_id, name, idx, x, y) VALUES (?, ?, ?, ?, ?)",
           "add_point: recording the series" + of);
    for (const auto& sr : series) {
      if (sr.x.size() != sr.y.size())
        throw DbError(in_quotes(path_) + ": add_point: series '" + sr.name + "'" + of + " has " +
                      std::to_string(sr.x.size()) + " x values but " + std::to_string(sr.y.size()) + " y values");
      for (std::size_t i = 0; i < sr.x.size(); ++i)
        q.bind(1, id).bind(2, sr.name).bind(3, static_cast<std::int64_t>(i)).bind(4, sr.x[i]).bind(5, sr.y[i])
            .exec("series '" + sr.name + "'");
    }
  }
  // The metrics last: a failure among them (a duplicated name) undoes everything written before.
  {
    Stmt q(db, path_, "INSERT INTO metrics (point_id, name, value) VALUES (?, ?, ?)",
           "add_point: recording the metrics" + of);
    for (const auto& [name, value] : p.metrics) q.bind(1, id).bind(2, name).bind(3, value).exec("metric '" + name + "'");
  }
  tx.commit();
  return id;
}

std::vector<RunRecord> ResultsDb::runs() const {
  Stmt q(db_.get(), path_,
         (std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY started_unix_ms DESC, id DESC").c_str(),
         "runs: listing the runs");
  std::vector<RunRecord> out;
  std::optional<RunWriter> here;
  while (q.step()) {
    out.push_back(read_run(q));
    report_abandoned(out.back(), here);
  }
  return out;
}

std::optional<RunRecord> ResultsDb::run(std::int64_t id) const {
  Stmt q(db_.get(), path_, (std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?").c_str(),
         "run: reading run " + std::to_string(id));
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  RunRecord r = read_run(q);
  std::optional<RunWriter> here;
  report_abandoned(r, here);
  return r;
}

std::vector<PointRecord> ResultsDb::points(std::int64_t run_id) const {
  sqlite3* db = db_.get();
  const std::string of = " of run " + std::to_string(run_id);
  // One snapshot for the three queries, so a point committed meanwhile is all there or not at all.
  Transaction tx(db, path_, "BEGIN", "points: reading the points" + of);
  std::vector<PointRecord> out;
  std::unordered_map<std::int64_t, std::size_t> slot;
  // The joins below only return rows of this run's points; one that names no point read above can only come
  // from a damaged index (found by fuzzing: a NULL point id in point_axes' index).
  auto point_slot = [&](std::int64_t id) {
    const auto it = slot.find(id);
    if (it == slot.end())
      refuse_corrupt(path_, "a row of point_axes or metrics names point id " + std::to_string(id) +
                                ", which run " + std::to_string(run_id) + " does not have");
    return it->second;
  };
  {
    Stmt q(db, path_,
           "SELECT id, sweep_index, mode, status, error FROM points WHERE run_id = ? ORDER BY sweep_index",
           "points: reading the points" + of);
    q.bind(1, run_id);
    while (q.step()) {
      PointRecord p;
      p.id = q.i64(0);
      p.run_id = run_id;
      p.index = q.i32(1);
      p.mode = q.text(2);
      p.status = q.text(3);
      p.error = q.text(4);
      slot.emplace(p.id, out.size());
      out.push_back(std::move(p));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT a.point_id, a.name, a.value FROM point_axes a JOIN points p ON p.id = a.point_id "
           "WHERE p.run_id = ? ORDER BY a.point_id, a.position",
           "points: reading the axes" + of);
    q.bind(1, run_id);
    while (q.step()) out[point_slot(q.i64(0))].axes.emplace_back(q.text(1), q.text(2));
  }
  {
    Stmt q(db, path_,
           "SELECT m.point_id, m.name, m.value FROM metrics m JOIN points p ON p.id = m.point_id "
           "WHERE p.run_id = ? ORDER BY m.point_id, m.id",
           "points: reading the metrics" + of);
    q.bind(1, run_id);
    while (q.step()) out[point_slot(q.i64(0))].metrics.emplace_back(q.text(1), q.f64(2));
  }
  tx.commit();
  return out;
}

std::optional<prof::ProfileTrace> ResultsDb::profile(std::int64_t point_id) const {
  sqlite3* db = db_.get();
  const std::string of = " of point id " + std::to_string(point_id);
  // One snapshot for every table, as points() does.
  Transaction tx(db, path_, "BEGIN", "profile: reading the profile" + of);
  prof::ProfileTrace t;
  bool profiled = false;
  {
    const bool v6 = schema_version_ >= 6;  // version 5 (read as it is) has no stage stamps
    Stmt q(db, path_,
           v6 ? "SELECT source, steps, start, end, droppedRecords, droppedStamps FROM profiles WHERE point_id = ?"
              : "SELECT source, steps, start, end, droppedRecords, 0 FROM profiles WHERE point_id = ?",
           "profile: reading the profile" + of);
    q.bind(1, point_id);
    if (q.step()) {
      profiled = true;
      t.source = q.text(0);
      t.steps = q.i32(1);
      t.start_ns = q.i64(2);
      t.end_ns = q.i64(3);
      t.dropped_records = to_u64(q.i64(4));
      t.dropped_stamps = to_u64(q.i64(5));
    }
  }
  if (!profiled) {
    tx.commit();
    return std::nullopt;
  }
  StringIdReader names(db, path_, of);
  {
    const bool v7 = schema_version_ >= 7;  // versions 5 and 6 (read as they are) declare no costs
    const std::string sql =
        std::string("SELECT start, end, deviceId, contextId, streamId, correlationId, demangledName, shortName, gridX, "
                    "gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, "
                    "dynamicSharedMemory, graphId, graphNodeId, rangeId, step") +
        (v7 ? ", opName, opBytes, opFlops, opCall, opBound" : "") +
        " FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE point_id = ? ORDER BY id";
    Stmt q(db, path_, sql.c_str(), "profile: reading the kernels" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::KernelRecord k;
      k.start_ns = q.i64(0);
      k.end_ns = q.i64(1);
      k.device_id = q.i32(2);
      k.context_id = to_u32(q.i64(3));
      k.stream_id = to_u32(q.i64(4));
      k.correlation_id = to_u32(q.i64(5));
      k.name = names.value(q.i64(6));
      k.short_name = names.value(q.i64(7));
      k.grid_x = q.i32(8);
      k.grid_y = q.i32(9);
      k.grid_z = q.i32(10);
      k.block_x = q.i32(11);
      k.block_y = q.i32(12);
      k.block_z = q.i32(13);
      k.registers_per_thread = q.i32(14);
      k.static_shared_bytes = q.i32(15);
      k.dynamic_shared_bytes = q.i32(16);
      k.graph_id = to_u32(q.i64(17));
      k.graph_node_id = to_u64(q.i64(18));
      k.range_id = q.i64(19);
      k.step = q.i32(20);
      if (v7) {
        if (!q.is_null(21)) k.op = names.value(q.i64(21));
        k.op_bytes = q.i64(22);
        k.op_flops = q.i64(23);
        k.op_call = q.i64(24);
        k.op_bound = q.i32(25) != 0;
      }
      t.kernels.push_back(std::move(k));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT start, end, deviceId, contextId, streamId, correlationId, bytes, copyKind, srcKind, dstKind, "
           "graphId, graphNodeId, rangeId, step FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE point_id = ? ORDER BY id",
           "profile: reading the memcpys" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::MemcpyRecord m;
      m.start_ns = q.i64(0);
      m.end_ns = q.i64(1);
      m.device_id = q.i32(2);
      m.context_id = to_u32(q.i64(3));
      m.stream_id = to_u32(q.i64(4));
      m.correlation_id = to_u32(q.i64(5));
      m.bytes = q.i64(6);
      m.copy_kind = q.text(7);
      m.src_kind = q.text(8);
      m.dst_kind = q.text(9);
      m.graph_id = to_u32(q.i64(10));
      m.graph_node_id = to_u64(q.i64(11));
      m.range_id = q.i64(12);
      m.step = q.i32(13);
      t.memcpys.push_back(std::move(m));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT start, end, deviceId, contextId, streamId, correlationId, bytes, value, memKind, graphId, "
           "graphNodeId, rangeId, step FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE point_id = ? ORDER BY id",
           "profile: reading the memsets" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::MemsetRecord m;
      m.start_ns = q.i64(0);
      m.end_ns = q.i64(1);
      m.device_id = q.i32(2);
      m.context_id = to_u32(q.i64(3));
      m.stream_id = to_u32(q.i64(4));
      m.correlation_id = to_u32(q.i64(5));
      m.bytes = q.i64(6);
      m.value = q.i32(7);
      m.mem_kind = q.text(8);
      m.graph_id = to_u32(q.i64(9));
      m.graph_node_id = to_u64(q.i64(10));
      m.range_id = q.i64(11);
      m.step = q.i32(12);
      t.memsets.push_back(std::move(m));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT start, end, nameId, domain, correlationId, globalTid, returnValue FROM CUPTI_ACTIVITY_KIND_RUNTIME "
           "WHERE point_id = ? ORDER BY id",
           "profile: reading the CUDA API calls" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::ApiRecord a;
      a.start_ns = q.i64(0);
      a.end_ns = q.i64(1);
      a.name = names.value(q.i64(2));
      a.domain = q.text(3);
      a.correlation_id = to_u32(q.i64(4));
      a.thread_id = to_u32(q.i64(5));
      a.return_value = q.i32(6);
      t.api.push_back(std::move(a));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT start, deviceId, contextId, streamId, correlationId, address, bytes, memoryOperationType, memKind "
           "FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE point_id = ? ORDER BY id",
           "profile: reading the device memory events" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::DeviceMemoryRecord m;
      m.t_ns = q.i64(0);
      m.device_id = q.i32(1);
      m.context_id = to_u32(q.i64(2));
      m.stream_id = to_u32(q.i64(3));
      m.correlation_id = to_u32(q.i64(4));
      m.address = to_u64(q.i64(5));
      m.bytes = q.i64(6);
      m.is_alloc = q.text(7) == "alloc";
      m.mem_kind = q.text(8);
      t.device_memory.push_back(std::move(m));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT rangeId, parentId, text, depth, step, projStart, projEnd, start, end, numGpuOps FROM NVTX_EVENTS "
           "WHERE point_id = ? ORDER BY id",
           "profile: reading the phase ranges" + of);
    q.bind(1, point_id);
    while (q.step()) {
      prof::PhaseRange r;
      r.id = q.i64(0);
      r.parent_id = q.i64(1);
      r.name = q.text(2);
      r.depth = q.i32(3);
      r.step = q.i32(4);
      r.start_ns = q.i64(5);
      r.end_ns = q.i64(6);
      r.host_start_ns = q.i64(7);
      r.host_end_ns = q.i64(8);
      r.ops = q.i32(9);
      t.ranges.push_back(std::move(r));
    }
  }
  {
    Stmt q(db, path_,
           "SELECT start, category, module, layer, bytes, categoryLiveBytes FROM ALLOCATOR_EVENTS WHERE point_id = ? "
           "ORDER BY id",
           "profile: reading the allocator events" + of);
    q.bind(1, point_id);
    while (q.step()) t.allocator.push_back({q.i64(0), q.text(1), q.text(2), q.i32(3), q.i64(4), q.i64(5)});
  }
  if (schema_version_ >= 6) {
    Stmt q(db, path_,
           "SELECT step, kernel, launch, rangeId, layer, stage, start, end, waitNs FROM STAGE_STAMPS WHERE point_id = ? "
           "ORDER BY id",
           "profile: reading the stage stamps" + of);
    q.bind(1, point_id);
    while (q.step())
      t.stages.push_back({q.i32(0), names.value(q.i64(1)), q.i32(2), q.i64(3), q.i32(4), names.value(q.i64(5)), q.i64(6),
                          q.i64(7), q.i64(8)});
  }
  tx.commit();
  return t;
}

std::vector<RangeRecord> ResultsDb::ranges(std::int64_t point_id) const {
  Stmt q(db_.get(), path_, "SELECT name, start_ns, end_ns, depth FROM ranges WHERE point_id = ? ORDER BY id",
         "ranges: reading the ranges of point id " + std::to_string(point_id));
  q.bind(1, point_id);
  std::vector<RangeRecord> out;
  while (q.step()) out.push_back({q.text(0), q.i64(1), q.i64(2), q.i32(3)});
  return out;
}

std::vector<MemEventRecord> ResultsDb::memory_events(std::int64_t point_id) const {
  Stmt q(db_.get(), path_,
         "SELECT t_ns, category, module, layer, bytes FROM memory_events WHERE point_id = ? ORDER BY id",
         "memory_events: reading the memory events of point id " + std::to_string(point_id));
  q.bind(1, point_id);
  std::vector<MemEventRecord> out;
  while (q.step()) out.push_back({q.i64(0), q.text(1), q.text(2), q.i32(3), q.i64(4)});
  return out;
}

std::vector<SeriesRecord> ResultsDb::series(std::int64_t point_id) const {
  Stmt q(db_.get(), path_, "SELECT name, x, y FROM point_series WHERE point_id = ? ORDER BY name, idx",
         "series: reading the series of point id " + std::to_string(point_id));
  q.bind(1, point_id);
  std::vector<SeriesRecord> out;
  while (q.step()) {
    std::string name = q.text(0);
    if (out.empty() || out.back().name != name) out.push_back({std::move(name), {}, {}});
    out.back().x.push_back(q.f64(1));
    out.back().y.push_back(q.f64(2));
  }
  return out;
}

std::vector<DeviceRecord> ResultsDb::devices(std::int64_t run_id) const {
  Stmt q(db_.get(), path_, "SELECT kind, name, properties_json FROM devices WHERE run_id = ? ORDER BY id",
         "devices: reading the devices of run " + std::to_string(run_id));
  q.bind(1, run_id);
  std::vector<DeviceRecord> out;
  while (q.step()) out.push_back({q.text(0), q.text(1), q.text(2)});
  return out;
}

std::vector<KernelSummaryRow> ResultsDb::kernel_summary(std::int64_t run_id, const std::string& short_name) const {
  Stmt q(db_.get(), path_,
         "SELECT k.point_id, count(*), sum(k.end - k.start), min(k.end - k.start), max(k.end - k.start), pr.steps "
         "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN points p ON p.id = k.point_id JOIN profiles pr ON pr.point_id = "
         "k.point_id WHERE p.run_id = ? AND k.shortName = (SELECT id FROM StringIds WHERE value = ?) "
         "GROUP BY k.point_id ORDER BY p.sweep_index",
         "kernel_summary: reading kernel '" + short_name + "' of run " + std::to_string(run_id));
  q.bind(1, run_id).bind(2, short_name);
  std::vector<KernelSummaryRow> out;
  while (q.step()) out.push_back({q.i64(0), q.i64(1), q.i64(2), q.i64(3), q.i64(4), q.i32(5)});
  return out;
}

std::string ResultsDb::quick_check(int max) const {
  return quick_check_verdict(db_.get(), path_, max);
}

std::int64_t ResultsDb::data_version() const {
  Stmt q(db_.get(), path_, "PRAGMA data_version", "data_version: polling for changes");
  return q.step() ? q.i64(0) : 0;
}

std::optional<CeilingsRecord> ceilings_for_profile(const std::vector<CeilingsRecord>& all, const prof::ProfileTrace& t) {
  int dev = t.source == "cpu" ? -1 : 0;
  if (t.source != "cpu" && !t.kernels.empty()) {
    dev = t.kernels.front().device_id;
    for (const auto& k : t.kernels) dev = std::min(dev, k.device_id);
  }
  for (const auto& c : all)
    if (c.device_id == dev) return c;
  return std::nullopt;
}

void ResultsDb::add_ceilings(std::int64_t run_id, const CeilingsRecord& c) {
  require_writable("add_ceilings");
  Stmt q(db_.get(), path_,
         "INSERT INTO DEVICE_CEILINGS (run_id, deviceId, device, copyGBps, gemmTflops, gemmDtype, measuredUnixMs, "
         "source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
         "add_ceilings: recording the ceilings of '" + c.device + "' for run " + std::to_string(run_id));
  q.bind(1, run_id).bind(2, c.device_id).bind(3, c.device).bind(4, c.copy_GBps).bind(5, c.gemm_tflops);
  q.bind(6, c.gemm_dtype).bind(7, c.measured_unix_ms).bind(8, c.source).exec();
}

std::vector<CeilingsRecord> ResultsDb::ceilings(std::int64_t run_id) const {
  if (schema_version_ < 7) return {};  // an older file read as it is: none recorded
  Stmt q(db_.get(), path_,
         "SELECT deviceId, device, copyGBps, gemmTflops, gemmDtype, measuredUnixMs, source FROM DEVICE_CEILINGS "
         "WHERE run_id = ? ORDER BY deviceId",
         "ceilings: reading the device ceilings of run " + std::to_string(run_id));
  q.bind(1, run_id);
  std::vector<CeilingsRecord> out;
  while (q.step()) {
    CeilingsRecord c;
    c.device_id = q.i32(0);
    c.device = q.text(1);
    c.copy_GBps = q.f64(2);
    c.gemm_tflops = q.f64(3);
    c.gemm_dtype = q.text(4);
    c.measured_unix_ms = q.i64(5);
    c.source = q.text(6);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<GpuInfoRecord> ResultsDb::gpu_info(std::int64_t run_id) const {
  Stmt q(db_.get(), path_,
         "SELECT id, name, computeMajor, computeMinor, smCount, l2CacheSize, totalMemory, clockRate, memoryClockRate, "
         "busWidth FROM TARGET_INFO_GPU WHERE run_id = ? ORDER BY id",
         "gpu_info: reading the GPUs of run " + std::to_string(run_id));
  q.bind(1, run_id);
  std::vector<GpuInfoRecord> out;
  while (q.step()) {
    GpuInfoRecord g;
    g.id = q.i32(0);
    g.name = q.text(1);
    g.compute_major = q.i32(2);
    g.compute_minor = q.i32(3);
    g.sm_count = q.i32(4);
    g.l2_cache_size = q.i64(5);
    g.total_memory = q.i64(6);
    g.clock_rate_khz = q.i32(7);
    g.memory_clock_rate_khz = q.i32(8);
    g.bus_width_bits = q.i32(9);
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> run_environment(const RunRecord& r) {
  std::vector<std::string> out;
  try {
    const auto cfg = nlohmann::ordered_json::parse(r.config_json);
    if (cfg.is_object() && cfg.contains("env") && cfg["env"].is_object())
      for (const auto& [k, v] : cfg["env"].items()) out.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
  } catch (const nlohmann::json::exception&) {
    out.clear();  // config_json is opaque to the store: an unreadable one records no environment
  }
  return out;
}

}  // namespace moc::db

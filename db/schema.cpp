// The schema (its migrations, append only) and the checks that keep a file mocbench must not touch
// untouched: not SQLite, another application's, newer, damaged, cut short.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "db/store_sql.h"

namespace moc::db::internal {

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

}  // namespace moc::db::internal

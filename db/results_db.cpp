// The results database on the SQLite C API. Conventions: prepared statements with every value bound (the
// only SQL built with numbers in it are PRAGMA assignments of this file's own constants, which SQLite
// cannot bind); every return code is checked; errors name the file, the operation and SQLite's message.
// This file: opening (with its checks) and the runs, points, devices and series; the schema, the writer
// process and the profile rows have files of their own (db/store_sql.h).
#include "db/results_db.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "db/store_sql.h"

namespace moc::db {

using namespace internal;

namespace {

void check_one_of(const std::string& path, const std::string& value, std::initializer_list<std::string_view> allowed,
                  const std::string& what) {
  std::string list;
  for (const auto a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw DbError(in_quotes(path) + ": " + what + " '" + value + "' is not one of " + list);
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

}  // namespace

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
  return read_trace(db_.get(), path_, point_id, schema_version_);
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


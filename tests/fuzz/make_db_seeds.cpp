// Writes the results-database seed corpus of fuzz_results_db into a folder (scripts/fuzz.sh runs it, so no
// binary file is kept in git): real files made through the store's API -- a database with runs, points,
// a profile, devices and a run left "running" by a process that is gone; an empty one -- a file as schema
// version 1 left it (the read-write pass migrates it), another application's SQLite file, and files that
// are no SQLite at all. Page size 512, the smallest SQLite allows: the seeds are 1 to 28 KiB (the schema
// alone is some 50 pages) and a mutation lands on a small page that matters.
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "db/results_db.h"

namespace fs = std::filesystem;
using namespace moc::db;

namespace {

void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error(path + ": " + sqlite3_errmsg(db));
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error(path + ": " + message);
}

// Rewrites the file with 512-byte pages, in rollback-journal mode or (wal) with the WAL flag in its header.
void compact(const std::string& path, bool wal) {
  exec(path, "PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM;");
  if (wal) exec(path, "PRAGMA journal_mode = WAL;");
}

moc::prof::ProfileTrace small_profile() {
  moc::prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  t.start_ns = 0;
  t.end_ns = 100;
  moc::prof::KernelRecord k;
  k.name = "void moc::gemm<float>(int)";
  k.short_name = "gemm";
  k.start_ns = 10, k.end_ns = 20, k.device_id = 0, k.grid_x = 8, k.block_x = 128, k.range_id = 1;
  t.kernels = {k};
  t.memcpys = {{30, 40, 0, 1, 7, 2, 4096, "HtoD", "pinned", "device", 0, 0, 1, 0}};
  t.memsets = {{41, 45, 0, 1, 7, 3, 512, 0, "device", 0, 0, -1, 0}};
  t.api = {{"cudaLaunchKernel", "runtime", 5, 9, 1, 11, 0}};
  t.device_memory = {{2, 0, 1, 7, 4, 0x7f0000, 1 << 20, true, "device"}};
  t.ranges = {{1, -1, "step", 0, 0, 10, 45, 1, 50, 3}};
  t.allocator = {{1, "weights", "ffn", 0, 256, 256}};
  return t;
}

void make_runs_file(const std::string& path) {
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    RunRecord r;
    r.scenario_name = "smoke_cpu";
    r.scenario_path = "scenarios/smoke_cpu.toml";
    r.scenario_text = "mode = \"topk\"\n[model]\npreset = \"tiny\"\n";
    r.scenario_hash = "0123456789abcdef";
    r.config_json = "{}";
    r.overrides_json = "[]";
    r.machine_json = "{\"cpu\":\"x\"}";
    r.device_kind = "cuda";
    r.device_name = "NVIDIA H100";
    r.mocbench_version = "fuzz";
    r.started_unix_ms = 1000;
    const auto run = db.begin_run(r);
    db.add_device(run, {"cuda", "NVIDIA H100", "{\"sm\":132}"});
    db.add_gpu_info(run, {0, "NVIDIA H100", 9, 0, 132, 50 << 20, 80LL << 30, 1980000, 2619000, 5120});
    PointRecord p;
    p.run_id = run;
    p.index = 0;
    p.mode = "ffn-decode";
    p.status = "ok";
    p.axes = {{"ffn", "moc"}, {"batch", "1"}};
    p.metrics = {{"median_us", 12.5}, {"noise", 0.01}};
    const auto trace = small_profile();
    db.add_point(p, {{"step", 0, 50, 0}, {"ffn.up", 10, 20, 1}}, {{0, "weights", "ffn", 0, 256}}, &trace);
    p.index = 1;
    p.status = "oom";
    p.error = "out of memory";
    p.metrics = {};
    db.add_point(p, {}, {});
    db.finish_run(run, "ok", 2000);
    // Left "running" by this process, which is gone when the fuzzer reads the file: abandoned.
    r.scenario_name = "left_running";
    db.begin_run(r);
  }
}

// The version 1 schema as shipped (tests/test_db_migration.cpp keeps the same frozen copy), with one run.
void make_version1_file(const std::string& path) {
  exec(path,
       "PRAGMA page_size = 512; BEGIN;"
       "CREATE TABLE runs (id INTEGER PRIMARY KEY, scenario_name TEXT NOT NULL, scenario_path TEXT NOT NULL,"
       " scenario_text TEXT NOT NULL, scenario_hash TEXT NOT NULL, config_json TEXT NOT NULL,"
       " overrides_json TEXT NOT NULL, machine_json TEXT NOT NULL, device_kind TEXT NOT NULL,"
       " device_name TEXT NOT NULL, mocbench_version TEXT NOT NULL, started_unix_ms INTEGER NOT NULL,"
       " finished_unix_ms INTEGER, status TEXT NOT NULL);"
       "CREATE TABLE points (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
       " sweep_index INTEGER NOT NULL, status TEXT NOT NULL, error TEXT NOT NULL, UNIQUE (run_id, sweep_index));"
       "CREATE TABLE point_axes (point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,"
       " position INTEGER NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (point_id, position),"
       " UNIQUE (point_id, name));"
       "CREATE TABLE metrics (id INTEGER PRIMARY KEY, point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE "
       "CASCADE, name TEXT NOT NULL, value REAL, UNIQUE (point_id, name));"
       "CREATE TABLE ops (id INTEGER PRIMARY KEY, point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,"
       " kind TEXT NOT NULL, name TEXT NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,"
       " device_id INTEGER NOT NULL, stream_id INTEGER NOT NULL, grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL,"
       " grid_z INTEGER NOT NULL, block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,"
       " registers_per_thread INTEGER NOT NULL, static_shared_bytes INTEGER NOT NULL,"
       " dynamic_shared_bytes INTEGER NOT NULL, range_name TEXT NOT NULL);"
       "CREATE INDEX ops_point ON ops(point_id);"
       "CREATE TABLE ranges (id INTEGER PRIMARY KEY, point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE "
       "CASCADE, name TEXT NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, depth INTEGER NOT NULL);"
       "CREATE INDEX ranges_point ON ranges(point_id);"
       "CREATE TABLE memory_events (id INTEGER PRIMARY KEY, point_id INTEGER NOT NULL REFERENCES points(id) ON "
       "DELETE CASCADE, t_ns INTEGER NOT NULL, category TEXT NOT NULL, module TEXT NOT NULL, layer INTEGER NOT "
       "NULL, bytes INTEGER NOT NULL);"
       "CREATE INDEX memory_events_point ON memory_events(point_id);"
       "INSERT INTO runs VALUES (7, 'v1_scenario', 's.toml', 'text', 'h', '{}', '{}', '{}', 'cuda', 'NVIDIA H200',"
       " 'v0.0.9', 1000, 2000, 'ok');"
       "INSERT INTO points VALUES (70, 7, 0, 'ok', '');"
       "INSERT INTO point_axes VALUES (70, 0, 'batch', '4'), (70, 1, 'seq', '256');"
       "INSERT INTO metrics (point_id, name, value) VALUES (70, 'median_us', 42.5);"
       "INSERT INTO ops VALUES (1, 70, 'kernel', 'gemm', 10, 20, 0, 1, 8, 1, 1, 128, 1, 1, 64, 0, 0, 'ffn.up');"
       "INSERT INTO ranges VALUES (1, 70, 'step', 5, 25, 0);"
       "INSERT INTO memory_events VALUES (1, 70, 3, 'weights', 'none', -1, 1024);"
       "PRAGMA application_id = 1297040194; PRAGMA user_version = 1; COMMIT;");
}

void write_text(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FOLDER\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  try {
    fs::create_directories(dir);
    const std::string work = (dir / "work.db").string();
    for (const bool wal : {false, true}) {  // a file with runs, in both journal modes
      fs::remove(work), fs::remove(work + "-wal"), fs::remove(work + "-shm");
      make_runs_file(work);
      compact(work, wal);
      fs::copy_file(work, dir / (wal ? "runs-wal.sqlite" : "runs.sqlite"), fs::copy_options::overwrite_existing);
    }
    fs::remove(work), fs::remove(work + "-wal"), fs::remove(work + "-shm");
    ResultsDb::open(work, OpenMode::read_write);  // a new file: the schema and no run
    compact(work, false);
    fs::copy_file(work, dir / "empty.sqlite", fs::copy_options::overwrite_existing);
    fs::remove(work);
    make_version1_file((dir / "v1.sqlite").string());
    const std::string foreign = (dir / "foreign.sqlite").string();
    fs::remove(foreign);
    exec(foreign, "PRAGMA page_size = 512; CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL);"
                  "INSERT INTO invoices VALUES (1, 9.5);");
    write_text((dir / "zero-length").string(), "");
    write_text((dir / "not-sqlite").string(), "name = \"not a database\"\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_db_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}

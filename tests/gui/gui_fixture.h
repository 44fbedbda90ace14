// The dashboard tests' database: made once per test program by a real `mocbench run` of tests/gui/fixture.toml
// on the CPU backend (training, FFN decode and decode points, profiled), in a fresh temporary folder.
#pragma once
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "db/results_db.h"
#include "gui/model/roofline.h"

namespace moc::gui::test {

// A fresh seed per call (tests use fresh random inputs; SCOPED_TRACE it); MOCBENCH_TEST_SEED=<seed> replays
// one (as tests/test_util.h, which these tests do not link).
inline std::uint32_t fresh_seed() {
  if (const char* s = std::getenv("MOCBENCH_TEST_SEED")) return static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10));
  static std::random_device rd;
  return rd();
}

// One directory per test process, removed when the process exits (CTest runs each test in its own process:
// left behind, they piled up by the hundred in /tmp).
inline std::string temp_dir() {
  struct Dir {
    std::string path;
    Dir() {
      path = (std::filesystem::temp_directory_path() / "mocbench_gui_XXXXXX").string();
      if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline int run_command(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The fixture database (made on first use).
inline std::string fixture_db() {
  static const std::string path = [] {
    const std::string p = temp_dir() + "/fixture.db";
    const std::string cmd = std::string(MOCBENCH_BIN) + " run " + MOCBENCH_SOURCE_DIR + "/tests/gui/fixture.toml --db " + p +
                            " --quiet > " + temp_dir() + "/fixture.log 2>&1";
    if (run_command(cmd) != 0) throw std::runtime_error("making the fixture failed: " + cmd);
    return p;
  }();
  return path;
}

// A database with one run of one point whose profile is synthetic_roofline_trace() (declared op costs: each
// kernel's % of floor known by construction), with the run's measured ceilings (synthetic_roofline_ceilings())
// or, with_ceilings = false, none (as a file from before they were recorded).
inline std::string roofline_fixture_db(bool with_ceilings) {
  const std::string p = temp_dir() + (with_ceilings ? "/roofline.db" : "/roofline_no_ceilings.db");
  if (std::filesystem::exists(p)) return p;
  auto w = db::ResultsDb::open(p, db::OpenMode::read_write);
  db::RunRecord r;
  r.scenario_name = with_ceilings ? "roofline" : "roofline_no_ceilings";
  r.device_kind = "cuda";
  r.device_name = "Synthetic GPU";
  const std::int64_t run = w.begin_run(r);
  if (with_ceilings) w.add_ceilings(run, synthetic_roofline_ceilings());
  db::PointRecord pt;
  pt.run_id = run;
  pt.mode = "ffn-decode";
  pt.status = "ok";
  pt.axes = {{"mode", "ffn-decode"}, {"ffn", "moc"}};
  pt.metrics = {{"profile_steps", 2}};
  const prof::ProfileTrace t = synthetic_roofline_trace();
  w.add_point(pt, {}, {}, &t);
  w.finish_run(run, "ok", 1);
  return p;
}

// A database with a training run on real text (the Python tutorial's sources, Debian's python3.11-doc):
// two train points (dense, MoC) with their loss curves, validation perplexity and gate histograms.
inline std::string text_fixture_db() {
  static const std::string path = [] {
    const std::string dir = temp_dir() + "/text";
    std::filesystem::create_directories(dir);
    std::filesystem::copy("/usr/share/doc/python3.11/html/_sources/tutorial", dir + "/corpus");
    std::ofstream(dir + "/text.toml")
        << "name = \"text\"\ndescription = \"t\"\nmode = \"train\"\ndevice = \"cpu\"\n[model]\npreset = \"tiny\"\n"
           "vocab = 512\n[data]\ncorpus = \"corpus\"\nval_fraction = 0.2\nsteps = 20\neval_every = 5\n"
           "eval_windows = 8\nlr = 0.003\nwarmup = 2\n[axes]\nbatch = [4]\nseq = [32]\nffn = [\"dense\", \"moc\"]\n"
           "[profile]\nkernels = false\n";
    const std::string p = dir + "/text.db";
    const std::string cmd = "cd " + dir + " && " + std::string(MOCBENCH_BIN) + " run text.toml --db " + p +
                            " --quiet > " + dir + "/text.log 2>&1";
    if (run_command(cmd) != 0) throw std::runtime_error("making the text fixture failed: " + cmd);
    return p;
  }();
  return path;
}

// A copy of the fixture under a new name (the live and compare tests change their copy).
inline std::string fixture_copy(const std::string& name) {
  const std::string p = temp_dir() + "/" + name;
  std::filesystem::copy_file(fixture_db(), p, std::filesystem::copy_options::overwrite_existing);
  return p;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Runs SQL on a file with the raw C API (fixtures the store itself would refuse to write).
inline void sql(const std::string& path, const std::string& statements) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open " + path);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, statements.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("sql on " + path + ": " + msg);
}

// A copy of the fixture damaged in the middle (issue #27): the root page of the points table overwritten with
// noise, while the header, the schema and the runs table stay intact -- it opens, lists its run, and SQLite
// fails only when the run's points are read (once shown as a run of "0/0 ok" points).
inline std::string damaged_db() {
  const std::string p = fixture_copy("damaged.db");
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(p.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) throw std::runtime_error("open " + p);
  long long root = 0, page = 0;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'points'", -1, &st, nullptr);
  if (st && sqlite3_step(st) == SQLITE_ROW) root = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &st, nullptr);
  if (st && sqlite3_step(st) == SQLITE_ROW) page = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (root < 2 || page <= 0) throw std::runtime_error("no points table in " + p);
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::uint32_t x = 4242;
  const auto at = static_cast<std::size_t>((root - 1) * page);
  for (std::size_t i = at; i < at + static_cast<std::size_t>(page) && i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_file(p, bytes);
  return p;
}

// The three kinds of file the dashboard must refuse with a message: not ours, newer, corrupt.
inline std::string foreign_db() {
  const std::string p = temp_dir() + "/foreign.db";
  std::filesystem::remove(p);
  sql(p, "CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL); INSERT INTO invoices VALUES (1, 9.5);");
  return p;
}
inline std::string newer_db() {
  const std::string p = fixture_copy("newer.db");
  sql(p, "PRAGMA user_version = 99;");
  return p;
}
inline std::string corrupt_db() {
  const std::string p = temp_dir() + "/corrupt.db";
  std::ifstream in(fixture_db(), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  write_file(p, bytes.substr(0, bytes.size() / 2 + 100));  // not whole pages
  return p;
}

}  // namespace moc::gui::test

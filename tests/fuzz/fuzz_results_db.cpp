// libFuzzer target: opening a results database (issue #16). Any bytes, written to a file, are either opened
// -- and then everything a reader asks of the file (runs, points, profiles, ranges, memory, devices, GPUs,
// kernel summaries) reads without crashing -- or refused with a DbError carrying a message. Both ways in are
// tried: read-only (the dashboard, list/show/export) and read-write (a run appending to the file: it migrates
// older schemas and marks abandoned runs); a file opened for writing also takes one small run. Anything else
// -- another exception, a crash, a hang, a leak, an ASan or UBSan report -- is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "db/results_db.h"

namespace fs = std::filesystem;
using moc::db::DbError;
using moc::db::OpenMode;
using moc::db::ResultsDb;

namespace {

// Readers are bounded, so that one input costs milliseconds however many rows a mutated file claims.
constexpr std::size_t kMaxRuns = 8, kMaxPoints = 8;

std::string g_dir;  // a private folder for the file and its -wal/-shm companions

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_results_db: %s\n", what.c_str());
  std::abort();  // libFuzzer saves the input as a crash
}

void remove_dir() {
  std::error_code ec;
  if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ec;
    fs::remove(path + suffix, ec);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) finding("cannot write " + path);
}

void read_everything(const ResultsDb& db) {
  (void)db.data_version();
  std::size_t nruns = 0;
  for (const auto& run : db.runs()) {
    if (++nruns > kMaxRuns) break;
    (void)db.run(run.id);
    (void)db.devices(run.id);
    (void)db.gpu_info(run.id);
    (void)db.kernel_summary(run.id, "gemm");
    const auto points = db.points(run.id);
    std::size_t npoints = 0;
    for (const auto& point : points) {
      if (++npoints > kMaxPoints) break;
      (void)db.ranges(point.id);
      (void)db.memory_events(point.id);
      if (auto trace = db.profile(point.id)) {
        if (!trace->kernels.empty()) (void)db.kernel_summary(run.id, trace->kernels.front().short_name);
      }
    }
  }
}

void record_a_run(ResultsDb& db) {
  moc::db::RunRecord r;
  r.scenario_name = "fuzz";
  r.device_kind = "cpu";
  const std::int64_t run = db.begin_run(r);
  moc::db::PointRecord p;
  p.run_id = run;
  p.mode = "topk";
  p.status = "ok";
  p.axes = {{"batch", "1"}};
  p.metrics = {{"median_us", 1.5}};
  db.add_point(p, {{"step", 0, 10, 0}}, {{0, "weights", "ffn", 0, 64}});
  db.finish_run(run, "ok", 1);
}

// Opens and reads; returns normally when the file was opened or refused with a message.
void open_and_read(const std::string& path, OpenMode mode) {
  try {
    ResultsDb db = ResultsDb::open(path, mode);
    read_everything(db);
    if (mode == OpenMode::read_write) {
      record_a_run(db);
      read_everything(db);
    }
  } catch (const DbError& e) {
    if (std::string(e.what()).empty()) finding("a DbError without a message");
  }
  // Any other exception escapes: libFuzzer reports it as a crash (uncaught exception).
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // $FUZZ_TMPDIR (scripts/fuzz.sh: a folder it removes), else a RAM-backed folder when there is one: the
  // read-write pass writes and syncs the file every input.
  const char* given = std::getenv("FUZZ_TMPDIR");
  std::string base = given && *given ? given
                     : access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                     : fs::temp_directory_path().string();
  std::string templ = base + "/mocbench-fuzz-db-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) finding("cannot create a folder under " + base);
  g_dir = templ;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = g_dir + "/fuzz.db";
  write_file(path, data, size);
  open_and_read(path, OpenMode::read_only);
  write_file(path, data, size);  // the read-only pass may have left a -wal/-shm behind
  open_and_read(path, OpenMode::read_write);
  return 0;
}

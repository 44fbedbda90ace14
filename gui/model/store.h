// The dashboard's data model: the open databases and what the views read from them. It reads SQLite through
// moc::db::ResultsDb (read-only connections) and knows nothing of drawing (Tracy's split: the views in
// gui/views draw what this holds). One thread; the frame loop calls refresh() to pick up a run that is
// writing the same files.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/results_db.h"
#include "profiling/trace.h"

namespace moc::gui {

// A run in one of the open databases.
struct RunRef {
  int source = -1;  // index into Store::sources()
  std::int64_t run_id = 0;
  bool valid() const { return source >= 0; }
  bool operator==(const RunRef&) const = default;
  auto operator<=>(const RunRef&) const = default;
};

struct RunRow {
  RunRef ref;
  db::RunRecord run;
  int points = 0, ok_points = 0, profiled_points = 0;
  int noisy_points = 0;  // ok points whose repetitions stopped at a bound before the noise target (noise_met 0)
  std::string modes;  // distinct point modes, e.g. "ffn-decode, decode"
  std::string read_error;  // its points could not be read (a damaged file): what SQLite said; counts are 0
  std::vector<std::string> environment;  // db::run_environment: switches recorded with the run ("NAME=value")
};

// One database file. `error` is set (and `db` empty) when it could not be opened: a missing file, a file that
// is not a mocbench database, a newer schema, a corrupt file.
struct Source {
  std::string path;
  std::optional<db::ResultsDb> db;
  std::string error;
  std::string damage;  // opened, but SQLite's quick check found damage: its verdict (what is shown may be incomplete)
  std::int64_t data_version = -1;
  std::string failed_stamp;  // the file's existence, size and mtime when opening it last failed
};

class Store {
 public:
  // Opens `path` read-only; a failure is kept as the source's error, never thrown. Returns its index.
  int open(const std::string& path);
  const std::vector<Source>& sources() const { return sources_; }
  bool any_error() const;  // a file that could not be opened, or one that is damaged

  // Polls every source (PRAGMA data_version; a failed source is retried) and reloads what changed. Returns
  // true when something changed; generation() then counts up, so views re-derive their cached data.
  bool refresh();
  std::uint64_t generation() const { return generation_; }

  // Every run of every open database, newest first within a file, files in the order opened.
  const std::vector<RunRow>& runs() const { return runs_; }
  const RunRow* run(const RunRef& r) const;
  std::string run_label(const RunRef& r) const;  // "db.db #3 decode_bs1_4 (NVIDIA H100 ...)"

  // A run's points (by sweep index, with axes and metrics); cached until the file changes.
  const std::vector<db::PointRecord>& points(const RunRef& r);
  const db::PointRecord* point(const RunRef& r, std::int64_t point_id);
  // A point's profile (null: not profiled) and its measured repetition's memory events; cached.
  std::shared_ptr<const prof::ProfileTrace> profile(const RunRef& r, std::int64_t point_id);
  const std::vector<db::MemEventRecord>& memory_events(const RunRef& r, std::int64_t point_id);
  std::vector<db::KernelSummaryRow> kernel_summary(const RunRef& r, const std::string& short_name);
  // A point's time series and histograms (loss curves, gate histograms); cached.
  const std::vector<db::SeriesRecord>& series(const RunRef& r, std::int64_t point_id);
  // The run's measured device ceilings (roofline); empty for a file from before they were recorded. Cached.
  const std::vector<db::CeilingsRecord>& ceilings(const RunRef& r);

 private:
  void reload_runs();
  db::ResultsDb* db_of(int source);

  std::vector<Source> sources_;
  std::vector<RunRow> runs_;
  std::uint64_t generation_ = 0;
  std::map<RunRef, std::vector<db::PointRecord>> points_;
  std::map<RunRef, std::string> read_errors_;  // runs whose points could not be read, and why
  std::map<std::pair<int, std::int64_t>, std::shared_ptr<const prof::ProfileTrace>> profiles_;
  std::map<std::pair<int, std::int64_t>, std::vector<db::MemEventRecord>> memory_;
  std::map<std::pair<int, std::int64_t>, std::vector<db::SeriesRecord>> series_;
  std::map<RunRef, std::vector<db::CeilingsRecord>> ceilings_;
};

}  // namespace moc::gui

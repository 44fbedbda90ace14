#include "gui/model/store.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

namespace moc::gui {

namespace {
const std::vector<db::PointRecord> kNoPoints;
const std::vector<db::MemEventRecord> kNoEvents;
constexpr std::size_t kMaxCachedProfiles = 8;  // a profile can hold a million kernels

// What tells whether a file that could not be opened has changed since: missing, or its size and mtime.
std::string file_stamp(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return "missing";
  const auto mtime = std::filesystem::last_write_time(path, ec);
  return std::to_string(size) + "@" + std::to_string(ec ? 0 : mtime.time_since_epoch().count());
}

// Damage that the header and schema checks do not see (a page in the middle overwritten): SQLite's quick
// check, once per opening (about a second per GB). Empty when the file is sound.
std::string damage_of(const db::ResultsDb& d) {
  try {
    const std::string v = d.quick_check(3);
    return v == "ok" ? std::string() : v;
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A run whose process died commits nothing more, so data_version never tells: look at the writer of each
// running run instead (it then reads as "abandoned").
bool a_running_run_ended(const std::vector<RunRow>& runs) {
  std::optional<db::RunWriter> here;
  for (const auto& row : runs) {
    if (row.run.status != "running" || row.run.writer.pid == 0) continue;
    if (!here) here = db::this_process();
    if (db::writer_state(row.run.writer, *here) == db::WriterState::gone) return true;
  }
  return false;
}
}  // namespace

int Store::open(const std::string& path) {
  Source s;
  s.path = path;
  try {
    s.db = db::ResultsDb::open(path, db::OpenMode::read_only);
    s.data_version = s.db->data_version();
    s.damage = damage_of(*s.db);
  } catch (const std::exception& e) {
    s.error = e.what();
    s.failed_stamp = file_stamp(path);
  }
  sources_.push_back(std::move(s));
  reload_runs();
  ++generation_;
  return static_cast<int>(sources_.size()) - 1;
}

bool Store::any_error() const {
  return std::any_of(sources_.begin(), sources_.end(),
                     [](const Source& s) { return !s.error.empty() || !s.damage.empty(); });
}

db::ResultsDb* Store::db_of(int source) {
  if (source < 0 || source >= static_cast<int>(sources_.size())) return nullptr;
  auto& s = sources_[static_cast<std::size_t>(source)];
  return s.db ? &*s.db : nullptr;
}

bool Store::refresh() {
  bool changed = false;
  for (auto& s : sources_) {
    try {
      if (!s.db) {
        // A file that could not be opened is tried again only once it has changed (a run created it, or
        // finished writing an empty one): not every poll.
        const std::string stamp = file_stamp(s.path);
        if (stamp == s.failed_stamp) continue;
        s.failed_stamp = stamp;
        s.db = db::ResultsDb::open(s.path, db::OpenMode::read_only);
        s.error.clear();
        s.data_version = s.db->data_version();
        s.damage = damage_of(*s.db);
        profiles_.clear();  // a new file under an old name: its point ids mean other points
        changed = true;
        continue;
      }
      const std::int64_t v = s.db->data_version();
      if (v != s.data_version) {
        s.data_version = v;
        changed = true;
      }
    } catch (const std::exception& e) {
      if (s.error != e.what()) changed = true;
      s.error = e.what();
      if (s.db) s.failed_stamp = file_stamp(s.path);
      s.db.reset();
    }
  }
  changed = changed || a_running_run_ended(runs_);
  if (changed) {
    points_.clear();
    read_errors_.clear();
    memory_.clear();
    series_.clear();
    ceilings_.clear();
    // Profiles of committed points never change (a point is written in one transaction): keep them.
    reload_runs();
    ++generation_;
  }
  return changed;
}

void Store::reload_runs() {
  runs_.clear();
  for (int i = 0; i < static_cast<int>(sources_.size()); ++i) {
    auto& s = sources_[static_cast<std::size_t>(i)];
    if (!s.db) continue;
    try {
      for (auto& r : s.db->runs()) {
        RunRow row;
        row.ref = {i, r.id};
        row.environment = db::run_environment(r);
        auto it = points_.find(row.ref);
        if (it == points_.end()) {  // (cached from an earlier reload until the file changes)
          std::vector<db::PointRecord> read;
          try {
            read = s.db->points(r.id);
          } catch (const std::exception& e) {
            read_errors_[row.ref] = e.what();  // shown as such, not as a run of no points
          }
          it = points_.emplace(row.ref, std::move(read)).first;
        }
        if (auto e = read_errors_.find(row.ref); e != read_errors_.end()) row.read_error = e->second;
        const auto& pts = it->second;
        row.points = static_cast<int>(pts.size());
        std::vector<std::string> modes;
        for (const auto& p : pts) {
          row.ok_points += p.status == "ok";
          for (const auto& [name, v] : p.metrics) {
            if (name == "profile_steps" && v > 0) ++row.profiled_points;
            if (name == "noise_met" && v == 0 && p.status == "ok") ++row.noisy_points;
          }
          if (!p.mode.empty() && std::find(modes.begin(), modes.end(), p.mode) == modes.end()) modes.push_back(p.mode);
        }
        for (const auto& m : modes) row.modes += (row.modes.empty() ? "" : ", ") + m;
        row.run = std::move(r);
        runs_.push_back(std::move(row));
      }
    } catch (const std::exception& e) {
      s.error = e.what();
      s.db.reset();
    }
  }
}

const RunRow* Store::run(const RunRef& r) const {
  for (const auto& row : runs_)
    if (row.ref == r) return &row;
  return nullptr;
}

std::string Store::run_label(const RunRef& r) const {
  const RunRow* row = run(r);
  if (!row) return "(no run)";
  const std::string file = std::filesystem::path(sources_[static_cast<std::size_t>(r.source)].path).filename().string();
  return file + " #" + std::to_string(r.run_id) + " " + row->run.scenario_name + " (" + row->run.device_name + ")";
}

const std::vector<db::PointRecord>& Store::points(const RunRef& r) {
  if (auto it = points_.find(r); it != points_.end()) return it->second;
  db::ResultsDb* d = db_of(r.source);
  if (!d) return kNoPoints;
  try {
    return points_.emplace(r, d->points(r.run_id)).first->second;
  } catch (const std::exception&) {
    return kNoPoints;
  }
}

const db::PointRecord* Store::point(const RunRef& r, std::int64_t point_id) {
  for (const auto& p : points(r))
    if (p.id == point_id) return &p;
  return nullptr;
}

std::shared_ptr<const prof::ProfileTrace> Store::profile(const RunRef& r, std::int64_t point_id) {
  const auto key = std::make_pair(r.source, point_id);
  if (auto it = profiles_.find(key); it != profiles_.end()) return it->second;
  db::ResultsDb* d = db_of(r.source);
  if (!d) return nullptr;
  if (profiles_.size() >= kMaxCachedProfiles) profiles_.clear();  // holders keep theirs alive
  try {
    auto t = d->profile(point_id);
    std::shared_ptr<const prof::ProfileTrace> p;
    if (t) p = std::make_shared<const prof::ProfileTrace>(std::move(*t));
    return profiles_.emplace(key, std::move(p)).first->second;
  } catch (const std::exception&) {
    return nullptr;
  }
}

const std::vector<db::MemEventRecord>& Store::memory_events(const RunRef& r, std::int64_t point_id) {
  const auto key = std::make_pair(r.source, point_id);
  if (auto it = memory_.find(key); it != memory_.end()) return it->second;
  db::ResultsDb* d = db_of(r.source);
  if (!d) return kNoEvents;
  try {
    return memory_.emplace(key, d->memory_events(point_id)).first->second;
  } catch (const std::exception&) {
    return kNoEvents;
  }
}

const std::vector<db::SeriesRecord>& Store::series(const RunRef& r, std::int64_t point_id) {
  static const std::vector<db::SeriesRecord> kNone;
  const auto key = std::make_pair(r.source, point_id);
  if (auto it = series_.find(key); it != series_.end()) return it->second;
  db::ResultsDb* d = db_of(r.source);
  if (!d) return kNone;
  try {
    return series_.emplace(key, d->series(point_id)).first->second;
  } catch (const std::exception&) {
    return kNone;
  }
}

const std::vector<db::CeilingsRecord>& Store::ceilings(const RunRef& r) {
  static const std::vector<db::CeilingsRecord> kNone;
  if (auto it = ceilings_.find(r); it != ceilings_.end()) return it->second;
  db::ResultsDb* d = db_of(r.source);
  if (!d) return kNone;
  try {
    return ceilings_.emplace(r, d->ceilings(r.run_id)).first->second;
  } catch (const std::exception&) {
    return kNone;
  }
}

std::vector<db::KernelSummaryRow> Store::kernel_summary(const RunRef& r, const std::string& short_name) {
  db::ResultsDb* d = db_of(r.source);
  if (!d) return {};
  try {
    return d->kernel_summary(r.run_id, short_name);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace moc::gui

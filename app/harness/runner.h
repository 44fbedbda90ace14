// `mocbench run`: scenario -> points -> backend -> measurements -> SQLite, with progress on the terminal.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace moc {

struct RunOptions {
  std::string db_path = "mocbench.db";
  std::string device;            // empty: the scenario's device
  bool dry_run = false;
  enum class Output { progress, quiet, json } output = Output::progress;
  // CPU backend memory limit; 0: the host memory available less a margin (app/harness/host_memory.h)
  std::size_t cpu_memory_limit_bytes = 0;
  // "axis=value" filters: only the points whose axis (or mode) has that value run; all filters must match.
  std::vector<std::string> only;
  bool no_profile = false;  // --no-profile: no profile pass, whatever the scenario's [profile] says
  int gpus = 0;             // --gpus N: every train point runs data-parallel on N GPUs (0: the scenario's)
  int point_index = -1;     // --point I: only the point with sweep index I (what the launcher's workers run)
};

// How a point of a run ended, stored as its name (db::PointRecord::status): "ok", "oom" (it did not fit the
// device's memory), "failed" (any other error), "interrupted" (SIGINT).
// (Inline: the runner is part of the executable, and the tests check these without it.)
enum class PointStatus { ok, oom, failed, interrupted };
constexpr std::string_view point_status_name(PointStatus s) {
  switch (s) {
    case PointStatus::ok: return "ok";
    case PointStatus::oom: return "oom";
    case PointStatus::interrupted: return "interrupted";
    case PointStatus::failed: break;
  }
  return "failed";
}
// A stored name back to its status; a name that is none of the four reads as failed.
constexpr PointStatus parse_point_status(std::string_view name) {
  for (PointStatus s : {PointStatus::ok, PointStatus::oom, PointStatus::interrupted})
    if (point_status_name(s) == name) return s;
  return PointStatus::failed;
}

// Returns the process exit code: 0 ok, 1 runtime failure, 2 bad scenario, 130 interrupted.
int run_scenario_file(const std::string& path, const RunOptions& opt);

// The cache key of a device's roofline ceilings (app/harness/ceilings.h): "cuda|name|sm_90|132 SMs|mem ... kHz|driver
// ...", or "cpu|model|N threads" -- what, changed, would change them.
std::string ceilings_key(const std::string& backend, int gpu);

}  // namespace moc

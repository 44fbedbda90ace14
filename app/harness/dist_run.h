// Data-parallel points (issue 15): how `mocbench run` runs a point on several GPUs.
//
// On one machine (gpus = N in a scenario, or --gpus N): the runner starts N copies of itself, each
// `mocbench run FILE --point I --db DIR/point.db --quiet` with the mocbench launch contract in its environment
// (app/harness/dist_launch.h) and one GPU; they join one communicator (NCCL; on the CPU backend shared memory), run
// the point in lockstep, rank 0 gathers every rank's metrics and writes the point into DIR/point.db; the
// runner copies it into the user's database. Any rank failing ends the others; the point is stored as oom /
// failed with that rank's message and the sweep goes on.
//
// Under an external launcher (mpirun, srun; several machines) every process runs `mocbench run` itself and
// reads its rank from the environment; rank 0 writes the database.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/harness/dist_launch.h"
#include "db/results_db.h"
#include "kernels/comm.h"
#include "kernels/ops.h"

namespace moc {

// This process's end of the ranks' communicator: NCCL on "cuda" (the id from the environment or the id file),
// the launcher's shared-memory file (MOCBENCH_SHM_FILE) on "cpu". Collective: every rank calls it.
std::unique_ptr<Communicator> make_rank_communicator(const DistEnv& d, const std::string& backend, Ops& ops);

// A point as rank 0's worker stored it, read back for the runner's database.
struct StoredPoint {
  db::PointRecord rec;
  std::vector<db::RangeRecord> ranges;
  std::vector<db::MemEventRecord> memory;
  std::vector<db::SeriesRecord> series;
  std::optional<prof::ProfileTrace> profile;
};

struct WorkerLaunch {
  std::string scenario_path;
  // The text the launcher read and validated (stored with its run): the workers run a copy of it in their
  // scratch folder, not the file, which may have been edited since or been a pipe (`<(...)`). Empty: the file.
  std::string scenario_text;
  int point_index = 0;
  int gpus = 2;
  std::string backend;              // cuda | cpu
  std::vector<std::string> extra_args;  // passed to every worker's `run` (--no-profile, --gpus N, ...)
  const std::atomic<bool>* stop = nullptr;  // SIGINT in the runner: forwarded to the workers
};

// Starts the workers, waits for them and returns the stored point; when a rank fails, a record with status
// oom / failed / interrupted and the rank's message. Throws ConfigError when the workers cannot be started.
StoredPoint run_point_workers(const WorkerLaunch& w);

// In a worker started by run_point_workers (MOCBENCH_LAUNCHER_PID set): the worker dies with its launcher
// (PR_SET_PDEATHSIG), and ends at once when the launcher is already gone. No-op elsewhere.
void bind_worker_to_launcher();

// In a worker: where the launcher wants a failed rank's status and message (MOCBENCH_WORKER_DIR), written as
// "status\nmessage". No-op outside the launcher.
void report_worker_failure(const DistEnv& d, const std::string& status, const std::string& message);

}  // namespace moc

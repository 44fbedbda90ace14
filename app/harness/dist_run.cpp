#include "app/harness/dist_run.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "kernels/cpu/shm_comm.h"
#include "model/config.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/nccl.h"
#endif

extern char** environ;

namespace moc {

namespace fs = std::filesystem;

std::unique_ptr<Communicator> make_rank_communicator(const DistEnv& d, const std::string& backend, Ops& ops) {
  if (backend == "cpu") {
    const char* f = std::getenv("MOCBENCH_SHM_FILE");
    if (f == nullptr || *f == 0)
      throw ConfigError("the CPU backend's ranks meet in shared memory that mocbench's own launcher prepares "
                        "(gpus = N in a scenario, or --gpus N); under " + d.source +
                        " run the CUDA backend (--device cuda)");
    return open_shm_communicator(f, d.rank, d.world, ops);
  }
#ifdef MOCBENCH_HAVE_CUDA
  if (!cuda::nccl_available()) throw ConfigError("this build has no NCCL: data-parallel training is off");
  const auto id = acquire_nccl_id(d, [] { return cuda::nccl_unique_id(); });
  return cuda::make_nccl_communicator(ops, id, d.rank, d.world);
#else
  throw ConfigError("this build has no CUDA backend: data parallelism over GPUs needs one");
#endif
}

void bind_worker_to_launcher() {
  const char* launcher = std::getenv("MOCBENCH_LAUNCHER_PID");
  if (launcher == nullptr || *launcher == 0) return;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before the line above: this process was then handed to another parent.
  if (std::to_string(::getppid()) != launcher) _exit(137);
}

void report_worker_failure(const DistEnv& d, const std::string& status, const std::string& message) {
  const char* dir = std::getenv("MOCBENCH_WORKER_DIR");
  if (dir == nullptr || *dir == 0) return;
  std::ofstream f(fs::path(dir) / ("rank" + std::to_string(d.rank) + ".error"), std::ios::trunc);
  f << status << "\n" << message;
}

namespace {

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw ConfigError("cannot find mocbench's own executable to start workers: " + ec.message());
  return p.string();
}

std::vector<std::string> parent_environment(const std::vector<std::string>& add) {
  std::vector<std::string> out;
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e), name = name_of(kv);
    // A surrounding launch's id must not reach the workers: they meet through the launcher's file.
    bool replaced = name == "MOCBENCH_NCCL_ID" || name == "MOCBENCH_SHM_FILE";
    for (const auto& a : add) replaced = replaced || name_of(a) == name;
    if (!replaced) out.push_back(kv);
  }
  out.insert(out.end(), add.begin(), add.end());
  return out;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The launcher that made a point directory, in the directory: a later launch removes the directories of
// launchers that are gone (a SIGKILLed run cannot clean up after itself; its workers die with it).
constexpr const char* kOwnerFile = "launcher";

void write_owner(const fs::path& dir) {
  const db::RunWriter me = db::this_process();
  std::ofstream f(dir / kOwnerFile, std::ios::trunc);
  f << me.host << "\n" << me.boot_id << "\n" << me.pid_namespace << "\n" << me.pid << "\n" << me.start_ticks << "\n";
}

void remove_abandoned_point_dirs() {
  std::error_code ec;
  const db::RunWriter here = db::this_process();
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mocbench-point-", 0) != 0 || !e.is_directory(ec)) continue;
    std::ifstream f(e.path() / kOwnerFile);
    db::RunWriter w;
    if (!(std::getline(f, w.host) && std::getline(f, w.boot_id) && std::getline(f, w.pid_namespace) &&
          (f >> w.pid >> w.start_ticks)))
      continue;  // not ours, or still being created: left alone
    if (db::writer_state(w, here) == db::WriterState::gone) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

namespace {

// The environment every worker shares, and the device each rank gets.
struct WorkerSetup {
  std::vector<std::string> devices, common;
  std::string id_setting;
};

WorkerSetup worker_setup(const WorkerLaunch& w, const fs::path& dir) {
  const int n = w.gpus;
  WorkerSetup s;
  s.common = {"MOCBENCH_WORKER_DIR=" + dir.string(), "MOCBENCH_LAUNCHER_PID=" + std::to_string(::getpid())};
  s.id_setting = "MOCBENCH_NCCL_ID_FILE=" + (dir / "nccl.id").string();
  if (w.backend == "cpu") {
    create_shm_comm_file((dir / "comm.shm").string(), n);
    s.common.push_back("MOCBENCH_SHM_FILE=" + (dir / "comm.shm").string());
    // The ranks share the machine's cores.
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    s.common.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1u, hw / static_cast<unsigned>(n))));
    for (int r = 0; r < n; ++r) s.devices.push_back(std::to_string(r));  // unused by the CPU backend
  } else {
    int count = 0;
#ifdef MOCBENCH_HAVE_CUDA
    count = static_cast<int>(cuda::list_gpus().size());
#endif
    s.devices = visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), count);
  }
  return s;
}

void kill_all(const std::vector<pid_t>& pids, int sig) {
  for (pid_t p : pids)
    if (p > 0) ::kill(p, sig);
}

// One process per rank: `mocbench run SCENARIO --point I` with the rank's environment. A rank that cannot be
// started ends the ones already started.
std::vector<pid_t> spawn_workers(const WorkerLaunch& w, const fs::path& dir, const std::string& exe,
                                 const std::string& db) {
  const WorkerSetup setup = worker_setup(w, dir);
  std::string scenario = w.scenario_path;
  if (!w.scenario_text.empty()) {
    scenario = (dir / "scenario.toml").string();
    std::ofstream f(scenario, std::ios::binary | std::ios::trunc);
    f << w.scenario_text;
    f.close();
    if (!f) throw ConfigError("cannot write the scenario for the workers to " + scenario);
  }
  std::vector<std::string> args = {exe, "run", scenario, "--point", std::to_string(w.point_index), "--db", db,
                                   "--quiet", "--device", w.backend};
  args.insert(args.end(), w.extra_args.begin(), w.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < w.gpus; ++r) {
    auto add = worker_environment(r, w.gpus, setup.id_setting, setup.devices);
    add.insert(add.end(), setup.common.begin(), setup.common.end());
    auto env = parent_environment(add);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      kill_all(pids, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      throw ConfigError("cannot start worker " + std::to_string(r) + " (" + exe + "): " + std::strerror(rc));
    }
    pids.push_back(pid);
  }
  return pids;
}

struct WorkersEnded {
  std::vector<int> status;  // each rank's wait status
  int first_bad = -1;       // the first rank that ended badly, -1: none
  bool forwarded = false;   // a stop request was passed on (SIGINT)
};

// Waits for all. When one rank ends badly, the others are blocked in a collective: end them (SIGTERM, then
// SIGKILL after a grace period).
WorkersEnded wait_workers(std::vector<pid_t> pids, const std::atomic<bool>* stop) {
  const std::size_t n = pids.size();
  WorkersEnded out;
  out.status.assign(n, 0);
  std::vector<bool> done(n, false);
  std::size_t left = n;
  std::chrono::steady_clock::time_point bad_at;
  while (left > 0) {
    for (std::size_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      const pid_t got = waitpid(pids[r], &st, WNOHANG);
      if (got == 0) continue;
      done[r] = true;
      out.status[r] = st;
      pids[r] = -1;
      --left;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && out.first_bad < 0) {
        out.first_bad = static_cast<int>(r);
        bad_at = std::chrono::steady_clock::now();
        kill_all(pids, SIGTERM);
      }
    }
    if (stop && stop->load() && !out.forwarded) {
      kill_all(pids, SIGINT);
      out.forwarded = true;
    }
    if (out.first_bad >= 0 && left > 0 && std::chrono::steady_clock::now() - bad_at > std::chrono::seconds(10))
      kill_all(pids, SIGKILL);
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

// Rank 0's stored point, with everything recorded at it.
StoredPoint collect_point(const std::string& db) {
  StoredPoint out;
  std::error_code ec;
  if (!fs::exists(db, ec)) {
    out.rec.status = "failed";
    out.rec.error = "the workers ended without storing the point";
    return out;
  }
  const db::ResultsDb in = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto runs = in.runs();
  const auto points = runs.empty() ? std::vector<db::PointRecord>{} : in.points(runs.front().id);
  if (points.empty()) {
    out.rec.status = "failed";
    out.rec.error = "rank 0 stored no point";
    return out;
  }
  out.rec = points.front();
  out.ranges = in.ranges(out.rec.id);
  out.memory = in.memory_events(out.rec.id);
  out.series = in.series(out.rec.id);
  out.profile = in.profile(out.rec.id);
  return out;
}

// The first rank that failed says why (its message file), else its exit status.
StoredPoint failed_point(const fs::path& dir, const WorkersEnded& e) {
  StoredPoint out;
  out.rec.status = "failed";
  const std::string rank = "rank " + std::to_string(e.first_bad);
  std::string message = rank + " ended with " + exit_text(e.status[static_cast<std::size_t>(e.first_bad)]);
  std::ifstream f(dir / ("rank" + std::to_string(e.first_bad) + ".error"));
  std::string st;
  if (f && std::getline(f, st)) {
    std::stringstream rest;
    rest << f.rdbuf();
    out.rec.status = st;
    message = rank + ": " + rest.str();
  } else if (e.forwarded) {
    out.rec.status = "interrupted";
    message = "stopped by SIGINT";
  }
  out.rec.error = message;
  return out;
}

}  // namespace

StoredPoint run_point_workers(const WorkerLaunch& w) {
  remove_abandoned_point_dirs();
  std::string tmpl = (fs::temp_directory_path() / "mocbench-point-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr)
    throw ConfigError("cannot create a directory for the workers in " + fs::temp_directory_path().string());
  const fs::path dir(tmpl);
  write_owner(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const std::string exe = self_exe(), db = (dir / "point.db").string();
  const WorkersEnded ended = wait_workers(spawn_workers(w, dir, exe, db), w.stop);
  return ended.first_bad < 0 ? collect_point(db) : failed_point(dir, ended);
}

}  // namespace moc

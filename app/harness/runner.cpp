#include "app/harness/runner.h"

#include "app/harness/ceilings.h"
#include "app/harness/dist_launch.h"
#include "app/harness/dist_run.h"
#include "app/harness/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/harness/point_bench.h"
#include "app/harness/point_spec.h"
#include "app/scenario/scenario.h"
#include "app/report/summary.h"
#include "db/results_db.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/nccl.h"
#endif

#ifndef MOCBENCH_VERSION
#define MOCBENCH_VERSION "unknown"
#endif

namespace moc {

namespace {
std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop.store(true); }

// How long `run` waits for a results file another process keeps locked before it saves the point to a side
// file instead: 10 minutes, or MOCBENCH_LOCK_WAIT_S seconds.
double lock_wait_s() {
  const char* v = std::getenv("MOCBENCH_LOCK_WAIT_S");
  char* end = nullptr;
  const double s = v ? std::strtod(v, &end) : 0.0;
  return v && end != v && *end == 0 && s >= 0 && s <= 86400 ? s : 600.0;
}

// A measured point the results file would not take: saved as JSON beside it (else in the working folder) so
// that nothing measured is silently lost. Returns the file's name, or "" when even that failed.
std::string save_unstored_point(const std::string& db_path, std::int64_t run_id, const db::PointRecord& rec,
                                const std::string& why) {
  nlohmann::ordered_json axes = nlohmann::ordered_json::object(), metrics = nlohmann::ordered_json::object();
  for (const auto& [k, v] : rec.axes) axes[k] = v;
  for (const auto& [k, v] : rec.metrics) metrics[k] = v;  // NaN / inf: null
  const nlohmann::ordered_json doc{{"results_file", db_path}, {"run", run_id},       {"point", rec.index},
                                   {"mode", rec.mode},         {"status", rec.status}, {"error", rec.error},
                                   {"not_stored_because", why}, {"axes", axes},       {"metrics", metrics}};
  std::ostringstream j;
  j << doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  const std::string name = std::filesystem::path(db_path).filename().string() + ".unstored-run" +
                           std::to_string(run_id) + "-point" + std::to_string(rec.index) + ".json";
  const std::filesystem::path dir = std::filesystem::path(db_path).parent_path();
  for (const auto& where : {dir.empty() ? std::filesystem::path(".") : dir, std::filesystem::path(".")}) {
    const std::string out = (where / name).string();
    std::ofstream f(out, std::ios::trunc);
    f << j.str();
    f.close();
    if (f) return out;
  }
  return "";
}


std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

std::string ceilings_key(const std::string& backend, int gpu) {
#ifdef MOCBENCH_HAVE_CUDA
  if (backend == "cuda") {
    const auto g = cuda::list_gpus().at(static_cast<std::size_t>(gpu));
    return "cuda|" + g.name + "|sm_" + std::to_string(g.cc_major) + std::to_string(g.cc_minor) + "|" +
           std::to_string(g.sm_count) + " SMs|mem " + std::to_string(g.mem_clock_khz) + " kHz|driver " +
           std::to_string(g.driver_version);
  }
#endif
  (void)backend;
  (void)gpu;
  // (the GEMM library's build and threading: their GEMM rate is a different ceiling)
  const CpuBlasInfo blas = cpu_blas();
  return "cpu|" + cpu_model() + "|" + std::to_string(std::thread::hardware_concurrency()) + " threads|" + blas.config +
         "|" + blas.threading;
}

namespace {

// The run's device ceilings for the roofline (DEVICE_CEILINGS): from the cache or measured now. A failure is a
// note, never the run's end: the roofline then shows rates without % of the ceilings.
void record_ceilings(db::ResultsDb& store, std::int64_t run_id, const std::string& backend,
                     const std::string& device_name) {
  try {
    const std::string key = ceilings_key(backend, 0);
    std::optional<DeviceCeilings> c = cached_ceilings(key);
    if (!c) {  // measured once on a backend of its own (its memory is freed before the first point)
      std::unique_ptr<Ops> ops;
#ifdef MOCBENCH_HAVE_CUDA
      if (backend == "cuda") ops = cuda::make_cuda_ops(0);
#endif
      if (!ops) ops = make_cpu_ops();
      c = measure_ceilings(*ops);
      store_ceilings(key, *c);
    }
    db::CeilingsRecord r;
    r.device_id = backend == "cuda" ? 0 : -1;
    r.device = device_name;
    r.copy_GBps = c->copy_GBps;
    r.gemm_tflops = c->gemm_tflops;
    r.gemm_dtype = c->gemm_dtype;
    r.measured_unix_ms = c->measured_unix_ms;
    r.source = c->source;
    store.add_ceilings(run_id, r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mocbench: the device ceilings (roofline) could not be measured: %s\n", e.what());
  }
}

std::string machine_json(const std::string& backend) {
  const CpuBlasInfo blas = cpu_blas();
  nlohmann::ordered_json o{{"cpu", cpu_model()},
                           {"threads", std::thread::hardware_concurrency()},
                           {"backend", backend},
                           {"blas", {{"config", blas.config}, {"threading", blas.threading}, {"threads", blas.threads}}}};
#ifdef MOCBENCH_HAVE_CUDA
  std::string why;
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const auto& g : cuda::list_gpus(&why))
    gpus.push_back({{"name", g.name},
                    {"sm", std::to_string(g.cc_major) + std::to_string(g.cc_minor)},
                    {"sms", g.sm_count},
                    {"memory_bytes", g.total_mem_bytes},
                    {"l2_bytes", g.l2_bytes},
                    {"sm_clock_khz", g.sm_clock_khz},
                    {"mem_clock_khz", g.mem_clock_khz},
                    {"driver", g.driver_version},
                    {"runtime", g.runtime_version}});
  o["gpus"] = std::move(gpus);
#endif
  return o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

#ifdef MOCBENCH_HAVE_CUDA
// Dense bf16 tensor-core peak used for MFU: SMs x 4096 FLOP per clock (Hopper, sm_90) x 1.83 GHz, NVIDIA's
// figure for the H100 SXM and H200 (989.4 TFLOPS at 132 SMs). 0 (no MFU) for other architectures.
double dense_bf16_peak_flops(const cuda::GpuInfo& g) {
  if (g.cc_major != 9) return 0.0;
  return static_cast<double>(g.sm_count) * 4096.0 * 1.83e9;
}
#endif

bool gpu_present() {
#ifdef MOCBENCH_HAVE_CUDA
  return !cuda::list_gpus().empty();
#else
  return false;
#endif
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

std::string axes_text(const ScenarioPoint& p) {
  std::string t;
  for (const auto& [k, v] : p.axes) t += (t.empty() ? "" : " ") + k + "=" + v;
  return t;
}

// Best effort: when even this write fails, the run is left "running" and a later writer marks it abandoned.
void mark_failed(db::ResultsDb& store, std::int64_t run_id, const std::string& error) noexcept {
  try {
    store.finish_run(run_id, "failed", unix_ms(), error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nmocbench: run %lld could not be marked failed: %s\n", static_cast<long long>(run_id),
                 e.what());
  }
}


// A point in this process: its backend (made per point, so each starts with an empty allocator) and, for a
// rank of a launch, the communicator (made at the first point and kept: NCCL's creation is collective).
PointOutcome run_here(const ScenarioPoint& p, const RunOptions& opt, const std::string& backend, const DistEnv& dist,
                      std::unique_ptr<Communicator>& comm, std::string& host_limit_note) {
  std::unique_ptr<Ops> ops;
  std::size_t limit = 0;  // the CPU backend's memory limit, for the early refusal of points that cannot fit
#ifdef MOCBENCH_HAVE_CUDA
  if (backend == "cuda") {
    // A rank's GPU: its local rank among those it sees, or the only one it sees (srun --gpus-per-task 1 and
    // mocbench's own workers give each process one GPU, whatever its local rank).
    const int seen = static_cast<int>(cuda::list_gpus().size());
    if (seen != 1 && dist.local_rank >= seen)
      throw ConfigError("rank " + std::to_string(dist.rank) + ": local rank " + std::to_string(dist.local_rank) + " but this "
                        "process sees " + std::to_string(seen) + " GPUs (CUDA_VISIBLE_DEVICES)");
    ops = cuda::make_cuda_ops(seen == 1 ? 0 : dist.local_rank);
  }
#endif
  if (!ops) {
    // By default the host's available memory (read again for each point) less a margin: a point that
    // cannot fit is OutOfMemory, not a process the kernel's OOM killer ends.
    limit = opt.cpu_memory_limit_bytes;
    host_limit_note.clear();
    if (limit == 0)
      if (const auto hm = host_memory_available()) {
        limit = default_cpu_memory_limit(*hm);
        host_limit_note = " (the default limit: " + std::to_string(hm->available_bytes >> 20) + " MiB available per " +
                          hm->source + " less a margin; --cpu-memory-limit-mib sets another)";
      }
    ops = make_cpu_ops(limit);
  }
  PointSpec spec = to_spec(p, opt.no_profile);
  spec.stop = &g_stop;
  spec.memory_limit_bytes = limit;
#ifdef MOCBENCH_HAVE_CUDA
  if (backend == "cuda") spec.peak_flops = dense_bf16_peak_flops(cuda::list_gpus().at(0));
#endif
  if (dist.distributed()) {
    if (!comm) comm = make_rank_communicator(dist, backend, *ops);
    else comm->bind(*ops);
    spec.comm = comm.get();
  }
  return run_point(*ops, spec);
}

// A data-parallel point on this machine's GPUs: one worker process per GPU (app/harness/dist_run.h).
StoredPoint run_on_workers(const std::string& path, const std::string& text, const ScenarioPoint& p,
                           const RunOptions& opt, const std::string& backend) {
  WorkerLaunch w;
  w.scenario_path = path;
  w.scenario_text = text;
  w.point_index = p.index;
  w.gpus = p.gpus;
  w.backend = backend;
  w.stop = &g_stop;
  if (opt.no_profile) w.extra_args.push_back("--no-profile");
  if (opt.gpus > 0) w.extra_args.insert(w.extra_args.end(), {"--gpus", std::to_string(opt.gpus)});
  if (opt.cpu_memory_limit_bytes)
    w.extra_args.insert(w.extra_args.end(), {"--cpu-memory-limit-mib", std::to_string(opt.cpu_memory_limit_bytes >> 20)});
  return run_point_workers(w);
}

// What the database keeps of a point measured in this process.
StoredPoint stored_from(PointOutcome& out) {
  StoredPoint sp;
  for (const auto& r : out.ranges) sp.ranges.push_back({r.name, r.start_ns, r.end_ns, r.depth});
  for (const auto& e : out.memory_events)
    sp.memory.push_back({e.t_ns, std::string(category_name(e.tag.category)), std::string(module_name(e.tag.module)),
                         e.tag.layer, e.bytes});
  for (auto& sr : out.series) sp.series.push_back({std::move(sr.name), std::move(sr.x), std::move(sr.y)});
  sp.profile = std::move(out.profile);
  return sp;
}

// --- Planning: what runs, decided before the run record exists. Each step prints why a run cannot start and
// returns the exit code (2: bad input, 1: no usable backend), or nothing to go on.

// What the run is: the scenario, the backend, the points left after the filters, the launch this process is
// part of, and what it prints.
struct RunPlan {
  Scenario sc;
  std::string backend;
  std::vector<AppliedOverride> applied;
  std::vector<ScenarioPoint> points;
  DistEnv dist;
  bool writer = true;  // rank 0 alone writes the database
  bool quiet = false, json = false;
};

using ExitCode = std::optional<int>;

// The scenario, the backend that runs it, and its points.
ExitCode load_points(const std::string& path, const RunOptions& opt, RunPlan& plan) {
  try {
    plan.sc = load_scenario(path);
  } catch (const ScenarioError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::string& backend = plan.backend;
  backend = opt.device.empty() ? plan.sc.device : opt.device;
  if (backend == "auto") backend = gpu_present() ? "cuda" : "cpu";
  if (backend == "cuda" && !gpu_present()) {
#ifdef MOCBENCH_HAVE_CUDA
    std::string why;
    cuda::list_gpus(&why);
    std::fprintf(stderr, "mocbench: no usable CUDA GPU (%s); run with --device cpu\n", why.c_str());
#else
    std::fprintf(stderr, "mocbench: this build has no CUDA backend (nvcc was not found); run with --device cpu\n");
#endif
    return 1;
  }
  if (backend != "cpu" && backend != "cuda") {
    std::fprintf(stderr, "mocbench: unknown device '%s' (auto, cpu or cuda)\n", backend.c_str());
    return 2;
  }
  try {
    plan.points = plan.sc.expand(backend, &plan.applied);
  } catch (const ScenarioError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return {};
}

// --only axis=value ...: the points that, on every axis (or mode) named, have one of the values asked for there --
// `axis=a,b` and `--only axis=a --only axis=b` alike ask for a or b; different axes must all match. (A value that
// itself holds a comma matches as written, too.)
ExitCode apply_only(const std::string& path, const RunOptions& opt, std::vector<ScenarioPoint>& points) {
  if (opt.only.empty()) return {};
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;  // axis -> the values asked for, in order
  for (const auto& f : opt.only) {
    const auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == f.size()) {
      std::fprintf(stderr, "mocbench: --only expects axis=value or axis=v1,v2 (e.g. --only mode=decode --only "
                           "batch=1,4), got '%s'\n", f.c_str());
      return 2;
    }
    const std::string key = f.substr(0, eq), val = f.substr(eq + 1);
    auto it = std::find_if(axes.begin(), axes.end(), [&](const auto& a) { return a.first == key; });
    if (it == axes.end()) it = axes.insert(axes.end(), {key, {}});
    it->second.push_back(val);
    if (val.find(',') == std::string::npos) continue;
    std::istringstream pieces(val);
    for (std::string v; std::getline(pieces, v, ',');)
      if (!v.empty()) it->second.push_back(v);
  }
  std::vector<ScenarioPoint> kept;
  for (const auto& p : points) {
    bool match = true;
    for (const auto& [key, vals] : axes) {
      const std::string* have = key == "mode" ? &p.mode : p.axis(key);
      match = match && have && std::find(vals.begin(), vals.end(), *have) != vals.end();
    }
    if (match) kept.push_back(p);
  }
  if (kept.empty()) {
    std::fprintf(stderr, "mocbench: no point of %s matches --only", path.c_str());
    for (const auto& f : opt.only) std::fprintf(stderr, " %s", f.c_str());
    std::fprintf(stderr, " (see --dry-run for the points)\n");
    return 2;
  }
  points = std::move(kept);
  return {};
}

// --gpus N: every train point data-parallel on N GPUs.
ExitCode apply_gpus(const std::string& path, const RunOptions& opt, std::vector<ScenarioPoint>& points) {
  if (opt.gpus <= 0) return {};
  for (auto& p : points) {
    if (p.mode != "train") continue;
    if (p.data.active() && opt.gpus > 1) {
      std::fprintf(stderr, "%s: point #%d trains on [data] text, which runs on one GPU (data-parallel text training "
                           "is not built)\n  hint: --only to leave it out, or drop --gpus\n", path.c_str(), p.index);
      return 2;
    }
    p.gpus = opt.gpus;
    bool found = false;
    for (auto& [k, v] : p.axes)
      if (k == "gpus") {
        v = std::to_string(opt.gpus);
        found = true;
      }
    if (!found) p.axes.push_back({"gpus", std::to_string(opt.gpus)});
  }
  return {};
}

// --point I: the point of sweep index I alone (what the launcher's workers run).
ExitCode apply_point_index(const std::string& path, const RunOptions& opt, std::vector<ScenarioPoint>& points) {
  if (opt.point_index < 0) return {};
  std::vector<ScenarioPoint> kept;
  for (const auto& p : points)
    if (p.index == opt.point_index) kept.push_back(p);
  if (kept.empty()) {
    std::fprintf(stderr, "mocbench: %s has no point #%d (see --dry-run)\n", path.c_str(), opt.point_index);
    return 2;
  }
  points = std::move(kept);
  return {};
}

// Ranks of a launch (mocbench's own workers, MPI, Slurm): every train point runs over all of them.
ExitCode read_launch(const std::string& path, RunPlan& plan) {
  try {
    plan.dist = read_dist_env();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "mocbench: %s\n", e.what());
    return 2;
  }
  const DistEnv& dist = plan.dist;
  if (dist.distributed())
    for (const auto& p : plan.points)
      if (p.mode != "train" || p.gpus != dist.world) {
        std::fprintf(stderr,
                     "%s: point #%d (%s, gpus = %d) cannot run in this %s launch of %d ranks: every point must train "
                     "with gpus = %d\n  hint: select them with --only gpus=%d, or pass --gpus %d\n",
                     path.c_str(), p.index, p.mode.c_str(), p.gpus, dist.source.c_str(), dist.world, dist.world,
                     dist.world, dist.world);
        return 2;
      }
  return {};
}

// GPU counts: what the machine cannot hold is refused before any work (a launch's ranks each bring theirs).
ExitCode check_gpu_capacity(const std::string& path, const RunPlan& plan) {
  if (plan.dist.distributed()) return {};
  int most = 1;
  for (const auto& p : plan.points) most = std::max(most, p.gpus);
  if (most <= 1 || plan.backend != "cuda") return {};
  int available = 0;
  bool nccl = false;
#ifdef MOCBENCH_HAVE_CUDA
  available = static_cast<int>(cuda::list_gpus().size());
  nccl = cuda::nccl_available();
#endif
  try {
    check_gpu_count(most, available);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
    return 2;
  }
  if (!nccl) {
    std::fprintf(stderr, "%s: gpus = %d needs NCCL, which this build does not link (see the build log)\n", path.c_str(), most);
    return 2;
  }
  return {};
}

// Checkpoints named with placeholders (e.g. written by a training scenario's [data] save) must exist before
// any point runs.
ExitCode check_weights_exist(const std::string& path, const std::vector<ScenarioPoint>& points) {
  for (const auto& p : points) {
    std::error_code ec;
    if (p.weights_deferred && !std::filesystem::is_regular_file(p.weights, ec)) {
      std::fprintf(stderr,
                   "%s: point #%d: [model] weights: no file '%s'\n  hint: a checkpoint that a training scenario "
                   "writes with [data] save (e.g. mocbench run scenarios/quality_small.toml); run that first, from "
                   "the same directory\n",
                   path.c_str(), p.index, p.weights.c_str());
      return 2;
    }
  }
  return {};
}

// The whole plan: the steps above in order, the run's header printed, and --dry-run's list of points (exit 0).
ExitCode plan_run(const std::string& path, const RunOptions& opt, RunPlan& plan) {
  if (ExitCode code = load_points(path, opt, plan)) return code;
  if (ExitCode code = apply_only(path, opt, plan.points)) return code;
  if (ExitCode code = apply_gpus(path, opt, plan.points)) return code;
  if (ExitCode code = apply_point_index(path, opt, plan.points)) return code;
  if (ExitCode code = read_launch(path, plan)) return code;
  plan.writer = !plan.dist.distributed() || plan.dist.rank == 0;
  plan.quiet = opt.output == RunOptions::Output::quiet || !plan.writer;
  plan.json = plan.writer && opt.output == RunOptions::Output::json;
  if (!plan.quiet && !plan.json) {
    std::printf("scenario %s (%s): %zu points on %s\n", plan.sc.name.c_str(), path.c_str(), plan.points.size(),
                plan.backend.c_str());
    for (const auto& a : plan.applied)
      std::printf("  %s override: %s.%s = %s\n", plan.backend.c_str(), a.section.c_str(), a.key.c_str(), a.value.c_str());
    for (const auto& [k, v] : run_environment_now())  // stored with the run: they change what runs
      std::printf("  environment: %s=%s\n", k.c_str(), v.c_str());
  }
  if (opt.dry_run) {
    for (const auto& p : plan.points) std::printf("%s\n", p.describe().c_str());
    return 0;
  }
  if (ExitCode code = check_gpu_capacity(path, plan)) return code;
  return check_weights_exist(path, plan.points);
}

// --- The run record: the database the run goes to and what it keeps of the run before any point.

// Ranks other than 0 keep their run in a scratch file of their own, removed at the end ("" when it could not
// be made, said on stderr).
std::string scratch_db_path(const DistEnv& dist) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("mocbench-rank" + std::to_string(dist.rank) + "-XXXXXX")).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    std::fprintf(stderr, "mocbench: rank %d cannot create a scratch database in %s\n", dist.rank,
                 std::filesystem::temp_directory_path().c_str());
    return "";
  }
  ::close(fd);
  return tmpl;
}

struct ScratchDb {
  std::string path;
  ~ScratchDb() {
    if (path.empty()) return;
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
  }
};

std::string overrides_json(const std::vector<AppliedOverride>& applied) {
  nlohmann::ordered_json ov = nlohmann::ordered_json::array();
  for (const auto& a : applied) ov.push_back({{"section", a.section}, {"key", a.key}, {"value", a.value}});
  return ov.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Begins the run in the database: the scenario, the machine, its devices and roofline ceilings. Returns its id.
std::int64_t begin_run_record(db::ResultsDb& store, const std::string& path, const RunPlan& plan) {
  const std::string& backend = plan.backend;
  db::RunRecord run;
  run.scenario_name = plan.sc.name;
  run.scenario_path = path;
  run.scenario_text = plan.sc.text;
  run.scenario_hash = plan.sc.hash;
  run.overrides_json = overrides_json(plan.applied);
  run.config_json = run_config_json(backend, plan.points.size());
  run.machine_json = machine_json(backend);
  run.device_kind = backend;
  run.device_name = cpu_model();
#ifdef MOCBENCH_HAVE_CUDA
  if (backend == "cuda") run.device_name = cuda::list_gpus().at(0).name;
#endif
  run.mocbench_version = MOCBENCH_VERSION;
  run.started_unix_ms = unix_ms();
  const std::int64_t run_id = store.begin_run(run);
  store.add_device(run_id, {backend, run.device_name, run.machine_json});
#ifdef MOCBENCH_HAVE_CUDA
  if (backend == "cuda")
    for (const auto& g : cuda::list_gpus())
      store.add_gpu_info(run_id, {g.index, g.name, g.cc_major, g.cc_minor, g.sm_count,
                                  static_cast<std::int64_t>(g.l2_bytes), static_cast<std::int64_t>(g.total_mem_bytes),
                                  g.sm_clock_khz, g.mem_clock_khz, g.mem_bus_bits});
#endif
  record_ceilings(store, run_id, backend, run.device_name);
  return run_id;
}

// --- The loop over points.

// Measures the points of a plan one at a time, in this process or on worker processes, and keeps what the
// points share across the run: a launch's communicator and the one-GPU twins of data-parallel points.
class PointRunner {
 public:
  PointRunner(const std::string& path, const RunOptions& opt, const RunPlan& plan)
      : path_(path), opt_(opt), plan_(plan) {}

  // Point p measured: rec's status, error and metrics set, and what the database keeps of it.
  StoredPoint measure(const ScenarioPoint& p, db::PointRecord& rec, PointStatus& status) {
    StoredPoint stored;
    try {
      if (!plan_.dist.distributed() && p.gpus > 1) {
        stored = run_on_workers(path_, plan_.sc.text, p, opt_, plan_.backend);
        status = parse_point_status(stored.rec.status);
        rec.error = stored.rec.error;
        rec.metrics = stored.rec.metrics;
      } else {
        PointOutcome out = run_here(p, opt_, plan_.backend, plan_.dist, comm_, host_limit_note_);
        if (!out.profile_note.empty())
          std::fprintf(stderr, "\nmocbench: point %d not profiled: %s\n", p.index, out.profile_note.c_str());
        status = PointStatus::ok;
        rec.metrics = out.metrics;
        stored = stored_from(out);
      }
    } catch (const Interrupted&) {
      status = PointStatus::interrupted;
      rec.error = "stopped by SIGINT";
    } catch (const OutOfMemory& e) {
      status = PointStatus::oom;
      rec.error = std::string(e.what()) + host_limit_note_;
    } catch (const std::exception& e) {
      status = PointStatus::failed;
      rec.error = e.what();
    }
    rec.status = std::string(point_status_name(status));
    if (plan_.dist.distributed() && status != PointStatus::ok) report_worker_failure(plan_.dist, rec.status, rec.error);
    if (status == PointStatus::ok && p.mode == "train") add_scaling_efficiency(p, rec.metrics);
    return stored;
  }

 private:
  // Scaling efficiency of a data-parallel train point against the same point on one GPU (its twin: the same
  // axes but gpus, zero1 and comm_overlap), when the run measured that one first.
  void add_scaling_efficiency(const ScenarioPoint& p, std::vector<std::pair<std::string, double>>& metrics) {
    std::string key = p.mode;
    for (const auto& [a, v] : p.axes)
      if (a != "gpus" && a != "zero1" && a != "comm_overlap") key += ";" + a + "=" + v;
    double tps = -1;
    for (const auto& [k, v] : metrics)
      if (k == "tokens_per_s") tps = v;
    if (p.gpus == 1 && tps > 0) one_gpu_tokens_per_s_[key] = tps;
    const auto twin = one_gpu_tokens_per_s_.find(key);
    if (p.gpus > 1 && tps > 0 && twin != one_gpu_tokens_per_s_.end())
      metrics.push_back({"scaling_efficiency_pct", 100.0 * tps / (p.gpus * twin->second)});
  }

  const std::string& path_;
  const RunOptions& opt_;
  const RunPlan& plan_;
  std::string host_limit_note_;          // how the CPU backend's memory limit was set, for an oom point's message
  std::unique_ptr<Communicator> comm_;   // a launch's ranks: made at the first point, kept for the others
  std::map<std::string, double> one_gpu_tokens_per_s_;  // the gpus = 1 twins, for scaling efficiency
};

// Stores a measured point. Another process holding the results file's write lock past the busy timeout (a
// long transaction, a `sqlite3` shell in BEGIN) does not cost the measured point: it is kept and stored once
// the lock is free. Throws the database's error once waiting is over.
void store_point(db::ResultsDb& store, const db::PointRecord& rec, const StoredPoint& stored, const RunOptions& opt) {
  const auto wait_from = std::chrono::steady_clock::now();
  const double kLockWaitS = lock_wait_s();
  for (int attempt = 0;; ++attempt) {
    try {
      store.add_point(rec, stored.ranges, stored.memory, stored.profile ? &*stored.profile : nullptr, stored.series);
      if (attempt > 0) std::fprintf(stderr, "mocbench: the lock is free again: point #%d stored\n", rec.index);
      return;
    } catch (const db::DbError& e) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_from).count();
      if (!e.busy() || waited > kLockWaitS || g_stop.load()) throw;
      if (attempt == 0)
        std::fprintf(stderr,
                     "\nmocbench: %s is locked by another process; point #%d is measured and kept in memory, "
                     "waiting up to %.0f min for the lock (the process holding it: `fuser %s`)\n",
                     opt.db_path.c_str(), rec.index, kLockWaitS / 60.0, opt.db_path.c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

void print_progress(std::size_t i, const std::vector<ScenarioPoint>& points, bool tty,
                    std::chrono::steady_clock::time_point t0) {
  const auto& p = points[i];
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string eta = i ? fmt_duration(el / static_cast<double>(i) * static_cast<double>(points.size() - i)) : "?";
  const std::string what = (p.axis("mode") ? "" : "mode=" + p.mode + " ") + axes_text(p);
  std::printf(tty ? "\r\033[K[%zu/%zu] %s  ETA %s" : "[%zu/%zu] %s  ETA %s\n", i + 1, points.size(), what.c_str(),
              eta.c_str());
  std::fflush(stdout);
}

struct RunTally {
  std::string status = "ok";  // the run's: ok, interrupted or failed
  int ok = 0, oom = 0, failed = 0;
  void count(PointStatus s) {
    if (s == PointStatus::ok) ++ok;
    else if (s == PointStatus::oom) ++oom;
    else if (s == PointStatus::failed) ++failed;
  }
};

// Every point of the plan, measured and stored in turn; SIGINT stops the run after the point it interrupts.
RunTally run_points(db::ResultsDb& store, std::int64_t run_id, const std::string& path, const RunOptions& opt,
                    const RunPlan& plan, std::chrono::steady_clock::time_point t0) {
  g_stop.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  RunTally tally;
  PointRunner runner(path, opt, plan);
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const auto& p = plan.points[i];
    if (!plan.quiet && !plan.json) print_progress(i, plan.points, tty, t0);
    db::PointRecord rec;
    rec.run_id = run_id;
    rec.index = p.index;  // the sweep position, also when --only runs a subset
    rec.mode = p.mode;
    rec.axes = p.axes;
    PointStatus status = PointStatus::failed;
    const StoredPoint stored = runner.measure(p, rec, status);
    tally.count(status);
    try {
      store_point(store, rec, stored, opt);
    } catch (const std::exception& e) {
      // The run stops on a database error (disk full, I/O error, a lock that never freed): the measured point
      // goes to a side file named here, and the run is closed as failed where the file can still be written,
      // so it does not stay "running"; the caller reports the error either way.
      const std::string side = save_unstored_point(opt.db_path, run_id, rec, e.what());
      if (!side.empty())
        std::fprintf(stderr, "\nmocbench: point #%d could not be stored; it is saved in %s\n", p.index, side.c_str());
      std::signal(SIGINT, previous);
      mark_failed(store, run_id, e.what());
      throw;
    }
    if (plan.json) {
      std::printf("%s\n", run_json_line(i, p.mode, rec.status, p.axes, rec.metrics, rec.error).c_str());
      std::fflush(stdout);
    }
    if (status == PointStatus::interrupted) {
      tally.status = "interrupted";
      break;
    }
    if (plan.dist.distributed() && status != PointStatus::ok) {
      // The other ranks may be blocked in a collective: end this process; the launcher ends the rest.
      std::fprintf(stderr, "mocbench: rank %d: point #%d %s: %s\n", plan.dist.rank, p.index, rec.status.c_str(),
                   rec.error.c_str());
      tally.status = "failed";
      break;
    }
  }
  std::signal(SIGINT, previous);
  return tally;
}

// The run's last lines: the counts, and the answer the scenario asks for in human units (what `mocbench show
// RUN` prints again). The run is stored by now: a summary that cannot be read back is a note, not a failed run.
void print_run_end(db::ResultsDb& store, std::int64_t run_id, const RunTally& t, const RunPlan& plan,
                   const RunOptions& opt, std::chrono::steady_clock::time_point t0) {
  if (isatty(STDOUT_FILENO) != 0) std::printf("\n");
  std::printf("run %lld %s: %d ok, %d oom, %d failed of %zu points in %s -> %s\n", static_cast<long long>(run_id),
              t.status.c_str(), t.ok, t.oom, t.failed, plan.points.size(),
              fmt_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()).c_str(),
              opt.db_path.c_str());
  try {
    std::ostringstream summary;
    print_summary(summarize_run(store, run_id), SummaryFormat::table, summary, colour_terminal(stdout));
    std::printf("\n%s", summary.str().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mocbench: the run is stored, but its summary could not be read back: %s\n", e.what());
  }
}

}  // namespace

int run_scenario_file(const std::string& path, const RunOptions& opt) {
  bind_worker_to_launcher();  // a worker of a multi-rank point dies with its launcher
  RunPlan plan;
  if (const ExitCode code = plan_run(path, opt, plan)) return *code;
  std::string db_path = opt.db_path;
  if (!plan.writer && (db_path = scratch_db_path(plan.dist)).empty()) return 1;
  const ScratchDb scratch_db{plan.writer ? std::string() : db_path};  // removed after the store closes
  db::ResultsDb store = db::ResultsDb::open(db_path, db::OpenMode::read_write);
  const std::int64_t run_id = begin_run_record(store, path, plan);
  const auto t0 = std::chrono::steady_clock::now();
  const RunTally tally = run_points(store, run_id, path, opt, plan, t0);
  store.finish_run(run_id, tally.status, unix_ms());
  if (!plan.quiet && !plan.json) print_run_end(store, run_id, tally, plan, opt, t0);
  return tally.status == "interrupted" ? 130 : (tally.failed || tally.status == "failed" ? 1 : 0);
}

}  // namespace moc

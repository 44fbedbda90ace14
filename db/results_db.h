// The results database: one SQLite file holding runs, their sweep points (axis values and metrics) and
// what was recorded at each point (named ranges, memory events and, for a profiled point, its profile: a
// prof::ProfileTrace stored in tables named after Nsight Systems' SQLite export), plus the devices of each
// run. The schema is documented in db/README.md.
//
// Durability model: the file is in WAL mode and every point is written in its own transaction, so a
// reader (the dashboard, `mocbench` queries) can open the file while a run writes it, and a run whose
// process died keeps every point it committed. Each run records the process writing it (RunWriter), so a
// "running" run whose process is gone reads as "abandoned", and the next writer marks it so in the file.
//
// A ResultsDb is one connection: use it from one thread at a time. Every failure throws DbError naming
// the file, the operation and SQLite's message.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "profiling/trace.h"

struct sqlite3;

namespace moc::db {

class DbError : public std::runtime_error {
 public:
  explicit DbError(const std::string& what, bool busy = false) : std::runtime_error(what), busy_(busy) {}
  // Another connection kept the file's write lock past the busy timeout: nothing of this call was written,
  // and the call may be retried (run keeps a measured point and waits for the lock).
  bool busy() const { return busy_; }

 private:
  bool busy_ = false;
};

// The schema this build writes and reads. Older files are migrated forward when opened for writing;
// newer files are refused (nothing is changed).
inline constexpr int kSchemaVersion = 7;
// PRAGMA application_id of every mocbench results file: "MOCB" in ASCII.
inline constexpr std::int32_t kApplicationId = 0x4D4F4342;

enum class OpenMode { read_only, read_write };

// The process that records a run (begin_run fills it in), so that a run whose process died can be told
// from one still going. A process is named by its pid and start time: a pid alone is reused.
struct RunWriter {
  std::string host;           // gethostname()
  std::string boot_id;        // /proc/sys/kernel/random/boot_id: a reboot ends every process of the host
  std::string pid_namespace;  // /proc/self/ns/pid: pids are only comparable within one namespace
  std::int64_t pid = 0;       // 0: unknown (a run recorded before schema version 4)
  std::int64_t start_ticks = 0;  // the process's start time: /proc/<pid>/stat field 22, clock ticks since boot
  bool operator==(const RunWriter&) const = default;
};

// This process, as begin_run records it (read anew on each call: a forked child is another process).
RunWriter this_process();

enum class WriterState {
  alive,    // the process still runs
  gone,     // it ended (or the host rebooted): a "running" run of it is abandoned
  unknown,  // cannot be checked from here: another host or pid namespace, or no pid recorded
};
// Looks the writer up in /proc as seen from `here` (this_process()).
WriterState writer_state(const RunWriter& w, const RunWriter& here);

struct RunRecord {
  std::int64_t id = 0;
  std::string scenario_name, scenario_path, scenario_text, scenario_hash;
  std::string config_json;      // resolved scenario / config as JSON text (opaque to the db)
  std::string overrides_json;   // per-backend overrides that were applied (opaque)
  std::string machine_json;     // CPU model/threads, GPU, clocks, driver, CUDA (opaque)
  std::string device_kind;      // "cpu" | "cuda"
  std::string device_name;
  std::string mocbench_version;
  std::int64_t started_unix_ms = 0;
  std::int64_t finished_unix_ms = 0;  // 0 while the run is "running" (also when read as "abandoned")
  // "running" | "ok" | "interrupted" | "failed" | "abandoned". A reader sees a "running" run whose process is
  // gone as "abandoned" (with `error` saying why) before any writer has marked it so in the file.
  std::string status;
  std::string error;  // why the run failed or was abandoned ("" otherwise)
  RunWriter writer;   // who recorded it
  bool operator==(const RunRecord&) const = default;
};

struct PointRecord {
  std::int64_t id = 0, run_id = 0;
  int index = 0;       // position in the sweep, unique within a run
  std::string mode;    // "train" | "decode" | "ffn-train" | "ffn-decode" | "topk" ("" in files migrated without one)
  std::string status;  // "ok" | "oom" | "interrupted" | "failed"
  std::string error;   // message for non-ok points
  std::vector<std::pair<std::string, std::string>> axes;  // ordered axis name -> value text
  // name -> value (median_us, tokens_per_s, ...); order is kept. NaN round-trips (stored as NULL).
  std::vector<std::pair<std::string, double>> metrics;
  bool operator==(const PointRecord&) const = default;  // NaN metrics compare unequal, as doubles do
};

struct RangeRecord {
  std::string name;
  std::int64_t start_ns = 0, end_ns = 0;
  int depth = 0;
  bool operator==(const RangeRecord&) const = default;
};

struct MemEventRecord {
  std::int64_t t_ns = 0;
  std::string category, module;
  int layer = -1;
  std::int64_t bytes = 0;  // +allocated / -released
  bool operator==(const MemEventRecord&) const = default;
};

// A time series or a histogram of a point, e.g. "train_loss" by step, "val_ppl" by step, a layer's gate
// histogram by bin centre: (x, y) pairs in order. y may be NaN.
struct SeriesRecord {
  std::string name;
  std::vector<double> x, y;
  bool operator==(const SeriesRecord&) const = default;  // NaN values compare unequal, as doubles do
};

struct DeviceRecord {
  std::string kind, name, properties_json;
  bool operator==(const DeviceRecord&) const = default;
};

// One GPU of a run (TARGET_INFO_GPU, as in Nsight Systems' export): cudaDeviceProp's identity and limits.
struct GpuInfoRecord {
  int id = 0;  // the device ordinal
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  std::int64_t l2_cache_size = 0;  // bytes
  std::int64_t total_memory = 0;   // bytes
  int clock_rate_khz = 0;          // SM clock
  int memory_clock_rate_khz = 0;
  int bus_width_bits = 0;  // memory bus width
  bool operator==(const GpuInfoRecord&) const = default;
};

// A device's measured ceilings for the roofline (DEVICE_CEILINGS): what `mocbench devices --measure` finds --
// copy bandwidth (bytes read + written per second by a large device-to-device copy) and a dense GEMM's rate
// (bf16 on a GPU, f32 on the CPU backend) -- recorded with each run that used the device.
struct CeilingsRecord {
  int device_id = 0;   // GPU ordinal; -1: the CPU backend
  std::string device;  // its name
  double copy_GBps = 0, gemm_tflops = 0;
  std::string gemm_dtype;            // "bf16" | "f32"
  std::int64_t measured_unix_ms = 0;  // when they were measured
  std::string source;                 // "measured" (by this run) | "cache" (an earlier measurement on this host)
  bool operator==(const CeilingsRecord&) const = default;
};

// The ceilings of the device a profile ran on, among a run's: the CPU backend's (-1) for a CPU profile, else
// those of the lowest GPU ordinal its kernels ran on; none when the run recorded none for it. (`stats` and the
// dashboard's Roofline view and Timeline colouring pick them this one way.)
std::optional<CeilingsRecord> ceilings_for_profile(const std::vector<CeilingsRecord>& all, const prof::ProfileTrace& t);

// The environment switches a run recorded in its config_json ("env": {name: value}, written by `mocbench run`),
// "NAME=value" each in recorded order; empty for a run without any (or recorded before they were stored, or an
// unreadable config_json).
std::vector<std::string> run_environment(const RunRecord& r);

// One point's instances of a kernel (by short name): the kernel's statistics over a run, point by point.
struct KernelSummaryRow {
  std::int64_t point_id = 0;
  std::int64_t count = 0, total_ns = 0, min_ns = 0, max_ns = 0;
  int steps = 0;  // the point's profiled steps
  bool operator==(const KernelSummaryRow&) const = default;
};

class ResultsDb {
 public:
  // read_only: the file must exist. read_write: creates the file when it does not exist, migrates an
  // older schema in one transaction, then marks every "running" run whose process is gone as "abandoned"
  // (finished now). Refuses (DbError, file untouched) a newer schema, a file that is
  // not a mocbench results database, and a corrupt or truncated file.
  static ResultsDb open(const std::string& path, OpenMode mode);

  ~ResultsDb();
  ResultsDb(ResultsDb&&) noexcept;
  ResultsDb& operator=(ResultsDb&&) noexcept;
  ResultsDb(const ResultsDb&) = delete;
  ResultsDb& operator=(const ResultsDb&) = delete;

  int schema_version() const { return schema_version_; }
  const std::string& path() const { return path_; }
  OpenMode mode() const { return mode_; }

  // Records a run with status "running", written by this process (r.id, r.status, r.finished_unix_ms,
  // r.error and r.writer are ignored); returns its id.
  std::int64_t begin_run(const RunRecord& r);
  // status: "ok" | "interrupted" | "failed"; error: why it failed ("" for none).
  void finish_run(std::int64_t run_id, const std::string& status, std::int64_t finished_unix_ms,
                  const std::string& error = "");
  void add_device(std::int64_t run_id, const DeviceRecord& d);
  // One GPU of the run; (run_id, g.id) is unique.
  void add_gpu_info(std::int64_t run_id, const GpuInfoRecord& g);
  // The ceilings of one device of the run; (run_id, c.device_id) is unique.
  void add_ceilings(std::int64_t run_id, const CeilingsRecord& c);
  // Everything of one point in one transaction (all or nothing); trace, when given, is the point's profile.
  // series: the point's time series and histograms. p.id is ignored. Returns the point id.
  std::int64_t add_point(const PointRecord& p, const std::vector<RangeRecord>& ranges,
                         const std::vector<MemEventRecord>& mem, const prof::ProfileTrace* trace = nullptr,
                         const std::vector<SeriesRecord>& series = {});

  std::vector<RunRecord> runs() const;  // newest first
  std::optional<RunRecord> run(std::int64_t id) const;
  std::vector<PointRecord> points(std::int64_t run_id) const;  // by index, with axes and metrics
  // The point's profile, or nullopt when it was not profiled. Records come back in the order stored.
  std::optional<prof::ProfileTrace> profile(std::int64_t point_id) const;
  std::vector<RangeRecord> ranges(std::int64_t point_id) const;
  std::vector<MemEventRecord> memory_events(std::int64_t point_id) const;
  std::vector<DeviceRecord> devices(std::int64_t run_id) const;
  // The point's series, by name (each in the order stored).
  std::vector<SeriesRecord> series(std::int64_t point_id) const;
  std::vector<GpuInfoRecord> gpu_info(std::int64_t run_id) const;  // by device ordinal
  std::vector<CeilingsRecord> ceilings(std::int64_t run_id) const;  // by device ordinal (CPU first)
  // The kernels called `short_name` in every profiled point of the run (points without one are left out).
  std::vector<KernelSummaryRow> kernel_summary(std::int64_t run_id, const std::string& short_name) const;

  // SQLite's PRAGMA data_version: changes whenever another connection (a run writing this file) has
  // committed since this connection last looked. A reader polls it to pick up new runs and points.
  std::int64_t data_version() const;
  // SQLite's quick check of every page (about a second per GB): "ok", or what it found (at most `max`
  // problems, "; "-separated). Opening for writing runs it and refuses damage; readers may ask (the dashboard).
  std::string quick_check(int max = 3) const;

 private:
  struct Closer {
    void operator()(sqlite3* db) const noexcept;
  };
  ResultsDb(std::unique_ptr<sqlite3, Closer> db, std::string path, OpenMode mode, int version);
  void require_writable(const char* operation) const;

  std::unique_ptr<sqlite3, Closer> db_;
  std::string path_;
  OpenMode mode_ = OpenMode::read_only;
  int schema_version_ = 0;
};

}  // namespace moc::db

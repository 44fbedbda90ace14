// `mocbench stats`: reports over a point's profile (prof::ProfileTrace), modelled on `nsys stats`. Each
// report is a pure function from the trace (and, for phase_sum, the point's stored metrics) to a small
// table model; the shared printers (db/table.h) render any table as an aligned text table (human time units,
// nsys-like headers), Markdown, CSV or JSON (one result model, several printers, as nvbench does).
//
// Reports:
//   cuda_gpu_kern_sum      per kernel name (CPU ops on the CPU backend): Time (%), Total Time, Instances, Avg,
//                          Med, Min, Max, StdDev, Name; by total time, descending
//   cuda_gpu_mem_time_sum  the same per memory operation ([CUDA memcpy Host-to-Device], ..., [CUDA memset])
//   cuda_api_sum           per CUDA runtime/driver API name, over call durations
//   cuda_kern_exec_sum     per kernel name, eager launches only: API time, launch-to-start latency (kernel
//                          start - launch call start), kernel time
//   nvtx_sum               per phase range name over host durations (graph-replay copies, which the host
//                          never opened, are skipped): ..., Style, Range
//   nvtx_gpu_proj_sum      the same over the device projection (where the range's work ran), with GPU ops
//   phase_sum              (ours) per phase (innermost range of each op, layer.N merged into layer, "(none)"
//                          outside every range): kernels and device time per step, share of the busy time;
//                          then the paper's latency breakdown (gate, up & down, top-K, other) from the
//                          profile beside the point's timed breakdown metrics
//   roofline               (ours) per kernel name and phase: exclusive time per step, the bytes and FLOPs its
//                          op declared, GB/s and % of the measured copy bandwidth, TFLOP/s and % of the measured
//                          GEMM peak, floor (max of bytes / bandwidth, FLOPs / peak), % of floor and the time
//                          lost against it; by lost time, descending (profiling/roofline.h); on request
//   stage_sum              (ours) per kernel and stage of the device-side stage stamps (the decode FFN kernels
//                          k_gate, k_select, k_updown; an older profile's persistent k_step; layers merged):
//                          instances and time per step, share of the kernel's stamped time, barrier wait per
//                          step, avg and max; among the defaults for a point that has them
// Device time: every kernel, memcpy and memset is counted exclusive by default (prof::TimeMode: under PDL a
// record overlaps its predecessor's; the overlap is counted once, for the earlier record, so the ops of a
// step sum to its busy time); TimeMode::inclusive counts CUPTI's start-to-end. Each table says which.
// Statistics: Med is the middle value (the mean of the two middle values for an even count); StdDev is the
// sample standard deviation (n - 1; 0 for one instance), as nsys computes them.
#pragma once
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "db/table.h"
#include "profiling/roofline.h"
#include "profiling/trace.h"

namespace moc::stats {

// What a column's numbers are. Time columns in ns are shown in a readable unit by the text printer
// (ns, us, ms or s, one per table); CSV and JSON always carry the unit in the column's key ("Total Time (ns)").
enum class Unit { none, ns, us, ms, percent };

// The reports' tables are the shared table model (db/table.h): one model, the same printers as `show` and
// `compare`.
using Table = report::Table;
using Column = report::Column;
using Cell = report::Cell;  // empty: a value the point lacks ('-' in text, empty in CSV, null in JSON)

// A report column: key "Name (unit)" (the CSV header and JSON key), numbers with thousands separators and
// `decimals` digits in the text printer, ns columns scaled there to one readable unit per table.
Column column(std::string name, Unit unit, bool text = false, int decimals = 0);

// The report names `stats` accepts, and the ones it runs by default.
const std::vector<std::string>& report_names();
const std::vector<std::string>& default_reports();

// A point's stored metrics (name -> value), as db::PointRecord::metrics.
using Metrics = std::vector<std::pair<std::string, double>>;

// Summary statistics of a set of durations (ns).
struct DurationStats {
  double total = 0, avg = 0, med = 0, min = 0, max = 0, stddev = 0;
  std::size_t count = 0;
};
DurationStats duration_stats(std::vector<std::int64_t> durations);

using prof::TimeMode;
Table cuda_gpu_kern_sum(const prof::ProfileTrace& t, TimeMode time = TimeMode::exclusive);
Table cuda_gpu_mem_time_sum(const prof::ProfileTrace& t, TimeMode time = TimeMode::exclusive);
Table cuda_api_sum(const prof::ProfileTrace& t);
Table cuda_kern_exec_sum(const prof::ProfileTrace& t, TimeMode time = TimeMode::exclusive);
Table nvtx_sum(const prof::ProfileTrace& t);
Table nvtx_gpu_proj_sum(const prof::ProfileTrace& t);
// metrics: the point's (profile_stage_rep_ms says the stages came from a stamped repetition of their own).
Table stage_sum(const prof::ProfileTrace& t, const Metrics& metrics = {});
// ceilings: the run's measured ones (unknown: the rates are shown, the % and floor columns are empty).
Table roofline(const prof::ProfileTrace& t, const prof::Ceilings& ceilings, TimeMode time = TimeMode::exclusive);
// Two tables: phase_sum (per phase) and phase_sum_breakdown (profiled vs timed). mode: the point's mode
// ("ffn-decode" compares per call in us with gate_us/topk_us/up_down_us/other_us/latency_us, dividing
// the profiled step by the calls_per_replay metric (weight_copies in older runs); others per step in ms
// with gate_ms/topk_ms/up_down_ms and median_ms).
std::vector<Table> phase_sum(const prof::ProfileTrace& t, const Metrics& metrics, const std::string& mode,
                             TimeMode time = TimeMode::exclusive);

// The tables of one report by name; throws std::invalid_argument for an unknown name.
std::vector<Table> run_report(const std::string& name, const prof::ProfileTrace& t, const Metrics& metrics,
                              const std::string& mode, TimeMode time = TimeMode::exclusive,
                              const prof::Ceilings& ceilings = {});

// The phase an op belongs to: the name of its innermost range with "layer.N" merged into "layer";
// "(none)" for range_id -1 or an id the trace does not hold.
std::string phase_of(const prof::ProfileTrace& t, std::int64_t range_id);

// ---- printers
// Aligned text: " ** Title (id):", a blank line, headers, dashes, rows, notes.
void print_text(const Table& table, std::ostream& out);
// RFC 4180: a header row then the rows, raw units (ns exact); prefix columns (name, value) come first on
// every line (the CLI puts point and report there).
void print_csv(const Table& table, std::ostream& out,
               const std::vector<std::pair<std::string, std::string>>& prefix = {});
// The shared JSON table (report::to_json) on one line: {"id": report, "title", "columns": [{"key": "Total Time
// (ns)", "title", "unit": "ns"}...], "rows": [{key: value}...], "notes": [...]}; empty cells are null.
void print_json(const Table& table, std::ostream& out);

// A number as the text printer shows it: thousands separators, `decimals` digits after the point.
using report::group_thousands;

}  // namespace moc::stats

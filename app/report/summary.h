// The summary of a run, as a person reads it: one table per mode in human units (the unit in the header),
// the noise of each median, and the comparisons a user came for -- speedup and memory against the dense
// point with the same other axes, % of the byte floor, peak memory in GiB -- with a headline per FFN
// variant ("moc vs dense: 1.04x-1.16x"). `mocbench run` prints it at the end; `mocbench show` prints it
// as a table, CSV, JSON or Markdown (one model, four printers, as nvbench's).
#pragma once
#include <cstdint>
#include <cstdio>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/results_db.h"
#include "db/table.h"

namespace moc {

// A mode's table is the shared table model (db/table.h): id = the mode (train | decode | ffn-decode | ...),
// one row per point in sweep order; columns: the axes that vary and the status (text columns), then values
// (key: machine name such as ms_per_token or speedup_vs_dense; title with the unit: "ms/token", "latency
// (µs)"); each value cell carries its number in the column's unit and the text the table shows ("1.50x",
// "87.0!" for a median whose noise never met its target, "-" where not measured); notes: the headlines,
// "moc vs dense: best 1.16x (batch=1), worst 1.04x (batch=4) (speed; > 1 is faster)".
using SummaryColumn = report::Column;
using SummaryCell = report::Cell;
using SummaryTable = report::Table;

struct RunSummary {
  std::int64_t run_id = 0;
  std::string heading;  // "run 3: decode_bs1_4 on cuda NVIDIA H100 80GB HBM3, ok, 48 points"
  std::string error;    // why the run failed or was abandoned ("" otherwise)
  // The environment switches that changed what ran (run_environment_now), "NAME=value" each, as recorded.
  std::vector<std::string> environment;
  std::vector<SummaryTable> tables;
};

RunSummary summarize_run(const db::ResultsDb& store, std::int64_t run_id);

enum class SummaryFormat { table, csv, json, markdown };
SummaryFormat parse_summary_format(const std::string& text);  // throws std::invalid_argument

// colour: ANSI colours in the table format (speedups green / red, non-ok points yellow); the caller passes
// true only for a terminal.
void print_summary(const RunSummary& s, SummaryFormat format, std::ostream& out, bool colour = false);

// Colours only on a terminal, and not when NO_COLOR is set or TERM is "dumb".
bool colour_terminal(std::FILE* f);

// The environment variables that change which kernels run or what is measured, and so belong to a run's
// record: MOCBENCH_ATTN (attention on own kernels instead of cuDNN), MOCBENCH_SKINNY / MOCBENCH_SKINNY_BIG
// (decode GEMM kernels), MOCBENCH_CUPTI_KINDS (what the profiler traces), MOCBENCH_HOST_MEMORY_MIB (the CPU
// memory limit, so which points run out of memory). The ones set (non-empty) in this process, in that order.
std::vector<std::pair<std::string, std::string>> run_environment_now();
// The run's config_json (db::RunRecord): backend, point count and run_environment_now() ("env": {name: value}).
std::string run_config_json(const std::string& backend, std::size_t points);

// One point of `run --json` as one line of JSON (JSON Lines): index, mode, status, the point's axes, its
// metrics (a value that is not finite -- NaN, +-Inf -- is null), and error when there is one.
std::string run_json_line(std::size_t index, const std::string& mode, const std::string& status,
                          const std::vector<std::pair<std::string, std::string>>& axes,
                          const std::vector<std::pair<std::string, double>>& metrics, const std::string& error);

}  // namespace moc

// Readers over the results database: `mocbench export` (one row per point: run, device, axes, metrics) and
// `mocbench compare` (two runs of one scenario, point by point, with ratios). One result model, two printers
// (CSV for spreadsheets, JSON for scripts), as nvbench does.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "db/point_compare.h"
#include "db/results_db.h"
#include "db/table.h"

namespace moc {

enum class ExportFormat { csv, json };

// Writes every point of the given runs. Columns: run, scenario, scenario_hash, device_kind, device_name
// (the GPU's name on CUDA runs, the CPU model on CPU runs), mocbench_version, started (ISO 8601 UTC), point,
// status, mode (point_mode), error, then every axis (union over the runs, in first-seen order; CSV leaves
// out the mode axis, which the mode column carries), then every metric (likewise).
// A cell a point lacks is empty (CSV) or absent (JSON); NaN metrics are empty / null.
// A point's mode: PointRecord::mode; for points stored without one (older files), the `mode` axis, else the
// `mode = "..."` line of the run's scenario text; "" when none says.
std::string point_mode(const db::RunRecord& run, const db::PointRecord& point);

void write_export(const db::ResultsDb& store, const std::vector<std::int64_t>& run_ids, ExportFormat format,
                  std::ostream& out);

// "RUN", "FILE:RUN" or "FILE" (that file's newest run); default_db is used when no file is named.
struct RunRef {
  std::string db_path;
  std::optional<std::int64_t> run_id;
};
RunRef parse_run_ref(const std::string& text, const std::string& default_db);

struct CompareRow {
  std::string key;  // the point: its mode and axes, "ffn-decode ffn=moc batch=2" (metrics::point_label)
  std::string metric;
  std::optional<double> a, b;
  std::string status_a, status_b;  // "missing" when the other run has no such point
  metrics::Verdict verdict = metrics::Verdict::missing;  // as the dashboard's Compare view judges it
};
struct Comparison {
  std::string label_a, label_b;
  std::vector<std::string> warnings;  // different scenario text, devices, mocbench versions
  std::vector<CompareRow> rows;
  int matched = 0, only_a = 0, only_b = 0;
};
// Points are matched, metrics chosen and judged by metrics::compare_points (db/point_compare.h), as the
// dashboard's Compare view does. metrics empty: metrics::default_compare_metrics() that both runs have; a
// default metric neither side of a point has is left out of that point's rows. Throws std::invalid_argument
// when the runs belong to different scenarios (by name) and !allow_different_scenarios.
Comparison compare_runs(const db::ResultsDb& da, std::int64_t ra, const db::ResultsDb& dbb, std::int64_t rb,
                        const std::vector<std::string>& metrics, bool allow_different_scenarios);
// The comparison as the shared table (db/table.h): point, metric, A, B, B/A, verdict ("B is": better, worse,
// same -- within both sides' noise or a metric with no better direction -- or missing), and for the machine
// printers status_a, status_b and the metric's unit; the title names A and B, the note counts the matches.
report::Table comparison_table(const Comparison& c);
enum class ComparisonFormat { table, markdown, csv, json };
// table: "A: ...", "B: ...", notes on differing scenario text / devices / versions, the grid, "N points
// matched"; markdown: the same as a pipe table; csv: every column; json: an array of row objects.
void print_comparison(const Comparison& c, ComparisonFormat format, std::ostream& out);

}  // namespace moc

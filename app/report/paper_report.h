// `mocbench report`: the paper's tables and figures rebuilt from stored runs of the paper scenarios
// (scenarios/paper/). This side reads the database(s): it picks the runs (the newest run of each paper
// scenario, or the ones named), re-expands each run's stored scenario to recover every point's resolved
// model (sizes, dtypes, parameter count, the memory model's estimate of a training point), and writes them
// with the points' metrics to DIR/data.json. scripts/paper_report.py then writes DIR/report.md beside the
// paper's published numbers (scenarios/paper/paper_numbers.toml) and one PNG per table where a picture helps
// (matplotlib); without matplotlib the report is still written and the figures are listed as missing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moc {

struct PaperReportOptions {
  std::vector<std::string> db_paths;   // at least one
  std::vector<std::int64_t> run_ids;   // with one database only; empty: the newest run of each paper scenario
  std::string out_dir = "paper-report";
  std::string python;                  // empty: $MOCBENCH_PYTHON, else /usr/bin/python3, else python3
  std::string source_dir;              // where scripts/ and scenarios/paper/ are; empty: found (see .cpp)
  bool require_figures = false;        // exit nonzero when the figures could not be drawn
};

// Prefix of the paper scenarios' names.
inline constexpr const char* kPaperScenarioPrefix = "paper_";

// Writes DIR/data.json and runs the script; prints where it wrote. Returns the exit code.
int write_paper_report(const PaperReportOptions& opt);

// The JSON data file alone (tests and the script's contract): every point of the runs with its model.
std::string paper_report_data(const std::vector<std::string>& db_paths, const std::vector<std::int64_t>& run_ids);

}  // namespace moc

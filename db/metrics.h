// What a stored metric is, said once: its unit, which direction is an improvement, whether it carries a noise
// estimate (so a difference within that noise is no verdict), and a human label. The CLI (`mocbench compare`,
// app/report/report.cpp) and the dashboard (gui/model) both read metrics through this table instead of guessing from
// the name; tests/gui/test_gui_compare.cpp checks that every metric a real CPU run stores has an entry.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moc::metrics {

enum class Direction { lower, higher, neither };  // which way is better; neither: a count, a setting, a reference

struct MetricInfo {
  std::string_view pattern;  // an exact name, or a pattern where '*' stands for one or more characters
  std::string_view unit;     // "ms", "us", "s", "bytes", "GB/s", "tokens/s", "%", "count", ...
  Direction direction = Direction::neither;
  // The metric holding this one's relative noise (a fraction of its value: "noise" for the timed median and
  // what scales with it, "prefill_noise" for the prefill); empty: the value is exact (bytes, counts, settings).
  std::string_view noise;
  std::string_view label;  // "latency", "peak memory", ...
};

// Every entry, exact names first, then patterns (phase_*_ms, peak_*_bytes, ...) in the order they are tried.
const std::vector<MetricInfo>& registry();

// The entry for a stored name, or nullptr when the registry has none. "rank<N>_<metric>" (a data-parallel
// rank's own value) is <metric>'s entry.
const MetricInfo* find(std::string_view name);

// Unknown metrics: no unit, neither direction, exact.
Direction direction(std::string_view name);
bool noisy(std::string_view name);
std::string_view noise_metric(std::string_view name);  // "" when exact or unknown
std::string_view unit(std::string_view name);          // "" when unknown
std::string label(std::string_view name);              // the name itself when unknown
bool is_bytes(std::string_view name);                  // unit == "bytes"

// The metrics `mocbench compare` and the dashboard's Compare view show when none is asked for, in this order
// (each mode's main time, its rates, its memory); those both runs have are used.
const std::vector<std::string>& default_compare_metrics();

}  // namespace moc::metrics

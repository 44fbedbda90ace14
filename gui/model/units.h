// Human units for the dashboard's labels and tooltips, and what a metric is (from the metric registry,
// db/metrics.h: the CLI reads the same table).
#pragma once
#include <string>

#include "db/metrics.h"

namespace moc::gui {

std::string format_bytes(double bytes);  // "1.25 GiB", "312 KiB"
std::string format_ns(double ns);        // "12.3 us", "4.56 ms", "1.2 s"
std::string format_value(double v);      // 4 significant digits, no exponent for ordinary magnitudes

using Better = metrics::Direction;
// Which direction is an improvement (the registry's; neither for a metric it does not know).
Better better_direction(const std::string& metric);
// Metrics that carry a noise estimate (the timed median and what scales with it), so a difference within it
// is no verdict and the Sweep view draws it as error bars.
bool is_timed_metric(const std::string& metric);
bool is_bytes_metric(const std::string& metric);  // the registry's unit is bytes

}  // namespace moc::gui

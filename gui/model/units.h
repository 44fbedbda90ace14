// Human units for the dashboard's labels and tooltips, and what a metric's name says about it.
#pragma once
#include <string>

namespace moc::gui {

std::string format_bytes(double bytes);  // "1.25 GiB", "312 KiB"
std::string format_ns(double ns);        // "12.3 us", "4.56 ms", "1.2 s"
std::string format_value(double v);      // 4 significant digits, no exponent for ordinary magnitudes

enum class Better { lower, higher, neither };
// Which direction is an improvement: times, bytes -> lower; tokens/s, MFU, % of floor -> higher.
Better better_direction(const std::string& metric);
// Metrics that scale with the timed median, so its relative noise applies to them.
bool is_timed_metric(const std::string& metric);
bool is_bytes_metric(const std::string& metric);

}  // namespace moc::gui

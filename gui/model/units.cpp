#include "gui/model/units.h"

#include <cmath>
#include <cstdio>

namespace moc::gui {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = b;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", v, units[u]);
  return buf;
}

std::string format_ns(double ns) {
  char buf[48];
  const double a = std::fabs(ns);
  if (a < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.4g us", ns / 1e3);
  else if (a < 1e9) std::snprintf(buf, sizeof buf, "%.4g ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.4g s", ns / 1e9);
  return buf;
}

std::string format_value(double v) {
  char buf[48];
  if (std::isnan(v)) return "-";
  if (v != 0 && (std::fabs(v) >= 1e7 || std::fabs(v) < 1e-3)) std::snprintf(buf, sizeof buf, "%.4g", v);
  else if (v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

Better better_direction(const std::string& m) { return metrics::direction(m); }

bool is_timed_metric(const std::string& m) { return metrics::noisy(m); }

bool is_bytes_metric(const std::string& m) { return metrics::is_bytes(m); }

}  // namespace moc::gui

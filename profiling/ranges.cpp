#include "profiling/ranges.h"

namespace moc {

void HostRangeTimer::push(std::string_view name) {
  stack_.push_back({std::string(name), std::chrono::steady_clock::now()});
}

void HostRangeTimer::pop() {
  if (stack_.empty()) return;
  auto& o = stack_.back();
  auto dt = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - o.t0).count();
  auto& s = stats_[o.name];
  s.total_ns += dt;
  s.calls += 1;
  stack_.pop_back();
}

}  // namespace moc

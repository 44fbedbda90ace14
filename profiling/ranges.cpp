#include "profiling/ranges.h"

namespace moc {

void HostRangeTimer::push(std::string_view name) {
  stack_.push_back({std::string(name), std::chrono::steady_clock::now()});
}

void HostRangeTimer::pop() {
  if (stack_.empty()) return;
  auto& o = stack_.back();
  const auto now = std::chrono::steady_clock::now();
  auto dt = std::chrono::duration_cast<std::chrono::nanoseconds>(now - o.t0).count();
  auto& s = stats_[o.name];
  s.total_ns += dt;
  s.calls += 1;
  if (recording_) {
    auto rel = [&](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0_).count();
    };
    events_.push_back({o.name, rel(o.t0), rel(now), static_cast<int>(stack_.size()) - 1});
  }
  stack_.pop_back();
}

}  // namespace moc

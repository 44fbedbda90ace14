// Named phase ranges (step, layer.N, attention, ffn.gate, ffn.topk, ffn.up, ffn.down, head, optimizer, ...).
// The model opens them through a RangeSink; the CPU backend's sink times them on the host; the CUDA
// backend's sink will emit NVTX ranges under the same names.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace moc {

class RangeSink {
 public:
  virtual ~RangeSink() = default;
  virtual void push(std::string_view name) = 0;
  virtual void pop() = 0;
};

class ScopedRange {
 public:
  ScopedRange(RangeSink* sink, std::string_view name) : sink_(sink) {
    if (sink_) sink_->push(name);
  }
  ~ScopedRange() {
    if (sink_) sink_->pop();
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  RangeSink* sink_;
};

// Host wall-clock per range name (inclusive time, call count). Names are the innermost range's own
// name, so "ffn.down" sums over layers; "layer.3" is one layer.
class HostRangeTimer final : public RangeSink {
 public:
  struct Stat {
    std::int64_t total_ns = 0;
    std::int64_t calls = 0;
  };
  void push(std::string_view name) override;
  void pop() override;
  struct Event {  // one closed range, times relative to the timer's creation
    std::string name;
    std::int64_t start_ns = 0, end_ns = 0;
    int depth = 0;
  };
  const std::map<std::string, Stat, std::less<>>& stats() const { return stats_; }
  // Individual ranges are kept only while recording (one repetition, not thousands).
  void set_recording(bool on) { recording_ = on; }
  const std::vector<Event>& events() const { return events_; }
  void clear() {
    stats_.clear();
    events_.clear();
  }

 private:
  struct Open {
    std::string name;
    std::chrono::steady_clock::time_point t0;
  };
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::vector<Open> stack_;
  std::map<std::string, Stat, std::less<>> stats_;
  bool recording_ = false;
  std::vector<Event> events_;
};

// Forwards every range to several sinks (host timing and NVTX on a GPU run).
class TeeRangeSink final : public RangeSink {
 public:
  explicit TeeRangeSink(std::vector<RangeSink*> sinks) : sinks_(std::move(sinks)) {}
  void push(std::string_view name) override {
    for (auto* s : sinks_)
      if (s) s->push(name);
  }
  void pop() override {
    for (auto it = sinks_.rbegin(); it != sinks_.rend(); ++it)
      if (*it) (*it)->pop();
  }

 private:
  std::vector<RangeSink*> sinks_;
};

// NVTX ranges under the same names, for Nsight Systems and CUPTI's range correlation. A no-op sink when
// mocbench was built without the CUDA toolkit (nvtx_available() says which).
class NvtxRangeSink final : public RangeSink {
 public:
  void push(std::string_view name) override;
  void pop() override;
  static bool nvtx_available();
};

}  // namespace moc

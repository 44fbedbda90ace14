// The profiler of one sweep point: it sees every phase range the model opens (it is a RangeSink), keeps the
// records of the profiled steps, and attributes each kernel, copy and set to its innermost phase range.
// Two producers fill it: the CUPTI tracer on the GPU (profiling/cupti_tracer.h) and the recording Ops
// decorator on the CPU backend (profiling/recording_ops.h). Plain C++: no CUDA.
//
// Attribution. An op launched eagerly belongs to the innermost range the host had open when it launched it
// (the launch API call's time on the trace clock; for CPU ops, the range open when the op ran). Kernels
// replayed from a CUDA graph were launched by one cudaGraphLaunch, while the ranges that surrounded them
// fired only once, during the capture: the producer reports every graph node created during a capture
// (map_graph_node) and the range open at that moment, and each replay gets copies of those captured ranges
// parented under the range that was open around the graph launch.
//
// Use: push/pop ranges at any time (a capture may come long before the profile); enable(); for each
// profiled step begin_step() ... end_step() (steps must enclose every launch and finish their work before
// end_step: synchronize); finish(). Records produced outside the steps (warm-up, overhead repetitions) are
// dropped.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/op_cost.h"
#include "kernels/ops.h"
#include "profiling/ranges.h"
#include "profiling/trace.h"

namespace moc::prof {

// What the engine's allocator recorded during the profile (MemoryTracker's events, tracker-relative times).
struct AllocatorTimeline {
  struct Event {
    std::int64_t t_ns;  // since origin
    std::string category, module;
    int layer;
    std::int64_t bytes;
  };
  std::chrono::steady_clock::time_point origin;
  std::vector<std::pair<std::string, std::int64_t>> live_at_start;  // category -> live bytes when it began
  std::vector<Event> events;
};

// Costs (kernels/op_cost.h): the tracer is also the CostSink while it lives (the point's driver installs it
// with set_cost_sink). A kernel launched eagerly gets the innermost declaration open on the host when it was
// launched (the launch API call's time, as for ranges; a CPU op the one open when it ran); a kernel replayed
// from a CUDA graph the declaration open when its node was captured. Kernels that share one declaration in
// one step share its op_call (the roofline splits the cost among them). A declaration's per-position part is
// multiplied by the positions its step attended (set_step_positions; 0 when never set).
class Tracer : public RangeSink, public CostSink {
 public:
  ~Tracer() override;
  void push(std::string_view name) override;
  void pop() override;
  void push_cost(const OpCost& c) override;
  void pop_cost() override;
  // The cache positions (per sequence) the current step attends, for per-position costs.
  void set_step_positions(std::int64_t positions);

  // Start / stop producing records (CUPTI activity tracing on the GPU). Records between the two that fall
  // outside a step are dropped at finish().
  virtual void enable() = 0;
  virtual void disable() = 0;
  void begin_step();
  void end_step();
  // The stage stamps of the current step's launches (Ops::take_stamps, device clock; the harness passes
  // those of a stamped repetition of the same work), placed on the trace clock at finish(); dropped:
  // launches the device could not stamp.
  void add_stamps(std::vector<StampedLaunch> launches, std::uint64_t dropped);
  int steps() const { return static_cast<int>(windows_.size()); }
  // Everything recorded in the steps, attributed, on the trace clock. Disables first.
  ProfileTrace finish(const AllocatorTimeline& allocator);

  virtual std::string source() const = 0;  // "cupti" | "cpu"
  // The trace clock now, and a host steady-clock time converted onto it.
  virtual std::int64_t now_ns() = 0;
  virtual std::int64_t from_steady(std::chrono::steady_clock::time_point t) = 0;

  // ---- for producers
  // The innermost range open now (-1: none) and the step being recorded (-1: none).
  std::int64_t current_range() const;
  int current_step() const { return in_step_ ? static_cast<int>(windows_.size()) - 1 : -1; }
  // A graph node was created (during a capture) while the current range was open; clone: a node copied
  // from another when a graph is instantiated or cloned.
  void map_graph_node(std::uint64_t node_id);
  void map_graph_node_clone(std::uint64_t original_id, std::uint64_t clone_id);

 protected:
  // Deliver every record produced so far into raw() (CUPTI: flush its buffers). Called by finish().
  virtual void flush() {}
  // Raw records (range_id and step unset unless the producer knows them: CPU ops do). Guarded by mu().
  ProfileTrace& raw() { return raw_; }
  std::mutex& mu() { return mu_; }

 private:
  struct Instance {
    std::int64_t id, parent;
    std::string name;
    int depth;
    std::int64_t host_start, host_end;  // host_end = -1 while open
    bool pinned = false;                // a graph node maps to it or to a child: keep it (a template)
    bool in_step = false;               // opened during a profiled step: part of the trace
  };
  void pin(std::int64_t id);
  class Assembly;  // finish()'s stages (tracer_finish.cpp)

  mutable std::mutex mu_;
  ProfileTrace raw_;
  std::unordered_map<std::int64_t, Instance> instances_;  // kept ranges (profiled steps and templates)
  std::vector<std::int64_t> stack_;
  std::int64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::int64_t> node_range_;
  struct Window {
    std::int64_t start, end;
  };
  std::vector<Window> windows_;
  bool in_step_ = false;
  std::vector<std::pair<int, StampedLaunch>> stamps_;  // (step, launch)
  std::uint64_t dropped_stamps_ = 0;

  // Cost declarations: those opened during a step (host times, for eager launches), the open stack, and
  // the declaration each captured graph node was created under.
  struct CostInstance {
    OpCost cost;
    std::int64_t id;
    std::int64_t host_start, host_end;  // host_end = -1 while open
    std::int64_t parent;                // index into cost_instances_ (-1: none)
    bool in_step;
  };
  std::vector<CostInstance> cost_instances_;
  std::vector<std::size_t> cost_stack_;  // indices into cost_instances_
  std::int64_t next_cost_id_ = 1;
  std::unordered_map<std::uint64_t, std::pair<OpCost, std::int64_t>> node_cost_;  // node -> (cost, id)
  std::vector<std::int64_t> step_positions_;  // per step
  std::unordered_map<std::uint32_t, std::pair<OpCost, std::int64_t>> cpu_costs_;  // CPU op -> (cost, id)
  friend class CpuTracer;
};

// The CPU backend's tracer: the host steady clock; records come from RecordingOps.
class CpuTracer final : public Tracer {
 public:
  void enable() override { enabled_ = true; }
  void disable() override { enabled_ = false; }
  bool enabled() const { return enabled_; }
  std::string source() const override { return "cpu"; }
  std::int64_t now_ns() override { return from_steady(std::chrono::steady_clock::now()); }
  std::int64_t from_steady(std::chrono::steady_clock::time_point t) override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  // One op that ran from start to end (steady clock) inside the current range; dropped outside a step.
  void record_op(std::string_view name, std::chrono::steady_clock::time_point start,
                 std::chrono::steady_clock::time_point end);

 private:
  bool enabled_ = false;
};

// The CUPTI tracer when this build has it and the GPU allows it; null with the reason in *why otherwise.
std::unique_ptr<Tracer> make_cupti_tracer(std::string* why);

}  // namespace moc::prof

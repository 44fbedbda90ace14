#include "profiling/tracer.h"

#include <limits>

namespace moc::prof {

Tracer::~Tracer() = default;

void Tracer::push(std::string_view name) {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  const std::int64_t id = next_id_++;
  const std::int64_t parent = stack_.empty() ? -1 : stack_.back();
  instances_.emplace(id, Instance{id, parent, std::string(name), static_cast<int>(stack_.size()), t, -1, false, in_step_});
  stack_.push_back(id);
}

void Tracer::pop() {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  if (stack_.empty()) return;
  const std::int64_t id = stack_.back();
  stack_.pop_back();
  auto it = instances_.find(id);
  if (it == instances_.end()) return;
  it->second.host_end = t;
  // Ranges of unprofiled repetitions are forgotten at once, unless a captured graph node refers to them.
  if (!it->second.in_step && !it->second.pinned) instances_.erase(it);
}

void Tracer::push_cost(const OpCost& c) {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  const std::int64_t parent = cost_stack_.empty() ? -1 : static_cast<std::int64_t>(cost_stack_.back());
  cost_instances_.push_back({c, next_cost_id_++, t, -1, parent, in_step_});
  cost_stack_.push_back(cost_instances_.size() - 1);
}

void Tracer::pop_cost() {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  if (cost_stack_.empty()) return;
  const std::size_t i = cost_stack_.back();
  cost_stack_.pop_back();
  cost_instances_[i].host_end = t;
  // Declarations outside the steps are needed only while open (graph nodes copy theirs).
  if (!cost_instances_[i].in_step && i + 1 == cost_instances_.size()) cost_instances_.pop_back();
}

void Tracer::set_step_positions(std::int64_t positions) {
  std::lock_guard lk(mu_);
  // The current step, or the next one when none is open.
  const std::size_t step = in_step_ ? windows_.size() - 1 : windows_.size();
  if (step_positions_.size() <= step) step_positions_.resize(step + 1, 0);
  step_positions_[step] = positions;
}

std::int64_t Tracer::current_range() const {
  std::lock_guard lk(mu_);
  return stack_.empty() ? -1 : stack_.back();
}

void Tracer::pin(std::int64_t id) {
  while (id >= 0) {
    auto it = instances_.find(id);
    if (it == instances_.end() || it->second.pinned) return;
    it->second.pinned = true;
    id = it->second.parent;
  }
}

void Tracer::map_graph_node(std::uint64_t node_id) {
  std::lock_guard lk(mu_);
  if (!cost_stack_.empty()) {
    const CostInstance& c = cost_instances_[cost_stack_.back()];
    node_cost_[node_id] = {c.cost, c.id};
  }
  if (stack_.empty()) return;  // created outside every range: its kernels belong to the range around the launch
  node_range_[node_id] = stack_.back();
  pin(stack_.back());
}

void Tracer::map_graph_node_clone(std::uint64_t original_id, std::uint64_t clone_id) {
  std::lock_guard lk(mu_);
  auto it = node_range_.find(original_id);
  if (it != node_range_.end()) node_range_[clone_id] = it->second;
  auto c = node_cost_.find(original_id);
  if (c != node_cost_.end()) node_cost_[clone_id] = c->second;
}

void Tracer::begin_step() {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  windows_.push_back({t, std::numeric_limits<std::int64_t>::max()});
  in_step_ = true;
}

void Tracer::end_step() {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  if (!in_step_) return;
  windows_.back().end = t;
  in_step_ = false;
}

void Tracer::add_stamps(std::vector<StampedLaunch> launches, std::uint64_t dropped) {
  std::lock_guard lk(mu_);
  dropped_stamps_ += dropped;
  // Called inside the step or right after it ended: the latest step.
  const int step = static_cast<int>(windows_.size()) - 1;
  if (step < 0) return;
  for (auto& l : launches) stamps_.emplace_back(step, std::move(l));
}

void CpuTracer::record_op(std::string_view name, std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
  const int step = current_step();
  if (!enabled_ || step < 0) return;
  KernelRecord k;
  k.name = k.short_name = std::string(name);
  k.start_ns = from_steady(start);
  k.end_ns = from_steady(end);
  k.device_id = -1;
  k.range_id = current_range();
  k.step = step;
  std::lock_guard lk(mu());
  k.correlation_id = static_cast<std::uint32_t>(raw().kernels.size() + 1);
  if (!cost_stack_.empty()) {
    const CostInstance& c = cost_instances_[cost_stack_.back()];
    cpu_costs_[k.correlation_id] = {c.cost, c.id};
  }
  raw().kernels.push_back(std::move(k));
}

}  // namespace moc::prof

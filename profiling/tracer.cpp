#include "profiling/tracer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

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

namespace {
bool is_graph_launch(const std::string& api) {
  return api.rfind("cudaGraphLaunch", 0) == 0 || api.rfind("cuGraphLaunch", 0) == 0;
}
}  // namespace

ProfileTrace Tracer::finish(const AllocatorTimeline& allocator) {
  disable();
  flush();
  std::lock_guard lk(mu_);
  ProfileTrace out;
  out.source = source();
  out.steps = static_cast<int>(windows_.size());
  out.dropped_records = raw_.dropped_records;
  if (windows_.empty()) return out;
  if (windows_.back().end == std::numeric_limits<std::int64_t>::max()) windows_.back().end = now_ns();
  out.start_ns = windows_.front().start;
  out.end_ns = windows_.back().end;

  // The step whose window holds t, or -1.
  auto step_of = [&](std::int64_t t) {
    auto it = std::upper_bound(windows_.begin(), windows_.end(), t,
                               [](std::int64_t v, const Window& w) { return v < w.start; });
    if (it == windows_.begin()) return -1;
    --it;
    return t <= it->end ? static_cast<int>(it - windows_.begin()) : -1;
  };

  // The host's ranges of the profiled steps, by start: the innermost one holding t is the last one started
  // at or before t, or the nearest of its ancestors still open at t (ranges nest).
  std::vector<const Instance*> host;
  for (const auto& [id, in] : instances_)
    if (in.in_step && in.host_end >= 0) host.push_back(&in);
  std::sort(host.begin(), host.end(), [](const Instance* a, const Instance* b) {
    return a->host_start != b->host_start ? a->host_start < b->host_start : a->depth < b->depth;
  });
  auto innermost_at = [&](std::int64_t t) -> const Instance* {
    auto it = std::upper_bound(host.begin(), host.end(), t,
                               [](std::int64_t v, const Instance* in) { return v < in->host_start; });
    if (it == host.begin()) return nullptr;
    const Instance* in = *(it - 1);
    while (in != nullptr && in->host_end < t) {
      auto p = instances_.find(in->parent);
      in = p == instances_.end() || !p->second.in_step ? nullptr : &p->second;
    }
    return in;
  };

  // Launch calls: the earliest API record of each correlation id, and the graph launches by time.
  std::unordered_map<std::uint32_t, std::int64_t> launch_at;
  std::vector<std::pair<std::int64_t, std::uint32_t>> graph_launches;
  for (const auto& a : raw_.api) {
    auto [it, fresh] = launch_at.emplace(a.correlation_id, a.start_ns);
    if (!fresh) it->second = std::min(it->second, a.start_ns);
    if (is_graph_launch(a.name)) graph_launches.emplace_back(a.start_ns, a.correlation_id);
    if (step_of(a.start_ns) >= 0) out.api.push_back(a);
  }
  std::sort(graph_launches.begin(), graph_launches.end());

  // Output ranges: the host's, then one copy of each captured range per graph launch that replayed it.
  std::unordered_map<std::int64_t, std::size_t> slot;  // range id -> out.ranges index
  for (const Instance* in : host) {
    PhaseRange r;
    r.id = in->id;
    auto p = instances_.find(in->parent);
    r.parent_id = p != instances_.end() && p->second.in_step ? in->parent : -1;
    r.name = in->name;
    r.depth = in->depth;
    r.step = std::max(0, step_of(in->host_start));
    r.host_start_ns = in->host_start;
    r.host_end_ns = in->host_end;
    r.start_ns = std::numeric_limits<std::int64_t>::max();
    r.end_ns = std::numeric_limits<std::int64_t>::min();
    slot[r.id] = out.ranges.size();
    out.ranges.push_back(std::move(r));
  }
  std::map<std::pair<std::int64_t, std::uint32_t>, std::int64_t> replayed;  // (captured range, launch) -> copy
  std::int64_t next_id = next_id_;
  auto replay_copy = [&](auto&& self, std::int64_t captured, std::uint32_t launch, const Instance* around,
                         int step) -> std::int64_t {
    auto key = std::make_pair(captured, launch);
    if (auto it = replayed.find(key); it != replayed.end()) return it->second;
    const Instance& c = instances_.at(captured);
    std::int64_t parent = around ? around->id : -1;
    int depth = around ? around->depth + 1 : 0;
    auto cp = instances_.find(c.parent);
    if (cp != instances_.end() && cp->second.pinned && !cp->second.in_step) {
      parent = self(self, c.parent, launch, around, step);
      depth = out.ranges[slot.at(parent)].depth + 1;
    }
    PhaseRange r;
    r.id = next_id++;
    r.parent_id = parent;
    r.name = c.name;
    r.depth = depth;
    r.step = step;
    r.start_ns = std::numeric_limits<std::int64_t>::max();
    r.end_ns = std::numeric_limits<std::int64_t>::min();
    slot[r.id] = out.ranges.size();
    out.ranges.push_back(std::move(r));
    replayed.emplace(key, out.ranges.back().id);
    return out.ranges.back().id;
  };

  // Attribute each op; ops launched outside the steps are dropped. CPU ops arrive attributed.
  auto attribute = [&](auto& op, std::int64_t start, std::int64_t end) -> bool {
    if (op.range_id < 0 || op.device_id >= 0) {
      std::int64_t t = start;
      std::uint32_t launch = op.correlation_id;
      if (auto it = launch_at.find(op.correlation_id); it != launch_at.end()) {
        t = it->second;
      } else if (op.graph_node_id != 0 && !graph_launches.empty()) {
        auto g = std::upper_bound(graph_launches.begin(), graph_launches.end(),
                                  std::make_pair(start, std::numeric_limits<std::uint32_t>::max()));
        if (g != graph_launches.begin()) {
          --g;
          t = g->first;
          launch = g->second;
        }
      }
      op.step = step_of(t);
      if (op.step < 0) return false;
      const Instance* around = innermost_at(t);
      op.range_id = around ? around->id : -1;
      if (op.graph_node_id != 0)
        if (auto n = node_range_.find(op.graph_node_id); n != node_range_.end() && instances_.count(n->second))
          op.range_id = replay_copy(replay_copy, n->second, launch, around, op.step);
    } else if (op.step < 0) {
      return false;
    }
    if (op.range_id >= 0 && !slot.count(op.range_id)) op.range_id = -1;  // opened before the step began
    for (std::int64_t id = op.range_id; id >= 0;) {
      auto s = slot.find(id);
      if (s == slot.end()) break;
      PhaseRange& r = out.ranges[s->second];
      r.start_ns = std::min(r.start_ns, start);
      r.end_ns = std::max(r.end_ns, end);
      ++r.ops;
      id = r.parent_id;
    }
    return true;
  };
  // Cost declarations of the steps, by host start: the innermost one open at t (as ranges).
  std::vector<std::size_t> decl;
  for (std::size_t i = 0; i < cost_instances_.size(); ++i)
    if (cost_instances_[i].in_step && cost_instances_[i].host_end >= 0) decl.push_back(i);
  std::sort(decl.begin(), decl.end(), [&](std::size_t a, std::size_t b) {
    return cost_instances_[a].host_start < cost_instances_[b].host_start;
  });
  auto cost_at = [&](std::int64_t t) -> const CostInstance* {
    auto it = std::upper_bound(decl.begin(), decl.end(), t,
                               [&](std::int64_t v, std::size_t i) { return v < cost_instances_[i].host_start; });
    if (it == decl.begin()) return nullptr;
    const CostInstance* c = &cost_instances_[*(it - 1)];
    while (c != nullptr && c->host_end < t)
      c = c->parent >= 0 && cost_instances_[static_cast<std::size_t>(c->parent)].in_step
              ? &cost_instances_[static_cast<std::size_t>(c->parent)]
              : nullptr;
    return c;
  };
  // (step, declaration id, graph launch) -> op_call: one call per declaration per replay.
  std::map<std::tuple<int, std::int64_t, std::uint32_t>, std::int64_t> calls;
  auto positions_of = [&](int step) {
    return step >= 0 && static_cast<std::size_t>(step) < step_positions_.size() ? step_positions_[static_cast<std::size_t>(step)]
                                                                                : std::int64_t{0};
  };
  auto set_cost = [&](KernelRecord& k, const OpCost& c, std::int64_t id, std::uint32_t launch) {
    const std::int64_t pos = positions_of(k.step);
    k.op = c.op;
    k.op_bytes = c.bytes_at(pos);
    k.op_flops = c.flops_at(pos);
    k.op_bound = c.bound;
    auto [it, fresh] = calls.emplace(std::make_tuple(k.step, id, launch), static_cast<std::int64_t>(calls.size()));
    (void)fresh;
    k.op_call = it->second;
  };
  for (auto& k : raw_.kernels) {
    if (!attribute(k, k.start_ns, k.end_ns)) continue;
    if (k.device_id >= 0) {  // GPU: from the graph node or the launch call; CPU ops arrive with theirs
      if (k.graph_node_id != 0) {
        if (auto n = node_cost_.find(k.graph_node_id); n != node_cost_.end()) {
          std::uint32_t launch = 0;
          auto g = std::upper_bound(graph_launches.begin(), graph_launches.end(),
                                    std::make_pair(k.start_ns, std::numeric_limits<std::uint32_t>::max()));
          if (g != graph_launches.begin()) launch = (g - 1)->second;
          set_cost(k, n->second.first, n->second.second, launch);
        }
      } else if (auto it = launch_at.find(k.correlation_id); it != launch_at.end()) {
        if (const CostInstance* c = cost_at(it->second)) set_cost(k, c->cost, c->id, 0);
      }
    } else if (auto c = cpu_costs_.find(k.correlation_id); c != cpu_costs_.end()) {
      set_cost(k, c->second.first, c->second.second, 0);
    }
    out.kernels.push_back(k);
  }
  for (auto& m : raw_.memcpys)
    if (attribute(m, m.start_ns, m.end_ns)) out.memcpys.push_back(m);
  for (auto& m : raw_.memsets)
    if (attribute(m, m.start_ns, m.end_ns)) out.memsets.push_back(m);
  for (const auto& d : raw_.device_memory)
    if (step_of(d.t_ns) >= 0) out.device_memory.push_back(d);

  // Where a range's work ran: its ops' span on the device; the host's own times on the CPU backend (and for
  // a range without ops).
  const bool cpu = out.source == "cpu";
  for (auto& r : out.ranges)
    if (cpu || r.ops == 0) {
      r.start_ns = r.host_start_ns;
      r.end_ns = r.host_end_ns;
    }
  std::sort(out.ranges.begin(), out.ranges.end(), [](const PhaseRange& a, const PhaseRange& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.depth < b.depth;
  });
  auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
  std::stable_sort(out.kernels.begin(), out.kernels.end(), by_start);
  std::stable_sort(out.memcpys.begin(), out.memcpys.end(), by_start);
  std::stable_sort(out.memsets.begin(), out.memsets.end(), by_start);
  std::stable_sort(out.api.begin(), out.api.end(), by_start);

  // Stage stamps: the n-th stamped launch of a kernel in a step belongs to the n-th record of that kernel in
  // the step (records by start); its stages move onto the trace clock so that the launch ends where its
  // record ends. A launch without a record keeps no stages.
  out.dropped_stamps = dropped_stamps_;
  {
    // Stages first on the device clock, numbered by launch; stage_kernels() pairs each with its record (the
    // one definition of which record a launch is), then each launch moves by its record's end less its own.
    std::map<std::pair<int, std::string>, int> seen;
    std::vector<std::int64_t> launch_end;  // per stage: its launch's end on the device clock
    for (const auto& [step, l] : stamps_) {
      const int n = seen[{step, l.kernel}]++;
      for (const auto& st : l.stages) {
        out.stages.push_back({step, l.kernel, n, -1, st.layer, st.stage, st.start_ns, st.end_ns, st.wait_ns});
        launch_end.push_back(l.end_ns);
      }
    }
    const auto owner = stage_kernels(out);
    std::vector<StageRecord> placed;
    placed.reserve(out.stages.size());
    for (std::size_t i = 0; i < out.stages.size(); ++i) {
      if (owner[i] < 0) continue;  // a launch without a record keeps no stages
      const KernelRecord& k = out.kernels[static_cast<std::size_t>(owner[i])];
      StageRecord g = out.stages[i];
      const std::int64_t shift = k.end_ns - launch_end[i];
      g.range_id = k.range_id;
      g.start_ns += shift;
      g.end_ns += shift;
      placed.push_back(std::move(g));
    }
    out.stages = std::move(placed);
  }
  stamps_.clear();
  dropped_stamps_ = 0;

  // The allocator's timeline on the trace clock: each category's live bytes when the profile began, then
  // the events inside the steps (live bytes follow every event, kept or not).
  std::map<std::string, std::int64_t> live;
  for (const auto& [cat, bytes] : allocator.live_at_start) {
    live[cat] = bytes;
    out.allocator.push_back({out.start_ns, cat, "", -1, 0, bytes});
  }
  for (const auto& e : allocator.events) {
    const std::int64_t t = from_steady(allocator.origin + std::chrono::nanoseconds(e.t_ns));
    const std::int64_t now = live[e.category] += e.bytes;
    if (step_of(t) >= 0) out.allocator.push_back({t, e.category, e.module, e.layer, e.bytes, now});
  }
  raw_ = ProfileTrace{};
  cpu_costs_.clear();
  step_positions_.clear();
  return out;
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

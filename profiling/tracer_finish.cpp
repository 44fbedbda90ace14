// Tracer::finish: the raw records of the profiled steps attributed to their steps, phase ranges and cost
// declarations, on the trace clock (profiling/tracer.h says the rules). One stage a method of Tracer::Assembly,
// in the order finish() runs them; the recording side (ranges, costs, steps, stamps) is tracer.cpp.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "profiling/tracer.h"

namespace moc::prof {

namespace {
bool is_graph_launch(const std::string& api) {
  return api.rfind("cudaGraphLaunch", 0) == 0 || api.rfind("cuGraphLaunch", 0) == 0;
}
}  // namespace

// The state of one finish(): indexes of the tracer's ranges, launches and declarations, and the trace being built.
// Runs under the tracer's lock.
class Tracer::Assembly {
 public:
  Assembly(Tracer& t, ProfileTrace& out) : t_(t), out_(out), next_id_(t.next_id_) {}

  // The host's ranges of the profiled steps, by start (innermost_at's index).
  void index_host_ranges() {
    for (const auto& [id, in] : t_.instances_)
      if (in.in_step && in.host_end >= 0) host_.push_back(&in);
    std::sort(host_.begin(), host_.end(), [](const Instance* a, const Instance* b) {
      return a->host_start != b->host_start ? a->host_start < b->host_start : a->depth < b->depth;
    });
  }

  // Launch calls: the earliest API record of each correlation id, and the graph launches by time; the API records
  // of the steps go to the trace.
  void index_launches() {
    for (const auto& a : t_.raw_.api) {
      auto [it, fresh] = launch_at_.emplace(a.correlation_id, a.start_ns);
      if (!fresh) it->second = std::min(it->second, a.start_ns);
      if (is_graph_launch(a.name)) graph_launches_.emplace_back(a.start_ns, a.correlation_id);
      if (step_of(a.start_ns) >= 0) out_.api.push_back(a);
    }
    std::sort(graph_launches_.begin(), graph_launches_.end());
  }

  // Output ranges: the host's (replayed copies of captured ranges follow as ops need them: replay_copy).
  void emit_host_ranges() {
    for (const Instance* in : host_) {
      PhaseRange r;
      r.id = in->id;
      auto p = t_.instances_.find(in->parent);
      r.parent_id = p != t_.instances_.end() && p->second.in_step ? in->parent : -1;
      r.name = in->name;
      r.depth = in->depth;
      r.step = std::max(0, step_of(in->host_start));
      r.host_start_ns = in->host_start;
      r.host_end_ns = in->host_end;
      r.start_ns = std::numeric_limits<std::int64_t>::max();
      r.end_ns = std::numeric_limits<std::int64_t>::min();
      slot_[r.id] = out_.ranges.size();
      out_.ranges.push_back(std::move(r));
    }
  }

  // Cost declarations of the steps, by host start (cost_at's index).
  void index_costs() {
    const auto& ci = t_.cost_instances_;
    for (std::size_t i = 0; i < ci.size(); ++i)
      if (ci[i].in_step && ci[i].host_end >= 0) decl_.push_back(i);
    std::sort(decl_.begin(), decl_.end(),
              [&](std::size_t a, std::size_t b) { return ci[a].host_start < ci[b].host_start; });
  }

  // Kernels: each attributed (those outside the steps dropped) and given its cost declaration -- a GPU kernel from
  // its graph node or its launch call; CPU ops arrive with theirs.
  void attribute_kernels() {
    for (auto& k : t_.raw_.kernels) {
      if (!attribute(k, k.start_ns, k.end_ns)) continue;
      if (k.device_id >= 0) {
        if (k.graph_node_id != 0) {
          if (auto n = t_.node_cost_.find(k.graph_node_id); n != t_.node_cost_.end()) {
            std::uint32_t launch = 0;
            auto g = std::upper_bound(graph_launches_.begin(), graph_launches_.end(),
                                      std::make_pair(k.start_ns, std::numeric_limits<std::uint32_t>::max()));
            if (g != graph_launches_.begin()) launch = (g - 1)->second;
            set_cost(k, n->second.first, n->second.second, launch);
          }
        } else if (auto it = launch_at_.find(k.correlation_id); it != launch_at_.end()) {
          if (const CostInstance* c = cost_at(it->second)) set_cost(k, c->cost, c->id, 0);
        }
      } else if (auto c = t_.cpu_costs_.find(k.correlation_id); c != t_.cpu_costs_.end()) {
        set_cost(k, c->second.first, c->second.second, 0);
      }
      out_.kernels.push_back(k);
    }
  }

  // Copies and sets attributed as kernels; device memory events of the steps kept.
  void attribute_copies() {
    for (auto& m : t_.raw_.memcpys)
      if (attribute(m, m.start_ns, m.end_ns)) out_.memcpys.push_back(m);
    for (auto& m : t_.raw_.memsets)
      if (attribute(m, m.start_ns, m.end_ns)) out_.memsets.push_back(m);
    for (const auto& d : t_.raw_.device_memory)
      if (step_of(d.t_ns) >= 0) out_.device_memory.push_back(d);
  }

  // Where a range's work ran: its ops' span on the device; the host's own times on the CPU backend (and for a
  // range without ops). Then every list by start.
  void finish_ranges() {
    const bool cpu = out_.source == "cpu";
    for (auto& r : out_.ranges)
      if (cpu || r.ops == 0) {
        r.start_ns = r.host_start_ns;
        r.end_ns = r.host_end_ns;
      }
    std::sort(out_.ranges.begin(), out_.ranges.end(), [](const PhaseRange& a, const PhaseRange& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.depth < b.depth;
    });
    auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
    std::stable_sort(out_.kernels.begin(), out_.kernels.end(), by_start);
    std::stable_sort(out_.memcpys.begin(), out_.memcpys.end(), by_start);
    std::stable_sort(out_.memsets.begin(), out_.memsets.end(), by_start);
    std::stable_sort(out_.api.begin(), out_.api.end(), by_start);
  }

  // Stage stamps: the n-th stamped launch of a kernel in a step belongs to the n-th record of that kernel in the
  // step (records by start); its stages move onto the trace clock so that the launch ends where its record ends.
  // A launch without a record keeps no stages.
  void place_stages() {
    out_.dropped_stamps = t_.dropped_stamps_;
    // Stages first on the device clock, numbered by launch; stage_kernels() pairs each with its record (the one
    // definition of which record a launch is), then each launch moves by its record's end less its own.
    std::map<std::pair<int, std::string>, int> seen;
    std::vector<std::int64_t> launch_end;  // per stage: its launch's end on the device clock
    for (const auto& [step, l] : t_.stamps_) {
      const int n = seen[{step, l.kernel}]++;
      for (const auto& st : l.stages) {
        out_.stages.push_back({step, l.kernel, n, -1, st.layer, st.stage, st.start_ns, st.end_ns, st.wait_ns});
        launch_end.push_back(l.end_ns);
      }
    }
    const auto owner = stage_kernels(out_);
    std::vector<StageRecord> placed;
    placed.reserve(out_.stages.size());
    for (std::size_t i = 0; i < out_.stages.size(); ++i) {
      if (owner[i] < 0) continue;  // a launch without a record keeps no stages
      const KernelRecord& k = out_.kernels[static_cast<std::size_t>(owner[i])];
      StageRecord g = out_.stages[i];
      const std::int64_t shift = k.end_ns - launch_end[i];
      g.range_id = k.range_id;
      g.start_ns += shift;
      g.end_ns += shift;
      placed.push_back(std::move(g));
    }
    out_.stages = std::move(placed);
  }

  // The allocator's timeline on the trace clock: each category's live bytes when the profile began, then the
  // events inside the steps (live bytes follow every event, kept or not).
  void allocator_timeline(const AllocatorTimeline& allocator) {
    std::map<std::string, std::int64_t> live;
    for (const auto& [cat, bytes] : allocator.live_at_start) {
      live[cat] = bytes;
      out_.allocator.push_back({out_.start_ns, cat, "", -1, 0, bytes});
    }
    for (const auto& e : allocator.events) {
      const std::int64_t t = t_.from_steady(allocator.origin + std::chrono::nanoseconds(e.t_ns));
      const std::int64_t now = live[e.category] += e.bytes;
      if (step_of(t) >= 0) out_.allocator.push_back({t, e.category, e.module, e.layer, e.bytes, now});
    }
  }

 private:
  // The step whose window holds t, or -1.
  int step_of(std::int64_t t) const {
    const auto& w = t_.windows_;
    auto it = std::upper_bound(w.begin(), w.end(), t, [](std::int64_t v, const Window& x) { return v < x.start; });
    if (it == w.begin()) return -1;
    --it;
    return t <= it->end ? static_cast<int>(it - w.begin()) : -1;
  }

  // The innermost host range holding t: the last one started at or before t, or the nearest of its ancestors still
  // open at t (ranges nest).
  const Instance* innermost_at(std::int64_t t) const {
    auto it = std::upper_bound(host_.begin(), host_.end(), t,
                               [](std::int64_t v, const Instance* in) { return v < in->host_start; });
    if (it == host_.begin()) return nullptr;
    const Instance* in = *(it - 1);
    while (in != nullptr && in->host_end < t) {
      auto p = t_.instances_.find(in->parent);
      in = p == t_.instances_.end() || !p->second.in_step ? nullptr : &p->second;
    }
    return in;
  }

  // The copy of captured range `captured` for the graph launch `launch` (made once, with the copies of its pinned
  // captured ancestors), parented under `around`, the range open around the launch.
  std::int64_t replay_copy(std::int64_t captured, std::uint32_t launch, const Instance* around, int step) {
    auto key = std::make_pair(captured, launch);
    if (auto it = replayed_.find(key); it != replayed_.end()) return it->second;
    const Instance& c = t_.instances_.at(captured);
    std::int64_t parent = around ? around->id : -1;
    int depth = around ? around->depth + 1 : 0;
    auto cp = t_.instances_.find(c.parent);
    if (cp != t_.instances_.end() && cp->second.pinned && !cp->second.in_step) {
      parent = replay_copy(c.parent, launch, around, step);
      depth = out_.ranges[slot_.at(parent)].depth + 1;
    }
    PhaseRange r;
    r.id = next_id_++;
    r.parent_id = parent;
    r.name = c.name;
    r.depth = depth;
    r.step = step;
    r.start_ns = std::numeric_limits<std::int64_t>::max();
    r.end_ns = std::numeric_limits<std::int64_t>::min();
    slot_[r.id] = out_.ranges.size();
    out_.ranges.push_back(std::move(r));
    replayed_.emplace(key, out_.ranges.back().id);
    return out_.ranges.back().id;
  }

  // Attributes one op (its step and range; its ranges' spans grow by it); false: launched outside the steps (then
  // dropped). CPU ops arrive attributed.
  template <class Op>
  bool attribute(Op& op, std::int64_t start, std::int64_t end) {
    if (op.range_id < 0 || op.device_id >= 0) {
      std::int64_t t = start;
      std::uint32_t launch = op.correlation_id;
      if (auto it = launch_at_.find(op.correlation_id); it != launch_at_.end()) {
        t = it->second;
      } else if (op.graph_node_id != 0 && !graph_launches_.empty()) {
        auto g = std::upper_bound(graph_launches_.begin(), graph_launches_.end(),
                                  std::make_pair(start, std::numeric_limits<std::uint32_t>::max()));
        if (g != graph_launches_.begin()) {
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
        if (auto n = t_.node_range_.find(op.graph_node_id); n != t_.node_range_.end() && t_.instances_.count(n->second))
          op.range_id = replay_copy(n->second, launch, around, op.step);
    } else if (op.step < 0) {
      return false;
    }
    if (op.range_id >= 0 && !slot_.count(op.range_id)) op.range_id = -1;  // opened before the step began
    for (std::int64_t id = op.range_id; id >= 0;) {
      auto s = slot_.find(id);
      if (s == slot_.end()) break;
      PhaseRange& r = out_.ranges[s->second];
      r.start_ns = std::min(r.start_ns, start);
      r.end_ns = std::max(r.end_ns, end);
      ++r.ops;
      id = r.parent_id;
    }
    return true;
  }

  // The innermost cost declaration open at t (as ranges).
  const CostInstance* cost_at(std::int64_t t) const {
    const auto& ci = t_.cost_instances_;
    auto it = std::upper_bound(decl_.begin(), decl_.end(), t,
                               [&](std::int64_t v, std::size_t i) { return v < ci[i].host_start; });
    if (it == decl_.begin()) return nullptr;
    const CostInstance* c = &ci[*(it - 1)];
    while (c != nullptr && c->host_end < t)
      c = c->parent >= 0 && ci[static_cast<std::size_t>(c->parent)].in_step ? &ci[static_cast<std::size_t>(c->parent)]
                                                                             : nullptr;
    return c;
  }

  std::int64_t positions_of(int step) const {
    const auto& sp = t_.step_positions_;
    return step >= 0 && static_cast<std::size_t>(step) < sp.size() ? sp[static_cast<std::size_t>(step)]
                                                                     : std::int64_t{0};
  }

  // Kernel k's cost from declaration c (id) at its step's positions; one op_call per declaration per step and
  // graph launch.
  void set_cost(KernelRecord& k, const OpCost& c, std::int64_t id, std::uint32_t launch) {
    const std::int64_t pos = positions_of(k.step);
    k.op = c.op;
    k.op_bytes = c.bytes_at(pos);
    k.op_flops = c.flops_at(pos);
    k.op_bound = c.bound;
    auto [it, fresh] = calls_.emplace(std::make_tuple(k.step, id, launch), static_cast<std::int64_t>(calls_.size()));
    (void)fresh;
    k.op_call = it->second;
  }

  Tracer& t_;
  ProfileTrace& out_;
  std::vector<const Instance*> host_;
  std::unordered_map<std::uint32_t, std::int64_t> launch_at_;
  std::vector<std::pair<std::int64_t, std::uint32_t>> graph_launches_;
  std::unordered_map<std::int64_t, std::size_t> slot_;  // range id -> out.ranges index
  std::map<std::pair<std::int64_t, std::uint32_t>, std::int64_t> replayed_;  // (captured range, launch) -> copy
  std::int64_t next_id_;                                                    // of replayed copies
  std::vector<std::size_t> decl_;                                           // indices into cost_instances_
  std::map<std::tuple<int, std::int64_t, std::uint32_t>, std::int64_t> calls_;  // (step, declaration, launch) -> op_call
};

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

  Assembly a(*this, out);
  a.index_host_ranges();
  a.index_launches();
  a.emit_host_ranges();
  a.index_costs();
  a.attribute_kernels();
  a.attribute_copies();
  a.finish_ranges();
  a.place_stages();
  a.allocator_timeline(allocator);

  stamps_.clear();
  dropped_stamps_ = 0;
  raw_ = ProfileTrace{};
  cpu_costs_.clear();
  step_positions_.clear();
  return out;
}

}  // namespace moc::prof

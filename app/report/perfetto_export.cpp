#include "app/report/perfetto_export.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <ostream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "app/report/json_line.h"

namespace moc::perfetto {

namespace {

// Key order kept as written: a trace is read by people too.
using Json = nlohmann::ordered_json;

// One complete event before its track (lane) is known.
struct Slice {
  std::int64_t start = 0, end = 0;
  int depth = 0;  // ties at equal (start, end): the outer one first
  std::string name, cat;
  Json args;
  std::uint32_t correlation_id = 0;  // device ops and API records: the flow key (0: none)
  bool is_api = false;
  int tid = 0;  // set by place()
};

// A base track: its slices go to the base thread or to overflow lanes so that each lane nests properly.
struct Track {
  std::string name;
  std::vector<Slice> slices;
};

struct Thread {
  int tid;
  std::string name;
};

std::string dim3(int x, int y, int z) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%d, %d, %d)", x, y, z);
  return buf;
}

// Microseconds as a JSON number: ns / 1000 is correctly rounded and printed as the shortest text that reads
// back to it, so a time of up to 15 significant digits (days, in ns) comes out exactly ("1234.567").
double us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Assigns every slice of the track to the first lane where it nests (within the innermost open slice, or
// after every open slice ended); lane 0 is the base thread, lane K "NAME (overlap K)".
void place(Track& tr, int& next_tid, std::vector<Thread>& threads) {
  std::vector<std::size_t> order(tr.slices.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Slice &x = tr.slices[a], &y = tr.slices[b];
    if (x.start != y.start) return x.start < y.start;
    if (x.end != y.end) return x.end > y.end;
    return x.depth < y.depth;
  });
  std::vector<std::vector<std::int64_t>> lanes;  // each lane's stack of open ends
  std::vector<int> lane_tid;
  for (std::size_t i : order) {
    Slice& s = tr.slices[i];
    std::size_t lane = 0;
    for (; lane < lanes.size(); ++lane) {
      auto& st = lanes[lane];
      while (!st.empty() && st.back() <= s.start) st.pop_back();
      if (st.empty() || st.back() >= s.end) break;
    }
    if (lane == lanes.size()) {
      lanes.emplace_back();
      lane_tid.push_back(next_tid++);
      threads.push_back({lane_tid.back(), lane ? tr.name + " (overlap " + std::to_string(lane) + ")" : tr.name});
    }
    lanes[lane].push_back(s.end);
    s.tid = lane_tid[lane];
  }
  // Events go out in the same order (per track: by start, outer first).
  std::vector<Slice> sorted;
  sorted.reserve(order.size());
  for (std::size_t i : order) sorted.push_back(std::move(tr.slices[i]));
  tr.slices = std::move(sorted);
}

// One point's process: its tracks filled from the trace, then placed on lanes and written as metadata and
// events (each a JSON object dumped on its own line).
class PointWriter {
 public:
  PointWriter(const PointProfile& pp, prof::TimeMode time, int& next_tid, long long& flow_id)
      : pp_(pp), t_(*pp.trace), time_(time), pid_(pp.index + 1), own_tid_(next_tid++), next_tid_(next_tid),
        flow_id_(flow_id), dt_(prof::device_times(t_, time)), cpu_(t_.source == "cpu") {
    origin_ = origin();
    for (const auto& r : t_.ranges) ranges_.emplace(r.id, &r);
    make_tracks();
    add_ranges();
    add_api();
    add_kernels();
    add_copies();
    add_stages();
    for (auto& tr : tracks_) place(tr, next_tid_, threads_);  // a track without slices gets no thread
  }

  void write_meta(std::vector<Json>& out) const {
    auto meta = [&](int tid, const char* name, Json args) {
      out.push_back(Json{{"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"name", name}, {"args", std::move(args)}});
    };
    meta(own_tid_, "process_name", Json{{"name", pp_.label}});
    meta(own_tid_, "process_sort_index", Json{{"sort_index", pp_.index}});
    std::string labels = t_.source + ", " + std::to_string(t_.steps) + " step(s), " + prof::time_mode_name(time_) +
                         " device time";
    if (t_.dropped_records) labels += ", " + std::to_string(t_.dropped_records) + " records dropped";
    meta(own_tid_, "process_labels", Json{{"labels", labels}});
    for (const auto& th : threads_) {
      meta(th.tid, "thread_name", Json{{"name", th.name}});
      meta(th.tid, "thread_sort_index", Json{{"sort_index", th.tid}});
    }
  }

  // Complete events, per track in nesting order; the memory counters; the launch flows. A flow binds to the
  // slice open at its time on its track: its ends sit at the middle of the API call and of the op (not at
  // their starts, where the order of events with equal times would decide).
  void write_events(std::vector<Json>& out) const {
    auto mid = [](const Slice& x) { return x.start + (x.end - x.start) / 2; };
    std::unordered_map<std::uint32_t, std::pair<int, std::int64_t>> launch;  // correlation id -> (tid, ts)
    for (const auto& tr : tracks_)
      for (const auto& s : tr.slices) {
        out.push_back(Json{{"ph", "X"}, {"pid", pid_}, {"tid", s.tid}, {"ts", ts(s.start)}, {"dur", us(s.end - s.start)},
                           {"name", s.name}, {"cat", s.cat}, {"args", s.args}});
        if (s.is_api && s.correlation_id) launch.emplace(s.correlation_id, std::make_pair(s.tid, mid(s)));
      }
    // Memory by category: one counter series per category (Perfetto shows "memory <category>").
    for (const auto& e : t_.allocator)
      out.push_back(Json{{"ph", "C"}, {"pid", pid_}, {"tid", own_tid_}, {"ts", ts(e.t_ns)}, {"name", "memory"},
                         {"args", Json{{e.category, e.category_live_bytes}}}});
    // Flows: launch API record -> each kernel / memcpy / memset with its correlation id.
    for (const auto& tr : tracks_)
      for (const auto& s : tr.slices) {
        if (s.is_api || !s.correlation_id) continue;
        auto it = launch.find(s.correlation_id);
        if (it == launch.end()) continue;
        const long long id = ++flow_id_;
        out.push_back(Json{{"ph", "s"}, {"pid", pid_}, {"tid", it->second.first}, {"ts", ts(it->second.second)},
                           {"id", id}, {"name", "launch"}, {"cat", "flow"}});
        out.push_back(Json{{"ph", "f"}, {"bp", "e"}, {"pid", pid_}, {"tid", s.tid}, {"ts", ts(mid(s))}, {"id", id},
                           {"name", "launch"}, {"cat", "flow"}});
      }
  }

 private:
  // The origin: the window's start, or an earlier record's (no negative times).
  std::int64_t origin() const {
    std::int64_t o = t_.start_ns;
    for (const auto& k : t_.kernels) o = std::min(o, k.start_ns);
    for (const auto& m : t_.memcpys) o = std::min(o, m.start_ns);
    for (const auto& m : t_.memsets) o = std::min(o, m.start_ns);
    for (const auto& a : t_.api) o = std::min(o, a.start_ns);
    for (const auto& a : t_.allocator) o = std::min(o, a.t_ns);
    for (const auto& r : t_.ranges)
      if (r.ops > 0 || cpu_) o = std::min(o, r.start_ns);
    return o;
  }
  double ts(std::int64_t ns) const { return us(ns - origin_); }

  // Exclusive: the inclusive record and its wait as arguments.
  void times(Json& a, std::int64_t start, std::int64_t end, std::int64_t own) const {
    if (time_ != prof::TimeMode::exclusive) return;
    a["inclusive_start_us"] = ts(start);
    a["inclusive_dur_us"] = us(std::max(start, end) - start);
    a["wait_us"] = us(std::min(own, std::max(start, end)) - start);
  }

  std::string path(std::int64_t id) const {
    std::string p;
    for (int hops = 0; id >= 0 && hops < 1000; ++hops) {
      auto it = ranges_.find(id);
      if (it == ranges_.end()) break;
      p = p.empty() ? it->second->name : it->second->name + "/" + p;
      id = it->second->parent_id;
    }
    return p.empty() ? std::string("(none)") : p;
  }

  // Base tracks in display order: phases, API threads, then (device, stream) sorted whatever the order
  // records come in.
  void make_tracks() {
    tracks_.push_back({"Phases", {}});
    for (const auto& a : t_.api) api_track_.emplace(a.thread_id, 0);
    for (auto& [thread, idx] : api_track_) {
      idx = tracks_.size();
      tracks_.push_back({api_track_.size() == 1 ? std::string("CUDA API")
                                                : "CUDA API (thread " + std::to_string(thread) + ")",
                         {}});
    }
    std::vector<std::pair<int, std::uint32_t>> keys;
    for (const auto& k : t_.kernels) keys.emplace_back(k.device_id, k.device_id < 0 ? 0u : k.stream_id);
    for (const auto& m : t_.memcpys) keys.emplace_back(m.device_id, m.device_id < 0 ? 0u : m.stream_id);
    for (const auto& m : t_.memsets) keys.emplace_back(m.device_id, m.device_id < 0 ? 0u : m.stream_id);
    std::sort(keys.begin(), keys.end());
    for (const auto& [d, s] : keys) stream_of(d, s);
  }

  Track& stream_of(int device, std::uint32_t stream) {
    auto [it, fresh] = stream_track_.emplace(std::make_pair(device, device < 0 ? 0u : stream), 0);
    if (fresh) {
      it->second = tracks_.size();
      tracks_.push_back({device < 0 ? std::string("CPU ops")
                                    : "GPU " + std::to_string(device) + " stream " + std::to_string(stream),
                         {}});
    }
    return tracks_[it->second];
  }

  void add_ranges() {
    for (const auto& r : t_.ranges) {
      if (!cpu_ && r.ops <= 0) continue;  // no device work: no projection
      Json a{{"id", r.id}, {"parent_id", r.parent_id}, {"depth", r.depth}, {"step", r.step}, {"ops", r.ops}};
      if (r.host_start_ns == 0 && r.host_end_ns == 0) {
        a["graph_replay"] = true;
      } else {
        a["host_start_us"] = ts(r.host_start_ns);
        a["host_dur_us"] = us(r.host_end_ns - r.host_start_ns);
      }
      tracks_[0].slices.push_back({r.start_ns, std::max(r.start_ns, r.end_ns), r.depth, r.name, "phase", std::move(a), 0,
                                   false, 0});
    }
  }

  void add_api() {
    for (const auto& api : t_.api) {
      Json a{{"domain", api.domain}, {"correlation_id", api.correlation_id}, {"thread_id", api.thread_id},
             {"return_value", api.return_value}};
      tracks_[api_track_[api.thread_id]].slices.push_back(
          {api.start_ns, std::max(api.start_ns, api.end_ns), 0, api.name, "cuda_api", std::move(a), api.correlation_id,
           true, 0});
    }
  }

  void add_kernels() {
    for (std::size_t i = 0; i < t_.kernels.size(); ++i) {
      const auto& k = t_.kernels[i];
      Json a = Json::object();
      if (k.device_id >= 0) {
        a["name"] = k.name;
        a["grid"] = dim3(k.grid_x, k.grid_y, k.grid_z);
        a["block"] = dim3(k.block_x, k.block_y, k.block_z);
        a["registers_per_thread"] = k.registers_per_thread;
        a["static_shared_bytes"] = k.static_shared_bytes;
        a["dynamic_shared_bytes"] = k.dynamic_shared_bytes;
        launch_args(a, k.correlation_id, k.device_id, k.context_id, k.stream_id, k.graph_id, k.graph_node_id);
      }
      a["phase"] = path(k.range_id);
      a["step"] = k.step;
      if (k.op_bytes >= 0) {  // what its op declared (the roofline): shared by the op's kernels in this step
        a["op"] = k.op;
        a["op_bytes"] = k.op_bytes;
        a["op_flops"] = k.op_flops;
        a["op_call"] = k.op_call;
        if (k.op_bound) a["op_bytes_upper_bound"] = 1;
      }
      times(a, k.start_ns, k.end_ns, dt_.kernel_own[i]);
      stream_of(k.device_id, k.stream_id)
          .slices.push_back({dt_.kernel_own[i], dt_.kernel_own[i] + dt_.kernels[i], 0,
                             k.short_name.empty() ? k.name : k.short_name, k.device_id < 0 ? "cpu_op" : "kernel",
                             std::move(a), k.correlation_id, false, 0});
    }
  }

  static void launch_args(Json& a, std::uint32_t correlation, int device, std::uint32_t context, std::uint32_t stream,
                          std::uint32_t graph, std::uint64_t graph_node) {
    a["correlation_id"] = correlation;
    a["device"] = device;
    a["context"] = context;
    a["stream"] = stream;
    a["graph_id"] = graph;
    a["graph_node_id"] = graph_node;
  }

  void add_copies() {
    for (std::size_t i = 0; i < t_.memcpys.size(); ++i) {
      const auto& m = t_.memcpys[i];
      Json a{{"bytes", m.bytes}, {"copy_kind", m.copy_kind}, {"src_kind", m.src_kind}, {"dst_kind", m.dst_kind}};
      launch_args(a, m.correlation_id, m.device_id, m.context_id, m.stream_id, m.graph_id, m.graph_node_id);
      a["phase"] = path(m.range_id);
      a["step"] = m.step;
      times(a, m.start_ns, m.end_ns, dt_.memcpy_own[i]);
      stream_of(m.device_id, m.stream_id)
          .slices.push_back({dt_.memcpy_own[i], dt_.memcpy_own[i] + dt_.memcpys[i], 0,
                             prof::memcpy_operation(m.copy_kind), "memcpy", std::move(a), m.correlation_id, false, 0});
    }
    for (std::size_t i = 0; i < t_.memsets.size(); ++i) {
      const auto& m = t_.memsets[i];
      Json a{{"bytes", m.bytes}, {"value", m.value}, {"mem_kind", m.mem_kind}};
      launch_args(a, m.correlation_id, m.device_id, m.context_id, m.stream_id, m.graph_id, m.graph_node_id);
      a["phase"] = path(m.range_id);
      a["step"] = m.step;
      times(a, m.start_ns, m.end_ns, dt_.memset_own[i]);
      stream_of(m.device_id, m.stream_id)
          .slices.push_back({dt_.memset_own[i], dt_.memset_own[i] + dt_.memsets[i], 0, "[CUDA memset]", "memset",
                             std::move(a), m.correlation_id, false, 0});
    }
  }

  // Device-side stage stamps: one track per stamped kernel's (device, stream), under its stream's track.
  void add_stages() {
    const auto owner = prof::stage_kernels(t_);
    std::map<std::pair<int, std::uint32_t>, std::size_t> stage_track;
    for (std::size_t i = 0; i < t_.stages.size(); ++i) {
      const auto& g = t_.stages[i];
      int device = 0;
      std::uint32_t stream = 0;
      if (owner[i] >= 0) {
        const auto& k = t_.kernels[static_cast<std::size_t>(owner[i])];
        device = k.device_id;
        stream = k.stream_id;
      }
      auto [it, fresh] = stage_track.emplace(std::make_pair(device, stream), 0);
      if (fresh) {
        it->second = tracks_.size();
        tracks_.push_back(
            {"GPU " + std::to_string(device) + " stream " + std::to_string(stream) + " " + g.kernel + " stages", {}});
      }
      Json a{{"layer", g.layer}, {"step", g.step}, {"launch", g.launch}, {"barrier_wait_us", us(g.wait_ns)},
             {"phase", path(g.range_id)}};
      const std::string name = g.layer >= 0 ? g.stage + " (layer " + std::to_string(g.layer) + ")" : g.stage;
      tracks_[it->second].slices.push_back(
          {g.start_ns, std::max(g.start_ns, g.end_ns), 0, name, "stage", std::move(a), 0, false, 0});
    }
  }

  const PointProfile& pp_;
  const prof::ProfileTrace& t_;
  prof::TimeMode time_;
  int pid_, own_tid_;
  int& next_tid_;
  long long& flow_id_;
  prof::DeviceTimes dt_;
  bool cpu_;
  std::int64_t origin_ = 0;
  std::unordered_map<std::int64_t, const prof::PhaseRange*> ranges_;
  std::vector<Track> tracks_;
  std::map<std::uint32_t, std::size_t> api_track_;
  std::map<std::pair<int, std::uint32_t>, std::size_t> stream_track_;
  std::vector<Thread> threads_;
};

}  // namespace

std::string us_text(std::int64_t ns) {
  const bool neg = ns < 0;
  const unsigned long long a = neg ? 0ULL - static_cast<unsigned long long>(ns) : static_cast<unsigned long long>(ns);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", a / 1000, a % 1000);
  return buf;
}

void write_trace(const std::vector<PointProfile>& points, std::ostream& out, prof::TimeMode time) {
  std::vector<Json> meta, events;
  long long flow_id = 0;
  // Thread ids are unique in the whole file (Perfetto's importer keys thread names by tid alone); each
  // process's own events (its metadata, its counters) use one tid of their own that holds no slices.
  int next_tid = 1;
  for (const auto& pp : points) {
    if (!pp.trace) continue;
    const PointWriter w(pp, time, next_tid, flow_id);
    w.write_meta(meta);
    w.write_events(events);
  }
  // One event per line; NaN or infinite numbers (none expected) would be written as null.
  out << "{\"traceEvents\": [";
  bool first = true;
  for (const auto* list : {&meta, &events})
    for (const auto& e : *list) {
      out << (first ? "\n" : ",\n") << json_line(e);
      first = false;
    }
  out << "\n], \"displayTimeUnit\": \"ns\"}\n";
}

}  // namespace moc::perfetto

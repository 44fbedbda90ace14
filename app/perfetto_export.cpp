#include "app/perfetto_export.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <ostream>
#include <unordered_map>

#include "app/json_text.h"

namespace moc::perfetto {

namespace {

// One complete event before its track (lane) is known.
struct Slice {
  std::int64_t start = 0, end = 0;
  int depth = 0;  // ties at equal (start, end): the outer one first
  std::string name, cat, args;  // args: a JSON object's text
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

class Args {
 public:
  Args& num(const char* k, long long v) {
    sep();
    s_ += json_quote(k) + ": " + std::to_string(v);
    return *this;
  }
  Args& str(const char* k, const std::string& v) {
    sep();
    s_ += json_quote(k) + ": " + json_quote(v);
    return *this;
  }
  Args& raw(const char* k, const std::string& v) {
    sep();
    s_ += json_quote(k) + ": " + v;
    return *this;
  }
  std::string text() const { return "{" + s_ + "}"; }

 private:
  void sep() {
    if (!s_.empty()) s_ += ", ";
  }
  std::string s_;
};

std::string dim3(int x, int y, int z) {
  return "\"(" + std::to_string(x) + ", " + std::to_string(y) + ", " + std::to_string(z) + ")\"";
}

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

}  // namespace

std::string us_text(std::int64_t ns) {
  const bool neg = ns < 0;
  const unsigned long long a = neg ? 0ULL - static_cast<unsigned long long>(ns) : static_cast<unsigned long long>(ns);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", a / 1000, a % 1000);
  return buf;
}

void write_trace(const std::vector<PointProfile>& points, std::ostream& out, prof::TimeMode time) {
  std::vector<std::string> meta, events;
  long long flow_id = 0;
  // Thread ids are unique in the whole file (Perfetto's importer keys thread names by tid alone); each
  // process's own events (its metadata, its counters) use one tid of their own that holds no slices.
  int next_tid = 1;
  for (const auto& pp : points) {
    if (!pp.trace) continue;
    const prof::ProfileTrace& t = *pp.trace;
    const int pid = pp.index + 1;
    const std::string P = "\"pid\": " + std::to_string(pid);
    const std::string PT = P + ", \"tid\": " + std::to_string(next_tid++);

    // The origin: the window's start, or an earlier record's (no negative times).
    std::int64_t origin = t.start_ns;
    for (const auto& k : t.kernels) origin = std::min(origin, k.start_ns);
    for (const auto& m : t.memcpys) origin = std::min(origin, m.start_ns);
    for (const auto& m : t.memsets) origin = std::min(origin, m.start_ns);
    for (const auto& a : t.api) origin = std::min(origin, a.start_ns);
    for (const auto& a : t.allocator) origin = std::min(origin, a.t_ns);
    const bool cpu = t.source == "cpu";
    for (const auto& r : t.ranges)
      if (r.ops > 0 || cpu) origin = std::min(origin, r.start_ns);
    auto ts = [&](std::int64_t ns) { return us_text(ns - origin); };
    const prof::DeviceTimes dt = prof::device_times(t, time);
    const bool excl = time == prof::TimeMode::exclusive;
    // Exclusive: the inclusive record and its wait as arguments.
    auto times = [&](Args& a, std::int64_t start, std::int64_t end, std::int64_t own) {
      if (!excl) return;
      a.raw("inclusive_start_us", ts(start)).raw("inclusive_dur_us", us_text(std::max(start, end) - start));
      a.raw("wait_us", us_text(std::min(own, std::max(start, end)) - start));
    };
    std::unordered_map<std::int64_t, const prof::PhaseRange*> ranges;
    for (const auto& r : t.ranges) ranges.emplace(r.id, &r);
    auto path = [&](std::int64_t id) {
      std::string p;
      for (int hops = 0; id >= 0 && hops < 1000; ++hops) {
        auto it = ranges.find(id);
        if (it == ranges.end()) break;
        p = p.empty() ? it->second->name : it->second->name + "/" + p;
        id = it->second->parent_id;
      }
      return p.empty() ? std::string("(none)") : p;
    };

    // Base tracks in display order: phases, API threads, then (device, stream).
    std::vector<Track> tracks;
    tracks.push_back({"Phases", {}});
    std::map<std::uint32_t, std::size_t> api_track;
    for (const auto& a : t.api) api_track.emplace(a.thread_id, 0);
    for (auto& [thread, idx] : api_track) {
      idx = tracks.size();
      tracks.push_back({api_track.size() == 1 ? std::string("CUDA API")
                                              : "CUDA API (thread " + std::to_string(thread) + ")",
                        {}});
    }
    std::map<std::pair<int, std::uint32_t>, std::size_t> stream_track;
    auto stream_of = [&](int device, std::uint32_t stream) -> Track& {
      auto [it, fresh] = stream_track.emplace(std::make_pair(device, stream), 0);
      if (fresh) {
        it->second = tracks.size();
        tracks.push_back({device < 0 ? std::string("CPU ops")
                                     : "GPU " + std::to_string(device) + " stream " + std::to_string(stream),
                          {}});
      }
      return tracks[it->second];
    };
    // Stream tracks sorted by (device, stream) regardless of the order records come in.
    {
      std::vector<std::pair<int, std::uint32_t>> keys;
      for (const auto& k : t.kernels) keys.emplace_back(k.device_id, k.device_id < 0 ? 0u : k.stream_id);
      for (const auto& m : t.memcpys) keys.emplace_back(m.device_id, m.device_id < 0 ? 0u : m.stream_id);
      for (const auto& m : t.memsets) keys.emplace_back(m.device_id, m.device_id < 0 ? 0u : m.stream_id);
      std::sort(keys.begin(), keys.end());
      for (const auto& [d, s] : keys) stream_of(d, s);
    }

    for (const auto& r : t.ranges) {
      if (!cpu && r.ops <= 0) continue;  // no device work: no projection
      const bool replay = r.host_start_ns == 0 && r.host_end_ns == 0;
      Args a;
      a.num("id", r.id).num("parent_id", r.parent_id).num("depth", r.depth).num("step", r.step).num("ops", r.ops);
      if (replay) a.raw("graph_replay", "true");
      else a.raw("host_start_us", ts(r.host_start_ns)).raw("host_dur_us", us_text(r.host_end_ns - r.host_start_ns));
      tracks[0].slices.push_back({r.start_ns, std::max(r.start_ns, r.end_ns), r.depth, r.name, "phase", a.text(), 0,
                                  false, 0});
    }
    for (const auto& api : t.api) {
      Args a;
      a.str("domain", api.domain).num("correlation_id", api.correlation_id).num("thread_id", api.thread_id);
      a.num("return_value", api.return_value);
      tracks[api_track[api.thread_id]].slices.push_back({api.start_ns, std::max(api.start_ns, api.end_ns), 0,
                                                         api.name, "cuda_api", a.text(), api.correlation_id, true, 0});
    }
    for (std::size_t i = 0; i < t.kernels.size(); ++i) {
      const auto& k = t.kernels[i];
      Args a;
      if (k.device_id >= 0) {
        a.str("name", k.name).raw("grid", dim3(k.grid_x, k.grid_y, k.grid_z));
        a.raw("block", dim3(k.block_x, k.block_y, k.block_z)).num("registers_per_thread", k.registers_per_thread);
        a.num("static_shared_bytes", k.static_shared_bytes).num("dynamic_shared_bytes", k.dynamic_shared_bytes);
        a.num("correlation_id", k.correlation_id).num("device", k.device_id).num("context", k.context_id);
        a.num("stream", k.stream_id).num("graph_id", k.graph_id).num("graph_node_id", static_cast<long long>(k.graph_node_id));
      }
      a.str("phase", path(k.range_id)).num("step", k.step);
      if (k.op_bytes >= 0) {  // what its op declared (the roofline): shared by the op's kernels in this step
        a.str("op", k.op).num("op_bytes", static_cast<long long>(k.op_bytes));
        a.num("op_flops", static_cast<long long>(k.op_flops)).num("op_call", static_cast<long long>(k.op_call));
        if (k.op_bound) a.num("op_bytes_upper_bound", 1);
      }
      times(a, k.start_ns, k.end_ns, dt.kernel_own[i]);
      stream_of(k.device_id, k.device_id < 0 ? 0u : k.stream_id)
          .slices.push_back({dt.kernel_own[i], dt.kernel_own[i] + dt.kernels[i], 0, k.short_name.empty() ? k.name : k.short_name,
                             k.device_id < 0 ? "cpu_op" : "kernel", a.text(), k.correlation_id, false, 0});
    }
    for (std::size_t i = 0; i < t.memcpys.size(); ++i) {
      const auto& m = t.memcpys[i];
      Args a;
      a.num("bytes", m.bytes).str("copy_kind", m.copy_kind).str("src_kind", m.src_kind).str("dst_kind", m.dst_kind);
      a.num("correlation_id", m.correlation_id).num("device", m.device_id).num("context", m.context_id);
      a.num("stream", m.stream_id).num("graph_id", m.graph_id).num("graph_node_id", static_cast<long long>(m.graph_node_id));
      a.str("phase", path(m.range_id)).num("step", m.step);
      times(a, m.start_ns, m.end_ns, dt.memcpy_own[i]);
      stream_of(m.device_id, m.device_id < 0 ? 0u : m.stream_id)
          .slices.push_back({dt.memcpy_own[i], dt.memcpy_own[i] + dt.memcpys[i], 0, prof::memcpy_operation(m.copy_kind), "memcpy",
                             a.text(), m.correlation_id, false, 0});
    }
    for (std::size_t i = 0; i < t.memsets.size(); ++i) {
      const auto& m = t.memsets[i];
      Args a;
      a.num("bytes", m.bytes).num("value", m.value).str("mem_kind", m.mem_kind);
      a.num("correlation_id", m.correlation_id).num("device", m.device_id).num("context", m.context_id);
      a.num("stream", m.stream_id).num("graph_id", m.graph_id).num("graph_node_id", static_cast<long long>(m.graph_node_id));
      a.str("phase", path(m.range_id)).num("step", m.step);
      times(a, m.start_ns, m.end_ns, dt.memset_own[i]);
      stream_of(m.device_id, m.device_id < 0 ? 0u : m.stream_id)
          .slices.push_back({dt.memset_own[i], dt.memset_own[i] + dt.memsets[i], 0, "[CUDA memset]", "memset", a.text(),
                             m.correlation_id, false, 0});
    }

    // Device-side stage stamps: one track per stamped kernel's (device, stream), under its stream's track.
    {
      const auto owner = prof::stage_kernels(t);
      std::map<std::pair<int, std::uint32_t>, std::size_t> stage_track;
      for (std::size_t i = 0; i < t.stages.size(); ++i) {
        const auto& g = t.stages[i];
        int device = 0;
        std::uint32_t stream = 0;
        if (owner[i] >= 0) {
          const auto& k = t.kernels[static_cast<std::size_t>(owner[i])];
          device = k.device_id;
          stream = k.stream_id;
        }
        auto [it, fresh] = stage_track.emplace(std::make_pair(device, stream), 0);
        if (fresh) {
          it->second = tracks.size();
          tracks.push_back({"GPU " + std::to_string(device) + " stream " + std::to_string(stream) + " " + g.kernel +
                                " stages",
                            {}});
        }
        Args a;
        a.num("layer", g.layer).num("step", g.step).num("launch", g.launch).raw("barrier_wait_us", us_text(g.wait_ns));
        a.str("phase", path(g.range_id));
        const std::string name = g.layer >= 0 ? g.stage + " (layer " + std::to_string(g.layer) + ")" : g.stage;
        tracks[it->second].slices.push_back({g.start_ns, std::max(g.start_ns, g.end_ns), 0, name, "stage", a.text(), 0,
                                             false, 0});
      }
    }

    // Lanes, then metadata: process name and labels, every thread's name and place.
    std::vector<Thread> threads;
    for (auto& tr : tracks) place(tr, next_tid, threads);  // a track without slices gets no thread
    meta.push_back("{\"ph\": \"M\", " + PT + ", \"name\": \"process_name\", \"args\": {\"name\": " +
                   json_quote(pp.label) + "}}");
    meta.push_back("{\"ph\": \"M\", " + PT + ", \"name\": \"process_sort_index\", \"args\": {\"sort_index\": " +
                   std::to_string(pp.index) + "}}");
    {
      std::string labels = t.source + ", " + std::to_string(t.steps) + " step(s), " + prof::time_mode_name(time) +
                           " device time";
      if (t.dropped_records) labels += ", " + std::to_string(t.dropped_records) + " records dropped";
      meta.push_back("{\"ph\": \"M\", " + PT + ", \"name\": \"process_labels\", \"args\": {\"labels\": " +
                     json_quote(labels) + "}}");
    }
    for (const auto& th : threads) {
      const std::string T = P + ", \"tid\": " + std::to_string(th.tid);
      meta.push_back("{\"ph\": \"M\", " + T + ", \"name\": \"thread_name\", \"args\": {\"name\": " + json_quote(th.name) + "}}");
      meta.push_back("{\"ph\": \"M\", " + T + ", \"name\": \"thread_sort_index\", \"args\": {\"sort_index\": " +
                     std::to_string(th.tid) + "}}");
    }

    // Complete events, per track in nesting order; remember each API record's place for the flows. A flow
    // binds to the slice open at its time on its track: its ends sit at the middle of the API call and of
    // the op (not at their starts, where the order of events with equal times would decide).
    auto mid = [](const Slice& x) { return x.start + (x.end - x.start) / 2; };
    std::unordered_map<std::uint32_t, std::pair<int, std::int64_t>> launch;  // correlation id -> (tid, ts)
    for (const auto& tr : tracks)
      for (const auto& s : tr.slices) {
        events.push_back("{\"ph\": \"X\", " + P + ", \"tid\": " + std::to_string(s.tid) + ", \"ts\": " + ts(s.start) +
                         ", \"dur\": " + us_text(s.end - s.start) + ", \"name\": " + json_quote(s.name) +
                         ", \"cat\": " + json_quote(s.cat) + ", \"args\": " + s.args + "}");
        if (s.is_api && s.correlation_id) launch.emplace(s.correlation_id, std::make_pair(s.tid, mid(s)));
      }
    // Memory by category: one counter series per category (Perfetto shows "memory <category>").
    for (const auto& e : t.allocator)
      events.push_back("{\"ph\": \"C\", " + PT + ", \"ts\": " + ts(e.t_ns) +
                       ", \"name\": \"memory\", \"args\": {" + json_quote(e.category) + ": " +
                       std::to_string(e.category_live_bytes) + "}}");
    // Flows: launch API record -> each kernel / memcpy / memset with its correlation id.
    for (const auto& tr : tracks)
      for (const auto& s : tr.slices) {
        if (s.is_api || !s.correlation_id) continue;
        auto it = launch.find(s.correlation_id);
        if (it == launch.end()) continue;
        const std::string id = std::to_string(++flow_id);
        events.push_back("{\"ph\": \"s\", " + P + ", \"tid\": " + std::to_string(it->second.first) + ", \"ts\": " +
                         ts(it->second.second) + ", \"id\": " + id + ", \"name\": \"launch\", \"cat\": \"flow\"}");
        events.push_back("{\"ph\": \"f\", \"bp\": \"e\", " + P + ", \"tid\": " + std::to_string(s.tid) +
                         ", \"ts\": " + ts(mid(s)) + ", \"id\": " + id + ", \"name\": \"launch\", \"cat\": \"flow\"}");
      }
  }
  out << "{\"traceEvents\": [";
  bool first = true;
  for (const auto* list : {&meta, &events})
    for (const auto& e : *list) {
      out << (first ? "\n" : ",\n") << e;
      first = false;
    }
  out << "\n], \"displayTimeUnit\": \"ns\"}\n";
}

}  // namespace moc::perfetto

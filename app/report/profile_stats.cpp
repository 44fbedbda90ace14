#include "app/report/profile_stats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <ostream>
#include <stdexcept>
#include <unordered_map>

#include "app/report/json_line.h"
#include <nlohmann/json.hpp>
#include "profiling/duration_stats.h"
#include "profiling/phases.h"

namespace moc::stats {

namespace {

const char* unit_suffix(Unit u) {
  switch (u) {
    case Unit::ns: return "ns";
    case Unit::us: return "us";
    case Unit::ms: return "ms";
    case Unit::percent: return "%";
    case Unit::none: break;
  }
  return "";
}

double metric(const Metrics& m, const std::string& name, bool* found) {
  for (const auto& [k, v] : m)
    if (k == name && !std::isnan(v)) {
      *found = true;
      return v;
    }
  *found = false;
  return 0;
}

std::vector<Column> stat_columns(const std::string& count_name) {
  return {column("Time", Unit::percent, false, 1),    column("Total Time", Unit::ns, false, 0), column(count_name, Unit::none, false, 0),
          column("Avg", Unit::ns, false, 1),          column("Med", Unit::ns, false, 1),        column("Min", Unit::ns, false, 0),
          column("Max", Unit::ns, false, 0),          column("StdDev", Unit::ns, false, 1)};
}

// Groups of durations by key, as rows sorted by total time descending (then by key).
struct Group {
  std::vector<std::int64_t> durations;
  double extra = 0;  // nvtx_gpu_proj_sum: GPU ops
};

std::vector<std::pair<std::string, DurationStats>> summarize(std::map<std::string, Group>& groups, double* grand) {
  std::vector<std::pair<std::string, DurationStats>> out;
  *grand = 0;
  for (auto& [k, g] : groups) {
    out.emplace_back(k, duration_stats(g.durations));
    *grand += out.back().second.total;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  return out;
}

std::vector<Cell> stat_cells(const DurationStats& s, double grand) {
  return {grand > 0 ? 100.0 * s.total / grand : 0.0, s.total, static_cast<double>(s.count), s.avg, s.med, s.min,
          s.max, s.stddev};
}

// The paper's parts as array indices (prof::PaperPart's values).
constexpr int kGate = static_cast<int>(prof::PaperPart::gate), kUpDown = static_cast<int>(prof::PaperPart::up_down),
              kTopk = static_cast<int>(prof::PaperPart::topk), kOther = static_cast<int>(prof::PaperPart::other),
              kParts = prof::kPaperParts;

// Every kernel, memcpy and memset of the trace as (range, duration, is a kernel).
struct Op {
  std::int64_t range_id, dur;
  bool kernel;
  const std::string* short_name = nullptr;  // kernels only
};
std::vector<Op> device_ops(const prof::ProfileTrace& t, const prof::DeviceTimes& dt) {
  std::vector<Op> ops;
  ops.reserve(t.kernels.size() + t.memcpys.size() + t.memsets.size());
  for (std::size_t i = 0; i < t.kernels.size(); ++i)
    ops.push_back({t.kernels[i].range_id, dt.kernels[i], true, &t.kernels[i].short_name});
  for (std::size_t i = 0; i < t.memcpys.size(); ++i) ops.push_back({t.memcpys[i].range_id, dt.memcpys[i], false, nullptr});
  for (std::size_t i = 0; i < t.memsets.size(); ++i) ops.push_back({t.memsets[i].range_id, dt.memsets[i], false, nullptr});
  return ops;
}

// The note every device-time table carries: which time it counts.
std::string time_note(TimeMode time) {
  if (time == TimeMode::inclusive)
    return "device times are inclusive (CUPTI's start to end: under programmatic dependent launch a kernel's "
           "record includes its wait for its predecessor, so overlapping records count the shared time twice)";
  return "device times are exclusive (where records overlap -- a PDL kernel waiting for its predecessor -- the "
         "shared time counts once, for the record that started earlier; --time inclusive shows start to end)";
}

}  // namespace

const std::vector<std::string>& report_names() {
  static const std::vector<std::string> names = {"cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_api_sum",
                                                 "cuda_kern_exec_sum", "nvtx_sum", "nvtx_gpu_proj_sum", "phase_sum",
                                                 "stage_sum", "roofline"};
  return names;
}

const std::vector<std::string>& default_reports() {
  static const std::vector<std::string> names = {"cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "nvtx_sum",
                                                 "phase_sum"};
  return names;
}

DurationStats duration_stats(std::vector<std::int64_t> d) {
  // The one computation the dashboard's Kernels view uses too (profiling/duration_stats.h).
  const prof::DurationSummary p = prof::summarize_durations(std::vector<double>(d.begin(), d.end()));
  DurationStats s;
  s.count = p.count;
  s.total = p.total;
  s.avg = p.mean;
  s.med = p.median;
  s.min = p.min;
  s.max = p.max;
  s.stddev = p.stddev;
  return s;
}

std::string phase_of(const prof::ProfileTrace& t, std::int64_t range_id) { return prof::PhaseIndex(t).phase(range_id); }

// A table of duration statistics per name (nsys's *_sum reports): one row per group, by total time, with
// `extra` text columns before the name column.
Table duration_summary(std::string id, std::string title, const std::string& count_name,
                       const std::vector<std::pair<std::string, std::string>>& extra, const std::string& name_column,
                       std::map<std::string, Group>& groups, const std::string& empty_note) {
  Table tb;
  tb.id = std::move(id);
  tb.title = std::move(title);
  tb.columns = stat_columns(count_name);
  for (const auto& [name, value] : extra) tb.columns.push_back(column(name, Unit::none, true, 0));
  tb.columns.push_back(column(name_column, Unit::none, true, 0));
  double grand = 0;
  for (const auto& [name, st] : summarize(groups, &grand)) {
    auto row = stat_cells(st, grand);
    for (const auto& [column, value] : extra) row.emplace_back(value);
    row.emplace_back(name);
    tb.rows.push_back(std::move(row));
  }
  if (tb.rows.empty()) tb.notes.push_back(empty_note);
  return tb;
}

Table cuda_gpu_kern_sum(const prof::ProfileTrace& t, TimeMode time) {
  const prof::DeviceTimes dt = prof::device_times(t, time);
  std::map<std::string, Group> groups;
  for (std::size_t i = 0; i < t.kernels.size(); ++i) groups[t.kernels[i].name].durations.push_back(dt.kernels[i]);
  Table tb = duration_summary("cuda_gpu_kern_sum", t.source == "cpu" ? "CPU Op Summary" : "CUDA GPU Kernel Summary",
                              "Instances", {}, "Name", groups, "no kernel records in this profile");
  if (!tb.rows.empty()) tb.notes.push_back(time_note(time));
  return tb;
}

Table cuda_api_sum(const prof::ProfileTrace& t) {
  std::map<std::string, Group> groups;
  for (const auto& a : t.api) groups[a.name].durations.push_back(a.end_ns - a.start_ns);
  return duration_summary("cuda_api_sum", "CUDA API Summary", "Num Calls", {}, "Name", groups,
                          "no CUDA API records in this profile (the CPU backend has none)");
}

Table cuda_kern_exec_sum(const prof::ProfileTrace& t, TimeMode time) {
  const prof::DeviceTimes dt = prof::device_times(t, time);
  Table tb;
  tb.id = "cuda_kern_exec_sum";
  tb.title = "CUDA Kernel Launch & Exec Time Summary (eager launches)";
  tb.columns = {column("Count", Unit::none, false, 0),    column("API Avg", Unit::ns, false, 1),
                column("Launch-to-start Avg", Unit::ns, false, 1), column("Launch-to-start Med", Unit::ns, false, 1),
                column("Launch-to-start Min", Unit::ns, false, 0), column("Launch-to-start Max", Unit::ns, false, 0),
                column("Kernel Avg", Unit::ns, false, 1), column("Name", Unit::none, true, 0)};
  // The earliest API call of each correlation id: the launch (a runtime call and the driver call inside it
  // share the id).
  std::unordered_map<std::uint32_t, const prof::ApiRecord*> launch;
  for (const auto& a : t.api) {
    auto [it, fresh] = launch.emplace(a.correlation_id, &a);
    if (!fresh && a.start_ns < it->second->start_ns) it->second = &a;
  }
  struct Acc {
    std::vector<std::int64_t> api, latency, kernel;
  };
  std::map<std::string, Acc> acc;
  std::size_t graph = 0, unmatched = 0;
  for (std::size_t ki = 0; ki < t.kernels.size(); ++ki) {
    const auto& k = t.kernels[ki];
    if (k.graph_node_id != 0) {
      ++graph;
      continue;
    }
    auto it = launch.find(k.correlation_id);
    if (it == launch.end()) {
      ++unmatched;
      continue;
    }
    auto& a = acc[k.name];
    a.api.push_back(it->second->end_ns - it->second->start_ns);
    a.latency.push_back(k.start_ns - it->second->start_ns);
    a.kernel.push_back(dt.kernels[ki]);
  }
  std::vector<std::pair<double, std::vector<Cell>>> rows;
  for (auto& [name, a] : acc) {
    const auto api = duration_stats(a.api), lat = duration_stats(a.latency), ker = duration_stats(a.kernel);
    rows.push_back({ker.total, {static_cast<double>(lat.count), api.avg, lat.avg, lat.med, lat.min, lat.max, ker.avg,
                                name}});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& r : rows) tb.rows.push_back(std::move(r.second));
  tb.notes.push_back("launch-to-start = kernel start - start of its launch call (host and device on CUPTI's clock)");
  tb.notes.push_back(time_note(time));
  if (graph) tb.notes.push_back(std::to_string(graph) + " kernels replayed from CUDA graphs are not listed (one "
                                "graph launch starts them all)");
  if (unmatched) tb.notes.push_back(std::to_string(unmatched) + " kernels without a launch record are not listed");
  return tb;
}

Table cuda_gpu_mem_time_sum(const prof::ProfileTrace& t, TimeMode time) {
  const prof::DeviceTimes dt = prof::device_times(t, time);
  std::map<std::string, Group> groups;
  for (std::size_t i = 0; i < t.memcpys.size(); ++i)
    groups[prof::memcpy_operation(t.memcpys[i].copy_kind)].durations.push_back(dt.memcpys[i]);
  for (std::size_t i = 0; i < t.memsets.size(); ++i) groups["[CUDA memset]"].durations.push_back(dt.memsets[i]);
  Table tb = duration_summary("cuda_gpu_mem_time_sum", "CUDA GPU MemOps Summary (by Time)", "Count", {}, "Operation",
                              groups, "no memcpy or memset records in this profile");
  if (!tb.rows.empty()) tb.notes.push_back(time_note(time));
  return tb;
}

Table nvtx_sum(const prof::ProfileTrace& t) {
  std::map<std::string, Group> groups;
  std::size_t replays = 0;
  for (const auto& r : t.ranges) {
    if (r.host_start_ns == 0 && r.host_end_ns == 0) {
      ++replays;
      continue;
    }
    groups[r.name].durations.push_back(r.host_end_ns - r.host_start_ns);
  }
  Table tb = duration_summary("nvtx_sum", "NVTX Range Summary", "Instances", {{"Style", "PushPop"}}, "Range", groups,
                              "no host ranges in this profile");
  if (replays)
    tb.notes.push_back(std::to_string(replays) +
                       " range(s) replayed inside CUDA graphs were not opened by the host and are left out "
                       "(see nvtx_gpu_proj_sum)");
  return tb;
}

Table nvtx_gpu_proj_sum(const prof::ProfileTrace& t) {
  Table tb;
  tb.id = "nvtx_gpu_proj_sum";
  tb.title = "NVTX GPU Projection Summary";
  tb.columns = stat_columns("Instances");
  tb.columns[1] = column("Total Proj Time", Unit::ns, false, 0);
  tb.columns.push_back(column("Total GPU Ops", Unit::none, false, 0));
  tb.columns.push_back(column("Style", Unit::none, true, 0));
  tb.columns.push_back(column("Range", Unit::none, true, 0));
  std::map<std::string, Group> groups;
  for (const auto& r : t.ranges) {
    if (r.ops <= 0) continue;
    auto& g = groups[r.name];
    g.durations.push_back(r.end_ns - r.start_ns);
    g.extra += r.ops;
  }
  double grand = 0;
  for (const auto& [name, s] : summarize(groups, &grand)) {
    auto row = stat_cells(s, grand);
    row.emplace_back(groups[name].extra);
    row.emplace_back(std::string("PushPop"));
    row.emplace_back(name);
    tb.rows.push_back(std::move(row));
  }
  if (tb.rows.empty()) tb.notes.push_back("no range holds device work in this profile");
  return tb;
}

namespace {

// Each op in its innermost range, with the idle time between ops: the rows sum to the step's span.
Table phase_table(const prof::ProfileTrace& t, const prof::DeviceTimes& dt, TimeMode time) {
  const prof::PhaseIndex ix(t);
  const auto ops = device_ops(t, dt);
  const double steps = std::max(1, t.steps);
  const bool cpu = t.source == "cpu";
  const std::string dev = cpu ? "CPU" : "GPU";

  Table ph;
  ph.id = "phase_sum";
  ph.title = "Phase Summary (each op in its innermost range, layers merged)";
  ph.columns = {column("Phase", Unit::none, true, 0),
                column("Kernels per step", Unit::none, false, 1),
                column(dev + " time per step", Unit::ms, false, 3),
                column("Share of step", Unit::percent, false, 1)};
  struct Acc {
    double kernels = 0;
    std::int64_t ns = 0;
  };
  std::map<std::string, Acc> acc;
  for (const auto& o : ops) {
    auto& a = acc[ix.phase(o.range_id)];
    a.kernels += o.kernel ? 1 : 0;
    a.ns += o.dur;
  }
  const double busy = static_cast<double>(prof::busy_ns(t));
  const double span = static_cast<double>(prof::step_span_ns(t));
  const double idle = std::max(0.0, span - busy);
  // Shares of the step (its span: first op's start to last op's end); exclusive phases and the idle time
  // between ops sum to it.
  const double whole = std::max(span, busy);
  std::vector<std::pair<std::string, Acc>> rows(acc.begin(), acc.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  for (const auto& [name, a] : rows)
    ph.rows.push_back({name, a.kernels / steps, static_cast<double>(a.ns) / steps / 1e6,
                       whole > 0 ? 100.0 * static_cast<double>(a.ns) / whole : 0.0});
  if (!ops.empty() && !cpu)
    ph.rows.push_back({std::string("(idle between ops)"), 0.0, idle / steps / 1e6, whole > 0 ? 100.0 * idle / whole : 0.0});
  {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%d profiled step(s); per step: %s busy %.3f ms (union of kernel, memcpy and memset "
                  "intervals) + idle between ops %.3f ms = the step's span %.3f ms (first op's start to last op's "
                  "end)%s", t.steps, dev.c_str(), busy / steps / 1e6, idle / steps / 1e6, span / steps / 1e6,
                  time == TimeMode::exclusive ? "; exclusive times: the rows sum to the span"
                                              : "; shares above 100% in sum mean ops overlapped");
    ph.notes.push_back(buf);
    if (cpu) ph.notes.push_back("the CPU backend's ops run back to back: the time between them (host work) is not listed");
    ph.notes.push_back(time_note(time));
  }
  if (ops.empty()) ph.notes.push_back("no kernel, memcpy or memset records in this profile");
  return ph;
}

// The paper's breakdown: profiled (device time of the ops under each part's ranges) beside timed.
Table breakdown_table(const prof::ProfileTrace& t, const prof::DeviceTimes& dt, const Metrics& metrics,
                      const std::string& mode, TimeMode time) {
  const prof::PaperBreakdown pb = prof::paper_breakdown(t, dt);
  const auto& parts = pb.ns;
  const bool in_decode = pb.in_decode, fused_decode = pb.fused_decode;
  const double steps = std::max(1, t.steps);
  const bool cpu = t.source == "cpu";
  Table bd;
  bd.id = "phase_sum_breakdown";
  bd.title = "Latency Breakdown (profiled vs timed)";
  const bool decode = mode == "ffn-decode";
  const Unit u = decode ? Unit::us : Unit::ms;
  bd.columns = {column("Part", Unit::none, true, 0),
                column("Profiled", u, false, 3),
                column("Timed", u, false, 3),
                column("Profiled share", Unit::percent, false, 1),
                column("Timed share", Unit::percent, false, 1)};
  double per = steps * 1e6;  // ns per step -> ms
  if (decode) {
    // Calls per profiled step: calls_per_replay (since 2026-11-28; before, a replay made one call per copy).
    bool found = false;
    double calls = metric(metrics, "calls_per_replay", &found);
    if (!found || calls <= 0) calls = metric(metrics, "weight_copies", &found);
    if (!found || calls <= 0) calls = 1;
    per = steps * calls * 1e3;  // ns per call -> us
  }
  double prof_part[kParts];
  double prof_total = 0;
  for (int p = 0; p < kParts; ++p) {
    // other also holds the device's idle time between ops (launch gaps), as the timed other does.
    prof_part[p] = (parts[p] + (p == kOther && !cpu ? pb.idle_ns : 0.0)) / per;
    prof_total += prof_part[p];
  }
  const char* timed_names[kParts];
  const char* timed_total_name;
  if (decode) {
    timed_names[kGate] = "gate_us";
    timed_names[kUpDown] = "up_down_us";
    timed_names[kTopk] = "topk_us";
    timed_names[kOther] = "other_us";
    timed_total_name = "latency_us";
  } else {
    timed_names[kGate] = "gate_ms";
    timed_names[kUpDown] = "up_down_ms";
    timed_names[kTopk] = "topk_ms";
    timed_names[kOther] = nullptr;  // the step time minus the three parts
    timed_total_name = "median_ms";
  }
  Cell timed_part[kParts];
  bool total_found = false;
  const double timed_total = metric(metrics, timed_total_name, &total_found);
  bool all_parts = true;
  double timed_sum = 0;
  for (int p = 0; p < kParts; ++p) {
    if (!timed_names[p]) continue;
    bool f = false;
    const double v = metric(metrics, timed_names[p], &f);
    if (f) {
      timed_part[p] = v;
      timed_sum += v;
    } else {
      all_parts = false;
    }
  }
  if (!decode && all_parts && total_found) timed_part[kOther] = timed_total - timed_sum;
  auto share = [](const Cell& v, double total, bool have_total) -> Cell {
    if (!have_total || total <= 0 || !v.value) return Cell{};
    return 100.0 * *v.value / total;
  };
  for (int p : {kGate, kUpDown, kTopk, kOther}) {
    const Cell prof_cell = prof_part[p];
    bd.rows.push_back({std::string(prof::paper_part_label(static_cast<prof::PaperPart>(p))), prof_cell, timed_part[p],
                       share(prof_cell, prof_total, true),
                       share(timed_part[p], timed_total, total_found)});
  }
  Cell timed_total_cell, timed_total_share;  // empty unless the total was timed
  if (total_found) timed_total_cell = timed_total, timed_total_share = 100.0;
  bd.rows.push_back({std::string(decode ? "total (call)" : "total (step)"), prof_total, timed_total_cell,
                     Cell(prof_total > 0 ? 100.0 : 0.0), timed_total_share});
  if (decode)
    bd.notes.push_back("per ffn-decode call: the profiled step divided by its calls (calls_per_replay; weight_copies "
                       "in older runs); timed: gate_us, up_down_us, topk_us, other_us, latency_us (gate and top-K "
                       "timed as passes of the call, up & down what the rest of the call adds; MoC's up & down timed "
                       "alone: up_down_alone_us)");
  else
    bd.notes.push_back("per step: profiled = device time of the ops under ffn.gate, ffn.up + ffn.down, ffn.topk "
                       "and the rest; timed = gate_ms, up_down_ms, topk_ms and median_ms (other = the remainder)");
  if (!cpu && pb.idle_ns > 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "profiled other includes %.3f %s of device idle time between ops (launch gaps), so "
                  "the profiled total is the steps' span", pb.idle_ns / per, decode ? "us" : "ms");
    bd.notes.push_back(buf);
  }
  if (in_decode)
    bd.notes.push_back("inside ffn.decode the fused decode kernels are split by name: k_gate = gate, k_select = "
                       "top-K, k_updown = up & down");
  bd.notes.push_back(time_note(time));
  if (pb.from_stages)
    bd.notes.push_back("kernels with device-side stage stamps (stage_sum: the decode FFN kernels k_gate, k_select, "
                       "k_updown; in older profiles also the since retired persistent decode kernel k_step) are "
                       "split by their stages: gate, top-K, up and down to their parts, the rest (start, "
                       "qkv, attention, o, head) to other; a kernel's time outside its stages is the part its name "
                       "says for the decode FFN kernels, whose stamps begin after their dependency wait (other for "
                       "k_step: its launch and exit)");
  if (pb.fused_stages)
    bd.notes.push_back("the dense FFN (k_updown, or an older profile's persistent k_step) reads each gate row and up "
                       "row together in one pass (stage \"gate & up\"): that stage is split evenly between gate and "
                       "up & down (equal bytes), not measured apart");
  if (fused_decode)
    bd.notes.push_back("ops inside ffn.decode that no part can be told for (the CPU backend's one ffn_decode op, "
                       "an unstamped dense k_updown, which computes gate, up and down in one kernel) are counted as "
                       "other");
  return bd;
}

}  // namespace

std::vector<Table> phase_sum(const prof::ProfileTrace& t, const Metrics& metrics, const std::string& mode,
                             TimeMode time) {
  const prof::DeviceTimes dt = prof::device_times(t, time);
  return {phase_table(t, dt, time), breakdown_table(t, dt, metrics, mode, time)};
}

Table stage_sum(const prof::ProfileTrace& t, const Metrics& metrics) {
  Table tb;
  tb.id = "stage_sum";
  tb.title = "Kernel Stage Summary (device-side stamps, layers merged)";
  tb.columns = {column("Kernel", Unit::none, true, 0),
                column("Stage", Unit::none, true, 0),
                column("Instances per step", Unit::none, false, 1),
                column("Time per step", Unit::ns, false, 1),
                column("Share of kernel", Unit::percent, false, 1),
                column("Barrier wait per step", Unit::ns, false, 1),
                column("Avg", Unit::ns, false, 1),
                column("Max", Unit::ns, false, 0)};
  const double steps = std::max(1, t.steps);
  struct Acc {
    std::vector<std::int64_t> d;
    std::int64_t wait = 0;
    std::size_t order = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> acc;
  std::map<std::string, std::int64_t> kernel_stage_total;
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    const auto& g = t.stages[i];
    auto [it, fresh] = acc.try_emplace({g.kernel, g.stage});
    if (fresh) it->second.order = i;
    it->second.d.push_back(g.end_ns - g.start_ns);
    it->second.wait += g.wait_ns;
    kernel_stage_total[g.kernel] += g.end_ns - g.start_ns;
  }
  // Rows in the order stages first appear (the kernel's own order), so a step reads top to bottom.
  std::vector<std::pair<std::pair<std::string, std::string>, Acc*>> rows;
  for (auto& [k, a] : acc) rows.push_back({k, &a});
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second->order < b.second->order; });
  for (const auto& [key, a] : rows) {
    const DurationStats st = duration_stats(a->d);
    const double kt = static_cast<double>(kernel_stage_total[key.first]);
    tb.rows.push_back({key.first, key.second, static_cast<double>(st.count) / steps, st.total / steps,
                       kt > 0 ? 100.0 * st.total / kt : 0.0, static_cast<double>(a->wait) / steps, st.avg, st.max});
  }
  if (tb.rows.empty()) {
    tb.notes.push_back("no stage stamps in this profile (the decode FFN kernels k_gate, k_select and k_updown stamp "
                       "their stages; other kernels are timed whole by CUPTI)");
    return tb;
  }
  // How the stamped launches compare with their kernel records.
  const auto owner = prof::stage_kernels(t);
  std::map<std::ptrdiff_t, std::int64_t> covered;
  std::size_t unmatched = 0;
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    if (owner[i] < 0) ++unmatched;
    else covered[owner[i]] += t.stages[i].end_ns - t.stages[i].start_ns;
  }
  double stage_ns = 0, kernel_ns = 0;
  for (const auto& [k, ns] : covered) {
    stage_ns += static_cast<double>(ns);
    const auto& r = t.kernels[static_cast<std::size_t>(k)];
    kernel_ns += static_cast<double>(r.end_ns - r.start_ns);
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%zu stamped launch(es): their stages cover %.1f%% of their kernel records' time "
                "(from the first block's start to the last block's end; the rest is launch and exit, and for a kernel that "
                "PDL starts early its wait for its predecessor and what it does before that wait)",
                covered.size(), kernel_ns > 0 ? 100.0 * stage_ns / kernel_ns : 0.0);
  tb.notes.push_back(buf);
  tb.notes.push_back("a stage ends when the last block passes its boundary (for a grid barrier: the last arrival); "
                     "barrier wait = time blocks spent waiting at the barrier ending the stage, mean per block");
  bool from_rep = false;
  const double rep_ms = metric(metrics, "profile_stage_rep_ms", &from_rep);
  if (from_rep) {
    std::snprintf(buf, sizeof buf, "the profiled steps ran unstamped (stamping lengthens the kernels it splits); "
                  "the stages are an untraced stamped repetition's (the median one, %.1f us), each launch placed "
                  "on the same launch's record, ends aligned", rep_ms * 1e3);
    tb.notes.push_back(buf);
  } else {
    tb.notes.push_back("the stages were stamped in the profiled steps themselves (profiles written before "
                       "2026-11-28): their kernel times include what stamping costs (profile_stamp_overhead_pct)");
  }
  if (unmatched) tb.notes.push_back(std::to_string(unmatched) + " stage(s) have no kernel record in the trace");
  if (t.dropped_stamps) tb.notes.push_back(std::to_string(t.dropped_stamps) + " stamped launch(es) dropped");
  return tb;
}

Table roofline(const prof::ProfileTrace& t, const prof::Ceilings& ceilings, TimeMode time) {
  const prof::Roofline r = prof::roofline(t, ceilings, time);
  const bool known = ceilings.known();
  Table tb;
  tb.id = "roofline";
  tb.title = "Roofline (per kernel and phase, against what each op declared)";
  tb.columns = {column("Time per step", Unit::ns, false, 1), column("Instances", Unit::none, false, 0),
                column("Bytes per step", Unit::none, false, 0), column("GB/s", Unit::none, false, 1),
                column("Of bandwidth", Unit::percent, false, 1), column("TFLOP/s", Unit::none, false, 2),
                column("Of peak", Unit::percent, false, 1),     column("Floor per step", Unit::ns, false, 1),
                column("Of floor", Unit::percent, false, 1),    column("Lost per step", Unit::ns, false, 1),
                column("Phase", Unit::none, true, 0),           column("Op", Unit::none, true, 0),
                column("Name", Unit::none, true, 0)};
  std::size_t bounds = 0;
  for (const auto& row : r.rows) {
    std::vector<Cell> c;
    c.emplace_back(row.time_ns);
    c.emplace_back(static_cast<double>(row.instances) / r.steps);
    if (!row.declared) {
      for (int i = 0; i < 8; ++i) c.emplace_back(Cell{});
      c.emplace_back(row.phase);
      c.emplace_back(std::string("(undeclared)"));
      c.emplace_back(row.kernel);
      tb.rows.push_back(std::move(c));
      continue;
    }
    if (row.bound) ++bounds;
    const double gbps = row.GBps(), tf = row.tflops();
    c.emplace_back(row.bytes);
    c.emplace_back(gbps);
    if (known) c.emplace_back(100.0 * gbps / ceilings.copy_GBps);
    else c.emplace_back(Cell{});
    c.emplace_back(tf);
    if (known) c.emplace_back(100.0 * tf / ceilings.gemm_tflops);
    else c.emplace_back(Cell{});
    if (known) {
      c.emplace_back(row.floor_ns);
      c.emplace_back(row.time_ns > 0 ? 100.0 * row.floor_ns / row.time_ns : 0.0);
      c.emplace_back(row.lost_ns);
    } else {
      for (int i = 0; i < 3; ++i) c.emplace_back(Cell{});
    }
    c.emplace_back(row.phase);
    c.emplace_back(row.op + (row.bound ? " (bytes: upper bound)" : ""));
    c.emplace_back(row.kernel);
    tb.rows.push_back(std::move(c));
  }
  if (tb.rows.empty()) {
    tb.notes.push_back("no kernel records in this profile");
    return tb;
  }
  char buf[256];
  if (known) {
    std::snprintf(buf, sizeof buf,
                  "ceilings: copy %.0f GB/s, GEMM %.1f TFLOP/s (measured; `mocbench devices --measure`); floor = "
                  "max(bytes / bandwidth, FLOPs / peak)",
                  ceilings.copy_GBps, ceilings.gemm_tflops);
    tb.notes.push_back(buf);
    std::snprintf(buf, sizeof buf,
                  "declared kernels: %.1f us per step against a floor of %.1f us (%.1f%% of floor); undeclared: %.1f "
                  "us",
                  r.declared_ns / 1e3, r.floor_ns / 1e3, r.declared_ns > 0 ? 100.0 * r.floor_ns / r.declared_ns : 0.0,
                  (r.time_ns - r.declared_ns) / 1e3);
    tb.notes.push_back(buf);
  } else {
    tb.notes.push_back("this run has no measured device ceilings (a results file from before they were recorded): "
                       "rates only, no % or floor");
  }
  tb.notes.push_back("bytes and FLOPs are what each op declares it must move (kernels/op_cost.h); a declaration "
                     "covering several kernels is split by their share of its time");
  if (bounds)
    tb.notes.push_back("rows marked 'upper bound' read the union of the batch's MoC selections, declared as "
                       "min(d_ffn, rows x K) channels");
  tb.notes.push_back(time_note(time));
  return tb;
}

std::vector<Table> run_report(const std::string& name, const prof::ProfileTrace& t, const Metrics& metrics,
                              const std::string& mode, TimeMode time, const prof::Ceilings& ceilings) {
  if (name == "roofline") return {stats::roofline(t, ceilings, time)};
  if (name == "cuda_gpu_kern_sum") return {cuda_gpu_kern_sum(t, time)};
  if (name == "cuda_gpu_mem_time_sum") return {cuda_gpu_mem_time_sum(t, time)};
  if (name == "cuda_api_sum") return {cuda_api_sum(t)};
  if (name == "cuda_kern_exec_sum") return {cuda_kern_exec_sum(t, time)};
  if (name == "nvtx_sum") return {nvtx_sum(t)};
  if (name == "nvtx_gpu_proj_sum") return {nvtx_gpu_proj_sum(t)};
  if (name == "phase_sum") return phase_sum(t, metrics, mode, time);
  if (name == "stage_sum") return {stage_sum(t, metrics)};
  std::string known;
  for (const auto& n : report_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown report '" + name + "'; reports: " + known);
}

// ---- printers: the shared table's (db/table.h), framed as `nsys stats` frames its tables.

report::Column column(std::string name, Unit unit, bool text, int decimals) {
  report::Column c;
  c.key = unit == Unit::none ? name : name + " (" + unit_suffix(unit) + ")";
  c.title = unit == Unit::ns ? name : c.key;  // ns: the text printers add the unit they scale to
  c.unit = unit_suffix(unit);
  c.text = text;
  c.decimals = decimals;
  c.grouped = !text;
  c.scale_ns = unit == Unit::ns;
  return c;
}

void print_text(const Table& tb, std::ostream& out) {
  out << " ** " << tb.title << " (" << tb.id << "):\n\n";
  if (!tb.rows.empty()) report::print_grid(tb, out, {" ", {}});
  if (!tb.rows.empty() && !tb.notes.empty()) out << "\n";
  for (const auto& n : tb.notes) out << " " << n << "\n";
  out << "\n";
}

void print_csv(const Table& tb, std::ostream& out, const std::vector<std::pair<std::string, std::string>>& prefix) {
  report::print_csv(tb, out, prefix);
}

void print_json(const Table& tb, std::ostream& out) { out << json_line(report::to_json(tb)); }

}  // namespace moc::stats

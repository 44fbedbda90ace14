#include "gui/model/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <unordered_map>

#include "profiling/phases.h"

namespace moc::gui {

const std::string& kernel_name(const prof::KernelRecord& k) { return k.short_name.empty() ? k.name : k.short_name; }

std::string stage_class(const std::string& stage) { return "stage: " + stage; }

std::string stage_label(const prof::StageRecord& s) { return s.layer < 0 ? s.stage : s.stage + " L" + std::to_string(s.layer); }

double Timeline::stage_share(const TimelineItem& stage) const {
  if (!trace || stage.kind != ItemKind::stage || stage.index < 0 || static_cast<std::size_t>(stage.index) >= stage_kernel.size())
    return 0;
  const std::ptrdiff_t k = stage_kernel[static_cast<std::size_t>(stage.index)];
  if (k < 0) return 0;
  const auto& r = trace->kernels[static_cast<std::size_t>(k)];
  const std::int64_t d = r.end_ns - r.start_ns;
  return d > 0 ? std::clamp(static_cast<double>(stage.end - stage.start) / static_cast<double>(d), 0.0, 1.0) : 0.0;
}

int pack_rows(std::vector<TimelineItem>* items) {
  std::vector<std::size_t> order(items->size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return (*items)[a].start < (*items)[b].start; });
  std::vector<std::int64_t> row_end;  // the last end placed on each row
  for (std::size_t i : order) {
    TimelineItem& it = (*items)[i];
    std::size_t r = 0;
    while (r < row_end.size() && row_end[r] > it.start) ++r;
    if (r == row_end.size()) row_end.push_back(it.end);
    row_end[r] = std::max(it.start, it.end);
    it.row = static_cast<std::int32_t>(r);
  }
  return std::max<int>(1, static_cast<int>(row_end.size()));
}

std::string phase_lane_label(const std::vector<std::string>& names, std::size_t max_names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < max_names; ++i) s += (i ? " / " : "") + names[i];
  if (names.size() > max_names) s += " ...";
  return s;
}

double tick_step(double min_step_ns) {
  const double want = std::max(1.0, min_step_ns);
  double mag = std::pow(10.0, std::floor(std::log10(want)));
  // log10 rounding: make sure mag <= want < 10 mag.
  if (mag > want) mag /= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= want * (1 - 1e-12)) return m * mag;
  return 10 * mag;
}

std::vector<TimeTick> time_ticks(double t0_ns, double t1_ns, double min_step_ns) {
  std::vector<TimeTick> out;
  if (!(t1_ns >= t0_ns)) return out;
  const double step = tick_step(min_step_ns);
  // Each tick is k * step for a whole k (no accumulated error: 200 us stays 200 us).
  const auto k0 = static_cast<long long>(std::ceil(t0_ns / step)), k1 = static_cast<long long>(std::floor(t1_ns / step));
  for (long long k = k0; k <= k1 && out.size() < 10000; ++k) {
    const double ns = static_cast<double>(k) * step;
    out.push_back({ns, format_tick(ns, step)});
  }
  return out;
}

std::string format_tick(double ns, double step_ns) {
  if (ns == 0) return "0";
  const double a = std::fabs(ns);
  const double unit = a < 1e3 ? 1 : a < 1e6 ? 1e3 : a < 1e9 ? 1e6 : 1e9;
  const char* name = a < 1e3 ? "ns" : a < 1e6 ? "us" : a < 1e9 ? "ms" : "s";
  const int decimals = std::clamp(static_cast<int>(std::ceil(std::log10(unit / std::max(1.0, step_ns)) - 1e-9)), 0, 9);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, ns / unit, name);
  return buf;
}

Timeline build_timeline(std::shared_ptr<const prof::ProfileTrace> trace) {
  Timeline tl;
  tl.trace = trace;
  if (!trace) return tl;
  const prof::ProfileTrace& t = *trace;
  const prof::PhaseIndex ix(t);
  const prof::DeviceTimes excl = prof::device_times(t, prof::TimeMode::exclusive);
  std::unordered_map<std::string, std::int32_t> color_of;
  auto color = [&](const std::string& phase) {
    auto [it, fresh] = color_of.emplace(phase, static_cast<std::int32_t>(tl.phases.size()));
    if (fresh) tl.phases.push_back(phase);
    return it->second;
  };
  // A range id's colour is cached: a million kernels share a few hundred ranges.
  std::unordered_map<std::int64_t, std::int32_t> range_color;
  auto color_of_range = [&](std::int64_t range_id) {
    auto it = range_color.find(range_id);
    if (it != range_color.end()) return it->second;
    const std::int32_t c = color(ix.phase(range_id));
    range_color.emplace(range_id, c);
    return c;
  };

  std::map<std::pair<int, std::uint32_t>, std::size_t> lane_of;  // (device, stream) -> lane, ordered
  std::vector<TimelineLane> op_lanes;
  auto lane = [&](int device, std::uint32_t stream) -> TimelineLane& {
    auto [it, fresh] = lane_of.emplace(std::make_pair(device, stream), 0);
    if (fresh) {
      it->second = op_lanes.size();
      TimelineLane l;
      l.label = device < 0 ? std::string("CPU ops") : "GPU " + std::to_string(device) + " stream " + std::to_string(stream);
      op_lanes.push_back(std::move(l));
    }
    return op_lanes[it->second];
  };
  // Inside ffn.decode the fused decode kernels have no finer ranges: they take the colour of the paper's part
  // their name says they are (as the Breakdown view counts them), e.g. "ffn.decode: gate".
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    const auto& k = t.kernels[i];
    std::int32_t c = color_of_range(k.range_id);
    if (tl.phases[static_cast<std::size_t>(c)] == "ffn.decode") {
      const prof::PaperPart part = prof::decode_kernel_part(k.short_name);
      if (part != prof::PaperPart::other) c = color(std::string("ffn.decode: ") + prof::paper_part_label(part));
    }
    lane(k.device_id, k.stream_id).items.push_back({k.start_ns, k.end_ns, excl.kernel_own[i], c, static_cast<std::int32_t>(i), ItemKind::kernel});
  }
  for (std::size_t i = 0; i < t.memcpys.size(); ++i) {
    const auto& m = t.memcpys[i];
    lane(m.device_id, m.stream_id).items.push_back({m.start_ns, m.end_ns, excl.memcpy_own[i], color("memcpy"), static_cast<std::int32_t>(i), ItemKind::memcpy});
  }
  for (std::size_t i = 0; i < t.memsets.size(); ++i) {
    const auto& m = t.memsets[i];
    lane(m.device_id, m.stream_id).items.push_back({m.start_ns, m.end_ns, excl.memset_own[i], color("memset"), static_cast<std::int32_t>(i), ItemKind::memset});
  }
  // Stage stamps: on a lane under their kernel record's stream lane (one per stream that has any); stages
  // without a record on a lane of their own after the stream lanes.
  struct StageLane {
    TimelineLane lane;
    std::vector<std::string> kernels;  // the stamped kernels' names, first appearance order
    TimelineLane done(const char* suffix) {
      lane.stages = true;
      lane.label = phase_lane_label(kernels, 2) + " stages" + suffix;
      return std::move(lane);
    }
  };
  tl.stage_kernel = prof::stage_kernels(t);
  std::map<std::pair<int, std::uint32_t>, StageLane> stage_lanes;
  StageLane orphans;
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    const auto& g = t.stages[i];
    const std::ptrdiff_t k = tl.stage_kernel[i];
    StageLane& sl = k < 0 ? orphans : stage_lanes[{t.kernels[static_cast<std::size_t>(k)].device_id, t.kernels[static_cast<std::size_t>(k)].stream_id}];
    if (std::find(sl.kernels.begin(), sl.kernels.end(), g.kernel) == sl.kernels.end()) sl.kernels.push_back(g.kernel);
    sl.lane.items.push_back({g.start_ns, g.end_ns, g.start_ns, color(stage_class(g.stage)), static_cast<std::int32_t>(i), ItemKind::stage});
  }
  // Re-order lanes by (device, stream), each followed by its stage lane.
  for (const auto& [key, idx] : lane_of) {
    tl.lanes.push_back(std::move(op_lanes[idx]));
    if (auto s = stage_lanes.find(key); s != stage_lanes.end()) tl.lanes.push_back(s->second.done(""));
  }
  if (!orphans.lane.items.empty()) tl.lanes.push_back(orphans.done(" (no kernel record)"));

  int max_depth = -1;
  for (const auto& r : t.ranges) max_depth = std::max(max_depth, r.depth);
  for (int d = 0; d <= max_depth; ++d) {
    TimelineLane l;
    l.phases = true;
    l.depth = d;
    tl.lanes.push_back(std::move(l));
  }
  const std::size_t first_phase_lane = tl.lanes.size() - static_cast<std::size_t>(max_depth + 1);
  std::vector<std::vector<std::string>> names_at(static_cast<std::size_t>(max_depth + 1));  // a lane's range names
  for (std::size_t i = 0; i < t.ranges.size(); ++i) {
    const auto& r = t.ranges[i];
    if (r.end_ns <= r.start_ns || r.ops <= 0) continue;  // a range without device work has no projection
    const std::string name = r.name.starts_with("layer.") ? std::string("layer") : r.name;
    auto& names = names_at[static_cast<std::size_t>(r.depth)];
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    tl.lanes[first_phase_lane + static_cast<std::size_t>(r.depth)].items.push_back(
        {r.start_ns, r.end_ns, r.start_ns, color(name), static_cast<std::int32_t>(i), ItemKind::range});
  }
  for (int d = 0; d <= max_depth; ++d)
    tl.lanes[first_phase_lane + static_cast<std::size_t>(d)].label = phase_lane_label(names_at[static_cast<std::size_t>(d)]);
  bool any = false;
  for (auto& l : tl.lanes) {
    const int rows = pack_rows(&l.items);
    std::stable_sort(l.items.begin(), l.items.end(), [](const TimelineItem& a, const TimelineItem& b) {
      return a.row != b.row ? a.row < b.row : a.start < b.start;
    });
    l.row_begin.assign(static_cast<std::size_t>(rows) + 1, l.items.size());
    l.row_max_duration.assign(static_cast<std::size_t>(rows), 0);
    for (std::size_t i = l.items.size(); i-- > 0;) l.row_begin[static_cast<std::size_t>(l.items[i].row)] = i;
    for (int r = rows - 1; r >= 0; --r)  // a row is never empty, but keep the offsets monotone regardless
      l.row_begin[static_cast<std::size_t>(r)] = std::min(l.row_begin[static_cast<std::size_t>(r)], l.row_begin[static_cast<std::size_t>(r) + 1]);
    for (const auto& it : l.items) {
      if (it.kind != ItemKind::range && it.kind != ItemKind::stage) {  // device work, counted once
        tl.exclusive_sum_ns += it.exclusive_ns();
        tl.inclusive_sum_ns += it.inclusive_ns();
      }
      auto& m = l.row_max_duration[static_cast<std::size_t>(it.row)];
      m = std::max(m, it.end - it.start);
      tl.start_ns = any ? std::min(tl.start_ns, it.start) : it.start;
      tl.end_ns = any ? std::max(tl.end_ns, it.end) : it.end;
      any = true;
    }
    tl.items += l.items.size();
  }
  if (!any) {
    tl.start_ns = t.start_ns;
    tl.end_ns = t.end_ns;
  }
  // Drop empty phase lanes (depths whose ranges held no device work).
  tl.lanes.erase(std::remove_if(tl.lanes.begin(), tl.lanes.end(), [](const TimelineLane& l) { return l.phases && l.items.empty(); }),
                 tl.lanes.end());
  return tl;
}

namespace {
// One sub-row of a lane: items[begin, end) by start, none overlapping.
struct RowView {
  const std::vector<TimelineItem>& items;
  std::size_t begin, end;
  std::int64_t max_duration;
  // First index in [from, end) whose start is >= t (end when none).
  std::size_t first_starting_at(std::size_t from, std::int64_t t) const {
    return static_cast<std::size_t>(
        std::lower_bound(items.begin() + static_cast<std::ptrdiff_t>(from), items.begin() + static_cast<std::ptrdiff_t>(end), t,
                         [](const TimelineItem& a, std::int64_t x) { return a.start < x; }) -
        items.begin());
  }
};
RowView row_view(const TimelineLane& lane, int row) {
  if (row < 0 || row >= lane.rows()) return {lane.items, 0, 0, 0};
  const auto r = static_cast<std::size_t>(row);
  return {lane.items, lane.row_begin[r], lane.row_begin[r + 1], lane.row_max_duration[r]};
}
}  // namespace

void visible_spans(const TimelineLane& lane, int row, std::int64_t t0, std::int64_t t1, double ns_per_px, double min_px,
                   std::vector<VisibleSpan>* out) {
  const RowView rv = row_view(lane, row);
  const auto& v = lane.items;
  const std::size_t n = rv.end;
  if (rv.begin == rv.end || t1 <= t0) return;
  const auto min_ns = static_cast<std::int64_t>(min_px * ns_per_px);
  // Items that end after t0 start no earlier than t0 - max_duration.
  std::size_t i = rv.first_starting_at(rv.begin, t0 - rv.max_duration);
  while (i < n && v[i].end < t0) ++i;
  while (i < n && v[i].start < t1) {
    const TimelineItem& it = v[i];
    if (it.end - it.start >= min_ns) {
      out->push_back({it.start, it.end, static_cast<std::int32_t>(i), 1});
      ++i;
      continue;
    }
    // A run of narrow items: jump past everything that starts within min_px, again while the next item is
    // narrow and close, so each step of this loop covers at least a pixel.
    const std::size_t first = i;
    std::int64_t end = it.end;
    std::size_t j = i + 1;
    for (;;) {
      std::size_t k = std::min(rv.first_starting_at(j, end + min_ns), rv.first_starting_at(j, t1));
      // On a sub-row items do not overlap, so only the last of those can be wide: it ends the run.
      if (k > j && v[k - 1].end - v[k - 1].start >= min_ns) --k;
      if (k == j) break;
      end = std::max(end, v[k - 1].end);
      j = k;
      if (j >= n || v[j].start >= t1) break;
    }
    out->push_back({v[first].start, end, static_cast<std::int32_t>(first), static_cast<std::int32_t>(j - first)});
    i = j;
  }
}

int item_at(const TimelineLane& lane, int row, std::int64_t t, std::int64_t slack_ns) {
  const RowView rv = row_view(lane, row);
  const auto& v = lane.items;
  std::size_t i = rv.first_starting_at(rv.begin, t - rv.max_duration - slack_ns);
  int best = -1;
  std::int64_t best_dur = 0;
  for (; i < rv.end && v[i].start <= t + slack_ns; ++i) {
    if (v[i].end + slack_ns < t) continue;
    const std::int64_t d = v[i].end - v[i].start;
    if (best < 0 || d < best_dur) {
      best = static_cast<int>(i);
      best_dur = d;
    }
  }
  return best;
}

prof::ProfileTrace synthetic_trace(std::size_t n, int streams, bool pdl) {
  prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  static const char* kNames[] = {"k_gate", "k_select", "k_updown", "gemm_bf16", "rmsnorm", "attention_fwd"};
  static const char* kPhases[] = {"attention", "ffn.gate", "ffn.topk", "ffn.up", "ffn.down", "head"};
  const std::size_t per_layer = 60;
  std::int64_t clock = 1000;
  t.ranges.push_back({0, -1, "step", 0, 0, 0, 0, 0, 0, 0});
  std::int64_t layer_id = -1, phase_id = -1;
  t.kernels.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % per_layer == 0) {
      layer_id = static_cast<std::int64_t>(t.ranges.size());
      t.ranges.push_back({layer_id, 0, "layer." + std::to_string(i / per_layer), 1, 0, clock, clock, 0, 0, 0});
    }
    if (i % 10 == 0) {
      phase_id = static_cast<std::int64_t>(t.ranges.size());
      t.ranges.push_back({phase_id, layer_id, kPhases[(i / 10) % 6], 2, 0, clock, clock, 0, 0, 0});
    }
    prof::KernelRecord k;
    k.short_name = kNames[i % 6];
    k.start_ns = clock;
    if (pdl && i % 3 == 2) k.start_ns = t.kernels.back().end_ns - 500;  // launched early, waits in its record
    k.end_ns = clock + 800 + static_cast<std::int64_t>((i * 7919) % 4000);
    clock = k.end_ns + 200;
    k.device_id = 0;
    k.stream_id = static_cast<std::uint32_t>(7 + (i % static_cast<std::size_t>(std::max(1, streams))));
    k.grid_x = 132;
    k.block_x = 256;
    k.registers_per_thread = 64;
    k.range_id = phase_id;
    t.kernels.push_back(std::move(k));
    for (std::int64_t r : {phase_id, layer_id, std::int64_t{0}}) {
      auto& pr = t.ranges[static_cast<std::size_t>(r)];
      if (pr.ops == 0) pr.start_ns = t.kernels.back().start_ns;
      pr.end_ns = t.kernels.back().end_ns;
      ++pr.ops;
    }
  }
  t.start_ns = 0;
  t.end_ns = clock;
  return t;
}

prof::ProfileTrace synthetic_stage_trace(int steps, int layers, std::uint32_t seed) {
  prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = steps;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> jitter(0, 600);
  static const char* kLayerStages[] = {"qkv", "attention", "o", "gate", "top-K", "up", "down"};
  static const std::int64_t kBaseNs[] = {2500, 1500, 1200, 3000, 800, 1600, 1600};
  std::int64_t clock = 1000;
  auto kernel = [&](const char* name, int step, std::int64_t range_id, std::int64_t start, std::int64_t end) {
    prof::KernelRecord k;
    k.short_name = name;
    k.name = std::string("moc::kernels::") + name + "(DecodeArgs)";
    k.start_ns = start;
    k.end_ns = end;
    k.device_id = 0;
    k.stream_id = 7;
    k.grid_x = 132;
    k.block_x = 512;
    k.registers_per_thread = 128;
    k.range_id = range_id;
    k.step = step;
    t.kernels.push_back(std::move(k));
  };
  for (int s = 0; s < steps; ++s) {
    const auto range_id = static_cast<std::int64_t>(t.ranges.size());
    const std::int64_t step_start = clock;
    kernel("k_embed", s, range_id, clock, clock + 2000);
    clock += 2500;
    const std::int64_t launch_start = clock;
    std::int64_t at = clock + 300;  // the first block starts a little after the record
    auto stage = [&](const std::string& name, int layer, std::int64_t base_ns, bool barrier) {
      const std::int64_t d = base_ns + jitter(rng);
      t.stages.push_back({s, "k_step", 0, range_id, layer, name, at, at + d, barrier ? d / 5 + jitter(rng) / 10 : 0});
      at += d;
    };
    stage("start", -1, 400, true);
    for (int l = 0; l < layers; ++l)
      for (std::size_t i = 0; i < std::size(kLayerStages); ++i) stage(kLayerStages[i], l, kBaseNs[i], true);
    stage("head", -1, 5000, true);
    stage("output", -1, 300, false);
    kernel("k_step", s, range_id, launch_start, at);
    clock = at + 1000;
    t.ranges.push_back({range_id, -1, "step", 0, s, step_start, at, 0, 0, 2});
  }
  t.start_ns = 0;
  t.end_ns = clock;
  return t;
}

}  // namespace moc::gui

#include "gui/model/timeline.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "profiling/phases.h"

namespace moc::gui {

const std::string& kernel_name(const prof::KernelRecord& k) { return k.short_name.empty() ? k.name : k.short_name; }

Timeline build_timeline(std::shared_ptr<const prof::ProfileTrace> trace) {
  Timeline tl;
  tl.trace = trace;
  if (!trace) return tl;
  const prof::ProfileTrace& t = *trace;
  const prof::PhaseIndex ix(t);
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
    lane(k.device_id, k.stream_id).items.push_back({k.start_ns, k.end_ns, c, static_cast<std::int32_t>(i), ItemKind::kernel});
  }
  for (std::size_t i = 0; i < t.memcpys.size(); ++i) {
    const auto& m = t.memcpys[i];
    lane(m.device_id, m.stream_id).items.push_back({m.start_ns, m.end_ns, color("memcpy"), static_cast<std::int32_t>(i), ItemKind::memcpy});
  }
  for (std::size_t i = 0; i < t.memsets.size(); ++i) {
    const auto& m = t.memsets[i];
    lane(m.device_id, m.stream_id).items.push_back({m.start_ns, m.end_ns, color("memset"), static_cast<std::int32_t>(i), ItemKind::memset});
  }
  // Re-order lanes by (device, stream).
  for (const auto& [key, idx] : lane_of) tl.lanes.push_back(std::move(op_lanes[idx]));

  int max_depth = -1;
  for (const auto& r : t.ranges) max_depth = std::max(max_depth, r.depth);
  for (int d = 0; d <= max_depth; ++d) {
    TimelineLane l;
    l.label = "phases " + std::to_string(d);
    l.phases = true;
    l.depth = d;
    tl.lanes.push_back(std::move(l));
  }
  const std::size_t first_phase_lane = tl.lanes.size() - static_cast<std::size_t>(max_depth + 1);
  for (std::size_t i = 0; i < t.ranges.size(); ++i) {
    const auto& r = t.ranges[i];
    if (r.end_ns <= r.start_ns || r.ops <= 0) continue;  // a range without device work has no projection
    const std::string name = r.name.starts_with("layer.") ? std::string("layer") : r.name;
    tl.lanes[first_phase_lane + static_cast<std::size_t>(r.depth)].items.push_back(
        {r.start_ns, r.end_ns, color(name), static_cast<std::int32_t>(i), ItemKind::range});
  }
  bool any = false;
  for (auto& l : tl.lanes) {
    std::stable_sort(l.items.begin(), l.items.end(), [](const TimelineItem& a, const TimelineItem& b) { return a.start < b.start; });
    for (const auto& it : l.items) {
      l.max_duration = std::max(l.max_duration, it.end - it.start);
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
// First index >= from whose start is >= t.
std::size_t first_starting_at(const std::vector<TimelineItem>& v, std::size_t from, std::int64_t t) {
  return static_cast<std::size_t>(
      std::lower_bound(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), t,
                       [](const TimelineItem& a, std::int64_t x) { return a.start < x; }) -
      v.begin());
}
}  // namespace

void visible_spans(const TimelineLane& lane, std::int64_t t0, std::int64_t t1, double ns_per_px, double min_px,
                   std::vector<VisibleSpan>* out) {
  const auto& v = lane.items;
  if (v.empty() || t1 <= t0) return;
  const auto min_ns = static_cast<std::int64_t>(min_px * ns_per_px);
  // Items that end after t0 start no earlier than t0 - max_duration.
  std::size_t i = first_starting_at(v, 0, t0 - lane.max_duration);
  while (i < v.size() && v[i].end < t0) ++i;
  while (i < v.size() && v[i].start < t1) {
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
      std::size_t k = std::min(first_starting_at(v, j, end + min_ns), first_starting_at(v, j, t1));
      // On a stream items do not overlap, so only the last of those can be wide: it ends the run.
      if (k > j && v[k - 1].end - v[k - 1].start >= min_ns) --k;
      if (k == j) break;
      end = std::max(end, v[k - 1].end);
      j = k;
      if (j >= v.size() || v[j].start >= t1) break;
    }
    out->push_back({v[first].start, end, static_cast<std::int32_t>(first), static_cast<std::int32_t>(j - first)});
    i = j;
  }
}

int item_at(const TimelineLane& lane, std::int64_t t, std::int64_t slack_ns) {
  const auto& v = lane.items;
  std::size_t i = first_starting_at(v, 0, t - lane.max_duration - slack_ns);
  int best = -1;
  std::int64_t best_dur = 0;
  for (; i < v.size() && v[i].start <= t + slack_ns; ++i) {
    if (v[i].end + slack_ns < t) continue;
    const std::int64_t d = v[i].end - v[i].start;
    if (best < 0 || d < best_dur) {
      best = static_cast<int>(i);
      best_dur = d;
    }
  }
  return best;
}

prof::ProfileTrace synthetic_trace(std::size_t n, int streams) {
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

}  // namespace moc::gui

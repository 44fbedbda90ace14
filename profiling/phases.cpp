#include "profiling/phases.h"

#include <algorithm>
#include <set>
#include <vector>

namespace moc::prof {

const char* paper_part_label(PaperPart p) {
  switch (p) {
    case PaperPart::gate: return "gate";
    case PaperPart::up_down: return "up & down";
    case PaperPart::topk: return "top-K";
    case PaperPart::other: break;
  }
  return "other";
}

PhaseIndex::PhaseIndex(const ProfileTrace& t) {
  by_id_.reserve(t.ranges.size());
  for (const auto& r : t.ranges) by_id_.emplace(r.id, &r);
}

const PhaseRange* PhaseIndex::find(std::int64_t range_id) const {
  auto it = by_id_.find(range_id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::string PhaseIndex::phase(std::int64_t range_id) const {
  const PhaseRange* r = range_id < 0 ? nullptr : find(range_id);
  if (!r) return "(none)";
  return r->name.starts_with("layer.") ? std::string("layer") : r->name;
}

PaperPart PhaseIndex::part_of_range(std::int64_t range_id) const {
  for (int hops = 0; range_id >= 0 && hops < 1000; ++hops) {
    const PhaseRange* r = find(range_id);
    if (!r) break;
    if (r->name == "ffn.gate") return PaperPart::gate;
    if (r->name == "ffn.topk") return PaperPart::topk;
    if (r->name == "ffn.up" || r->name == "ffn.down") return PaperPart::up_down;
    range_id = r->parent_id;
  }
  return PaperPart::other;
}

std::int64_t PhaseIndex::ancestor_named(std::int64_t range_id, const std::string& name) const {
  for (int hops = 0; range_id >= 0 && hops < 1000; ++hops) {
    const PhaseRange* r = find(range_id);
    if (!r) return -1;
    if (r->name == name) return range_id;
    range_id = r->parent_id;
  }
  return -1;
}

PaperPart decode_kernel_part(const std::string& short_name) {
  if (short_name == "k_gate" || short_name == "k_gen_gate") return PaperPart::gate;
  if (short_name == "k_select") return PaperPart::topk;
  if (short_name == "k_updown" || short_name == "k_gen_z" || short_name == "k_gen_down") return PaperPart::up_down;
  return PaperPart::other;
}

bool add_stage_parts(const std::string& stage, double ns, std::array<double, kPaperParts>& parts) {
  if (stage == "gate") parts[static_cast<int>(PaperPart::gate)] += ns;
  else if (stage == "top-K") parts[static_cast<int>(PaperPart::topk)] += ns;
  else if (stage == "up" || stage == "down") parts[static_cast<int>(PaperPart::up_down)] += ns;
  else if (stage == "gate & up") {
    parts[static_cast<int>(PaperPart::gate)] += ns / 2;
    parts[static_cast<int>(PaperPart::up_down)] += ns / 2;
    return false;
  } else {
    parts[static_cast<int>(PaperPart::other)] += ns;
  }
  return true;
}

PaperBreakdown paper_breakdown(const ProfileTrace& t, TimeMode mode) { return paper_breakdown(t, device_times(t, mode)); }

PaperBreakdown paper_breakdown(const ProfileTrace& t, const DeviceTimes& dt) {
  // Stamped kernels: their stages' parts.
  std::vector<std::array<double, kPaperParts>> stamped(t.kernels.size());
  std::vector<char> has_stages(t.kernels.size(), 0);
  PaperBreakdown out;
  {
    const auto owner = stage_kernels(t);
    for (std::size_t i = 0; i < t.stages.size(); ++i) {
      if (owner[i] < 0) continue;
      const auto k = static_cast<std::size_t>(owner[i]);
      has_stages[k] = 1;
      if (!add_stage_parts(t.stages[i].stage, static_cast<double>(t.stages[i].end_ns - t.stages[i].start_ns), stamped[k]))
        out.fused_stages = true;
    }
  }
  const PhaseIndex ix(t);
  std::set<std::int64_t> split_decode;  // ffn.decode ranges that ran a gate kernel
  for (const auto& k : t.kernels)
    if (decode_kernel_part(k.short_name) == PaperPart::gate)
      if (const auto d = ix.ancestor_named(k.range_id, "ffn.decode"); d >= 0) split_decode.insert(d);
  auto add = [&](std::int64_t range_id, std::int64_t dur, const std::string* short_name) {
    PaperPart p = ix.part_of_range(range_id);
    if (p == PaperPart::other) {
      const auto d = ix.ancestor_named(range_id, "ffn.decode");
      if (d >= 0) {
        out.in_decode = true;
        if (short_name && split_decode.count(d)) p = decode_kernel_part(*short_name);
        // k_prep (it zeroes the next kernel's accumulators) is other by what it is, not a fused kernel.
        if (p == PaperPart::other && !(short_name && *short_name == "k_prep")) out.fused_decode = true;
      }
    }
    out.ns[static_cast<int>(p)] += static_cast<double>(dur);
  };
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    if (!has_stages[i]) {
      add(t.kernels[i].range_id, dt.kernels[i], &t.kernels[i].short_name);
      continue;
    }
    // The kernel's time split as its stages were. What they do not cover is other -- e.g. an older
    // profile's persistent k_step: its launch and exit -- except for the decode FFN's own kernels (k_gate,
    // k_select, k_updown in ffn.decode), whose stamps begin after their dependency wait: the rest of their
    // time is still the part their name says. Stages longer than the kernel's counted time (inclusive vs
    // exclusive) are scaled to it, so the parts still sum to it.
    out.from_stages = true;
    const auto& parts = stamped[i];
    double sum = 0;
    for (double v : parts) sum += v;
    const double total = static_cast<double>(dt.kernels[i]);
    const double scale = sum > total && sum > 0 ? total / sum : 1.0;
    for (int p = 0; p < kPaperParts; ++p) out.ns[p] += parts[p] * scale;
    PaperPart rest = PaperPart::other;
    if (ix.ancestor_named(t.kernels[i].range_id, "ffn.decode") >= 0) {
      out.in_decode = true;
      rest = decode_kernel_part(t.kernels[i].short_name);
    }
    out.ns[static_cast<int>(rest)] += std::max(0.0, total - sum);
  }
  out.idle_ns = static_cast<double>(std::max<std::int64_t>(0, step_span_ns(t) - busy_ns(t)));
  for (std::size_t i = 0; i < t.memcpys.size(); ++i) add(t.memcpys[i].range_id, dt.memcpys[i], nullptr);
  for (std::size_t i = 0; i < t.memsets.size(); ++i) add(t.memsets[i].range_id, dt.memsets[i], nullptr);
  return out;
}

}  // namespace moc::prof

#include "profiling/phases.h"

#include <set>

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

PaperBreakdown paper_breakdown(const ProfileTrace& t, TimeMode mode) {
  const DeviceTimes dt = device_times(t, mode);
  const PhaseIndex ix(t);
  PaperBreakdown out;
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
        if (p == PaperPart::other) out.fused_decode = true;
      }
    }
    out.ns[static_cast<int>(p)] += static_cast<double>(dur);
  };
  for (std::size_t i = 0; i < t.kernels.size(); ++i) add(t.kernels[i].range_id, dt.kernels[i], &t.kernels[i].short_name);
  for (std::size_t i = 0; i < t.memcpys.size(); ++i) add(t.memcpys[i].range_id, dt.memcpys[i], nullptr);
  for (std::size_t i = 0; i < t.memsets.size(); ++i) add(t.memsets[i].range_id, dt.memsets[i], nullptr);
  return out;
}

}  // namespace moc::prof

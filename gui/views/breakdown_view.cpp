// Breakdown: per point of run A, the paper's latency breakdown (gate / up & down / top-K / other) as stacked
// bars, one chart per mode -- from the profile's kernel records where the point was profiled, from its timed
// phases otherwise -- and the per-phase time of each step (embedding, attention, FFN, head, loss, optimizer).
// Traced bars count device time exclusive or inclusive, as the shared toggle says (exclusive by default).
#include <imgui.h>
#include <implot.h>

#include <cmath>

#include "gui/model/breakdown.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {


void draw_breakdown_view(Store& store, UiState& ui) {
  RunRef a;
  if (!begin_run_view(View::breakdown, ui, &a)) return;
  time_mode_toggle(ui);
  ImGui::SameLine(0, 20);
  ImGui::TextUnformatted(store.run_label(a).c_str());
  const auto& pts = store.points(a);
  if (ui.breakdown.stale(a, store.generation()) || ui.breakdown.data.mode != ui.time_mode)
    ui.breakdown.set(a, store.generation(),
                     build_breakdown(pts, [&](std::int64_t id) { return store.profile(a, id); }, ui.time_mode));
  const BreakdownData& d = ui.breakdown.data;
  if (d.groups.empty() && d.phases.empty()) {
    ImGui::TextDisabled("No point of this run has a profile or timed phases.");
    ImGui::End();
    return;
  }
  std::string axes_line;
  for (const auto& ax : d.label_axes) axes_line += (axes_line.empty() ? "" : " / ") + ax;
  ImGui::TextDisabled("traced bars: %s device time of the kernel records; *: from timed phases (the profile cannot "
                      "split the parts); diamonds: the timed total",
                      prof::time_mode_name(d.mode));
  if (!d.group_axis.empty())
    ImGui::TextDisabled("bars grouped by %s (top axis), labelled by %s (one line each); hover a bar for its full label",
                        d.group_axis.c_str(), axes_line.c_str());
  else if (!axes_line.empty())
    ImGui::TextDisabled("bars labelled by %s", axes_line.c_str());
  const int charts = static_cast<int>(d.groups.size() + d.phases.size());
  const float h = std::max(170.0f, (ImGui::GetContentRegionAvail().y - 30.0f * static_cast<float>(charts)) / static_cast<float>(charts));
  for (const auto& g : d.groups) {
    int profiled = 0;
    for (const auto& b : g.bars) profiled += b.from_profile;
    ImGui::Text("%s: latency breakdown, %s per %s -- %d of %d bars traced (%s)", g.mode.c_str(), g.unit.c_str(),
                g.mode == "ffn-decode" ? "FFN call" : "step", profiled, static_cast<int>(g.bars.size()),
                prof::time_mode_name(d.mode));
    std::vector<std::string> items, labels, groups;
    std::vector<double> totals;
    std::vector<std::vector<double>> values(prof::kPaperParts);
    std::vector<ImVec4> colors;
    for (int p = 0; p < prof::kPaperParts; ++p) {
      items.push_back(prof::paper_part_label(static_cast<prof::PaperPart>(p)));
      colors.push_back(part_color(p));
    }
    for (const auto& b : g.bars) {
      labels.push_back(b.label + (b.from_profile ? "" : " *"));
      groups.push_back(b.group);
      totals.push_back(b.timed_total > 0 ? b.timed_total : std::nan(""));
      for (int p = 0; p < prof::kPaperParts; ++p) values[static_cast<std::size_t>(p)].push_back(b.parts[static_cast<std::size_t>(p)]);
    }
    stacked_bars(("##bd_" + g.mode).c_str(), items, values, labels, g.unit.c_str(), colors, h, totals,
                 d.group_axis.empty() ? std::vector<std::string>{} : groups);
  }
  for (const auto& pb : d.phases) {
    ImGui::Text("%s: time per phase of a step (ms, timed phase ranges)", pb.mode.c_str());
    std::vector<ImVec4> colors;
    for (const auto& ph : pb.phases) colors.push_back(ph == "other" ? part_color(3) : phase_color(ph));
    stacked_bars(("##ph_" + pb.mode).c_str(), pb.phases, pb.ms, pb.labels, "ms", colors, h, {},
                 d.group_axis.empty() ? std::vector<std::string>{} : pb.groups);
  }
  ImGui::End();
}

}  // namespace moc::gui

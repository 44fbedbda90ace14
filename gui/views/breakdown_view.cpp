// Breakdown: per point of run A, the paper's latency breakdown (gate / up & down / top-K / other) as stacked
// bars, one chart per mode -- from the profile's kernel records where the point was profiled, from its timed
// phases otherwise -- and the per-phase time of each step (embedding, attention, FFN, head, loss, optimizer).
#include <imgui.h>
#include <implot.h>

#include <cmath>

#include "gui/model/breakdown.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
// totals: one marker per bar (the timed total), or empty.
void stacked_bars(const char* id, const std::vector<std::string>& items, const std::vector<std::vector<double>>& values,
                  const std::vector<std::string>& labels, const char* y_label, const std::vector<ImVec4>& colors,
                  float height, const std::vector<double>& totals = {}) {
  const int groups = static_cast<int>(labels.size());
  if (groups == 0) return;
  if (ImPlot::BeginPlot(id, ImVec2(-1, height))) {
    std::vector<double> ticks;
    std::vector<const char*> tick_labels;
    for (int i = 0; i < groups; ++i) {
      ticks.push_back(i);
      tick_labels.push_back(labels[static_cast<std::size_t>(i)].c_str());
    }
    ImPlot::SetupAxes(nullptr, y_label, ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
    ImPlot::SetupAxisTicks(ImAxis_X1, ticks.data(), groups, tick_labels.data());
    ImPlot::SetupLegend(ImPlotLocation_NorthEast, ImPlotLegendFlags_Outside);
    // Stacked by drawing each item's cumulative top, the full stack first, so lower items paint over the
    // lower part of those above (ImPlot bars start at 0); each item keeps its colour and legend entry.
    std::vector<std::vector<double>> tops(items.size());
    std::vector<double> acc(static_cast<std::size_t>(groups), 0.0);
    for (std::size_t it = 0; it < items.size(); ++it) {
      for (int g = 0; g < groups; ++g) acc[static_cast<std::size_t>(g)] += values[it][static_cast<std::size_t>(g)];
      tops[it] = acc;
    }
    for (std::size_t k = items.size(); k-- > 0;) {
      ImPlotSpec spec;
      spec.FillColor = colors[k];
      spec.LineColor = ImVec4(0.1f, 0.1f, 0.1f, 1.0f);
      ImPlot::PlotBars(items[k].c_str(), tops[k].data(), groups, 0.6, 0.0, spec);
    }
    if (!totals.empty()) {
      ImPlotSpec mark;
      mark.Marker = ImPlotMarker_Diamond;
      mark.MarkerSize = 6;
      mark.MarkerFillColor = ImVec4(1, 1, 1, 1);
      mark.MarkerLineColor = ImVec4(0, 0, 0, 1);
      mark.Flags = ImPlotLineFlags_SkipNaN;
      mark.LineColor = ImVec4(0, 0, 0, 0);
      ImPlot::PlotLine("timed total", ticks.data(), totals.data(), groups, mark);
    }
    if (ImPlot::IsPlotHovered()) {
      const ImPlotPoint mp = ImPlot::GetPlotMousePos();
      const int g = static_cast<int>(std::lround(mp.x));
      if (g >= 0 && g < groups && std::fabs(mp.x - g) < 0.3) {
        ImGui::BeginTooltip();
        ImGui::TextUnformatted(labels[static_cast<std::size_t>(g)].c_str());
        double total = 0;
        for (std::size_t it = 0; it < items.size(); ++it) total += values[it][static_cast<std::size_t>(g)];
        for (std::size_t it = 0; it < items.size(); ++it) {
          const double v = values[it][static_cast<std::size_t>(g)];
          ImGui::ColorButton("##c", colors[it], ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
          ImGui::SameLine();
          ImGui::Text("%-10s %s %s (%.1f%%)", items[it].c_str(), format_value(v).c_str(), y_label, total > 0 ? 100 * v / total : 0.0);
        }
        ImGui::Text("total %s %s", format_value(total).c_str(), y_label);
        ImGui::EndTooltip();
      }
    }
    ImPlot::EndPlot();
  }
}
}  // namespace

void draw_breakdown_view(Store& store, UiState& ui) {
  if (!ImGui::Begin(view_title(View::breakdown))) {
    ImGui::End();
    return;
  }
  const RunRef a = run_a(ui);
  if (!a.valid()) {
    ImGui::TextDisabled("Select a run in Runs.");
    ImGui::End();
    return;
  }
  ImGui::TextUnformatted(store.run_label(a).c_str());
  const auto& pts = store.points(a);
  if (ui.breakdown.stale(a, store.generation()))
    ui.breakdown.set(a, store.generation(), build_breakdown(pts, [&](std::int64_t id) { return store.profile(a, id); }));
  const BreakdownData& d = ui.breakdown.data;
  if (d.groups.empty() && d.phases.empty()) {
    ImGui::TextDisabled("No point of this run has a profile or timed phases.");
    ImGui::End();
    return;
  }
  std::string axes_line;
  for (const auto& ax : d.label_axes) axes_line += (axes_line.empty() ? "" : " / ") + ax;
  if (!axes_line.empty()) ImGui::TextDisabled("bars labelled by %s", axes_line.c_str());
  const int charts = static_cast<int>(d.groups.size() + d.phases.size());
  const float h = std::max(220.0f, (ImGui::GetContentRegionAvail().y - 30.0f * static_cast<float>(charts)) / static_cast<float>(charts));
  for (const auto& g : d.groups) {
    int profiled = 0;
    for (const auto& b : g.bars) profiled += b.from_profile;
    ImGui::Text("%s: latency breakdown, %s per %s -- %d of %d bars from kernel records (traced), the rest from timed "
                "phases; diamonds: the timed total",
                g.mode.c_str(), g.unit.c_str(), g.mode == "ffn-decode" ? "FFN call" : "step", profiled,
                static_cast<int>(g.bars.size()));
    std::vector<std::string> items, labels;
    std::vector<double> totals;
    std::vector<std::vector<double>> values(prof::kPaperParts);
    std::vector<ImVec4> colors;
    for (int p = 0; p < prof::kPaperParts; ++p) {
      items.push_back(prof::paper_part_label(static_cast<prof::PaperPart>(p)));
      colors.push_back(part_color(p));
    }
    for (const auto& b : g.bars) {
      labels.push_back(b.label + (b.from_profile ? "" : "\n(timed)"));
      totals.push_back(b.timed_total > 0 ? b.timed_total : std::nan(""));
      for (int p = 0; p < prof::kPaperParts; ++p) values[static_cast<std::size_t>(p)].push_back(b.parts[static_cast<std::size_t>(p)]);
    }
    stacked_bars(("##bd_" + g.mode).c_str(), items, values, labels, g.unit.c_str(), colors, h, totals);
  }
  for (const auto& pb : d.phases) {
    ImGui::Text("%s: time per phase of a step (ms, timed phase ranges)", pb.mode.c_str());
    std::vector<ImVec4> colors;
    for (const auto& ph : pb.phases) colors.push_back(ph == "other" ? part_color(3) : phase_color(ph));
    stacked_bars(("##ph_" + pb.mode).c_str(), pb.phases, pb.ms, pb.labels, "ms", colors, h);
  }
  ImGui::End();
}

}  // namespace moc::gui

// A stacked bar chart (one bar per group, one colour per item) with a tooltip per bar: the Breakdown view's
// charts and the Memory view's Figure 1.
#include <imgui.h>
#include <implot.h>

#include <cmath>

#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

int stacked_bars(const char* id, const std::vector<std::string>& items, const std::vector<std::vector<double>>& values,
                 const std::vector<std::string>& labels, const char* y_label, const std::vector<ImVec4>& colors,
                 float height, const std::vector<double>& totals) {
  const int groups = static_cast<int>(labels.size());
  int clicked = -1;
  if (groups == 0) return clicked;
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
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) clicked = g;
      }
    }
    ImPlot::EndPlot();
  }
  return clicked;
}

}  // namespace moc::gui

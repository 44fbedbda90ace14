// A stacked bar chart (one bar per group, one colour per item) with a tooltip per bar: the Breakdown view's
// charts and the Memory view's Figure 1. At many bars the labels stay readable: bars can stand in groups
// (named once, on the top axis), and a tick label wider than its bar is shortened, whole in the tooltip.
#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>

#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {


int stacked_bars(const char* id, const std::vector<std::string>& items, const std::vector<std::vector<double>>& values,
                 const std::vector<std::string>& labels, const char* y_label, const std::vector<ImVec4>& colors,
                 float height, const std::vector<double>& totals, const std::vector<std::string>& groups) {
  const int bars = static_cast<int>(labels.size());
  int clicked = -1;
  if (bars == 0) return clicked;
  // x of each bar: one apart, a gap between groups.
  const bool grouped = groups.size() == labels.size();
  std::vector<double> xs;
  std::vector<double> group_x;  // centre of each group
  std::vector<std::string> group_names;
  {
    double x = 0;
    std::size_t group_first = 0;
    for (int i = 0; i < bars; ++i) {
      const auto u = static_cast<std::size_t>(i);
      if (grouped && i > 0 && groups[u] != groups[u - 1]) {
        group_x.push_back(0.5 * (xs[group_first] + xs.back()));
        group_names.push_back(groups[u - 1]);
        group_first = u;
        x += 0.6;
      }
      xs.push_back(x);
      x += 1;
    }
    if (grouped) {
      group_x.push_back(0.5 * (xs[group_first] + xs.back()));
      group_names.push_back(groups.back());
    }
  }
  const double x_lo = xs.front() - 0.6, x_hi = xs.back() + 0.6;
  // The plot's width less the y axis and the legend outside it: what one unit of x gets in pixels.
  float legend_px = 0;
  for (const auto& it : items) legend_px = std::max(legend_px, ImGui::CalcTextSize(it.c_str()).x);
  const float plot_px = std::max(50.0f, ImGui::GetContentRegionAvail().x - legend_px - 40.0f - 70.0f);
  const float unit_px = plot_px / static_cast<float>(x_hi - x_lo);
  std::vector<std::string> shown;
  for (const auto& l : labels) shown.push_back(fit_text(l, unit_px * 0.95f));
  std::vector<std::string> group_shown;
  for (std::size_t g = 0; g < group_names.size(); ++g) {
    int n = 0;
    for (int i = 0; i < bars; ++i) n += groups[static_cast<std::size_t>(i)] == group_names[g];
    group_shown.push_back(fit_text(group_names[g], unit_px * (static_cast<float>(n) + 0.5f)));
  }
  // The y range: the tallest stack or total and a little room above it (a fitted axis ends at the top bar).
  double y_max = 0;
  for (int g = 0; g < bars; ++g) {
    double stack = 0;
    for (const auto& row : values) stack += row[static_cast<std::size_t>(g)];
    y_max = std::max(y_max, stack);
    if (!totals.empty() && std::isfinite(totals[static_cast<std::size_t>(g)])) y_max = std::max(y_max, totals[static_cast<std::size_t>(g)]);
  }
  if (ImPlot::BeginPlot(id, ImVec2(-1, height))) {
    std::vector<const char*> tick_labels, group_labels;
    for (const auto& s : shown) tick_labels.push_back(s.c_str());
    for (const auto& s : group_shown) group_labels.push_back(s.c_str());
    ImPlot::SetupAxes(nullptr, y_label, ImPlotAxisFlags_None, ImPlotAxisFlags_None);
    ImPlot::SetupAxisLimits(ImAxis_Y1, 0, y_max > 0 ? 1.08 * y_max : 1, ImPlotCond_Always);
    ImPlot::SetupAxisLimits(ImAxis_X1, x_lo, x_hi, ImPlotCond_Always);
    ImPlot::SetupAxisTicks(ImAxis_X1, xs.data(), bars, tick_labels.data());
    if (grouped) {
      ImPlot::SetupAxis(ImAxis_X2, nullptr, ImPlotAxisFlags_AuxDefault | ImPlotAxisFlags_NoTickMarks);
      ImPlot::SetupAxisLimits(ImAxis_X2, x_lo, x_hi, ImPlotCond_Always);
      ImPlot::SetupAxisTicks(ImAxis_X2, group_x.data(), static_cast<int>(group_x.size()), group_labels.data());
    }
    ImPlot::SetupLegend(ImPlotLocation_NorthEast, ImPlotLegendFlags_Outside);
    // Stacked by drawing each item's cumulative top, the full stack first, so lower items paint over the
    // lower part of those above (ImPlot bars start at 0); each item keeps its colour and legend entry.
    std::vector<std::vector<double>> tops(items.size());
    std::vector<double> acc(static_cast<std::size_t>(bars), 0.0);
    for (std::size_t it = 0; it < items.size(); ++it) {
      for (int g = 0; g < bars; ++g) acc[static_cast<std::size_t>(g)] += values[it][static_cast<std::size_t>(g)];
      tops[it] = acc;
    }
    for (std::size_t k = items.size(); k-- > 0;) {
      ImPlotSpec spec;
      spec.FillColor = colors[k];
      spec.LineColor = ImVec4(0.1f, 0.1f, 0.1f, 1.0f);
      ImPlot::PlotBars(items[k].c_str(), xs.data(), tops[k].data(), bars, 0.6, spec);
    }
    if (!totals.empty()) {
      ImPlotSpec mark;
      mark.Marker = ImPlotMarker_Diamond;
      mark.MarkerSize = 6;
      mark.MarkerFillColor = ImVec4(1, 1, 1, 1);
      mark.MarkerLineColor = ImVec4(0, 0, 0, 1);
      mark.Flags = ImPlotLineFlags_SkipNaN;
      mark.LineColor = ImVec4(0, 0, 0, 0);
      ImPlot::PlotLine("timed total", xs.data(), totals.data(), bars, mark);
    }
    if (ImPlot::IsPlotHovered()) {
      const ImPlotPoint mp = ImPlot::GetPlotMousePos();
      int g = -1;
      for (int i = 0; i < bars; ++i)
        if (std::fabs(mp.x - xs[static_cast<std::size_t>(i)]) < 0.3) g = i;
      if (g >= 0) {
        ImGui::BeginTooltip();
        if (grouped) ImGui::TextUnformatted(groups[static_cast<std::size_t>(g)].c_str());
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

// Training: what a run on real text recorded. "Curves": a series (validation perplexity, losses, learning
// rate) against the step, one line per point, log y where it spans a decade. "Gates": the selected point's
// trained FFN gates, one layer at a time: the pre-SiLU and post-SiLU histograms with the top-K threshold
// marked (the paper's Figure 3) and how much two tokens' selections overlap.
#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>

#include "gui/model/series.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {

void draw_curves(Store& store, UiState& ui, const RunRef& a) {
  const auto names = curve_names(store, a);
  if (names.empty()) {
    ImGui::TextDisabled("This run recorded no curves: train points with [data] corpus = ... record them.");
    return;
  }
  if (std::find(names.begin(), names.end(), ui.training_series) == names.end()) ui.training_series = names.front();
  ImGui::SetNextItemWidth(200);
  if (ImGui::BeginCombo("series", ui.training_series.c_str())) {
    for (const auto& n : names)
      if (ImGui::Selectable(n.c_str(), n == ui.training_series)) ui.training_series = n;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::Checkbox("last 3/4 of the steps", &ui.training_tail);
  CurvePlot plot = build_curves(store, a, ui.training_series);
  if (ui.training_tail) {
    double max_x = 0;
    for (const auto& l : plot.lines)
      if (!l.x.empty()) max_x = std::max(max_x, l.x.back());
    for (auto& l : plot.lines) {
      std::size_t i = 0;
      while (i + 1 < l.x.size() && l.x[i] < 0.25 * max_x) ++i;
      l.x.erase(l.x.begin(), l.x.begin() + static_cast<std::ptrdiff_t>(i));
      l.y.erase(l.y.begin(), l.y.begin() + static_cast<std::ptrdiff_t>(i));
    }
    plot.log_y = false;
  }
  if (ImPlot::BeginPlot("##curves", ImVec2(-1, -1))) {
    ImPlot::SetupAxes("step", plot.name.c_str(), ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
    if (plot.log_y) ImPlot::SetupAxisScale(ImAxis_Y1, ImPlotScale_Log10);
    ImPlot::SetupLegend(ImPlotLocation_NorthEast);
    for (const auto& l : plot.lines) {
      ImPlotSpec spec;
      spec.LineWeight = 2;
      if (l.x.size() <= 30) {
        spec.Marker = ImPlotMarker_Circle;
        spec.MarkerSize = 3;
      }
      ImPlot::PlotLine(l.label.c_str(), l.x.data(), l.y.data(), static_cast<int>(l.x.size()), spec);
    }
    if (ImPlot::IsPlotHovered()) {
      const ImPlotPoint m = ImPlot::GetPlotMousePos();
      ImGui::BeginTooltip();
      ImGui::Text("step %.0f", m.x);
      for (const auto& l : plot.lines) {
        const auto it = std::lower_bound(l.x.begin(), l.x.end(), m.x);
        const std::size_t i = it == l.x.end() ? l.x.size() - 1 : static_cast<std::size_t>(it - l.x.begin());
        ImGui::Text("%s: %s at step %.0f", l.label.c_str(), format_value(l.y[i]).c_str(), l.x[i]);
      }
      ImGui::EndTooltip();
    }
    ImPlot::EndPlot();
  }
}

void histogram_plot(const char* id, const char* x_label, const std::vector<double>& x, const std::vector<double>& y,
                    double threshold, const ImVec2& size) {
  if (!ImPlot::BeginPlot(id, size)) return;
  ImPlot::SetupAxes(x_label, "fraction", ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
  const double width = x.size() > 1 ? x[1] - x[0] : 1.0;
  ImPlot::PlotBars("values", x.data(), y.data(), static_cast<int>(x.size()), width);
  if (std::isfinite(threshold)) {
    ImPlotSpec spec;
    spec.LineColor = ImVec4(0.95f, 0.30f, 0.25f, 1.0f);
    spec.LineWeight = 2.5f;
    ImPlot::PlotInfLines("top-K threshold", &threshold, 1, spec);
  }
  ImPlot::EndPlot();
}

void draw_gates(Store& store, UiState& ui, const RunRef& a) {
  point_picker(store, ui, false);
  const std::int64_t pid = current_point(store, ui, false);
  const auto layers = gate_layers(store, a, pid);
  if (layers.empty()) {
    ImGui::TextDisabled("This point has no gate histograms: train points with [data] (analyze = true) record them.");
    return;
  }
  ui.training_layer = std::clamp(ui.training_layer, 0, static_cast<int>(layers.size()) - 1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(160);
  ImGui::SliderInt("layer", &ui.training_layer, 0, static_cast<int>(layers.size()) - 1);
  const GateLayer& g = layers[static_cast<std::size_t>(ui.training_layer)];
  const float w = (ImGui::GetContentRegionAvail().x - 2 * ImGui::GetStyle().ItemSpacing.x) / 3.0f;
  const float h = ImGui::GetContentRegionAvail().y;
  histogram_plot("pre-SiLU gate G##pre", "G = x W_gate", g.pre_x, g.pre_y, g.threshold_pre, ImVec2(w, h));
  ImGui::SameLine();
  histogram_plot("post-SiLU SiLU(G)##post", "SiLU(G)", g.post_x, g.post_y, g.threshold_post, ImVec2(w, h));
  ImGui::SameLine();
  histogram_plot("selection overlap of two tokens##ov", "|sel(i) & sel(j)| / K", g.overlap_x, g.overlap_y, NAN,
                 ImVec2(w, h));
}

}  // namespace

void draw_training_view(Store& store, UiState& ui) {
  RunRef a;
  if (!begin_run_view(View::training, ui, &a)) return;
  ImGui::TextUnformatted(store.run_label(a).c_str());
  ImGui::RadioButton("curves", &ui.training_mode, 0);
  ImGui::SameLine();
  ImGui::RadioButton("gates", &ui.training_mode, 1);
  if (ui.training_mode == 0) draw_curves(store, ui, a);
  else draw_gates(store, ui, a);
  ImGui::End();
}

}  // namespace moc::gui

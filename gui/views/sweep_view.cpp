// Sweep: a chosen metric of run A against a chosen axis, one line per combination of the other varying axes,
// error bars from each median's noise, the byte floor dashed where the run has one, log axes where the values
// span a decade; hovering shows the nearest point's exact values.
#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
bool combo(const char* label, std::string* value, const std::vector<std::string>& options, float width) {
  bool changed = false;
  ImGui::SetNextItemWidth(width);
  if (ImGui::BeginCombo(label, value->c_str())) {
    for (const auto& o : options)
      if (ImGui::Selectable(o.c_str(), o == *value)) {
        *value = o;
        changed = true;
      }
    ImGui::EndCombo();
  }
  return changed;
}
// The plot's axes: their names and scales, and ticks at the categories or at the swept values (12 at most).
void setup_sweep_axes(const SweepPlot& plot, const UiState& ui) {
  ImPlot::SetupAxes(ui.sweep_axis.c_str(), ui.sweep_metric.c_str(), ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
  if (ui.sweep_log_x && plot.x_numeric) ImPlot::SetupAxisScale(ImAxis_X1, ImPlotScale_Log10);
  if (ui.sweep_log_y) ImPlot::SetupAxisScale(ImAxis_Y1, ImPlotScale_Log10);
  std::vector<double> ticks;
  std::vector<const char*> tick_labels;
  if (!plot.x_numeric) {
    for (std::size_t i = 0; i < plot.categories.size(); ++i) {
      ticks.push_back(static_cast<double>(i));
      tick_labels.push_back(plot.categories[i].c_str());
    }
    ImPlot::SetupAxisTicks(ImAxis_X1, ticks.data(), static_cast<int>(ticks.size()), tick_labels.data());
  } else {
    // Ticks at the swept values.
    for (const auto& s : plot.series)
      for (double x : s.x)
        if (std::find(ticks.begin(), ticks.end(), x) == ticks.end()) ticks.push_back(x);
    std::sort(ticks.begin(), ticks.end());
    if (!ticks.empty() && ticks.size() <= 12) ImPlot::SetupAxisTicks(ImAxis_X1, ticks.data(), static_cast<int>(ticks.size()));
  }
}

// A floor series: dashed, in the colour of the measured series before it (last_color).
void plot_floor_series(const SweepSeries& s, const std::string& label, const ImVec4& last_color) {
  const int n = static_cast<int>(s.x.size());
  ImPlotSpec spec;
  spec.LineColor = ImVec4(last_color.x, last_color.y, last_color.z, 0.55f);
  spec.LineWeight = 1.5f;
  // Dashes: draw every other segment of a densely resampled line.
  std::vector<double> xs, ys;
  for (int i = 0; i + 1 < n; ++i)
    for (int k = 0; k < 16; k += 2) {
      const double f0 = k / 16.0, f1 = (k + 1) / 16.0;
      auto lerp = [&](const std::vector<double>& v, double f) { return v[static_cast<std::size_t>(i)] + f * (v[static_cast<std::size_t>(i) + 1] - v[static_cast<std::size_t>(i)]); };
      xs.push_back(lerp(s.x, f0));
      ys.push_back(lerp(s.y, f0));
      xs.push_back(lerp(s.x, f1));
      ys.push_back(lerp(s.y, f1));
    }
  spec.Flags = ImPlotLineFlags_Segments;
  if (xs.empty()) {
    spec.Marker = ImPlotMarker_Cross;
    ImPlot::PlotLine(label.c_str(), s.x.data(), s.y.data(), n, spec);
  } else {
    ImPlot::PlotLine(label.c_str(), xs.data(), ys.data(), static_cast<int>(xs.size()), spec);
  }
}

// A measured series: line and markers, error bars from the noise, and its medians that never met the noise target
// ringed in yellow (one legend entry for all of them). Returns the series' colour.
ImVec4 plot_measured_series(const SweepSeries& s, const std::string& label) {
  const int n = static_cast<int>(s.x.size());
  ImPlotSpec spec;
  spec.Marker = ImPlotMarker_Circle;
  spec.MarkerSize = 4;
  spec.LineWeight = 2;
  ImPlot::PlotLine(label.c_str(), s.x.data(), s.y.data(), n, spec);
  const ImVec4 color = ImPlot::GetLastItemColor();
  ImPlotSpec err;
  err.LineColor = color;
  ImPlot::PlotErrorBars(label.c_str(), s.x.data(), s.y.data(), s.err.data(), n, err);
  std::vector<double> nx, ny;
  for (std::size_t i = 0; i < s.not_final.size(); ++i)
    if (s.not_final[i]) {
      nx.push_back(s.x[i]);
      ny.push_back(s.y[i]);
    }
  if (!nx.empty()) {
    ImPlotSpec ring;
    ring.Marker = ImPlotMarker_Circle;
    ring.MarkerSize = 8;
    ring.LineColor = ImVec4(1.0f, 0.85f, 0.2f, 1);
    ring.MarkerLineColor = ring.LineColor;
    ring.MarkerFillColor = ImVec4(0, 0, 0, 0);
    ImPlot::PlotScatter("noise above target (not final)", nx.data(), ny.data(), static_cast<int>(nx.size()), ring);
  }
  return color;
}

// Hover: the nearest point in screen space (within 20 px) gets a tooltip with its exact values; a click selects it.
void sweep_hover(Store& store, UiState& ui, const RunRef& a, const SweepPlot& plot) {
  const ImVec2 mouse = ImGui::GetMousePos();
  double best = 400;  // px^2
  const SweepSeries* bs = nullptr;
  std::size_t bi = 0;
  for (const auto& s : plot.series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      const ImVec2 p = ImPlot::PlotToPixels(s.x[i], s.y[i]);
      const double d = (p.x - mouse.x) * (p.x - mouse.x) + (p.y - mouse.y) * (p.y - mouse.y);
      if (d < best) {
        best = d;
        bs = &s;
        bi = i;
      }
    }
  if (!bs) return;
  ImGui::BeginTooltip();
  ImGui::Text("%s", bs->label.empty() ? ui.sweep_metric.c_str() : bs->label.c_str());
  const std::string xv = plot.x_numeric ? format_value(bs->x[bi]) : plot.categories[static_cast<std::size_t>(bs->x[bi])];
  ImGui::Text("%s = %s", ui.sweep_axis.c_str(), xv.c_str());
  const double y = bs->y[bi];
  const std::string yv = is_bytes_metric(ui.sweep_metric) ? format_bytes(y) : format_value(y);
  if (bs->err[bi] > 0)
    ImGui::Text("%s = %s  +/- %s (%.1f%% noise)", ui.sweep_metric.c_str(), yv.c_str(), format_value(bs->err[bi]).c_str(),
                100.0 * bs->err[bi] / std::fabs(y));
  else
    ImGui::Text("%s = %s", bs->floor ? "floor" : ui.sweep_metric.c_str(), yv.c_str());
  if (const auto* p = store.point(a, bs->point_ids[bi])) {
    ImGui::Separator();
    ImGui::Text("point #%d %s", p->index, p->mode.c_str());
    if (metric_of(*p, "noise_met") == 0.0)
      ImGui::TextColored(ImVec4(1.0f, 0.85f, 0.2f, 1),
                         "noise above the target: the repetitions hit a bound; the median is not final");
    for (const char* m : {"pct_of_floor", "floor_us", "noise", "reps", "peak_bytes"}) {
      const double v = metric_of(*p, m);
      if (!std::isnan(v))
        ImGui::Text("%s = %s", m, std::string(m) == "peak_bytes" ? format_bytes(v).c_str() : format_value(v).c_str());
    }
  }
  ImGui::EndTooltip();
  if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) ui.point_id = bs->point_ids[bi];
}
}  // namespace

void draw_sweep_view(Store& store, UiState& ui) {
  RunRef a;
  if (!begin_run_view(View::sweep, ui, &a)) return;
  const auto& pts = store.points(a);
  const auto metrics = sweep_metrics(pts);
  const auto axes = varying_axes(pts);
  ImGui::TextUnformatted(store.run_label(a).c_str());
  if (metrics.empty() || axes.empty()) {
    ImGui::TextDisabled(axes.empty() ? "This run sweeps no axis." : "No ok point with metrics.");
    ImGui::End();
    return;
  }
  if (std::find(metrics.begin(), metrics.end(), ui.sweep_metric) == metrics.end()) ui.sweep_metric = metrics.front();
  if (std::find(axes.begin(), axes.end(), ui.sweep_axis) == axes.end()) {
    // The first non-mode axis: batch, k, preset, ...
    ui.sweep_axis = axes.front();
    for (const char* pref : {"batch", "k", "preset", "seq"})
      if (std::find(axes.begin(), axes.end(), pref) != axes.end()) {
        ui.sweep_axis = pref;
        break;
      }
  }
  combo("metric", &ui.sweep_metric, metrics, 220);
  ImGui::SameLine();
  combo("against", &ui.sweep_axis, axes, 140);
  ImGui::SameLine();
  ImGui::Checkbox("auto log", &ui.sweep_log_auto);
  const SweepPlot plot = build_sweep(pts, ui.sweep_metric, ui.sweep_axis);
  if (ui.sweep_log_auto) {
    ui.sweep_log_x = plot.log_x;
    ui.sweep_log_y = plot.log_y;
  }
  ImGui::SameLine();
  ImGui::Checkbox("log x", &ui.sweep_log_x);
  ImGui::SameLine();
  ImGui::Checkbox("log y", &ui.sweep_log_y);

  if (ImPlot::BeginPlot("##sweep", ImVec2(-1, -1))) {
    setup_sweep_axes(plot, ui);
    ImPlot::SetupLegend(ImPlotLocation_NorthWest);
    ImVec4 last_color(1, 1, 1, 1);
    for (const auto& s : plot.series) {
      const std::string label = s.label.empty() ? ui.sweep_metric : s.label;
      if (s.floor) plot_floor_series(s, label, last_color);
      else last_color = plot_measured_series(s, label);
    }
    if (ImPlot::IsPlotHovered()) sweep_hover(store, ui, a, plot);
    ImPlot::EndPlot();
  }
  ImGui::End();
}

}  // namespace moc::gui

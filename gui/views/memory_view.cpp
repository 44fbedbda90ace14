// Memory: the allocator's timeline of one measured repetition of a point as stacked areas by class (weights,
// gradients, optimizer state, KV cache, workspace, activations per module), the peak marked and broken down,
// and the measured activation memory beside the paper's formula and mocbench's model; or, across the run's
// points, what was live at each point's peak by category -- the paper's Figure 1 for any run.
#include <imgui.h>
#include <implot.h>

#include <cmath>

#include "gui/model/breakdown.h"
#include "gui/model/memory.h"
#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

void point_timeline(Store& store, UiState& ui, const RunRef& a) {
  point_picker(store, ui, false);
  const std::int64_t pid = current_point(store, ui, false);
  const db::PointRecord* p = pid >= 0 ? store.point(a, pid) : nullptr;
  if (!p) {
    ImGui::TextDisabled("No point.");
    return;
  }
  const MemoryTimeline m = build_memory(store.memory_events(a, pid), *p);
  if (m.empty()) {
    ImGui::TextDisabled("This point recorded no memory events.");
    return;
  }
  const double unit = m.peak_bytes >= kGiB ? kGiB : kMiB;
  const char* unit_name = unit == kGiB ? "GiB" : "MiB";
  ImGui::Text("peak %s at %.3f ms of the repetition", format_bytes(m.peak_bytes).c_str(), m.peak_t_ms);
  if (m.folded_events > 0) {
    ImGui::SameLine();
    ImGui::TextDisabled("(%d allocation(s) made %.0f ms before the step are in the starting levels)", m.folded_events,
                        m.folded_gap_ms);
  }
  const float side = 300.0f;
  const float h = ImGui::GetContentRegionAvail().y;
  if (ImGui::BeginTable("mem", 2, ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("plot", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("peak", ImGuiTableColumnFlags_WidthFixed, side);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    if (ImPlot::BeginPlot("##memtl", ImVec2(-1, h - 8))) {
      ImPlot::SetupAxes("time in the repetition (ms)", unit_name, ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
      ImPlot::SetupLegend(ImPlotLocation_NorthEast);  // the step ends before the plot does: the corner is free
      const std::size_t n = m.t_ms.size();
      std::vector<double> lo(n, 0.0), hi(n);
      for (std::size_t c = 0; c < m.classes.size(); ++c) {
        for (std::size_t i = 0; i < n; ++i) hi[i] = m.top[c][i] / unit;
        ImPlotSpec spec;
        spec.FillColor = memory_color(m.classes[c]);
        spec.FillAlpha = 1.0f;
        ImPlot::PlotShaded(m.classes[c].c_str(), m.t_ms.data(), lo.data(), hi.data(), static_cast<int>(n), spec);
        lo = hi;
      }
      ImPlotSpec line;
      line.LineColor = ImVec4(1, 1, 1, 0.9f);
      line.Flags = ImPlotItemFlags_NoLegend;
      ImPlot::PlotLine("##total", m.t_ms.data(), lo.data(), static_cast<int>(n), line);
      ImPlotSpec peak;
      peak.LineColor = ImVec4(1.0f, 0.2f, 0.2f, 1.0f);
      peak.LineWeight = 2;
      ImPlot::PlotInfLines("peak", &m.peak_t_ms, 1, peak);
      ImPlot::TagX(m.peak_t_ms, ImVec4(1.0f, 0.2f, 0.2f, 1.0f), "peak");
      if (ImPlot::IsPlotHovered()) {
        const ImPlotPoint mp = ImPlot::GetPlotMousePos();
        std::size_t i = 0;
        while (i + 1 < n && m.t_ms[i + 1] <= mp.x) ++i;
        ImGui::BeginTooltip();
        ImGui::Text("t = %.3f ms", m.t_ms[i]);
        for (std::size_t c = m.classes.size(); c-- > 0;) {
          const double v = m.top[c][i] - (c ? m.top[c - 1][i] : 0.0);
          if (v > 0) ImGui::Text("%-24s %s", m.classes[c].c_str(), format_bytes(v).c_str());
        }
        ImGui::Text("%-24s %s", "total", format_bytes(m.top.back()[i]).c_str());
        ImGui::EndTooltip();
      }
      ImPlot::EndPlot();
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("At the peak");
    if (ImGui::BeginTable("atpeak", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("class");
      ImGui::TableSetupColumn("bytes");
      ImGui::TableSetupColumn("%");
      ImGui::TableHeadersRow();
      for (std::size_t c = m.classes.size(); c-- > 0;) {
        if (m.at_peak[c] <= 0) continue;
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::ColorButton("##c", memory_color(m.classes[c]), ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
        ImGui::SameLine();
        ImGui::TextUnformatted(m.classes[c].c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(m.at_peak[c]).c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%.1f", 100.0 * m.at_peak[c] / m.peak_bytes);
      }
      ImGui::EndTable();
    }
    ImGui::Spacing();
    ImGui::TextUnformatted("Activation memory");
    const double vals[3] = {m.measured_activation, m.model_activation, m.paper_activation};
    const char* names[3] = {"measured", "model", "paper"};
    bool any = false;
    for (double v : vals) any |= !std::isnan(v) && v > 0;
    if (any && ImPlot::BeginPlot("##act", ImVec2(-1, 200), ImPlotFlags_NoLegend | ImPlotFlags_NoMouseText)) {
      const double ticks[3] = {0, 1, 2};
      ImPlot::SetupAxes(nullptr, unit_name, 0, ImPlotAxisFlags_AutoFit);
      ImPlot::SetupAxisTicks(ImAxis_X1, ticks, 3, names);
      ImPlot::SetupAxisLimits(ImAxis_X1, -0.6, 2.6, ImPlotCond_Always);
      for (int i = 0; i < 3; ++i) {
        const double v = std::isnan(vals[i]) ? 0 : vals[i] / unit;
        const double x = i;
        ImPlotSpec spec;
        spec.FillColor = i == 0 ? memory_color("activations: ffn") : ImVec4(0.6f, 0.6f, 0.6f, 1.0f);
        ImPlot::PlotBars(names[i], &x, &v, 1, 0.6, spec);
      }
      ImPlot::EndPlot();
    }
    for (int i = 0; i < 3; ++i)
      ImGui::Text("%-9s %s", names[i], std::isnan(vals[i]) ? "-" : format_bytes(vals[i]).c_str());
    ImGui::TextDisabled("measured: the allocator's activation peak; model: mocbench's\nactivation model; paper: the paper's formula (Table 2)");
    ImGui::EndTable();
  }
}

void figure1(Store& store, UiState& ui, const RunRef& a) {
  const auto& pts = store.points(a);
  const auto varying = varying_axes(pts);
  if (ui.peaks.stale(a, store.generation())) {
    PeakBars fresh;
    for (const auto& p : pts) {
      if (p.status != "ok") continue;
      const MemoryTimeline m = build_memory(store.memory_events(a, p.id), p);
      if (m.empty()) continue;
      add_peak_bar(&fresh, point_label(p, varying, "\n", false), p.id, m);
    }
    ui.peaks.set(a, store.generation(), std::move(fresh));
  }
  const PeakBars& bars = ui.peaks.data;
  if (bars.labels.empty()) {
    ImGui::TextDisabled("No point of this run recorded memory events.");
    return;
  }
  std::string axes_line;
  for (const auto& ax : varying) axes_line += (axes_line.empty() ? "" : " / ") + ax;
  ImGui::Text("Live memory at each point's peak by category (GiB) -- the paper's Figure 1 for this run; bars: %s",
              axes_line.c_str());
  std::vector<std::vector<double>> gib(bars.categories.size());
  std::vector<ImVec4> colors;
  for (std::size_t c = 0; c < bars.categories.size(); ++c) {
    for (double v : bars.bytes[c]) gib[c].push_back(v / kGiB);
    colors.push_back(memory_color(bars.categories[c] == "activations" ? "activations: ffn" : bars.categories[c]));
  }
  const int g = stacked_bars("##fig1", bars.categories, gib, bars.labels, "GiB", colors, ImGui::GetContentRegionAvail().y);
  if (g >= 0) {
    ui.point_id = bars.point_ids[static_cast<std::size_t>(g)];  // click a bar: that point's timeline
    ui.memory_mode = 0;
  }
}
}  // namespace

void draw_memory_view(Store& store, UiState& ui) {
  RunRef a;
  if (!begin_run_view(View::memory, ui, &a)) return;
  ImGui::TextUnformatted(store.run_label(a).c_str());
  ImGui::RadioButton("point timeline", &ui.memory_mode, 0);
  ImGui::SameLine();
  ImGui::RadioButton("peak by point (Figure 1)", &ui.memory_mode, 1);
  if (ui.memory_mode == 0) point_timeline(store, ui, a);
  else figure1(store, ui, a);
  ImGui::End();
}

}  // namespace moc::gui

// Kernels: every kernel of the Timeline's point with its count and total / mean / median / min / max time over
// the point's profiled steps, biggest total first; pick one (here or by clicking it in the Timeline) to see
// the histogram of its instances' durations and its statistics in every profiled point of the run. Times are
// exclusive or inclusive as the shared toggle says, and the view says which.
#include <imgui.h>
#include <implot.h>

#include <algorithm>

#include "gui/model/breakdown.h"
#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

void update_kernel_stats(Store& store, UiState& ui) {
  KernelStatsState& ks = ui.kernels;
  const RunRef a = run_a(ui);
  std::shared_ptr<const prof::ProfileTrace> trace;
  if (ui.timeline.pinned) {
    trace = ui.timeline.timeline.trace;
  } else if (a.valid()) {
    const std::int64_t pid = current_point(store, ui, true);
    if (pid >= 0) trace = store.profile(a, pid);
  }
  if (trace != ks.trace || ui.time_mode != ks.mode) {
    ks.trace = trace;
    ks.mode = ui.time_mode;
    ks.table = trace ? kernel_table(*trace, ks.mode) : std::vector<KernelRow>{};
  }
  ks.row = -1;
  for (std::size_t i = 0; i < ks.table.size(); ++i)
    if (ks.table[i].name == ks.selected) ks.row = static_cast<int>(i);
  if (ui.timeline.pinned || !a.valid() || ks.selected.empty()) {
    ks.over_run.clear();
    ks.over_run_of.clear();
    return;
  }
  if (ks.run != a || ks.generation != store.generation() || ks.over_run_of != ks.selected || ks.over_run_mode != ks.mode) {
    ks.run = a;
    ks.generation = store.generation();
    ks.over_run_of = ks.selected;
    ks.over_run_mode = ks.mode;
    ks.over_run = kernel_over_run(store.points(a), [&](std::int64_t id) { return store.profile(a, id); }, ks.selected, ks.mode);
  }
}

namespace {
void kernel_list(KernelStatsState& ks, int steps, float height) {
  if (!ImGui::BeginTable("kernels", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable,
                         ImVec2(0, height)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("kernel", ImGuiTableColumnFlags_WidthStretch);
  for (const char* h : {"count", "count/step", "total", "mean", "median", "min", "max"})
    ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableHeadersRow();
  for (std::size_t i = 0; i < ks.table.size(); ++i) {
    const KernelRow& r = ks.table[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::PushID(static_cast<int>(i));
    if (ImGui::Selectable(r.name.c_str(), static_cast<int>(i) == ks.row, ImGuiSelectableFlags_SpanAllColumns)) ks.selected = r.name;
    ImGui::PopID();
    ImGui::TableNextColumn();
    ImGui::Text("%zu", r.stats.count);
    ImGui::TableNextColumn();
    ImGui::Text("%.1f", static_cast<double>(r.stats.count) / std::max(1, steps));
    for (double v : {r.stats.total_ns, r.stats.mean_ns, r.stats.median_ns, r.stats.min_ns, r.stats.max_ns}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(v).c_str());
    }
  }
  ImGui::EndTable();
}

void histogram(const KernelRow& r, prof::TimeMode mode, float height) {
  std::vector<double> us;
  for (double ns : r.durations_ns) us.push_back(ns / 1e3);
  if (us.empty() || !ImPlot::BeginPlot("##kernel_hist", ImVec2(-1, height))) return;
  const std::string x_label = std::string(prof::time_mode_name(mode)) + " duration (us)";
  ImPlot::SetupAxes(x_label.c_str(), "instances", ImPlotAxisFlags_AutoFit, ImPlotAxisFlags_AutoFit);
  double lo = us.front(), hi = us.back();
  if (hi - lo < 1e-6) {  // every instance took the same time: one bar around it
    lo -= 0.05 * lo + 1e-3;
    hi += 0.05 * hi + 1e-3;
  }
  ImPlotSpec spec;
  spec.FillColor = ImVec4(0.298f, 0.447f, 0.690f, 1.0f);
  ImPlot::PlotHistogram("instances", us.data(), static_cast<int>(us.size()), ImPlotBin_Sturges, 1.0, ImPlotRange(lo, hi), spec);
  ImPlot::EndPlot();
}

void over_run_table(Store& store, const RunRef& a, const KernelStatsState& ks) {
  if (ks.over_run.empty()) return;
  const auto& pts = store.points(a);
  auto varying = varying_axes(pts);
  std::erase(varying, std::string("mode"));  // the row names the mode already
  // No horizontal scroll: the numbers' columns fit their contents (short headers), and the point column takes
  // what is left, its labels cut ("..") to it with the whole label on hover.
  if (!ImGui::BeginTable("over_run", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("point", ImGuiTableColumnFlags_WidthStretch);
  for (const char* h : {"n/step", "time/step", "mean", "median", "max"}) ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableHeadersRow();
  for (const auto& r : ks.over_run) {
    const db::PointRecord* p = store.point(a, r.point_id);
    const double steps = std::max(1, r.steps);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const std::string label = p ? "#" + std::to_string(p->index) + " " + p->mode + " " + point_label(*p, varying) : "#-1";
    const std::string cut = fit_text(label, ImGui::GetContentRegionAvail().x);
    ImGui::TextUnformatted(cut.c_str());
    if (cut != label && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", label.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.1f", static_cast<double>(r.stats.count) / steps);
    for (double v : {r.stats.total_ns / steps, r.stats.mean_ns, r.stats.median_ns, r.stats.max_ns}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(v).c_str());
    }
  }
  ImGui::EndTable();
}
}  // namespace

void draw_kernel_stats_view(Store& store, UiState& ui) {
  if (!begin_point_view(store, ui, View::kernels, true)) return;
  update_kernel_stats(store, ui);
  KernelStatsState& ks = ui.kernels;
  if (!ks.trace) {
    end_without_profile();
    return;
  }
  const int steps = ks.trace->steps;
  ImGui::TextDisabled("%zu kernels over %d profiled step(s), %s device time; click one (or a kernel in the Timeline)",
                      ks.table.size(), steps, prof::time_mode_name(ks.mode));
  const float avail = ImGui::GetContentRegionAvail().y;
  kernel_list(ks, steps, std::max(120.0f, avail * 0.42f));
  update_kernel_stats(store, ui);  // a click in the list
  if (ks.row < 0) {
    ImGui::TextDisabled(ks.selected.empty() ? "No kernel selected." : "The selected kernel did not run in this point.");
    ImGui::End();
    return;
  }
  const KernelRow& r = ks.table[static_cast<std::size_t>(ks.row)];
  ImGui::Text("%s: %zu instances, %s device time: total %s, mean %s, median %s, min %s, max %s", r.name.c_str(), r.stats.count,
              prof::time_mode_name(ks.mode), format_ns(r.stats.total_ns).c_str(), format_ns(r.stats.mean_ns).c_str(),
              format_ns(r.stats.median_ns).c_str(), format_ns(r.stats.min_ns).c_str(), format_ns(r.stats.max_ns).c_str());
  const float h = std::max(120.0f, ImGui::GetContentRegionAvail().y);
  const float w = ImGui::GetContentRegionAvail().x;
  if (ImGui::BeginChild("hist", ImVec2(ks.over_run.empty() ? w : w * 0.4f, h))) histogram(r, ks.mode, h - 8);
  ImGui::EndChild();
  if (!ks.over_run.empty()) {
    ImGui::SameLine();
    if (ImGui::BeginChild("run", ImVec2(0, h))) {
      ImGui::TextDisabled("in every profiled point of the run");
      over_run_table(store, run_a(ui), ks);
    }
    ImGui::EndChild();
  }
  ImGui::End();
}

}  // namespace moc::gui

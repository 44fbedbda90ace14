// Stages: the Timeline's point's stamped kernels (the decode FFN's k_gate, k_select, k_updown; an older
// profile's persistent k_step) by their device-side stages, the layers and profiled steps merged -- per
// stage name its time per step, share of the kernel (a bar in the stage's Timeline colour), barrier wait per
// step, mean and max: `mocbench stats RUN --report stage_sum`'s numbers (gui/model/stage_stats). Stage times
// come from the kernel's own %globaltimer stamps, so the exclusive / inclusive toggle does not apply to them.
#include <imgui.h>

#include <algorithm>

#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
// The share column: the percentage, then a bar in the stage's colour (the rest of the cell = 100%).
void share_cell(double pct, const ImVec4& color) {
  ImGui::Text("%5.1f%%", pct);
  ImGui::SameLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + w, p.y + h - 2), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.05f)));
  dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + w * static_cast<float>(std::clamp(pct, 0.0, 100.0) / 100.0), p.y + h - 2),
                    ImGui::GetColorU32(color));
  ImGui::NewLine();
}

void stage_rows(const StageTable& tb) {
  if (!ImGui::BeginTable("stages", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("stage", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 8);
  ImGui::TableSetupColumn("kernel", ImGuiTableColumnFlags_WidthFixed);
  for (const char* h : {"instances/step", "time/step"}) ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableSetupColumn("share of kernel", ImGuiTableColumnFlags_WidthStretch);
  for (const char* h : {"barrier wait/step", "mean", "max"}) ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableHeadersRow();
  for (const StageRow& r : tb.rows) {
    const ImVec4 c = stage_color(r.stage);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float h = ImGui::GetTextLineHeight();
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), ImGui::GetColorU32(c));
    ImGui::SetCursorScreenPos(ImVec2(p.x + h, p.y));
    ImGui::TextUnformatted(r.stage.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.kernel.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.1f", r.instances_per_step);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_ns(r.time_per_step_ns).c_str());
    ImGui::TableNextColumn();
    share_cell(r.share_pct, c);
    for (double v : {r.wait_per_step_ns, r.mean_ns, r.max_ns}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(v).c_str());
    }
  }
  ImGui::EndTable();
}
}  // namespace

void draw_stage_stats_view(Store& store, UiState& ui) {
  if (!begin_point_view(store, ui, View::stages, false)) return;
  std::shared_ptr<const prof::ProfileTrace> trace;
  const db::PointRecord* point = nullptr;  // the point's metrics (none for a pinned timeline)
  if (ui.timeline.pinned) {
    trace = ui.timeline.timeline.trace;
  } else {
    point_picker(store, ui, true);
    const std::int64_t pid = current_point(store, ui, true);
    if (pid >= 0) {
      trace = store.profile(run_a(ui), pid);
      point = store.point(run_a(ui), pid);
    }
  }
  StageStatsState& ss = ui.stages;
  if (trace != ss.trace) {
    ss.trace = trace;
    ss.table = trace ? stage_table(*trace) : StageTable{};
  }
  if (!trace) {
    ImGui::TextDisabled("This point has no profile (run it without --no-profile and with [profile] kernels = true).");
  } else if (ss.table.rows.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("No stage stamps in this point's profile: the decode FFN's kernels (k_gate, k_select, k_updown) "
                       "stamp their stages; other kernels are timed whole (see Timeline and Kernels).");
    ImGui::PopStyleColor();
  } else {
    const StageTable& tb = ss.table;
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%zu stamped launch(es) over %d profiled step(s), layers merged; their stages cover %.1f%% of their kernel "
                       "records' time (the rest: launch before the first block starts, exit after the last ends). Device-side "
                       "stamps: a stage ends when the last block passes its boundary; barrier wait = the blocks' mean wait at the "
                       "barrier ending it. The numbers of `mocbench stats RUN --report stage_sum`.",
                       tb.launches, trace->steps, tb.coverage_pct);
    if (point) {
      const double rep_ms = metric_of(*point, "profile_stage_rep_ms");
      if (rep_ms == rep_ms)  // not NaN: a profile since 2026-11-28
        ImGui::TextWrapped("The profiled steps ran unstamped (stamping lengthens the kernels it splits); these stages are an "
                           "untraced stamped repetition's (the median one, %.1f us), each launch placed on the same launch's "
                           "record, ends aligned.", rep_ms * 1e3);
      else
        ImGui::TextWrapped("These stages were stamped in the profiled steps themselves (a profile written before 2026-11-28): "
                           "the kernel times include what stamping costs (profile_stamp_overhead_pct).");
    }
    ImGui::PopStyleColor();
    if (tb.unmatched) ImGui::TextColored(ImVec4(0.95f, 0.7f, 0.3f, 1), "%zu stage(s) have no kernel record in the trace", tb.unmatched);
    if (tb.dropped)
      ImGui::TextColored(ImVec4(0.95f, 0.7f, 0.3f, 1), "%llu stamped launch(es) dropped", static_cast<unsigned long long>(tb.dropped));
    stage_rows(tb);
  }
  ImGui::End();
}

}  // namespace moc::gui

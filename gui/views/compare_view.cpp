// Compare: run A and run B (two databases: H100 vs H200, before vs after a change) point by point, matched by
// mode and axis values; each metric's values and ratio B/A, green where B is better, red where worse, plain
// where the difference is within both sides' noise.
#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "gui/model/compare.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

void draw_compare_view(Store& store, UiState& ui) {
  if (!ImGui::Begin(view_title(View::compare))) {
    ImGui::End();
    return;
  }
  const RunRef a = run_a(ui), b = run_b(ui);
  if (!a.valid() || !b.valid()) {
    ImGui::TextDisabled("Select run A in Runs, then ctrl-click run B (another database opens beside: mocbench-gui A.db B.db).");
    ImGui::End();
    return;
  }
  ImGui::Text("A: %s", store.run_label(a).c_str());
  ImGui::Text("B: %s", store.run_label(b).c_str());
  const CompareTable t = build_compare(store.points(a), store.points(b));
  ImGui::TextDisabled("%zu matched points, %d only in A, %d only in B; ratio = B / A; green: B better, red: B worse, "
                      "plain: within both medians' noise", t.rows.size(), t.only_a, t.only_b);
  if (t.rows.empty() || t.metrics.empty()) {
    ImGui::TextDisabled("No point of A matches a point of B (same mode and axis values) with common metrics.");
    ImGui::End();
    return;
  }
  // One table per mode, with the metrics that mode's points have.
  std::vector<std::string> modes;
  for (const auto& row : t.rows)
    if (std::find(modes.begin(), modes.end(), row.mode) == modes.end()) modes.push_back(row.mode);
  ImGui::BeginChild("tables");
  for (const auto& mode : modes) {
    std::vector<std::size_t> cols_of;
    auto has_metric = [&](const std::string& m) {
      const auto it = std::find(t.metrics.begin(), t.metrics.end(), m);
      if (it == t.metrics.end()) return false;
      const auto i = static_cast<std::size_t>(it - t.metrics.begin());
      for (const auto& row : t.rows)
        if (row.mode == mode && row.cells[i].verdict != Verdict::missing) return true;
      return false;
    };
    // median_ms is the same time as latency_us (ffn-decode) and ms_per_token (decode): shown only without them.
    const bool median_repeats = has_metric("latency_us") || has_metric("ms_per_token");
    for (std::size_t i = 0; i < t.metrics.size(); ++i)
      if (has_metric(t.metrics[i]) && !(median_repeats && t.metrics[i] == "median_ms")) cols_of.push_back(i);
    int rows = 0;
    for (const auto& row : t.rows) rows += row.mode == mode;
    ImGui::SeparatorText(mode.empty() ? "(no mode)" : mode.c_str());
    const int cols = 1 + 3 * static_cast<int>(cols_of.size());
    const ImVec2 outer(0, (static_cast<float>(rows) + 1.6f) * ImGui::GetFrameHeight() + ImGui::GetStyle().ScrollbarSize);
    if (!ImGui::BeginTable(("cmp_" + mode).c_str(), cols,
                           ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollX,
                           outer))
      continue;
    ImGui::TableSetupColumn("point");
    for (std::size_t i : cols_of) {
      ImGui::TableSetupColumn((t.metrics[i] + " A").c_str());
      ImGui::TableSetupColumn((t.metrics[i] + " B").c_str());
      ImGui::TableSetupColumn("B/A");
    }
    ImGui::TableHeadersRow();
    for (const auto& row : t.rows) {
      if (row.mode != mode) continue;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(row.label.c_str());
      for (std::size_t i : cols_of) {
        const CompareCell& c = row.cells[i];
        const bool bytes = is_bytes_metric(t.metrics[i]);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(std::isnan(c.a) ? "-" : bytes ? format_bytes(c.a).c_str() : format_value(c.a).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(std::isnan(c.b) ? "-" : bytes ? format_bytes(c.b).c_str() : format_value(c.b).c_str());
        ImGui::TableNextColumn();
        if (c.verdict == Verdict::better || c.verdict == Verdict::worse) {
          const ImVec4 col = verdict_color(c.verdict == Verdict::better);
          ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, ImGui::GetColorU32(ImVec4(col.x, col.y, col.z, 0.45f)));
        }
        if (std::isnan(c.ratio)) ImGui::TextUnformatted("-");
        else ImGui::Text("%.3fx", c.ratio);
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace moc::gui

// Compare: run A and run B (two databases: H100 vs H200, before vs after a change) point by point, matched by
// mode and axis values; each metric's values and ratio B/A, green where B is better, red where worse, plain
// where the difference is within both sides' noise.
#include <imgui.h>

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
  const int cols = 1 + 3 * static_cast<int>(t.metrics.size());
  if (ImGui::BeginTable("cmp", cols, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollX |
                                       ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("point");
    for (const auto& m : t.metrics) {
      ImGui::TableSetupColumn((m + " A").c_str());
      ImGui::TableSetupColumn((m + " B").c_str());
      ImGui::TableSetupColumn("B/A");
    }
    ImGui::TableHeadersRow();
    for (const auto& row : t.rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(row.label.c_str());
      for (std::size_t i = 0; i < t.metrics.size(); ++i) {
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
  ImGui::End();
}

}  // namespace moc::gui

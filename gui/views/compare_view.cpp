// Compare: run A and run B (two databases: H100 vs H200, before vs after a change) point by point, matched by
// mode and axis values; each metric's values and ratio B/A, green where B is better, red where worse, plain
// where the difference is within both sides' noise.
#include <imgui.h>

#include <optional>

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
  // One table per mode, with the metrics that mode's points have (compare_tables: the shared table model, so the
  // copy buttons give exactly what is drawn). B/A is green where B is better, red where worse.
  ImGui::BeginChild("tables");
  for (const auto& tb : compare_tables(t)) {
    ImGui::SeparatorText(tb.title.c_str());
    draw_report_table(("cmp_" + tb.id).c_str(), tb, [&tb](std::size_t row, std::size_t col) -> std::optional<ImVec4> {
      const auto& key = tb.columns[col].key;
      if (key.size() < 6 || key.compare(key.size() - 6, 6, "_ratio") != 0) return std::nullopt;
      const std::string& verdict = tb.cell(row, col + 1).text;  // <metric>_verdict follows <metric>_ratio
      if (verdict != "better" && verdict != "worse") return std::nullopt;
      return verdict_color(verdict == "better");
    });
  }
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace moc::gui

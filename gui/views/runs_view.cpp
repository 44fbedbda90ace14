// Runs: every run of every open database in one filterable table; click selects the run the other views
// show (A), ctrl-click sets a second run beside it (B, for Compare). Databases that could not be opened are
// listed with their error; a damaged one (SQLite's quick check) with a warning, and runs whose points cannot
// be read as "unreadable", never as a run of no points.
#include <imgui.h>

#include <ctime>
#include <filesystem>

#include "gui/views/views.h"

namespace moc::gui {

namespace {
std::string date_of(std::int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}
}  // namespace

void draw_runs_view(Store& store, UiState& ui) {
  if (!ImGui::Begin(view_title(View::runs))) {
    ImGui::End();
    return;
  }
  for (const auto& s : store.sources()) {
    if (s.error.empty() && s.damage.empty()) continue;
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.35f, 0.30f, 1.0f));
    if (!s.error.empty()) ImGui::TextWrapped("%s: %s", s.path.c_str(), s.error.c_str());
    else
      ImGui::TextWrapped("%s is DAMAGED (SQLite's quick_check: %s): what it still holds is shown, but runs and "
                         "points may be missing or incomplete; runs whose points cannot be read say so. Restore "
                         "it from a copy; mocbench will not write to it.",
                         s.path.c_str(), s.damage.c_str());
    ImGui::PopStyleColor();
  }
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##filter", "filter runs (scenario, device, status, file, version)", ui.run_filter,
                           sizeof ui.run_filter);
  const std::string filter = ui.run_filter;
  ui.run_rows.clear();
  ImGui::TextDisabled("click: show a run; ctrl-click: set a second run beside it (Compare)");
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_ScrollX | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("runs", 9, flags)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h : {"sel", "file", "run", "scenario", "device", "started (UTC)", "status", "points", "version"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& row : store.runs()) {
      const auto& r = row.run;
      const std::string file = std::filesystem::path(store.sources()[static_cast<std::size_t>(row.ref.source)].path).filename().string();
      const std::string haystack = file + " " + r.scenario_name + " " + r.device_kind + " " + r.device_name + " " +
                                   r.status + " " + r.mocbench_version + " " + row.modes + " #" + std::to_string(r.id);
      if (!filter.empty() && haystack.find(filter) == std::string::npos) continue;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const char* mark = ui.selected.size() > 0 && ui.selected[0] == row.ref ? "A"
                         : ui.selected.size() > 1 && ui.selected[1] == row.ref ? "B" : "";
      ImGui::PushID(row.ref.source * 1000003 + static_cast<int>(r.id));
      const bool is_sel = mark[0] != 0;
      const bool clicked = ImGui::Selectable(mark[0] ? mark : " ", is_sel, ImGuiSelectableFlags_SpanAllColumns);
      ui.run_rows.emplace_back(row.ref, 0.5f * (ImGui::GetItemRectMin().y + ImGui::GetItemRectMax().y));
      ui.run_rows_x = ImGui::GetItemRectMin().x + 4;
      if (clicked) {
        const bool add = ImGui::GetIO().KeyCtrl || ImGui::GetIO().KeyShift;
        select_run(ui, row.ref, add);
      }
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(file.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", static_cast<long long>(r.id));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.scenario_name.c_str());
      if (ImGui::IsItemHovered() && !row.modes.empty()) ImGui::SetTooltip("modes: %s", row.modes.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s", r.device_name.empty() ? r.device_kind.c_str() : r.device_name.c_str());
      if (!row.environment.empty()) {  // switches that changed which kernels ran: the run is not the default build's
        ImGui::SameLine();
        ImGui::TextColored(ImVec4(1.0f, 0.85f, 0.25f, 1.0f), "env");
        if (ImGui::IsItemHovered()) {
          std::string tip = "environment switches recorded with this run (they change what ran):";
          for (const auto& e : row.environment) tip += "\n  " + e;
          ImGui::SetTooltip("%s", tip.c_str());
        }
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(date_of(r.started_unix_ms).c_str());
      ImGui::TableNextColumn();
      const ImVec4 c = r.status == "ok" ? ImVec4(0.4f, 0.85f, 0.4f, 1) : r.status == "running" ? ImVec4(0.4f, 0.7f, 1, 1)
                                                                                             : ImVec4(1, 0.5f, 0.3f, 1);
      if (!row.read_error.empty()) {  // whatever the run recorded, what is left of it cannot be read whole
        ImGui::TextColored(ImVec4(1.0f, 0.35f, 0.30f, 1.0f), "%s, damaged", r.status.c_str());
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", row.read_error.c_str());
      } else {
        ImGui::TextColored(c, "%s", r.status.c_str());
        // Why it failed or was abandoned.
        if (!r.error.empty() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.error.c_str());
      }
      ImGui::TableNextColumn();
      if (!row.read_error.empty()) {
        ImGui::TextColored(ImVec4(1.0f, 0.35f, 0.30f, 1.0f), "unreadable (damaged)");
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", row.read_error.c_str());
      } else {
        ImGui::Text("%d/%d ok, %d profiled", row.ok_points, row.points, row.profiled_points);
        if (row.noisy_points > 0) {
          ImGui::SameLine();
          ImGui::TextColored(ImVec4(1.0f, 0.85f, 0.25f, 1.0f), "%d noisy", row.noisy_points);
          if (ImGui::IsItemHovered())
            ImGui::SetTooltip("%d point(s) stopped at max_reps or time_bound_s before the noise met target_noise: "
                              "their medians are not final (marked in Sweep)",
                              row.noisy_points);
        }
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.mocbench_version.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

}  // namespace moc::gui

// What the views share: titles, the selection, the point picker, colours.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "gui/model/breakdown.h"
#include "gui/model/sweep.h"
#include "gui/views/views.h"

namespace moc::gui {

const char* view_title(View v) {
  switch (v) {
    case View::runs: return "Runs";
    case View::sweep: return "Sweep";
    case View::breakdown: return "Breakdown";
    case View::timeline: return "Timeline";
    case View::kernels: return "Kernels";
    case View::roofline: return "Roofline";
    case View::stages: return "Stages";
    case View::memory: return "Memory";
    case View::compare: return "Compare";
    case View::training: return "Training";
  }
  return "?";
}

const char* view_key(View v) {
  switch (v) {
    case View::runs: return "runs";
    case View::sweep: return "sweep";
    case View::breakdown: return "breakdown";
    case View::timeline: return "timeline";
    case View::kernels: return "kernels";
    case View::roofline: return "roofline";
    case View::stages: return "stages";
    case View::memory: return "memory";
    case View::compare: return "compare";
    case View::training: return "training";
  }
  return "?";
}

bool view_from_key(const std::string& key, View* out) {
  for (View v : kAllViews)
    if (key == view_key(v)) {
      *out = v;
      return true;
    }
  return false;
}

void select_run(UiState& ui, const RunRef& r, bool add) {
  if (!add || ui.selected.empty()) {
    if (ui.selected.empty() || ui.selected[0] != r) ui.point_id = -1;
    ui.selected = {r};
    return;
  }
  if (ui.selected[0] == r) return;
  if (ui.selected.size() > 1 && ui.selected[1] == r) {
    ui.selected.resize(1);
    return;
  }
  ui.selected.resize(1);
  ui.selected.push_back(r);
}

RunRef run_a(const UiState& ui) { return ui.selected.empty() ? RunRef{} : ui.selected[0]; }
RunRef run_b(const UiState& ui) { return ui.selected.size() > 1 ? ui.selected[1] : RunRef{}; }

bool begin_run_view(View v, const UiState& ui, RunRef* a) {
  if (!ImGui::Begin(view_title(v))) {
    ImGui::End();
    return false;
  }
  *a = run_a(ui);
  if (!a->valid()) {
    ImGui::TextDisabled("Select a run in Runs.");
    ImGui::End();
    return false;
  }
  return true;
}

std::int64_t current_point(Store& store, UiState& ui, bool want_profile) {
  const RunRef a = run_a(ui);
  if (!a.valid()) return -1;
  const auto& pts = store.points(a);
  if (ui.point_id >= 0)
    for (const auto& p : pts)
      if (p.id == ui.point_id) return p.id;
  std::int64_t first_ok = -1;
  for (const auto& p : pts) {
    if (p.status != "ok") continue;
    if (first_ok < 0) first_ok = p.id;
    if (!want_profile) break;
    if (metric_of(p, "profile_steps") > 0) return p.id;
  }
  return first_ok;
}

bool point_picker(Store& store, UiState& ui, bool want_profile) {
  const RunRef a = run_a(ui);
  const auto& pts = store.points(a);
  const auto varying = varying_axes(pts);
  const std::int64_t cur = current_point(store, ui, want_profile);
  std::string preview = "(none)";
  for (const auto& p : pts)
    if (p.id == cur) preview = "#" + std::to_string(p.index) + " " + p.mode + " " + point_label(p, varying);
  bool changed = false;
  ImGui::SetNextItemWidth(std::min(520.0f, ImGui::GetContentRegionAvail().x));
  if (ImGui::BeginCombo("point", preview.c_str())) {
    for (const auto& p : pts) {
      const bool profiled = metric_of(p, "profile_steps") > 0;
      std::string label = "#" + std::to_string(p.index) + " " + p.mode + " " + point_label(p, varying) +
                          (p.status != "ok" ? " [" + p.status + "]" : "") + (profiled ? "" : want_profile ? " (no profile)" : "");
      ImGui::PushID(static_cast<int>(p.id));
      if (ImGui::Selectable(label.c_str(), p.id == cur)) {
        ui.point_id = p.id;
        changed = true;
      }
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
  return changed;
}

// Each line of `label` cut to at most `max_px` wide, ".." marking a cut.
std::string fit_text(const std::string& label, float max_px) {
  std::string out;
  std::size_t from = 0;
  for (;;) {
    const std::size_t nl = label.find('\n', from);
    std::string line = label.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    if (ImGui::CalcTextSize(line.c_str()).x > max_px) {
      while (line.size() > 1 && ImGui::CalcTextSize((line + "..").c_str()).x > max_px) line.pop_back();
      line += "..";
    }
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    from = nl + 1;
  }
  return out;
}

bool begin_point_view(Store& store, UiState& ui, View v, bool with_time) {
  if (!ImGui::Begin(view_title(v))) {
    ImGui::End();
    return false;
  }
  if (!run_a(ui).valid() && !ui.timeline.pinned) {
    ImGui::TextDisabled("Select a run in Runs.");
    ImGui::End();
    return false;
  }
  if (with_time) {
    time_mode_toggle(ui);
    if (!ui.timeline.pinned) {
      ImGui::SameLine(0, 20);
      point_picker(store, ui, true);
    }
  }
  return true;
}

void end_without_profile() {
  ImGui::TextDisabled("This point has no profile (run it without --no-profile and with [profile] kernels = true).");
  ImGui::End();
}

void time_mode_toggle(UiState& ui) {
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("device time:");
  for (int i = 0; i < 2; ++i) {
    const prof::TimeMode m = i == 0 ? prof::TimeMode::exclusive : prof::TimeMode::inclusive;
    ImGui::SameLine();
    if (ImGui::RadioButton(prof::time_mode_name(m), ui.time_mode == m)) ui.time_mode = m;
    const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
    ui.time_mode_button[i][0] = 0.5f * (lo.x + hi.x);
    ui.time_mode_button[i][1] = 0.5f * (lo.y + hi.y);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(i == 0 ? "exclusive: every instant of device time counted once. Where records overlap (a PDL kernel\n"
                                 "launched early waits for its predecessor; two streams at once) the one that started first\n"
                                 "owns it; the waiting part is drawn hatched. Per-op times sum to the busy time."
                               : "inclusive: end - start as CUPTI reports it. Overlapping records count the shared time\n"
                                 "twice (or more), so per-op times can sum to more than the busy time.");
  }
}

ImVec4 part_color(int part) {
  switch (part) {
    case 0: return ImVec4(0.22f, 0.49f, 0.85f, 1.0f);   // gate: blue
    case 1: return ImVec4(0.95f, 0.55f, 0.13f, 1.0f);   // up & down: orange
    case 2: return ImVec4(0.85f, 0.20f, 0.20f, 1.0f);   // top-K: red
    default: return ImVec4(0.60f, 0.60f, 0.60f, 1.0f);  // other: grey
  }
}

ImVec4 memory_color(const std::string& cls) {
  if (cls == "weights") return ImVec4(0.25f, 0.45f, 0.80f, 1.0f);
  if (cls == "gradients") return ImVec4(0.55f, 0.35f, 0.75f, 1.0f);
  if (cls == "optimizer_state") return ImVec4(0.80f, 0.35f, 0.55f, 1.0f);
  if (cls == "kv_cache") return ImVec4(0.20f, 0.65f, 0.65f, 1.0f);
  if (cls == "workspace") return ImVec4(0.55f, 0.55f, 0.55f, 1.0f);
  if (cls == "activations: ffn") return ImVec4(0.95f, 0.55f, 0.13f, 1.0f);
  if (cls == "activations: attention") return ImVec4(0.30f, 0.70f, 0.30f, 1.0f);
  if (cls == "activations: norm") return ImVec4(0.75f, 0.80f, 0.30f, 1.0f);
  if (cls == "activations: residual") return ImVec4(0.55f, 0.80f, 0.55f, 1.0f);
  if (cls == "activations: head") return ImVec4(0.90f, 0.80f, 0.40f, 1.0f);
  if (cls == "activations: embedding") return ImVec4(0.40f, 0.55f, 0.35f, 1.0f);
  if (cls.starts_with("activations")) return ImVec4(0.65f, 0.75f, 0.45f, 1.0f);
  return ImVec4(0.4f, 0.4f, 0.4f, 1.0f);
}

ImVec4 stage_color(const std::string& stage) {
  // The FFN's stages in the Breakdown's part colours (down a darker orange than up, so the two stand apart);
  // attention's stages in greens around the attention phase's; the rest grey or the head's cyan.
  if (stage == "gate") return part_color(0);
  if (stage == "gate & up") return ImVec4(0.55f, 0.45f, 0.80f, 1.0f);  // gate and up in one pass: violet
  if (stage == "up") return part_color(1);
  if (stage == "down") return ImVec4(0.75f, 0.38f, 0.05f, 1.0f);
  if (stage == "top-K") return part_color(2);
  if (stage == "qkv") return ImVec4(0.55f, 0.82f, 0.45f, 1.0f);
  if (stage == "attention") return ImVec4(0.30f, 0.70f, 0.30f, 1.0f);
  if (stage == "o") return ImVec4(0.20f, 0.55f, 0.40f, 1.0f);
  if (stage == "head") return ImVec4(0.25f, 0.70f, 0.80f, 1.0f);
  if (stage == "start" || stage == "output") return ImVec4(0.62f, 0.62f, 0.62f, 1.0f);
  unsigned h = 2166136261u;
  for (char c : stage) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  float r, g, b;
  ImGui::ColorConvertHSVtoRGB(static_cast<float>(h % 360) / 360.0f, 0.45f, 0.80f, r, g, b);
  return ImVec4(r, g, b, 1.0f);
}

ImVec4 phase_color(const std::string& phase) {
  if (phase.starts_with("stage: ")) return stage_color(phase.substr(7));
  if (phase == "ffn.gate" || phase == "ffn.decode: gate") return part_color(0);
  if (phase == "ffn.up" || phase == "ffn.down" || phase == "ffn.decode: up & down") return part_color(1);
  if (phase == "ffn.topk" || phase == "ffn.decode: top-K") return part_color(2);
  if (phase == "attention") return ImVec4(0.30f, 0.70f, 0.30f, 1.0f);
  if (phase.starts_with("ffn")) return ImVec4(0.93f, 0.75f, 0.25f, 1.0f);
  if (phase == "memcpy" || phase == "memset") return ImVec4(0.85f, 0.40f, 0.85f, 1.0f);
  if (phase == "optimizer") return ImVec4(0.80f, 0.35f, 0.55f, 1.0f);
  if (phase == "head") return ImVec4(0.25f, 0.70f, 0.80f, 1.0f);
  if (phase == "loss") return ImVec4(0.45f, 0.50f, 0.95f, 1.0f);
  // Anything else: a stable hue from the name.
  unsigned h = 2166136261u;
  for (char c : phase) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  float r, g, b;
  ImGui::ColorConvertHSVtoRGB(static_cast<float>(h % 360) / 360.0f, 0.35f, 0.75f, r, g, b);
  return ImVec4(r, g, b, 1.0f);
}

ImVec4 verdict_color(bool better) {
  return better ? ImVec4(0.20f, 0.75f, 0.30f, 1.0f) : ImVec4(0.90f, 0.25f, 0.25f, 1.0f);
}

ImVec4 roof_color(bool compute) {
  return compute ? ImVec4(0.98f, 0.50f, 0.86f, 1.0f) : ImVec4(0.35f, 0.78f, 0.98f, 1.0f);
}

ImVec4 floor_color(double pct) {
  const Rgb c = floor_colour(pct);
  return ImVec4(c.r, c.g, c.b, 1.0f);
}

void floor_color_bar(float width) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float h = ImGui::GetTextLineHeight();
  ImGui::AlignTextToFramePadding();
  ImGui::TextDisabled("%% of floor:");
  ImGui::SameLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float y0 = p.y + 0.5f * (ImGui::GetFrameHeight() - h) + 2, y1 = y0 + h - 4;
  const float w = std::max(60.0f, width);
  // Red - yellow - green in two gradients, as floor_colour mixes them.
  const ImU32 c0 = ImGui::GetColorU32(floor_color(0)), c50 = ImGui::GetColorU32(floor_color(50)), c100 = ImGui::GetColorU32(floor_color(100));
  dl->AddRectFilledMultiColor(ImVec2(p.x, y0), ImVec2(p.x + w / 2, y1), c0, c50, c50, c0);
  dl->AddRectFilledMultiColor(ImVec2(p.x + w / 2, y0), ImVec2(p.x + w, y1), c50, c100, c100, c50);
  ImGui::Dummy(ImVec2(w, ImGui::GetFrameHeight()));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("floor / time: the least time the measured ceilings allow for what the op declared (bytes, FLOPs),\n"
                      "over the time it took. 100%%: at the ceiling; above 100%%: faster than the measured copy or GEMM\n"
                      "(data that stayed in a cache). Grey: the op declared no cost, or the run has no ceilings.");
  const char* ticks[] = {"0%", "50%", "100%+"};
  for (int i = 0; i < 3; ++i) {
    const float x = p.x + w * 0.5f * static_cast<float>(i);
    const float tw = ImGui::CalcTextSize(ticks[i]).x;
    const float tx = std::clamp(x - tw / 2, p.x + 2, p.x + w - tw - 2);
    dl->AddText(ImVec2(tx, y0 + (y1 - y0 - h) / 2), IM_COL32(0, 0, 0, 255), ticks[i]);
  }
  ImGui::SameLine();
  const ImVec2 q = ImGui::GetCursorScreenPos();
  dl->AddRectFilled(ImVec2(q.x, y0), ImVec2(q.x + h, y1), ImGui::GetColorU32(floor_color(std::nan(""))));
  ImGui::Dummy(ImVec2(h, ImGui::GetFrameHeight()));
  ImGui::SameLine();
  ImGui::TextDisabled("undeclared");
}

}  // namespace moc::gui

namespace moc::gui {

void draw_report_table(const char* id, const report::Table& t,
                       const std::function<std::optional<ImVec4>(std::size_t row, std::size_t col)>& cell_bg) {
  ImGui::PushID(id);
  if (ImGui::SmallButton("Copy CSV")) {
    std::ostringstream o;
    report::print_csv({&t}, o);
    ImGui::SetClipboardText(o.str().c_str());
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("Copy Markdown")) {
    std::ostringstream o;
    report::print_markdown(t, o);
    ImGui::SetClipboardText(o.str().c_str());
  }
  const report::Shown s = report::shown(t);
  const int cols = static_cast<int>(s.columns.size());
  const ImVec2 outer(0, (static_cast<float>(s.rows.size()) + 1.6f) * ImGui::GetFrameHeight() + ImGui::GetStyle().ScrollbarSize);
  if (cols > 0 && ImGui::BeginTable(id, cols,
                                    ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit |
                                        ImGuiTableFlags_ScrollX,
                                    outer)) {
    for (const auto& h : s.headers) ImGui::TableSetupColumn(h.c_str());
    ImGui::TableHeadersRow();
    for (std::size_t r = 0; r < s.rows.size(); ++r) {
      ImGui::TableNextRow();
      for (std::size_t i = 0; i < s.columns.size(); ++i) {
        ImGui::TableNextColumn();
        if (cell_bg)
          if (const auto bg = cell_bg(r, s.columns[i]))
            ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, ImGui::GetColorU32(ImVec4(bg->x, bg->y, bg->z, 0.45f)));
        const std::string& text = s.rows[r][i];
        if (!t.columns[s.columns[i]].text) {  // numbers right-aligned, as the text printers align them
          const float pad = ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize(text.c_str()).x;
          if (pad > 0) ImGui::SetCursorPosX(ImGui::GetCursorPosX() + pad);
        }
        ImGui::TextUnformatted(text.c_str());
      }
    }
    ImGui::EndTable();
  }
  ImGui::PopID();
}

}  // namespace moc::gui

// Timeline: a point's profiled step(s) -- one lane per (GPU, stream) with its kernels, copies and sets, then
// one lane per depth of the phase ranges -- drawn with ImGui's draw list as Tracy draws zones: each visible
// item a rectangle coloured by its phase, runs of items narrower than a few pixels merged into one (so a
// million kernels cost what the pixels cost). Wheel zooms at the cursor, dragging pans, double-click fits;
// hovering shows an item's name, duration, launch configuration, registers and shared memory; clicking a
// kernel shows its statistics in this point and over the run.
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <cmath>

#include "gui/model/breakdown.h"
#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
constexpr float kLabelWidth = 130.0f;
constexpr float kMinPx = 2.0f;  // items narrower than this merge with their neighbours

std::string item_name(const Timeline& tl, const TimelineItem& it) {
  const auto& t = *tl.trace;
  switch (it.kind) {
    case ItemKind::kernel: return kernel_name(t.kernels[static_cast<std::size_t>(it.index)]);
    case ItemKind::memcpy: return prof::memcpy_operation(t.memcpys[static_cast<std::size_t>(it.index)].copy_kind);
    case ItemKind::memset: return "[CUDA memset]";
    case ItemKind::range: return t.ranges[static_cast<std::size_t>(it.index)].name;
  }
  return "?";
}

void item_tooltip(const Timeline& tl, const TimelineItem& it) {
  const auto& t = *tl.trace;
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(item_name(tl, it).c_str());
  ImGui::Text("duration %s", format_ns(static_cast<double>(it.end - it.start)).c_str());
  ImGui::Text("starts at %s", format_ns(static_cast<double>(it.start - tl.start_ns)).c_str());
  ImGui::Text("phase %s", tl.phases[static_cast<std::size_t>(it.color)].c_str());
  if (it.kind == ItemKind::kernel) {
    const auto& k = t.kernels[static_cast<std::size_t>(it.index)];
    if (k.device_id >= 0) {
      ImGui::Text("grid (%d, %d, %d)  block (%d, %d, %d)", k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z);
      ImGui::Text("registers/thread %d  shared memory %s static + %s dynamic", k.registers_per_thread,
                  format_bytes(k.static_shared_bytes).c_str(), format_bytes(k.dynamic_shared_bytes).c_str());
      if (k.graph_id) ImGui::Text("CUDA graph %u node %llu", k.graph_id, static_cast<unsigned long long>(k.graph_node_id));
    } else {
      ImGui::TextUnformatted("a CPU backend op");
    }
    ImGui::Text("step %d", k.step);
    if (k.name != kernel_name(k)) {
      ImGui::Separator();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
      ImGui::TextUnformatted(k.name.c_str());
      ImGui::PopTextWrapPos();
    }
  } else if (it.kind == ItemKind::memcpy) {
    ImGui::Text("%s", format_bytes(static_cast<double>(t.memcpys[static_cast<std::size_t>(it.index)].bytes)).c_str());
  } else if (it.kind == ItemKind::memset) {
    ImGui::Text("%s", format_bytes(static_cast<double>(t.memsets[static_cast<std::size_t>(it.index)].bytes)).c_str());
  } else {
    const auto& r = t.ranges[static_cast<std::size_t>(it.index)];
    ImGui::Text("%d ops, depth %d, step %d", r.ops, r.depth, r.step);
  }
  ImGui::EndTooltip();
}

ImU32 with_alpha(const ImVec4& c, float a) { return ImGui::GetColorU32(ImVec4(c.x, c.y, c.z, a)); }

void selection_panel(Store& store, UiState& ui, const RunRef& a) {
  TimelineState& st = ui.timeline;
  if (st.sel_kernel.empty()) {
    ImGui::TextDisabled("Click a kernel to see its statistics over the run.");
    return;
  }
  const std::vector<double>& d = st.sel_durations;
  double total = 0;
  for (double x : d) total += x;
  ImGui::Text("%s", st.sel_kernel.c_str());
  if (!d.empty())
    ImGui::Text("this point: %zu instances, total %s, avg %s, median %s, min %s, max %s", d.size(), format_ns(total).c_str(),
                format_ns(total / static_cast<double>(d.size())).c_str(), format_ns(d[d.size() / 2]).c_str(),
                format_ns(d.front()).c_str(), format_ns(d.back()).c_str());
  const auto& pts = store.points(a);
  const auto varying = varying_axes(pts);
  if (ImGui::BeginTable("kstats", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit)) {
    for (const char* h : {"point", "instances/step", "time/step", "avg", "min", "max"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& r : st.sel_stats) {
      const db::PointRecord* p = store.point(a, r.point_id);
      const double steps = std::max(1, r.steps);
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("#%d %s %s", p ? p->index : -1, p ? p->mode.c_str() : "", p ? point_label(*p, varying).c_str() : "");
      ImGui::TableNextColumn();
      ImGui::Text("%.1f", static_cast<double>(r.count) / steps);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(static_cast<double>(r.total_ns) / steps).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(r.count ? static_cast<double>(r.total_ns) / static_cast<double>(r.count) : 0).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(static_cast<double>(r.min_ns)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_ns(static_cast<double>(r.max_ns)).c_str());
    }
    ImGui::EndTable();
  }
}
void draw_timeline_lanes(Store& store, UiState& ui, const RunRef& a, float height);
}  // namespace

void draw_timeline_view(Store& store, UiState& ui) {
  if (!ImGui::Begin(view_title(View::timeline))) {
    ImGui::End();
    return;
  }
  const RunRef a = run_a(ui);
  TimelineState& st = ui.timeline;
  if (!a.valid() && !st.pinned) {
    ImGui::TextDisabled("Select a run in Runs.");
    ImGui::End();
    return;
  }
  const std::int64_t pid = st.pinned ? st.point_id : (point_picker(store, ui, true), current_point(store, ui, true));
  if (!st.pinned && (st.run != a || st.point_id != pid)) {
    st.run = a;
    st.point_id = pid;
    st.timeline = build_timeline(pid >= 0 ? store.profile(a, pid) : nullptr);
    st.fit = true;
    st.sel_lane = st.sel_item = -1;
    st.sel_kernel.clear();
    st.sel_stats.clear();
    st.sel_durations.clear();
  }
  if (!st.timeline.trace) {
    ImGui::TextDisabled("This point has no profile (run it without --no-profile and with [profile] kernels = true).");
    ImGui::End();
    return;
  }
  ImGui::SameLine();
  if (ImGui::Button("fit")) st.fit = true;
  ImGui::SameLine();
  ImGui::TextDisabled("%zu items, %d step(s), %s traced; wheel: zoom, drag: pan, double-click: fit", st.timeline.items,
                      st.timeline.trace->steps, format_ns(static_cast<double>(st.timeline.end_ns - st.timeline.start_ns)).c_str());
  const float panel = st.sel_kernel.empty() ? ImGui::GetTextLineHeightWithSpacing() * 1.5f : 170.0f;
  draw_timeline_lanes(store, ui, a, std::max(80.0f, ImGui::GetContentRegionAvail().y - panel));
  selection_panel(store, ui, a);
  ImGui::End();
}

namespace {
void draw_timeline_lanes(Store& store, UiState& ui, const RunRef& a, float height) {
  TimelineState& st = ui.timeline;
  const Timeline& tl = st.timeline;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  const float lane_h = ImGui::GetTextLineHeight() + 6.0f;
  const float ruler_h = ImGui::GetTextLineHeight() + 4.0f;
  const float x0 = origin.x + kLabelWidth, x1 = origin.x + width;
  const float y0 = origin.y + ruler_h;
  ImGui::InvisibleButton("##lanes", ImVec2(width, height), ImGuiButtonFlags_MouseButtonLeft);
  const bool hovered = ImGui::IsItemHovered();
  const bool active = ImGui::IsItemActive();
  st.lanes_x0 = x0;
  st.lanes_x1 = x1;
  st.lanes_y0 = y0;
  st.lane_height = lane_h;

  const double span_total = static_cast<double>(std::max<std::int64_t>(1, tl.end_ns - tl.start_ns));
  if (st.fit || st.t1 <= st.t0) {
    st.t0 = static_cast<double>(tl.start_ns) - 0.01 * span_total;
    st.t1 = static_cast<double>(tl.end_ns) + 0.01 * span_total;
    st.fit = false;
  }
  const float lanes_w = std::max(1.0f, x1 - x0);
  double ns_per_px = (st.t1 - st.t0) / lanes_w;
  ImGuiIO& io = ImGui::GetIO();
  // Input: wheel zooms at the cursor, drag pans, double-click fits.
  if (hovered && io.MouseWheel != 0 && io.MousePos.x >= x0) {
    const double at = st.t0 + (io.MousePos.x - x0) * ns_per_px;
    const double f = std::pow(0.8, io.MouseWheel);
    const double w = std::clamp((st.t1 - st.t0) * f, 50.0, span_total * 4);
    st.t0 = at - (at - st.t0) * (w / (st.t1 - st.t0));
    st.t1 = st.t0 + w;
    ns_per_px = (st.t1 - st.t0) / lanes_w;
  }
  if (active && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
    const double dt = -io.MouseDelta.x * ns_per_px;
    st.t0 += dt;
    st.t1 += dt;
  }
  if (hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) st.fit = true;

  dl->PushClipRect(origin, ImVec2(x1, origin.y + height), true);
  dl->AddRectFilled(origin, ImVec2(x1, origin.y + height), ImGui::GetColorU32(ImVec4(0.10f, 0.10f, 0.12f, 1.0f)));
  // Ruler: about one tick per 100 px at a 1-2-5 step.
  {
    const double raw = ns_per_px * 100;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
    const double first = std::ceil((st.t0 - static_cast<double>(tl.start_ns)) / step) * step + static_cast<double>(tl.start_ns);
    for (double t = first; t < st.t1; t += step) {
      const float x = x0 + static_cast<float>((t - st.t0) / ns_per_px);
      dl->AddLine(ImVec2(x, origin.y + ruler_h - 4), ImVec2(x, origin.y + height), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.08f)));
      const std::string s = format_ns(t - static_cast<double>(tl.start_ns));
      dl->AddText(ImVec2(x + 2, origin.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), s.c_str());
    }
  }
  std::vector<ImU32> colors, dim;
  for (const auto& p : tl.phases) {
    const ImVec4 c = phase_color(p);
    colors.push_back(ImGui::GetColorU32(c));
    dim.push_back(with_alpha(ImVec4(c.x * 0.75f, c.y * 0.75f, c.z * 0.75f, 1), 0.85f));
  }
  std::vector<VisibleSpan> spans;
  st.spans_drawn = 0;
  int hover_lane = -1, hover_item = -1;
  const auto t0 = static_cast<std::int64_t>(std::floor(st.t0)), t1 = static_cast<std::int64_t>(std::ceil(st.t1));
  for (std::size_t li = 0; li < tl.lanes.size(); ++li) {
    const TimelineLane& lane = tl.lanes[li];
    const float ly = y0 + static_cast<float>(li) * lane_h;
    if (ly > origin.y + height) break;
    if (li % 2) dl->AddRectFilled(ImVec2(origin.x, ly), ImVec2(x1, ly + lane_h), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.03f)));
    dl->AddText(ImVec2(origin.x + 4, ly + 3), ImGui::GetColorU32(lane.phases ? ImGuiCol_TextDisabled : ImGuiCol_Text), lane.label.c_str());
    spans.clear();
    visible_spans(lane, t0, t1, ns_per_px, kMinPx, &spans);
    st.spans_drawn += spans.size();
    dl->PushClipRect(ImVec2(x0, ly), ImVec2(x1, ly + lane_h), true);
    for (const auto& s : spans) {
      float a0 = x0 + static_cast<float>((static_cast<double>(s.start) - st.t0) / ns_per_px);
      float a1 = x0 + static_cast<float>((static_cast<double>(s.end) - st.t0) / ns_per_px);
      a0 = std::max(a0, x0 - 2);
      a1 = std::min(std::max(a1, a0 + 1.0f), x1 + 2);
      const TimelineItem& it = lane.items[static_cast<std::size_t>(s.first)];
      const ImVec2 p0(a0, ly + 2), p1(a1, ly + lane_h - 2);
      if (s.count > 1) {
        dl->AddRectFilled(p0, p1, dim[static_cast<std::size_t>(it.color)]);
        // Tracy marks merged zones; a zig-zag edge is enough at this size.
        if (a1 - a0 > 6) dl->AddLine(ImVec2(a0, ly + lane_h / 2), ImVec2(a1, ly + lane_h / 2), ImGui::GetColorU32(ImVec4(0, 0, 0, 0.35f)));
        continue;
      }
      dl->AddRectFilled(p0, p1, colors[static_cast<std::size_t>(it.color)]);
      if (a1 - a0 > 4) dl->AddRect(p0, p1, IM_COL32(0, 0, 0, 110));  // neighbours of one colour stay apart
      const bool sel = static_cast<int>(li) == st.sel_lane && s.first == st.sel_item;
      if (sel) dl->AddRect(ImVec2(a0 - 1, ly + 1), ImVec2(a1 + 1, ly + lane_h - 1), ImGui::GetColorU32(ImVec4(1, 1, 1, 1)), 0, 0, 2.0f);
      if (a1 - a0 > 30) {
        const std::string name = item_name(tl, it);
        dl->PushClipRect(p0, p1, true);
        dl->AddText(ImVec2(std::max(a0, x0) + 3, ly + 3), IM_COL32(0, 0, 0, 255), name.c_str());
        dl->PopClipRect();
      }
    }
    dl->PopClipRect();
    if (hovered && io.MousePos.y >= ly && io.MousePos.y < ly + lane_h && io.MousePos.x >= x0) {
      hover_lane = static_cast<int>(li);
      const auto t = static_cast<std::int64_t>(st.t0 + (io.MousePos.x - x0) * ns_per_px);
      hover_item = item_at(lane, t, static_cast<std::int64_t>(2 * ns_per_px));
    }
  }
  dl->PopClipRect();
  if (hover_item >= 0) {
    const TimelineItem& it = tl.lanes[static_cast<std::size_t>(hover_lane)].items[static_cast<std::size_t>(hover_item)];
    if (!ImGui::IsMouseDragging(ImGuiMouseButton_Left)) item_tooltip(tl, it);
    if (ImGui::IsItemDeactivated() && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left, 2.0f)) {
      st.sel_lane = hover_lane;
      st.sel_item = hover_item;
      if (it.kind == ItemKind::kernel) {
        st.sel_kernel = kernel_name(tl.trace->kernels[static_cast<std::size_t>(it.index)]);
        st.sel_stats = st.pinned ? std::vector<db::KernelSummaryRow>{} : store.kernel_summary(a, st.sel_kernel);
        st.sel_durations.clear();
        for (const auto& k : tl.trace->kernels)
          if (kernel_name(k) == st.sel_kernel) st.sel_durations.push_back(static_cast<double>(k.end_ns - k.start_ns));
        std::sort(st.sel_durations.begin(), st.sel_durations.end());
      }
    }
  }
}

}  // namespace

}  // namespace moc::gui

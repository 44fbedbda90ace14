// Timeline: a point's profiled step(s) -- one lane per (GPU, stream) with its kernels, copies and sets, then
// one lane per depth of the phase ranges, named by the ranges it holds -- drawn with ImGui's draw list as
// Tracy draws zones: each visible item a rectangle coloured by its phase, runs of items narrower than a few
// pixels merged into one (so a million kernels cost what the pixels cost). Records that overlap on a lane
// stand on sub-rows of it (as Nsight Systems draws concurrent kernels); under exclusive time the part of a
// record that overlapped earlier work (a PDL kernel waiting for its predecessor) is hatched. A kernel that
// stamps its stages (the decode FFN's k_gate, k_select, k_updown; an older profile's persistent k_step) has a
// stage lane under its stream ("k_gate / k_select ... stages": the kernels it holds): each stage a box in its
// stage's colour, "qkv L3" where it has room, its barrier wait in the tooltip. The ruler ticks at round
// times. Wheel zooms at the cursor, dragging pans, double-click fits; hovering shows an item's name,
// inclusive / exclusive / waiting time, launch configuration, registers and shared memory; clicking a kernel
// selects it (its statistics below and in the Kernels view), and every instance of the selected kernel is
// outlined. A toggle colours the kernels by their % of floor instead of their phase (red far from the floor, green
// at it, grey where the op declared no cost; gui/model/roofline).
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gui/model/breakdown.h"
#include "gui/model/sweep.h"
#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
constexpr float kMinPx = 2.0f;  // items narrower than this merge with their neighbours
constexpr ImU32 kHighlight = IM_COL32(255, 255, 255, 255);  // outline of the selected kernel's instances
constexpr ImU32 kLabelBox = IM_COL32(12, 12, 14, 255);      // a name's box over hatching (tests look for it)
constexpr ImU32 kLabelOnBox = IM_COL32(240, 240, 240, 255);

// Marks the trace's kernel records that are instances of the selected kernel, when the selection or the trace
// changed since the last frame (so drawing tests one flag per visible item, not a name).
void update_highlight(TimelineState& st, const std::string& selected) {
  if (st.highlight_trace == st.timeline.trace && st.highlight_of == selected) return;
  st.highlight_trace = st.timeline.trace;
  st.highlight_of = selected;
  st.highlight.clear();
  if (!st.timeline.trace || selected.empty()) return;
  const auto& ks = st.timeline.trace->kernels;
  st.highlight.resize(ks.size(), 0);
  for (std::size_t i = 0; i < ks.size(); ++i) st.highlight[i] = kernel_name(ks[i]) == selected ? 1 : 0;
}

std::string item_name(const Timeline& tl, const TimelineItem& it) {
  const auto& t = *tl.trace;
  switch (it.kind) {
    case ItemKind::kernel: return kernel_name(t.kernels[static_cast<std::size_t>(it.index)]);
    case ItemKind::memcpy: return prof::memcpy_operation(t.memcpys[static_cast<std::size_t>(it.index)].copy_kind);
    case ItemKind::memset: return "[CUDA memset]";
    case ItemKind::range: return t.ranges[static_cast<std::size_t>(it.index)].name;
    case ItemKind::stage: return stage_label(t.stages[static_cast<std::size_t>(it.index)]);
  }
  return "?";
}

void item_times(const TimelineItem& it, prof::TimeMode mode) {
  if (it.kind == ItemKind::range) {
    ImGui::Text("duration %s (first op's start to last op's end)", format_ns(static_cast<double>(it.inclusive_ns())).c_str());
    return;
  }
  if (it.kind == ItemKind::stage) {
    ImGui::Text("duration %s (the last block passing the stage's start to the last passing its end)",
                format_ns(static_cast<double>(it.inclusive_ns())).c_str());
    return;
  }
  const bool excl = mode == prof::TimeMode::exclusive;
  ImGui::Text("exclusive %s%s", format_ns(static_cast<double>(it.exclusive_ns())).c_str(), excl ? "  (counted)" : "");
  ImGui::Text("inclusive %s%s", format_ns(static_cast<double>(it.inclusive_ns())).c_str(), excl ? "" : "  (counted)");
  if (it.wait_ns() > 0)
    ImGui::Text("waiting   %s  (overlapped earlier work: hatched)", format_ns(static_cast<double>(it.wait_ns())).c_str());
}

// A stage of a stamped kernel: which, where, how long, how much of it the blocks waited at its barrier.
void stage_tooltip(const Timeline& tl, const TimelineItem& it) {
  const prof::StageRecord& g = tl.trace->stages[static_cast<std::size_t>(it.index)];
  const auto d = static_cast<double>(it.inclusive_ns());
  ImGui::BeginTooltip();
  ImGui::Text("stage %s", g.stage.c_str());
  if (g.layer >= 0) ImGui::Text("layer %d", g.layer);
  else ImGui::TextUnformatted("outside the layers");
  ImGui::Text("duration %s", format_ns(d).c_str());
  ImGui::Text("barrier wait %s (%.0f%%): blocks' mean wait at the barrier ending it", format_ns(static_cast<double>(g.wait_ns)).c_str(),
              d > 0 ? 100.0 * static_cast<double>(g.wait_ns) / d : 0.0);
  const std::ptrdiff_t k = tl.stage_kernel[static_cast<std::size_t>(it.index)];
  if (k >= 0)
    ImGui::Text("%.1f%% of its kernel: %s launch %d of step %d (%s)", 100.0 * tl.stage_share(it), g.kernel.c_str(), g.launch, g.step,
                format_ns(static_cast<double>(tl.trace->kernels[static_cast<std::size_t>(k)].end_ns -
                                              tl.trace->kernels[static_cast<std::size_t>(k)].start_ns)).c_str());
  else
    ImGui::Text("%s launch %d of step %d: no kernel record in the trace", g.kernel.c_str(), g.launch, g.step);
  ImGui::Text("starts at %s", format_ns(static_cast<double>(it.start - tl.start_ns)).c_str());
  ImGui::EndTooltip();
}

void item_tooltip(const TimelineState& st, const TimelineItem& it, prof::TimeMode mode) {
  const Timeline& tl = st.timeline;
  if (it.kind == ItemKind::stage) return stage_tooltip(tl, it);
  const auto& t = *tl.trace;
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(item_name(tl, it).c_str());
  item_times(it, mode);
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
    if (k.op_bytes >= 0)
      ImGui::Text("op %s declared %s, %.4g FLOP%s", k.op.c_str(), format_bytes(static_cast<double>(k.op_bytes)).c_str(),
                  static_cast<double>(std::max<std::int64_t>(0, k.op_flops)), k.op_bound ? " (bytes: an upper bound)" : "");
    else
      ImGui::TextDisabled("no declared cost (bytes, FLOPs)");
    if (st.colour == TimelineState::Colour::floor && static_cast<std::size_t>(it.index) < st.floor_pct.size()) {
      const double pct = st.floor_pct[static_cast<std::size_t>(it.index)];
      if (std::isnan(pct)) ImGui::TextDisabled(st.ceilings ? "%% of floor: - (undeclared)" : "%% of floor: - (no measured ceilings)");
      else ImGui::TextColored(floor_color(pct), "%.1f%% of floor (%s device time)", pct, prof::time_mode_name(mode));
    }
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

// The waiting part of a record: a darker fill crossed by diagonal lines in its colour.
void draw_hatched(ImDrawList* dl, ImVec2 p0, ImVec2 p1, ImU32 fill, ImU32 line) {
  dl->AddRectFilled(p0, p1, fill);
  dl->PushClipRect(p0, p1, true);
  const float h = p1.y - p0.y;
  for (float x = p0.x - h; x < p1.x; x += 5.0f) dl->AddLine(ImVec2(x, p1.y), ImVec2(x + h, p0.y), line, 1.5f);
  dl->PopClipRect();
}

// "colour: (o) phase ( ) % of floor", with what each means on hover.
void colour_toggle(TimelineState& st) {
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("colour:");
  for (int i = 0; i < 2; ++i) {
    const auto c = i == 0 ? TimelineState::Colour::phase : TimelineState::Colour::floor;
    ImGui::SameLine();
    if (ImGui::RadioButton(i == 0 ? "phase" : "% of floor", st.colour == c)) st.colour = c;
    const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
    st.colour_button[i][0] = 0.5f * (lo.x + hi.x);
    st.colour_button[i][1] = 0.5f * (lo.y + hi.y);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(i == 0 ? "each op in its phase's colour (the Breakdown's parts: gate blue, up & down orange, top-K red)"
                               : "each kernel by its %% of floor: the least time the measured ceilings allow for what its op\n"
                                 "declared (bytes, FLOPs) over the time it took -- red far from the floor, green at it; grey\n"
                                 "where nothing was declared. The Roofline view has the numbers.");
  }
}

// Brings each kernel's % of floor and colour class up to date with the trace, the time mode and the ceilings.
void update_floor(TimelineState& st, prof::TimeMode mode) {
  const prof::Ceilings c = to_ceilings(st.ceilings);
  if (st.floor_of == st.timeline.trace && st.floor_mode == mode && st.floor_ceilings.copy_GBps == c.copy_GBps &&
      st.floor_ceilings.gemm_tflops == c.gemm_tflops && st.floor_bucket.size() == st.floor_pct.size())
    return;
  st.floor_of = st.timeline.trace;
  st.floor_mode = mode;
  st.floor_ceilings = c;
  st.floor_pct = st.timeline.trace ? prof::kernel_floor_pct(*st.timeline.trace, c, mode) : std::vector<double>{};
  st.floor_bucket.resize(st.floor_pct.size());
  for (std::size_t i = 0; i < st.floor_pct.size(); ++i) st.floor_bucket[i] = static_cast<std::int8_t>(floor_bucket(st.floor_pct[i]));
}

void selection_panel(Store& store, UiState& ui) {
  update_kernel_stats(store, ui);
  const KernelStatsState& ks = ui.kernels;
  if (ks.selected.empty()) {
    ImGui::TextDisabled("Click a kernel to see its statistics (here and in Kernels, with a histogram).");
    return;
  }
  ImGui::Text("%s", ks.selected.c_str());
  ImGui::SameLine();
  if (ImGui::SmallButton("histogram in Kernels")) ImGui::SetWindowFocus(view_title(View::kernels));
  if (ks.row >= 0) {
    const DurationStats& s = ks.table[static_cast<std::size_t>(ks.row)].stats;
    ImGui::Text("this point, %s device time: %zu instances, total %s, mean %s, median %s, min %s, max %s",
                prof::time_mode_name(ks.mode), s.count, format_ns(s.total_ns).c_str(), format_ns(s.mean_ns).c_str(),
                format_ns(s.median_ns).c_str(), format_ns(s.min_ns).c_str(), format_ns(s.max_ns).c_str());
  }
  if (ks.over_run.empty()) return;
  const RunRef a = run_a(ui);
  const auto& pts = store.points(a);
  auto varying = varying_axes(pts);
  std::erase(varying, std::string("mode"));  // the row names the mode already
  if (ImGui::BeginTable("kstats", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit)) {
    for (const char* h : {"point", "instances/step", "time/step", "mean", "min", "max"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& r : ks.over_run) {
      const db::PointRecord* p = store.point(a, r.point_id);
      const double steps = std::max(1, r.steps);
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("#%d %s %s", p ? p->index : -1, p ? p->mode.c_str() : "", p ? point_label(*p, varying).c_str() : "");
      ImGui::TableNextColumn();
      ImGui::Text("%.1f", static_cast<double>(r.stats.count) / steps);
      for (double v : {r.stats.total_ns / steps, r.stats.mean_ns, r.stats.min_ns, r.stats.max_ns}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_ns(v).c_str());
      }
    }
    ImGui::EndTable();
  }
}
void draw_timeline_lanes(UiState& ui, float height);
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
  }
  if (!st.timeline.trace) {
    ImGui::TextDisabled("This point has no profile (run it without --no-profile and with [profile] kernels = true).");
    ImGui::End();
    return;
  }
  ImGui::SameLine();
  if (ImGui::Button("fit")) st.fit = true;
  ImGui::SameLine(0, 20);
  time_mode_toggle(ui);
  // The run's ceilings for this profile (looking them up scans its kernels: once per profile and store change).
  if (!st.pinned && (st.ceilings_of != st.timeline.trace || st.ceilings_generation != store.generation())) {
    st.ceilings_of = st.timeline.trace;
    st.ceilings_generation = store.generation();
    st.ceilings = ceilings_for_trace(store.ceilings(a), *st.timeline.trace);
  }
  colour_toggle(st);
  if (st.colour == TimelineState::Colour::floor) {
    ImGui::SameLine(0, 20);
    floor_color_bar(220);
    ImGui::SameLine(0, 16);
    char buf[320];
    if (st.ceilings)
      std::snprintf(buf, sizeof buf, "against %s: copy %.4g GB/s, GEMM %.4g TFLOP/s", st.ceilings->device.c_str(),
                    st.ceilings->copy_GBps, st.ceilings->gemm_tflops);
    const std::string what = st.ceilings ? buf : "this run has no measured ceilings: every kernel grey";
    const std::string cut = fit_text(what, ImGui::GetContentRegionAvail().x);
    ImGui::AlignTextToFramePadding();
    if (st.ceilings) ImGui::TextDisabled("%s", cut.c_str());
    else ImGui::TextColored(ImVec4(0.95f, 0.7f, 0.3f, 1), "%s", cut.c_str());
    if (cut != what && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", what.c_str());
  }
  const Timeline& tl = st.timeline;
  ImGui::TextDisabled("%zu items, %d step(s), %s traced; device time (%s) %s, %s %s; wheel: zoom, drag: pan, "
                      "double-click: fit",
                      tl.items, tl.trace->steps, format_ns(static_cast<double>(tl.end_ns - tl.start_ns)).c_str(),
                      prof::time_mode_name(ui.time_mode), format_ns(static_cast<double>(tl.sum_ns(ui.time_mode))).c_str(),
                      ui.time_mode == prof::TimeMode::exclusive ? "inclusive" : "exclusive",
                      format_ns(static_cast<double>(tl.sum_ns(ui.time_mode == prof::TimeMode::exclusive ? prof::TimeMode::inclusive
                                                                                                            : prof::TimeMode::exclusive)))
                          .c_str());
  const float panel = ui.kernels.selected.empty() ? ImGui::GetTextLineHeightWithSpacing() * 1.5f : 170.0f;
  draw_timeline_lanes(ui, std::max(80.0f, ImGui::GetContentRegionAvail().y - panel));
  selection_panel(store, ui);
  ImGui::End();
}

namespace {
// Where the lanes are drawn this frame: the label column, the lanes' x range and the ruler above them.
struct LanesGeometry {
  ImVec2 origin;
  float width, row_h, ruler_h, label_w, x0, x1, y0, bottom;
};

// The lanes' geometry, their input area (an invisible button: hovered / active), and each lane's top into st.
LanesGeometry lanes_geometry(TimelineState& st, float height, bool& hovered, bool& active) {
  const Timeline& tl = st.timeline;
  LanesGeometry g{};
  g.origin = ImGui::GetCursorScreenPos();
  g.width = ImGui::GetContentRegionAvail().x;
  g.row_h = ImGui::GetTextLineHeight() + 6.0f;
  g.ruler_h = ImGui::GetTextLineHeight() + 4.0f;
  // The label column fits the longest lane name, up to a fifth of the width (longer ones are cut, whole on hover).
  float label_w = 0;
  for (const auto& l : tl.lanes) label_w = std::max(label_w, ImGui::CalcTextSize(l.label.c_str()).x);
  g.label_w = std::clamp(label_w + 14.0f, 110.0f, std::max(110.0f, g.width * 0.2f));
  g.x0 = g.origin.x + g.label_w;
  g.x1 = g.origin.x + g.width;
  g.y0 = g.origin.y + g.ruler_h;
  g.bottom = g.origin.y + height;
  ImGui::InvisibleButton("##lanes", ImVec2(g.width, height), ImGuiButtonFlags_MouseButtonLeft);
  hovered = ImGui::IsItemHovered();
  active = ImGui::IsItemActive();
  st.lanes_x0 = g.x0;
  st.lanes_x1 = g.x1;
  st.lanes_y0 = g.y0;
  st.lane_height = g.row_h;
  st.lane_y.clear();
  for (std::size_t li = 0; li < tl.lanes.size(); ++li)
    st.lane_y.push_back(li == 0 ? g.y0 : st.lane_y.back() + static_cast<float>(tl.lanes[li - 1].rows()) * g.row_h);
  return g;
}

// The visible time range: fitted to the trace (or the window asked for at start), then the frame's input -- wheel
// zooms at the cursor, drag pans, double-click fits. Returns ns per pixel.
double view_input(TimelineState& st, const LanesGeometry& g, bool hovered, bool active) {
  const Timeline& tl = st.timeline;
  const double span_total = static_cast<double>(std::max<std::int64_t>(1, tl.end_ns - tl.start_ns));
  if (st.fit || st.t1 <= st.t0) {
    st.t0 = static_cast<double>(tl.start_ns) - 0.01 * span_total;
    st.t1 = static_cast<double>(tl.end_ns) + 0.01 * span_total;
    if (st.window_t1_ns > st.window_t0_ns) {  // a window asked for at start (--window): once
      st.t0 = static_cast<double>(tl.start_ns) + st.window_t0_ns;
      st.t1 = static_cast<double>(tl.start_ns) + st.window_t1_ns;
      st.window_t0_ns = st.window_t1_ns = 0;
    }
    st.fit = false;
  }
  const float lanes_w = std::max(1.0f, g.x1 - g.x0);
  double ns_per_px = (st.t1 - st.t0) / lanes_w;
  ImGuiIO& io = ImGui::GetIO();
  if (hovered && io.MouseWheel != 0 && io.MousePos.x >= g.x0) {
    const double at = st.t0 + (io.MousePos.x - g.x0) * ns_per_px;
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
  return ns_per_px;
}

// Ruler: round times (1, 2 or 5 x 10^n) from the trace's start, at least 110 px apart.
void draw_ruler(ImDrawList* dl, const TimelineState& st, const LanesGeometry& g, double ns_per_px) {
  const double origin_ns = static_cast<double>(st.timeline.start_ns);
  for (const TimeTick& tick : time_ticks(st.t0 - origin_ns, st.t1 - origin_ns, ns_per_px * 110)) {
    const float x = g.x0 + static_cast<float>((tick.ns + origin_ns - st.t0) / ns_per_px);
    if (x < g.x0) continue;
    dl->AddLine(ImVec2(x, g.origin.y + g.ruler_h - 4), ImVec2(x, g.bottom), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.08f)));
    if (x + 2 + ImGui::CalcTextSize(tick.label.c_str()).x <= g.x1)  // a label the edge would cut is left out
      dl->AddText(ImVec2(x + 2, g.origin.y), ImGui::GetColorU32(ImGuiCol_TextDisabled), tick.label.c_str());
  }
}

// Colour classes: the phases, then (% of floor) the floor buckets and "undeclared"; each with its dimmed (merged
// spans) and dark (hatched wait) variants.
struct ColourClasses {
  std::vector<ImU32> colors, dim, wait_fill;
  bool by_floor = false;
  std::size_t floor0 = 0;

  void add(const ImVec4& c) {
    colors.push_back(ImGui::GetColorU32(c));
    dim.push_back(with_alpha(ImVec4(c.x * 0.75f, c.y * 0.75f, c.z * 0.75f, 1), 0.85f));
    wait_fill.push_back(ImGui::GetColorU32(ImVec4(c.x * 0.35f, c.y * 0.35f, c.z * 0.35f, 1)));
  }
  std::size_t of(const TimelineState& st, const TimelineItem& it) const {
    if (!by_floor || it.kind == ItemKind::range || it.kind == ItemKind::stage) return static_cast<std::size_t>(it.color);
    if (it.kind != ItemKind::kernel || static_cast<std::size_t>(it.index) >= st.floor_bucket.size()) return floor0 + kFloorBuckets;
    const int b = st.floor_bucket[static_cast<std::size_t>(it.index)];
    return floor0 + static_cast<std::size_t>(b < 0 ? kFloorBuckets : b);
  }
};

ColourClasses colour_classes(TimelineState& st, prof::TimeMode mode) {
  ColourClasses cc;
  for (const auto& p : st.timeline.phases) cc.add(phase_color(p));
  cc.by_floor = st.colour == TimelineState::Colour::floor;
  cc.floor0 = cc.colors.size();
  if (cc.by_floor) {
    update_floor(st, mode);
    for (int b = 0; b <= kFloorBuckets; ++b) {
      const Rgb c = floor_bucket_colour(b < kFloorBuckets ? b : -1);
      cc.add(ImVec4(c.r, c.g, c.b, 1));
    }
  }
  return cc;
}

// One visible span of lane li's row at ry, from a0 to a1 px: a merged run of items (dimmed, a line through it), or
// one item -- its hatched wait under exclusive time (ending at own_x), its name where it fits, the outlines of the
// selected kernel's instances and of the clicked record.
void draw_span(ImDrawList* dl, const TimelineState& st, const LanesGeometry& g, const ColourClasses& cc,
               const VisibleSpan& s, const TimelineItem& it, std::size_t li, float ry, float a0, float a1,
               float own_x) {
  const Timeline& tl = st.timeline;
  const float row_h = g.row_h;
  const ImVec2 p0(a0, ry + 2), p1(a1, ry + row_h - 2);
  const std::size_t c = cc.of(st, it);
  if (s.count > 1) {
    dl->AddRectFilled(p0, p1, cc.dim[c]);
    // Tracy marks merged zones; a line through them is enough at this size.
    if (a1 - a0 > 6) dl->AddLine(ImVec2(a0, ry + row_h / 2), ImVec2(a1, ry + row_h / 2), ImGui::GetColorU32(ImVec4(0, 0, 0, 0.35f)));
    return;
  }
  // Exclusive: [start, own) overlapped earlier work and is not counted -- hatched.
  if (own_x > a0) draw_hatched(dl, p0, ImVec2(own_x, p1.y), cc.wait_fill[c], cc.colors[c]);
  if (a1 > own_x) dl->AddRectFilled(ImVec2(own_x, p0.y), p1, cc.colors[c]);
  if (a1 - a0 > 4) dl->AddRect(p0, p1, IM_COL32(0, 0, 0, 110));  // neighbours of one colour stay apart
  if (a1 - a0 > 30) {
    // The name goes on the solid (counted) part when that holds it whole or is most of the record; a
    // mostly hatched record (a PDL kernel that waited most of its time) gets its name in light text on a
    // dark box over the hatching instead, where black text on the lines would be hard to read.
    const std::string name = item_name(tl, it);
    const float tw = ImGui::CalcTextSize(name.c_str()).x;
    const float solid_w = a1 - own_x, hatched_w = own_x - a0;
    const bool on_solid = hatched_w <= 0 || (solid_w > 30 && (solid_w >= tw + 6 || solid_w >= hatched_w));
    const float lx = std::max(on_solid ? own_x : a0, g.x0);
    dl->PushClipRect(ImVec2(lx, p0.y), p1, true);
    if (on_solid) {
      dl->AddText(ImVec2(lx + 3, ry + 3), IM_COL32(0, 0, 0, 255), name.c_str());
    } else {
      dl->AddRectFilled(ImVec2(lx + 1, p0.y + 1), ImVec2(lx + tw + 5, p1.y - 1), kLabelBox, 2.0f);
      dl->AddText(ImVec2(lx + 3, ry + 3), kLabelOnBox, name.c_str());
    }
    dl->PopClipRect();
  }
  // Every instance of the selected kernel (clicked here, picked in Kernels, or the kernel of a clicked
  // stage) is outlined in white; the clicked record itself gets a wider outline around it. Merged spans
  // (runs of items under 2 px) are not: finding the kernel among a merged run would cost a scan of its
  // items per frame, breaking the O(pixels x log items) level of detail -- zoom in to see each instance.
  if (it.kind == ItemKind::kernel && !st.highlight.empty() && st.highlight[static_cast<std::size_t>(it.index)])
    dl->AddRect(p0, p1, kHighlight, 0, 0, 2.0f);
  const bool sel = static_cast<int>(li) == st.sel_lane && s.first == st.sel_item;
  if (sel) dl->AddRect(ImVec2(a0 - 1, ry + 1), ImVec2(a1 + 1, ry + row_h - 1), kHighlight, 0, 0, 2.0f);
}

void draw_timeline_lanes(UiState& ui, float height) {
  TimelineState& st = ui.timeline;
  update_highlight(st, ui.kernels.selected);
  const Timeline& tl = st.timeline;
  const bool exclusive = ui.time_mode == prof::TimeMode::exclusive;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  bool hovered = false, active = false;
  const LanesGeometry g = lanes_geometry(st, height, hovered, active);
  const double ns_per_px = view_input(st, g, hovered, active);
  const ImVec2 origin = g.origin;
  const float row_h = g.row_h, x0 = g.x0, x1 = g.x1, bottom = g.bottom;
  ImGuiIO& io = ImGui::GetIO();

  dl->PushClipRect(origin, ImVec2(x1, bottom), true);
  dl->AddRectFilled(origin, ImVec2(x1, bottom), ImGui::GetColorU32(ImVec4(0.10f, 0.10f, 0.12f, 1.0f)));
  draw_ruler(dl, st, g, ns_per_px);
  const ColourClasses cc = colour_classes(st, ui.time_mode);
  std::vector<VisibleSpan> spans;
  st.spans_drawn = 0;
  int hover_lane = -1, hover_item = -1;
  const auto t0 = static_cast<std::int64_t>(std::floor(st.t0)), t1 = static_cast<std::int64_t>(std::ceil(st.t1));
  auto x_of = [&](std::int64_t t) { return x0 + static_cast<float>((static_cast<double>(t) - st.t0) / ns_per_px); };
  for (std::size_t li = 0; li < tl.lanes.size(); ++li) {
    const TimelineLane& lane = tl.lanes[li];
    const float ly = st.lane_y[li], lane_h = static_cast<float>(lane.rows()) * row_h;
    if (ly > bottom) break;
    if (li % 2) dl->AddRectFilled(ImVec2(origin.x, ly), ImVec2(x1, ly + lane_h), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.03f)));
    // The label, cut to the label column; whole on hover.
    dl->AddText(ImVec2(origin.x + 4, ly + 3), ImGui::GetColorU32(lane.phases ? ImGuiCol_TextDisabled : ImGuiCol_Text),
                fit_text(lane.label, g.label_w - 10).c_str());
    if (lane.rows() > 1)
      dl->AddText(ImVec2(origin.x + 4, ly + 3 + row_h), ImGui::GetColorU32(ImGuiCol_TextDisabled),
                  (std::to_string(lane.rows()) + " rows: overlap").c_str());
    if (hovered && io.MousePos.x < x0 && io.MousePos.y >= ly && io.MousePos.y < ly + lane_h) ImGui::SetTooltip("%s", lane.label.c_str());
    dl->PushClipRect(ImVec2(x0, ly), ImVec2(x1, ly + lane_h), true);
    for (int row = 0; row < lane.rows(); ++row) {
      const float ry = ly + static_cast<float>(row) * row_h;
      spans.clear();
      visible_spans(lane, row, t0, t1, ns_per_px, kMinPx, &spans);
      st.spans_drawn += spans.size();
      for (const auto& s : spans) {
        const float a0 = std::max(x_of(s.start), x0 - 2);
        const float a1 = std::min(std::max(x_of(s.end), a0 + 1.0f), x1 + 2);
        const TimelineItem& it = lane.items[static_cast<std::size_t>(s.first)];
        const float own_x = s.count == 1 && exclusive && it.wait_ns() > 0 ? std::clamp(x_of(it.own), a0, a1) : a0;
        draw_span(dl, st, g, cc, s, it, li, ry, a0, a1, own_x);
      }
    }
    dl->PopClipRect();
    if (li + 1 < tl.lanes.size()) dl->AddLine(ImVec2(origin.x, ly + lane_h), ImVec2(x1, ly + lane_h), ImGui::GetColorU32(ImVec4(1, 1, 1, 0.06f)));
    if (hovered && io.MousePos.y >= ly && io.MousePos.y < ly + lane_h && io.MousePos.x >= x0) {
      hover_lane = static_cast<int>(li);
      const int row = std::min(lane.rows() - 1, static_cast<int>((io.MousePos.y - ly) / row_h));
      const auto t = static_cast<std::int64_t>(st.t0 + (io.MousePos.x - x0) * ns_per_px);
      hover_item = item_at(lane, row, t, static_cast<std::int64_t>(2 * ns_per_px));
    }
  }
  dl->PopClipRect();
  if (hover_item >= 0) {
    const TimelineItem& it = tl.lanes[static_cast<std::size_t>(hover_lane)].items[static_cast<std::size_t>(hover_item)];
    if (!ImGui::IsMouseDragging(ImGuiMouseButton_Left)) item_tooltip(st, it, ui.time_mode);
    if (ImGui::IsItemDeactivated() && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left, 2.0f)) {
      st.sel_lane = hover_lane;
      st.sel_item = hover_item;
      if (it.kind == ItemKind::kernel) ui.kernels.selected = kernel_name(tl.trace->kernels[static_cast<std::size_t>(it.index)]);
      if (it.kind == ItemKind::stage) ui.kernels.selected = tl.trace->stages[static_cast<std::size_t>(it.index)].kernel;
    }
  }
}

}  // namespace

}  // namespace moc::gui

// Roofline: the Timeline's point's kernels against the device's measured ceilings, on log-log axes -- x the
// arithmetic intensity (FLOP per byte the op declared), y the achieved TFLOP/s -- one marker per (kernel, phase)
// (prof::roofline's rows), its area by time per step and its colour by % of floor (red far from the floor, green
// at it), under the memory roof (copy GB/s x intensity) and the compute roof (GEMM TFLOP/s) that meet at the
// ridge point. Kernels that do no arithmetic (0 FLOP) are squares at a fixed small intensity, at the height their
// bandwidth gives there. Below, the same rows as a sortable table (lost time first); undeclared kernels last.
// Hovering a marker or a row tells everything about it; clicking one selects the kernel (shared with Timeline
// and Kernels). Times follow the shared exclusive / inclusive toggle. Without ceilings (an older file) the
// achieved rates are plotted with no roofs. Data: gui/model/roofline.
#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gui/model/units.h"
#include "gui/views/views.h"

namespace moc::gui {

namespace {
constexpr float kMinRadius = 4.0f, kMaxRadius = 16.0f;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string format_flops(double f) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(f) >= 1000 && u < 5) {
    f /= 1000;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %sFLOP" : "%.3g %sFLOP", f, units[u]);
  return buf;
}

std::string pct_text(double pct) { return std::isnan(pct) ? std::string("-") : fmt("%.1f%%", pct); }

void update_roofline(Store& store, UiState& ui) {
  RooflineState& rs = ui.roofline;
  std::shared_ptr<const prof::ProfileTrace> trace;
  std::optional<db::CeilingsRecord> ceilings = rs.ceilings;
  const RunRef a = run_a(ui);
  if (ui.timeline.pinned) {
    trace = ui.timeline.timeline.trace;
    ceilings = ui.timeline.ceilings;
  } else if (a.valid()) {
    const std::int64_t pid = current_point(store, ui, true);
    if (pid >= 0) trace = store.profile(a, pid);
    // Looking the ceilings up scans the profile's kernels: once per profile and store change.
    if (trace != rs.trace || store.generation() != rs.generation)
      ceilings = trace ? ceilings_for_trace(store.ceilings(a), *trace) : std::nullopt;
  }
  rs.generation = store.generation();
  if (trace != rs.trace || ui.time_mode != rs.mode || ceilings != rs.ceilings) {
    rs.trace = trace;
    rs.mode = ui.time_mode;
    rs.ceilings = ceilings;
    rs.plot = trace ? build_roofline(*trace, ceilings, rs.mode) : RooflinePlot{};
    rs.order = roofline_order(rs.plot, rs.sort, rs.sort_descending);
    rs.fit = true;
    rs.hovered = -1;
  }
}

// Everything about one row (a marker's or a table row's tooltip).
void row_tooltip(const RooflinePlot& p, const prof::RooflineRow& r, bool zero_flops_marker) {
  ImGui::BeginTooltip();
  ImGui::Text("%s", r.kernel.c_str());
  ImGui::Text("phase %s   op %s", r.phase.c_str(), r.declared ? r.op.c_str() : "(undeclared)");
  const double steps = std::max(1, p.roofline.steps);
  ImGui::Text("time per step %s (%s device time), %.4g instance(s) per step", format_ns(r.time_ns).c_str(),
              prof::time_mode_name(p.roofline.mode), static_cast<double>(r.instances) / steps);
  if (!r.declared) {
    ImGui::TextDisabled("its op declared no cost (bytes, FLOPs): no place on the roofline, no floor");
    ImGui::EndTooltip();
    return;
  }
  ImGui::Text("per step: %s%s, %s", format_bytes(r.bytes).c_str(), r.bound ? " (an upper bound)" : "", format_flops(r.flops).c_str());
  if (r.flops > 0) ImGui::Text("intensity %.4g FLOP/byte", r.intensity());
  else ImGui::Text("intensity 0 (no arithmetic: pure data movement)");
  ImGui::Text("%.4g GB/s  (%s of bandwidth)", r.GBps(), pct_text(p.pct_bandwidth(r)).c_str());
  ImGui::Text("%.4g TFLOP/s  (%s of peak)", r.tflops(), pct_text(p.pct_peak(r)).c_str());
  if (p.has_ceilings()) {
    const double pf = p.pct_floor(r);
    ImGui::Text("floor %s per step:", format_ns(r.floor_ns).c_str());
    ImGui::SameLine();
    ImGui::TextColored(floor_color(pf), "%s of floor", pct_text(pf).c_str());
    ImGui::SameLine();
    ImGui::Text("lost %s per step", format_ns(r.lost_ns).c_str());
    if (pf > 100) ImGui::TextDisabled("faster than the measured ceilings (data that stayed in a cache?)");
  } else {
    ImGui::TextDisabled("no measured ceilings in this run: no floor");
  }
  if (zero_flops_marker)
    ImGui::TextDisabled("0 FLOP cannot stand on a log axis: drawn at %.3g FLOP/byte, at the height its GB/s gives there\n"
                        "(so its distance below the memory roof is its share of the bandwidth)",
                        p.zero_flop_intensity);
  ImGui::EndTooltip();
}

// The plot's title: the device and its measured ceilings (or that the run has none).
std::string roofline_title(const RooflinePlot& p) {
  if (!p.has_ceilings()) return "achieved rates (this run has no measured ceilings: no roofs)##roofline";
  const db::CeilingsRecord& c = *p.ceilings;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s: copy %.4g GB/s, %s GEMM %.4g TFLOP/s (%s)##roofline", c.device.c_str(), c.copy_GBps,
                c.gemm_dtype.c_str(), c.gemm_tflops, c.source.empty() ? "measured" : c.source.c_str());
  return buf;
}

// The memory and compute roofs (from lo to hi, beyond the limits on both sides, so panning does not find their ends)
// and the vertical line where 0-FLOP kernels stand.
void plot_roofs(const RooflinePlot& p, double lo, double hi) {
  if (p.has_ceilings()) {
    const double peak = p.compute_roof(), ridge = p.ridge_intensity;
    const double mx[2] = {lo, ridge}, my[2] = {p.memory_roof(lo), peak};
    const double cx[2] = {ridge, hi}, cy[2] = {peak, peak};
    ImPlotSpec spec;
    spec.LineWeight = 2.5f;
    spec.LineColor = roof_color(false);
    const std::string mem = fmt("memory roof: copy %.4g GB/s", p.ceilings->copy_GBps);
    ImPlot::PlotLine(mem.c_str(), mx, my, 2, spec);
    spec.LineColor = roof_color(true);
    const std::string comp = "compute roof: " + p.ceilings->gemm_dtype + fmt(" GEMM %.4g TFLOP/s", peak);
    ImPlot::PlotLine(comp.c_str(), cx, cy, 2, spec);
  }
  if (p.zero_flop_intensity > 0) {
    ImPlotSpec spec;
    spec.LineColor = ImVec4(0.7f, 0.7f, 0.7f, 0.35f);
    const std::string zl = fmt("0 FLOP (data movement): squares at %.3g FLOP/byte", p.zero_flop_intensity);
    ImPlot::PlotInfLines(zl.c_str(), &p.zero_flop_intensity, 1, spec);
  }
}

// The markers, by hand (per-marker size, colour and outline): biggest first, so small ones stay visible. Their
// pixel centres and radii go to rs.marker_px.
void draw_markers(ImDrawList* dl, const UiState& ui, RooflineState& rs) {
  const RooflinePlot& p = rs.plot;
  const auto& rows = p.roofline.rows;
  rs.marker_px.assign(p.markers.size(), {0, 0, 0});
  for (std::size_t i = 0; i < p.markers.size(); ++i) {
    const RooflineMarker& m = p.markers[i];
    const prof::RooflineRow& r = rows[m.row];
    const ImVec2 c = ImPlot::PlotToPixels(m.x, m.y);
    const float rad = kMinRadius + (kMaxRadius - kMinRadius) * static_cast<float>(m.size);
    const ImU32 fill = ImGui::GetColorU32(floor_color(p.pct_floor(r)));
    const bool sel = !ui.kernels.selected.empty() && r.kernel == ui.kernels.selected;
    const ImU32 edge = sel ? IM_COL32(255, 255, 255, 255) : IM_COL32(0, 0, 0, 200);
    if (m.zero_flops) {
      const float h = rad * 0.85f;
      dl->AddRectFilled(ImVec2(c.x - h, c.y - h), ImVec2(c.x + h, c.y + h), fill);
      dl->AddRect(ImVec2(c.x - h, c.y - h), ImVec2(c.x + h, c.y + h), edge, 0, 0, sel ? 2.5f : 1.0f);
    } else {
      dl->AddCircleFilled(c, rad, fill);
      dl->AddCircle(c, rad, edge, 0, sel ? 2.5f : 1.0f);
    }
    rs.marker_px[i] = {c.x, c.y, rad};
  }
}

// Whether a label box (x0, y0, x1, y1 in pixels) crosses a roof. The roofs are straight on log-log axes, with one
// bend at the ridge: over a box's x-range their pixel y spans the values at its two ends and at the ridge (when
// inside).
struct RoofClash {
  const RooflinePlot& p;
  float ridge_px;

  explicit RoofClash(const RooflinePlot& plot)
      : p(plot), ridge_px(plot.has_ceilings() ? ImPlot::PlotToPixels(plot.ridge_intensity, plot.compute_roof()).x : 0) {}
  float roof_px(float x) const {
    const double v = ImPlot::PixelsToPlot(ImVec2(x, 0)).x;
    return ImPlot::PlotToPixels(v, std::min(p.memory_roof(v), p.compute_roof())).y;
  }
  bool crosses(const ImVec4& b) const {
    if (!p.has_ceilings()) return false;
    float top = std::min(roof_px(b.x), roof_px(b.z)), bottom = std::max(roof_px(b.x), roof_px(b.z));
    if (ridge_px > b.x && ridge_px < b.z) {
      top = std::min(top, roof_px(ridge_px));
      bottom = std::max(bottom, roof_px(ridge_px));
    }
    return top < b.w + 2 && bottom > b.y - 2;
  }
};

bool boxes_overlap(const ImVec4& a, const ImVec4& b) { return a.x < b.z && b.x < a.z && a.y < b.w && b.y < a.w; }

// The ridge point: a dot, and its intensity above the roofs, left of it (above the memory roof nothing stands
// unless it beat the measured bandwidth). Its label's box goes to placed.
void draw_ridge(ImDrawList* dl, const RooflinePlot& p, ImVec2 pp, ImVec2 ps, std::vector<ImVec4>& placed) {
  const ImVec2 rp = ImPlot::PlotToPixels(p.ridge_intensity, p.compute_roof());
  const std::string label = fmt("ridge %.3g FLOP/byte", p.ridge_intensity);
  const ImVec2 ts = ImGui::CalcTextSize(label.c_str());
  const float x0 = std::clamp(rp.x - ts.x - 10, pp.x + 2, std::max(pp.x + 2, pp.x + ps.x - ts.x - 6));
  const float y0 = std::clamp(rp.y - ts.y - 8, pp.y + 2, std::max(pp.y + 2, pp.y + ps.y - ts.y - 4));
  const ImVec4 box(x0, y0, x0 + ts.x + 4, y0 + ts.y + 2);
  dl->AddCircleFilled(rp, 3.5f, ImGui::GetColorU32(roof_color(true)));
  dl->AddRectFilled(ImVec2(box.x, box.y), ImVec2(box.z, box.w), IM_COL32(20, 20, 24, 200), 2.0f);
  dl->AddText(ImVec2(box.x + 2, box.y + 1), IM_COL32(230, 230, 230, 255), label.c_str());
  placed.push_back(box);
}

// Names of the (at most 8) markers that lose the most time (rows are by lost time), right, left, above or below the
// marker, where they cover no other label, no other marker and no roof.
void label_markers(ImDrawList* dl, const RooflineState& rs, ImVec2 pp, ImVec2 ps, std::vector<ImVec4>& placed) {
  const RooflinePlot& p = rs.plot;
  const auto& rows = p.roofline.rows;
  std::vector<std::size_t> by_row(p.markers.size());
  for (std::size_t i = 0; i < by_row.size(); ++i) by_row[i] = i;
  std::sort(by_row.begin(), by_row.end(), [&](std::size_t a, std::size_t b) { return p.markers[a].row < p.markers[b].row; });
  const RoofClash roofs(p);
  int labelled = 0;
  for (std::size_t i : by_row) {
    if (labelled >= 8) break;
    const auto& mp = rs.marker_px[i];
    const prof::RooflineRow& r = rows[p.markers[i].row];
    const std::string label = r.kernel + " (" + r.phase + ")";
    const ImVec2 ts = ImGui::CalcTextSize(label.c_str());
    const ImVec2 at[4] = {{mp[0] + mp[2] + 4, mp[1] - ts.y / 2 - 1},
                          {mp[0] - mp[2] - 8 - ts.x, mp[1] - ts.y / 2 - 1},
                          {mp[0] - ts.x / 2 - 2, mp[1] - mp[2] - ts.y - 5},
                          {mp[0] - ts.x / 2 - 2, mp[1] + mp[2] + 3}};
    for (const ImVec2& a : at) {
      const ImVec4 box(a.x, a.y, a.x + ts.x + 4, a.y + ts.y + 2);
      if (box.x < pp.x || box.z > pp.x + ps.x || box.y < pp.y || box.w > pp.y + ps.y) continue;
      bool clash = roofs.crosses(box) || std::any_of(placed.begin(), placed.end(), [&](const ImVec4& o) { return boxes_overlap(box, o); });
      for (std::size_t j = 0; j < rs.marker_px.size() && !clash; ++j) {
        const auto& o = rs.marker_px[j];
        clash = j != i && boxes_overlap(box, ImVec4(o[0] - o[2], o[1] - o[2], o[0] + o[2], o[1] + o[2]));
      }
      if (clash) continue;
      placed.push_back(box);
      dl->AddRectFilled(ImVec2(box.x, box.y), ImVec2(box.z, box.w), IM_COL32(20, 20, 24, 200), 2.0f);
      dl->AddText(ImVec2(box.x + 2, box.y + 1), IM_COL32(230, 230, 230, 255), label.c_str());
      ++labelled;
      break;
    }
  }
}

// Hover: the marker under the pointer (the smallest when several); click selects its kernel; double-click goes back
// to the whole plot.
void roofline_hover(UiState& ui, RooflineState& rs) {
  const RooflinePlot& p = rs.plot;
  const ImVec2 mouse = ImGui::GetMousePos();
  float best = 1e30f;
  for (std::size_t i = 0; i < rs.marker_px.size(); ++i) {
    const auto& mp = rs.marker_px[i];
    const float d = std::hypot(mouse.x - mp[0], mouse.y - mp[1]);
    if (d <= mp[2] + 2 && mp[2] < best) {
      best = mp[2];
      rs.hovered = static_cast<int>(i);
    }
  }
  if (rs.hovered >= 0) {
    const RooflineMarker& m = p.markers[static_cast<std::size_t>(rs.hovered)];
    row_tooltip(p, p.roofline.rows[m.row], m.zero_flops);
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) ui.kernels.selected = p.roofline.rows[m.row].kernel;
  }
  if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) rs.fit = true;
}

void roofline_plot(UiState& ui, float height) {
  RooflineState& rs = ui.roofline;
  const RooflinePlot& p = rs.plot;
  const std::string title = roofline_title(p);
  if (!ImPlot::BeginPlot(title.c_str(), ImVec2(-1, height))) return;
  ImPlot::SetupAxes("arithmetic intensity (FLOP/byte)", "achieved TFLOP/s");
  ImPlot::SetupAxisScale(ImAxis_X1, ImPlotScale_Log10);
  ImPlot::SetupAxisScale(ImAxis_Y1, ImPlotScale_Log10);
  ImPlot::SetupAxesLimits(p.x_min, p.x_max, p.y_min, p.y_max, rs.fit ? ImPlotCond_Always : ImPlotCond_Once);
  rs.fit = false;
  ImPlot::SetupLegend(ImPlotLocation_NorthWest);
  plot_roofs(p, p.x_min / 1e3, p.x_max * 1e3);
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  const ImVec2 pp = ImPlot::GetPlotPos(), ps = ImPlot::GetPlotSize();
  rs.plot_rect[0] = pp.x;
  rs.plot_rect[1] = pp.y;
  rs.plot_rect[2] = ps.x;
  rs.plot_rect[3] = ps.y;
  ImPlot::PushPlotClipRect();
  draw_markers(dl, ui, rs);
  std::vector<ImVec4> placed;  // label boxes: x0, y0, x1, y1
  if (p.has_ceilings()) draw_ridge(dl, p, pp, ps, placed);
  label_markers(dl, rs, pp, ps, placed);
  ImPlot::PopPlotClipRect();
  rs.hovered = -1;
  if (ImPlot::IsPlotHovered()) roofline_hover(ui, rs);
  ImPlot::EndPlot();
}

void roofline_table(UiState& ui) {
  RooflineState& rs = ui.roofline;
  const RooflinePlot& p = rs.plot;
  const auto& rows = p.roofline.rows;
  rs.table_rows.clear();
  constexpr ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                    ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable | ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("roofline_rows", 11, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  constexpr ImGuiTableColumnFlags num = ImGuiTableColumnFlags_PreferSortDescending;
  ImGui::TableSetupColumn("time/step", num, 0, static_cast<ImGuiID>(RooflineColumn::time));
  ImGui::TableSetupColumn("GB/s", num, 0, static_cast<ImGuiID>(RooflineColumn::gbps));
  ImGui::TableSetupColumn("% bw", num, 0, static_cast<ImGuiID>(RooflineColumn::pct_bw));
  ImGui::TableSetupColumn("TFLOP/s", num, 0, static_cast<ImGuiID>(RooflineColumn::tflops));
  ImGui::TableSetupColumn("% peak", num, 0, static_cast<ImGuiID>(RooflineColumn::pct_peak));
  ImGui::TableSetupColumn("floor", num, 0, static_cast<ImGuiID>(RooflineColumn::floor));
  ImGui::TableSetupColumn("% floor", num, 0, static_cast<ImGuiID>(RooflineColumn::pct_floor));
  ImGui::TableSetupColumn("lost", num | ImGuiTableColumnFlags_DefaultSort, 0, static_cast<ImGuiID>(RooflineColumn::lost));
  ImGui::TableSetupColumn("phase", 0, 0, static_cast<ImGuiID>(RooflineColumn::phase));
  ImGui::TableSetupColumn("op", 0, 0, static_cast<ImGuiID>(RooflineColumn::op));
  ImGui::TableSetupColumn("kernel", ImGuiTableColumnFlags_WidthStretch, 0, static_cast<ImGuiID>(RooflineColumn::kernel));
  ImGui::TableHeadersRow();
  if (ImGuiTableSortSpecs* ss = ImGui::TableGetSortSpecs(); ss && ss->SpecsDirty) {
    if (ss->SpecsCount > 0) {
      rs.sort = static_cast<RooflineColumn>(ss->Specs[0].ColumnUserID);
      rs.sort_descending = ss->Specs[0].SortDirection == ImGuiSortDirection_Descending;
    }
    rs.order = roofline_order(p, rs.sort, rs.sort_descending);
    ss->SpecsDirty = false;
  }
  const bool known = p.has_ceilings();
  for (std::size_t k = 0; k < rs.order.size(); ++k) {
    const std::size_t i = rs.order[k];
    const prof::RooflineRow& r = rows[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::PushID(static_cast<int>(i));
    const bool sel = !ui.kernels.selected.empty() && r.kernel == ui.kernels.selected;
    if (ImGui::Selectable(format_ns(r.time_ns).c_str(), sel, ImGuiSelectableFlags_SpanAllColumns)) ui.kernels.selected = r.kernel;
    if (ImGui::IsItemHovered()) {
      bool zero = false;
      for (const auto& m : p.markers)
        if (m.row == i) zero = m.zero_flops;
      row_tooltip(p, r, zero);
    }
    ImGui::PopID();
    {
      const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
      rs.table_rows.emplace_back(r.kernel, 0.5f * (lo.y + hi.y));
      rs.table_x = lo.x + 10;
    }
    auto cell = [](const std::string& s) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(s.c_str());
    };
    if (!r.declared) {
      for (int c = 0; c < 7; ++c) cell("-");
      cell(r.phase);
      ImGui::TableNextColumn();
      ImGui::TextDisabled("(undeclared)");
      cell(r.kernel);
      continue;
    }
    cell(fmt("%.4g", r.GBps()));
    cell(pct_text(p.pct_bandwidth(r)));
    cell(fmt("%.4g", r.tflops()));
    cell(pct_text(p.pct_peak(r)));
    cell(known ? format_ns(r.floor_ns) : "-");
    ImGui::TableNextColumn();
    if (known) ImGui::TextColored(floor_color(p.pct_floor(r)), "%s", pct_text(p.pct_floor(r)).c_str());
    else ImGui::TextUnformatted("-");
    cell(known ? format_ns(r.lost_ns) : "-");
    cell(r.phase);
    cell(r.bound ? r.op + " (bound)" : r.op);
    cell(r.kernel);
  }
  ImGui::EndTable();
}
}  // namespace

void draw_roofline_view(Store& store, UiState& ui) {
  if (!begin_point_view(store, ui, View::roofline, true)) return;
  update_roofline(store, ui);
  RooflineState& rs = ui.roofline;
  if (!rs.trace) {
    end_without_profile();
    return;
  }
  const RooflinePlot& p = rs.plot;
  const prof::Roofline& rf = p.roofline;
  const ImVec4 warn(0.95f, 0.7f, 0.3f, 1);
  if (!p.has_ceilings())
    ImGui::TextColored(warn, "This run has no measured device ceilings (a file from before they were recorded): achieved rates "
                             "only -- no roofs, no floor.");
  if (p.declared_rows == 0)
    ImGui::TextColored(warn, "No kernel of this point declared its cost (bytes, FLOPs): a profile from before op costs were "
                             "recorded, or ops that declare none.");
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  if (p.has_ceilings()) {
    ImGui::TextWrapped("%d step(s), %s device time: declared kernels %s per step against a floor of %s (%.1f%% of floor); "
                        "undeclared %s; ridge at %.3g FLOP/byte",
                        rf.steps, prof::time_mode_name(rf.mode), format_ns(rf.declared_ns).c_str(), format_ns(rf.floor_ns).c_str(),
                        rf.declared_ns > 0 ? 100.0 * rf.floor_ns / rf.declared_ns : 0.0,
                        format_ns(rf.time_ns - rf.declared_ns).c_str(), p.ridge_intensity);
  } else {
    ImGui::TextWrapped("%d step(s), %s device time: declared kernels %s per step; undeclared %s", rf.steps,
                       prof::time_mode_name(rf.mode), format_ns(rf.declared_ns).c_str(),
                       format_ns(rf.time_ns - rf.declared_ns).c_str());
  }
  ImGui::PopStyleColor();
  const float avail = ImGui::GetContentRegionAvail().y;
  roofline_plot(ui, std::max(220.0f, avail * 0.6f));
  floor_color_bar(240);
  ImGui::SameLine(0, 24);
  ImGui::TextDisabled("size: time per step; squares: 0 FLOP%s; click a marker or a row to select its kernel",
                      p.unplotted ? (", " + std::to_string(p.unplotted) + " declared row(s) without time or bytes not drawn").c_str() : "");
  roofline_table(ui);
  ImGui::End();
}

}  // namespace moc::gui

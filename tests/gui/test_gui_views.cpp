// The dashboard's views rendered (Xvfb + Mesa's software renderer under CTest) from a database made by a real
// `mocbench run`: each view's window holds its expected colours; input through ImGui's queue zooms and pans the
// timeline, selects a kernel and selects runs; refused files show their error and make screenshot mode exit 1.
#include <gtest/gtest.h>
#include <imgui.h>
#include <implot.h>
#include <implot_internal.h>
#include <imgui_internal.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <fstream>

#include "gui/app/dashboard.h"
#include "tests/gui/gui_fixture.h"

namespace moc::gui {
namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  // Pixels in the rectangle within `tol` of colour c (each channel).
  int count(const float rect[4], const ImVec4& c, int tol = 6) const {
    int n = 0;
    const int x0 = std::max(0, static_cast<int>(rect[0])), y0 = std::max(0, static_cast<int>(rect[1]));
    const int x1 = std::min(w, static_cast<int>(rect[0] + rect[2])), y1 = std::min(h, static_cast<int>(rect[1] + rect[3]));
    const int r = static_cast<int>(std::lround(c.x * 255)), g = static_cast<int>(std::lround(c.y * 255)),
              b = static_cast<int>(std::lround(c.z * 255));
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const unsigned char* p = &px[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 4];
        if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol) ++n;
      }
    return n;
  }
  // Pixels whose channel `ch` exceeds both others by `margin` (a green or red tint of any shade).
  int dominant(const float rect[4], int ch, int margin) const {
    int n = 0;
    for (int y = std::max(0, static_cast<int>(rect[1])); y < std::min(h, static_cast<int>(rect[1] + rect[3])); ++y)
      for (int x = std::max(0, static_cast<int>(rect[0])); x < std::min(w, static_cast<int>(rect[0] + rect[2])); ++x) {
        const unsigned char* p = &px[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 4];
        const int c = p[ch], o1 = p[(ch + 1) % 3], o2 = p[(ch + 2) % 3];
        if (c > o1 + margin && c > o2 + margin) ++n;
      }
    return n;
  }
};

// The timeline's shade for a run of merged items of colour c (timeline_view.cpp: c x 0.75 at alpha 0.85) over its
// background (0.10, 0.10, 0.12).
ImVec4 merged_shade(const ImVec4& c) {
  auto mix = [](float v, float bg) { return 0.85f * 0.75f * v + 0.15f * bg; };
  return ImVec4(mix(c.x, 0.10f), mix(c.y, 0.10f), mix(c.z, 0.12f), 1.0f);
}

// Legend entries of every plot ImPlot drew (kept in its context after the frame).
std::vector<std::string> legend_labels() {
  std::vector<std::string> out;
  ImPlotContext* ctx = ImPlot::GetCurrentContext();
  for (int i = 0; i < ctx->Plots.GetBufSize(); ++i) {
    ImPlotPlot* plot = ctx->Plots.GetByIndex(i);
    for (int k = 0; k < plot->Items.GetLegendCount(); ++k) out.emplace_back(plot->Items.GetLegendLabel(k));
  }
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class GuiViews : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("DISPLAY")) GTEST_SKIP() << "no display (CTest runs this under xvfb-run)";
  }
  std::unique_ptr<Dashboard> open(std::vector<std::string> dbs, View v, int w = 1400, int h = 900) {
    DashboardOptions o;
    o.databases = std::move(dbs);
    o.width = w;
    o.height = h;
    o.focus = v;
    o.scripted_input = true;
    o.refresh_s = 1e9;
    auto d = std::make_unique<Dashboard>(o);
    std::string err;
    if (!d->init(&err)) {
      ADD_FAILURE() << err;
      return nullptr;
    }
    for (int i = 0; i < 4; ++i) d->frame();
    return d;
  }
  Image shot(Dashboard& d) {
    Image im;
    im.px = d.pixels(&im.w, &im.h);
    return im;
  }
  static void frames(Dashboard& d, int n) {
    for (int i = 0; i < n; ++i) d.frame();
  }
};

TEST_F(GuiViews, EveryViewDrawsItsDataWithTheExpectedColours) {
  auto d = open({test::fixture_db()}, View::sweep);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->ui().selected.size(), 1u) << "the newest run is selected at start";
  float r[4];

  ASSERT_TRUE(d->view_rect(View::runs, r));
  Image im = shot(*d);
  EXPECT_GT(im.w, 0);
  EXPECT_GT(im.count(r, ImVec4(0.4f, 0.85f, 0.4f, 1), 30), 5) << "the run's status 'ok' in green";

  ASSERT_TRUE(d->view_rect(View::sweep, r));
  // ImPlot's default colormap (Deep): the first two series.
  EXPECT_GT(im.count(r, ImVec4(0.298f, 0.447f, 0.690f, 1), 8), 50) << "first series line";
  EXPECT_GT(im.count(r, ImVec4(0.867f, 0.518f, 0.322f, 1), 8), 50) << "second series line";
  {
    const auto legend_sweep = legend_labels();
    EXPECT_TRUE(has(legend_sweep, "mode=ffn-decode ffn=dense")) << "one line per combination of the other axes";
    EXPECT_TRUE(has(legend_sweep, "mode=ffn-decode ffn=moc byte floor"));
  }

  d->show(View::breakdown);
  frames(*d, 3);
  im = shot(*d);
  ASSERT_TRUE(d->view_rect(View::breakdown, r));
  EXPECT_GT(im.count(r, part_color(0)), 200) << "gate bars";
  EXPECT_GT(im.count(r, part_color(1)), 200) << "up & down bars";
  EXPECT_GT(im.count(r, part_color(3)), 200) << "other bars";
  EXPECT_GT(im.count(r, phase_color("attention")), 30) << "phase bars: attention";
  auto legend = legend_labels();
  for (const char* l : {"gate", "up & down", "top-K", "other", "timed total", "attention"}) EXPECT_TRUE(has(legend, l)) << l;

  d->show(View::timeline);
  frames(*d, 3);
  im = shot(*d);
  ASSERT_TRUE(d->view_rect(View::timeline, r));
  EXPECT_GT(d->ui().timeline.timeline.items, 0u);
  EXPECT_GT(d->ui().timeline.spans_drawn, 0u);
  // An op is drawn in its phase's colour, or -- merged with neighbours under 2 px wide, as a CPU run's ops can be
  // when one slow op stretches the fitted trace -- in that colour's merged shade: either counts.
  EXPECT_GT(im.count(r, phase_color("attention")) + im.count(r, merged_shade(phase_color("attention"))), 30)
      << "attention ops";
  EXPECT_GT(im.count(r, phase_color("ffn.gate")) + im.count(r, merged_shade(phase_color("ffn.gate"))), 10)
      << "gate ops";

  d->show(View::memory);
  frames(*d, 3);
  im = shot(*d);
  ASSERT_TRUE(d->view_rect(View::memory, r));
  // The first point is a training point: weights, optimizer state and activations stacked.
  EXPECT_GT(im.count(r, memory_color("weights"), 10), 1000);
  EXPECT_GT(im.count(r, memory_color("optimizer_state"), 10), 1000);
  EXPECT_GT(im.count(r, memory_color("activations: attention"), 10), 200);
  EXPECT_GT(im.count(r, ImVec4(1.0f, 0.2f, 0.2f, 1), 10), 50) << "the peak line";
  legend = legend_labels();
  for (const char* l : {"weights", "gradients", "optimizer_state", "activations: ffn", "peak"}) EXPECT_TRUE(has(legend, l)) << l;
  d->ui().memory_mode = 1;
  frames(*d, 2);
  im = shot(*d);
  EXPECT_GT(im.count(r, memory_color("weights"), 10), 1000) << "Figure 1 bars";
}

TEST_F(GuiViews, TrainingDrawsCurvesPerPointAndAPointsGateHistograms) {
  auto d = open({test::text_fixture_db()}, View::training);
  ASSERT_TRUE(d);
  float r[4];
  frames(*d, 3);
  Image im = shot(*d);
  ASSERT_TRUE(d->view_rect(View::training, r));
  EXPECT_GT(im.count(r, ImVec4(0.298f, 0.447f, 0.690f, 1), 8), 50) << "first point's curve";
  EXPECT_GT(im.count(r, ImVec4(0.867f, 0.518f, 0.322f, 1), 8), 50) << "second point's curve";
  auto legend = legend_labels();
  EXPECT_TRUE(has(legend, "ffn=dense"));
  EXPECT_TRUE(has(legend, "ffn=moc"));
  d->ui().training_mode = 1;
  d->ui().point_id = d->store().points(d->ui().selected[0])[1].id;  // the MoC point
  frames(*d, 3);
  im = shot(*d);
  EXPECT_GT(im.count(r, ImVec4(0.298f, 0.447f, 0.690f, 1), 8), 500) << "histogram bars";
  EXPECT_GT(im.count(r, ImVec4(0.95f, 0.30f, 0.25f, 1), 12), 50) << "the top-K threshold line";
  legend = legend_labels();
  EXPECT_TRUE(has(legend, "top-K threshold"));
}

TEST_F(GuiViews, CompareColoursBetterAndLeavesNoiseUnhighlighted) {
  // A and B: the fixture with every median's noise fixed at 1% (verdicts independent of how busy the machine
  // was); B's FFN decode layer twice as fast, nothing else changed.
  const std::string a = test::fixture_copy("slower.db"), b = test::fixture_copy("faster.db");
  for (const auto& f : {a, b}) test::sql(f, "UPDATE metrics SET value = 0.01 WHERE name = 'noise';");
  test::sql(b, "UPDATE metrics SET value = value * 0.5 WHERE name = 'latency_us';");
  auto d = open({a, b}, View::compare);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->ui().selected.size(), 2u) << "the second database's newest run is B";
  float r[4];
  ASSERT_TRUE(d->view_rect(View::compare, r));
  const Image im = shot(*d);
  EXPECT_GT(im.dominant(r, 1, 40), 300) << "green cells: B better";
  EXPECT_LT(im.dominant(r, 0, 60), 50) << "no red cell: everything else equal";
}

TEST_F(GuiViews, WheelZoomsDragPansAndClickSelectsAKernelWithItsRunStatistics) {
  auto d = open({test::fixture_db()}, View::timeline);
  ASSERT_TRUE(d);
  TimelineState& st = d->ui().timeline;
  ASSERT_GT(st.timeline.items, 0u);
  ImGuiIO& io = ImGui::GetIO();
  // Whole pixels: ImGui rounds the mouse position.
  const float y = std::floor(st.lanes_y0 + st.lane_height * 0.5f);  // the first lane: CPU ops
  const float x = std::floor(0.5f * (st.lanes_x0 + st.lanes_x1));
  io.AddMousePosEvent(x, y);
  frames(*d, 1);
  const double w0 = st.t1 - st.t0;
  const double at = st.t0 + (x - st.lanes_x0) * w0 / (st.lanes_x1 - st.lanes_x0);
  io.AddMouseWheelEvent(0, 3);
  frames(*d, 1);
  const double w1 = st.t1 - st.t0;
  EXPECT_NEAR(w1 / w0, std::pow(0.8, 3), 1e-6) << "three wheel notches zoom in";
  EXPECT_NEAR(st.t0 + (x - st.lanes_x0) * w1 / (st.lanes_x1 - st.lanes_x0), at, w0 * 1e-6) << "around the cursor";
  // Drag 100 px to the right: the window moves 100 px worth of time to the left.
  const double t0 = st.t0, ns_per_px = w1 / (st.lanes_x1 - st.lanes_x0);
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  for (int i = 1; i <= 4; ++i) {
    io.AddMousePosEvent(x + 25.0f * static_cast<float>(i), y);
    frames(*d, 1);
  }
  io.AddMouseButtonEvent(0, false);
  frames(*d, 1);
  EXPECT_NEAR(st.t0 - t0, -100 * ns_per_px, 3 * ns_per_px);
  EXPECT_TRUE(d->ui().kernels.selected.empty()) << "a drag selects nothing";
  // Show an op of the CPU lane 20 times its width across the lanes, then click its middle.
  io.AddMousePosEvent(-1000, -1000);
  frames(*d, 1);
  const TimelineLane& lane = st.timeline.lanes[0];
  const auto& first = lane.items[lane.items.size() / 2];
  const double mid = 0.5 * static_cast<double>(first.start + first.end);
  const double w = std::max(1000.0, 20.0 * static_cast<double>(first.end - first.start));
  st.t0 = mid - w / 2;
  st.t1 = mid + w / 2;
  frames(*d, 1);
  const float cx = std::floor(st.lanes_x0 + static_cast<float>((mid - st.t0) / (st.t1 - st.t0)) * (st.lanes_x1 - st.lanes_x0));
  io.AddMousePosEvent(cx, y);
  frames(*d, 30);  // half a second after the drag's press: this click is not its double-click
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, false);
  frames(*d, 2);
  const KernelStatsState& ks = d->ui().kernels;
  ASSERT_FALSE(ks.selected.empty()) << "the click selected the op under the cursor";
  EXPECT_EQ(ks.selected, kernel_name(st.timeline.trace->kernels[static_cast<std::size_t>(first.index)]));
  EXPECT_EQ(st.sel_lane, 0);
  EXPECT_EQ(st.sel_item, static_cast<int>(lane.items.size() / 2));
  EXPECT_FALSE(ks.over_run.empty()) << "its statistics over the run's profiled points";
  ASSERT_GE(ks.row, 0) << "and in this point";
  EXPECT_GT(ks.table[static_cast<std::size_t>(ks.row)].stats.count, 0u);
  // Double-click fits the whole trace again.
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, false);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, false);
  frames(*d, 2);
  EXPECT_LE(st.t0, static_cast<double>(st.timeline.start_ns));
  EXPECT_GE(st.t1, static_cast<double>(st.timeline.end_ns));
}

// The toggle is one state for every view: clicking "inclusive" in Breakdown re-derives its bars inclusive, and
// the Timeline's toggle shows (and sets) the same state.
TEST_F(GuiViews, TimeModeToggleSwitchesBreakdownAndTimelineTogether) {
  auto d = open({test::fixture_db()}, View::breakdown);
  ASSERT_TRUE(d);
  UiState& ui = d->ui();
  frames(*d, 2);
  EXPECT_EQ(ui.time_mode, prof::TimeMode::exclusive) << "exclusive by default";
  EXPECT_EQ(ui.breakdown.data.mode, prof::TimeMode::exclusive);
  ImGuiIO& io = ImGui::GetIO();
  auto click = [&](const float at[2]) {
    io.AddMousePosEvent(std::floor(at[0]), std::floor(at[1]));
    frames(*d, 1);
    io.AddMouseButtonEvent(0, true);
    frames(*d, 1);
    io.AddMouseButtonEvent(0, false);
    frames(*d, 2);
  };
  click(ui.time_mode_button[1]);
  EXPECT_EQ(ui.time_mode, prof::TimeMode::inclusive);
  EXPECT_EQ(ui.breakdown.data.mode, prof::TimeMode::inclusive) << "the bars were re-derived inclusive";
  d->show(View::timeline);
  frames(*d, 3);
  float r[4];
  ASSERT_TRUE(d->view_rect(View::timeline, r));
  ASSERT_GT(ui.time_mode_button[0][0], r[0]) << "the Timeline draws the toggle too";
  click(ui.time_mode_button[0]);
  EXPECT_EQ(ui.time_mode, prof::TimeMode::exclusive);
  d->show(View::breakdown);
  frames(*d, 3);
  EXPECT_EQ(ui.breakdown.data.mode, prof::TimeMode::exclusive);
}

// A PDL trace: every third kernel starts 500 ns before its predecessor ends. The stream's lane is two sub-rows
// high, the early kernels stand on the second, their waiting part is hatched under exclusive time (a darker
// shade of their colour) and solid under inclusive, and a click on the second row selects the kernel there.
TEST_F(GuiViews, OverlappingKernelsStandOnSubRowsWithTheirWaitHatched) {
  auto d = open({}, View::timeline);
  ASSERT_TRUE(d);
  TimelineState& st = d->ui().timeline;
  st.pinned = true;
  st.timeline = build_timeline(std::make_shared<const prof::ProfileTrace>(synthetic_trace(300, 1, true)));
  st.fit = true;
  frames(*d, 2);
  const TimelineLane& lane = st.timeline.lanes[0];
  ASSERT_EQ(lane.rows(), 2);
  ASSERT_GE(st.lane_y.size(), 2u);
  EXPECT_FLOAT_EQ(st.lane_y[1] - st.lane_y[0], 2 * st.lane_height) << "the lane is two sub-rows high";
  // Show one early kernel (and its predecessor) across the lanes.
  const std::size_t pick = lane.row_begin[1] + 20;
  const TimelineItem& it = lane.items[pick];
  ASSERT_EQ(it.row, 1);
  ASSERT_EQ(it.wait_ns(), 500);
  st.t0 = static_cast<double>(it.start) - 1000;
  st.t1 = static_cast<double>(it.end) + 1000;
  frames(*d, 2);
  const double ns_per_px = (st.t1 - st.t0) / (st.lanes_x1 - st.lanes_x0);
  const float wx0 = st.lanes_x0 + static_cast<float>((static_cast<double>(it.start) - st.t0) / ns_per_px);
  const float wx1 = st.lanes_x0 + static_cast<float>((static_cast<double>(it.own) - st.t0) / ns_per_px);
  const float ry = st.lane_y[0] + st.lane_height;
  const float wait_rect[4] = {wx0 + 2, ry + 3, wx1 - wx0 - 4, st.lane_height - 6};
  const ImVec4 c = phase_color(st.timeline.phases[static_cast<std::size_t>(it.color)]);
  const ImVec4 dark(c.x * 0.35f, c.y * 0.35f, c.z * 0.35f, 1);
  Image im = shot(*d);
  const int area = static_cast<int>(wait_rect[2] * wait_rect[3]);
  const int dark_excl = im.count(wait_rect, dark, 4), solid_excl = im.count(wait_rect, c, 4);
  EXPECT_GT(dark_excl, area / 10) << "exclusive: the wait is a darker fill (crossed by lines)";
  EXPECT_LT(solid_excl, area / 4) << "not the solid colour of the counted part";
  d->ui().time_mode = prof::TimeMode::inclusive;
  frames(*d, 2);
  im = shot(*d);
  EXPECT_EQ(im.count(wait_rect, dark, 4), 0) << "inclusive: counted, so solid";
  EXPECT_GT(im.count(wait_rect, c, 4), std::max(area * 3 / 4, 2 * solid_excl)) << "(less its name's text)";
  // A click on the second sub-row, inside the early kernel's counted part.
  ImGuiIO& io = ImGui::GetIO();
  const float cx = std::floor(st.lanes_x0 + static_cast<float>((0.5 * static_cast<double>(it.own + it.end) - st.t0) / ns_per_px));
  io.AddMousePosEvent(cx, std::floor(ry + 0.5f * st.lane_height));
  frames(*d, 30);
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, false);
  frames(*d, 2);
  EXPECT_EQ(st.sel_lane, 0);
  EXPECT_EQ(st.sel_item, static_cast<int>(pick));
  EXPECT_EQ(d->ui().kernels.selected, kernel_name(st.timeline.trace->kernels[static_cast<std::size_t>(it.index)]));
}

// A kernel that waited most of its record (PDL, exclusive time): its name is not black on the hatching but light
// on a dark box over it; under inclusive time (all solid) it is black on the solid colour again.
TEST_F(GuiViews, AMostlyHatchedKernelsNameStandsOnADarkBox) {
  auto d = open({}, View::timeline);
  ASSERT_TRUE(d);
  prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = 1;
  for (auto [name, s, e] : {std::tuple{"k_first", 1000, 10000}, std::tuple{"k_updown", 2000, 10150}}) {
    prof::KernelRecord k;
    k.short_name = name;
    k.start_ns = s;
    k.end_ns = e;
    k.device_id = 0;
    k.stream_id = 7;
    k.range_id = -1;
    t.kernels.push_back(k);
  }
  t.start_ns = 0;
  t.end_ns = 11000;
  TimelineState& st = d->ui().timeline;
  st.pinned = true;
  st.timeline = build_timeline(std::make_shared<const prof::ProfileTrace>(t));
  st.fit = true;
  frames(*d, 2);
  st.t0 = 0;
  st.t1 = 11000;
  frames(*d, 2);
  const TimelineLane& lane = st.timeline.lanes[0];
  ASSERT_EQ(lane.rows(), 2);
  const TimelineItem& it = lane.items[lane.row_begin[1]];
  ASSERT_EQ(it.wait_ns(), 8000) << "k_updown waits for k_first";
  const double ns_per_px = (st.t1 - st.t0) / (st.lanes_x1 - st.lanes_x0);
  const float wx0 = st.lanes_x0 + static_cast<float>((static_cast<double>(it.start) - st.t0) / ns_per_px);
  const float ry = st.lane_y[0] + st.lane_height;
  const float tw = ImGui::CalcTextSize("k_updown").x;
  const float label[4] = {wx0 + 2, ry + 3, tw + 2, st.lane_height - 6};
  const int area = static_cast<int>(label[2] * label[3]);
  Image im = shot(*d);
  EXPECT_GT(im.count(label, ImVec4(12 / 255.f, 12 / 255.f, 14 / 255.f, 1), 2), area / 3) << "a dark box under the name";
  EXPECT_GT(im.count(label, ImVec4(240 / 255.f, 240 / 255.f, 240 / 255.f, 1), 10), 20) << "the name in light text";
  EXPECT_EQ(im.count(label, ImVec4(0, 0, 0, 1), 2), 0) << "no black text on the hatching";
  d->ui().time_mode = prof::TimeMode::inclusive;
  frames(*d, 2);
  im = shot(*d);
  EXPECT_EQ(im.count(label, ImVec4(12 / 255.f, 12 / 255.f, 14 / 255.f, 1), 2), 0) << "inclusive: no box";
  EXPECT_GT(im.count(label, ImVec4(0, 0, 0, 1), 2), 20) << "black text on the solid colour";
}

// Selecting a kernel (here as the Kernels view does) outlines every instance of it in the Timeline, not just one;
// the other kernels keep their dark borders.
TEST_F(GuiViews, SelectingAKernelOutlinesEveryInstanceOfItInTheTimeline) {
  auto d = open({}, View::timeline);
  ASSERT_TRUE(d);
  TimelineState& st = d->ui().timeline;
  st.pinned = true;
  st.timeline = build_timeline(std::make_shared<const prof::ProfileTrace>(synthetic_trace(300, 1, true)));
  st.fit = true;
  frames(*d, 2);
  const TimelineLane& lane = st.timeline.lanes[0];
  const prof::ProfileTrace& t = *st.timeline.trace;
  // Twelve kernels of row 0 across the lanes: two k_gate among them (every sixth kernel).
  const std::size_t from = lane.row_begin[0] + 40;
  st.t0 = static_cast<double>(lane.items[from].start) - 300;
  st.t1 = static_cast<double>(lane.items[from + 7].end) + 300;
  frames(*d, 2);
  const double ns_per_px = (st.t1 - st.t0) / (st.lanes_x1 - st.lanes_x0);
  auto x_of = [&](std::int64_t x) { return st.lanes_x0 + static_cast<float>((static_cast<double>(x) - st.t0) / ns_per_px); };
  const ImVec4 white(1, 1, 1, 1);
  auto outline_px = [&](const Image& im, const TimelineItem& it) {  // white on the record's top and bottom edges
    const float y = st.lane_y[0];
    const float top[4] = {x_of(it.start) + 4, y + 1, x_of(it.end) - x_of(it.start) - 8, 3};
    const float bot[4] = {x_of(it.start) + 4, y + st.lane_height - 4, x_of(it.end) - x_of(it.start) - 8, 3};
    return im.count(top, white, 2) + im.count(bot, white, 2);
  };
  std::vector<std::size_t> gates, others;
  for (std::size_t i = from; i < from + 8; ++i)
    (kernel_name(t.kernels[static_cast<std::size_t>(lane.items[i].index)]) == "k_gate" ? gates : others).push_back(i);
  ASSERT_GE(gates.size(), 1u);
  ASSERT_GE(others.size(), 4u);
  Image im = shot(*d);
  for (std::size_t i : gates) EXPECT_EQ(outline_px(im, lane.items[i]), 0) << "nothing selected: no outline";
  d->ui().kernels.selected = "k_gate";
  frames(*d, 2);
  im = shot(*d);
  for (std::size_t i : gates) {
    const float w = x_of(lane.items[i].end) - x_of(lane.items[i].start);
    EXPECT_GT(outline_px(im, lane.items[i]), static_cast<int>(w)) << "instance " << i << " outlined";
  }
  for (std::size_t i : others) EXPECT_EQ(outline_px(im, lane.items[i]), 0) << "item " << i << " is another kernel";
  EXPECT_EQ(st.sel_item, -1) << "none was clicked: every instance alike";
  d->ui().kernels.selected.clear();
  frames(*d, 2);
  im = shot(*d);
  for (std::size_t i : gates) EXPECT_EQ(outline_px(im, lane.items[i]), 0) << "unselected: outline gone";
}

// A stamped kernel's stages stand on their own lane under its stream: each stage a box in its stage's colour
// (the same in every layer), a click on one selects its kernel; the Stages view lists them with their colours.
TEST_F(GuiViews, StageLaneDrawsEachStageInItsColourAndAClickSelectsItsKernel) {
  auto d = open({}, View::timeline);
  ASSERT_TRUE(d);
  TimelineState& st = d->ui().timeline;
  st.pinned = true;
  st.timeline = build_timeline(std::make_shared<const prof::ProfileTrace>(synthetic_stage_trace(1, 4, test::fresh_seed())));
  st.fit = true;
  frames(*d, 2);
  ASSERT_GE(st.timeline.lanes.size(), 2u);
  const TimelineLane& lane = st.timeline.lanes[1];
  ASSERT_TRUE(lane.stages);
  ASSERT_GE(st.lane_y.size(), 2u);
  // The launch across the lanes: every stage several pixels wide.
  st.t0 = static_cast<double>(lane.items.front().start) - 500;
  st.t1 = static_cast<double>(lane.items.back().end) + 500;
  frames(*d, 2);
  const double ns_per_px = (st.t1 - st.t0) / (st.lanes_x1 - st.lanes_x0);
  auto x_of = [&](std::int64_t t) { return st.lanes_x0 + static_cast<float>((static_cast<double>(t) - st.t0) / ns_per_px); };
  const prof::ProfileTrace& t = *st.timeline.trace;
  const Image im = shot(*d);
  int checked = 0;
  for (std::size_t i = 0; i < lane.items.size(); ++i) {
    const TimelineItem& it = lane.items[i];
    const std::string& stage = t.stages[static_cast<std::size_t>(it.index)].stage;
    if (stage != "gate" && stage != "down" && stage != "attention") continue;
    const float x0 = x_of(it.start) + 2, x1 = x_of(it.end) - 2;
    ASSERT_GT(x1 - x0, 6) << "wide enough to check";
    const float r[4] = {x0, st.lane_y[1] + 3, x1 - x0, st.lane_height - 6};
    const int area = static_cast<int>(r[2] * r[3]);
    EXPECT_GT(im.count(r, stage_color(stage), 4), area / 3) << stage << " (less its label's text)";
    ++checked;
  }
  EXPECT_EQ(checked, 12) << "three stages in four layers";
  EXPECT_NE(im.count(std::array<float, 4>{st.lanes_x0, st.lane_y[1], st.lanes_x1 - st.lanes_x0, st.lane_height}.data(),
                     stage_color("top-K"), 4),
            0);
  // A click on the top-K stage of layer 2 selects the stamped kernel.
  std::size_t pick = lane.items.size();
  for (std::size_t i = 0; i < lane.items.size(); ++i) {
    const auto& g = t.stages[static_cast<std::size_t>(lane.items[i].index)];
    if (g.stage == "top-K" && g.layer == 2) pick = i;
  }
  ASSERT_LT(pick, lane.items.size());
  ImGuiIO& io = ImGui::GetIO();
  io.AddMousePosEvent(std::floor(0.5f * (x_of(lane.items[pick].start) + x_of(lane.items[pick].end))),
                      std::floor(st.lane_y[1] + 0.5f * st.lane_height));
  frames(*d, 30);
  io.AddMouseButtonEvent(0, true);
  frames(*d, 1);
  io.AddMouseButtonEvent(0, false);
  frames(*d, 2);
  EXPECT_EQ(st.sel_lane, 1);
  EXPECT_EQ(st.sel_item, static_cast<int>(pick));
  EXPECT_EQ(d->ui().kernels.selected, "k_step");
  // Stages: a row per stage name, each with its colour.
  io.AddMousePosEvent(-1, -1);
  d->show(View::stages);
  frames(*d, 3);
  EXPECT_EQ(d->ui().stages.table.rows.size(), 10u);
  float r[4];
  ASSERT_TRUE(d->view_rect(View::stages, r));
  const Image st_im = shot(*d);
  for (const char* s : {"qkv", "attention", "gate", "top-K", "up", "down", "head"})
    EXPECT_GT(st_im.count(r, stage_color(s), 4), 40) << s << ": swatch and share bar";
}

// Kernels: the point's kernels by total time; the selected one's instances as a histogram.
TEST_F(GuiViews, KernelsViewListsThePointsKernelsAndDrawsTheSelectedOnesHistogram) {
  auto d = open({test::fixture_db()}, View::kernels);
  ASSERT_TRUE(d);
  frames(*d, 2);
  KernelStatsState& ks = d->ui().kernels;
  ASSERT_TRUE(ks.trace);
  ASSERT_FALSE(ks.table.empty());
  EXPECT_EQ(ks.row, -1);
  ks.selected = ks.table.front().name;
  frames(*d, 3);
  ASSERT_EQ(ks.row, 0);
  EXPECT_FALSE(ks.over_run.empty());
  float r[4];
  ASSERT_TRUE(d->view_rect(View::kernels, r));
  const Image im = shot(*d);
  EXPECT_GT(im.count(r, ImVec4(0.298f, 0.447f, 0.690f, 1), 8), 200) << "histogram bars";
  EXPECT_TRUE(has(legend_labels(), "instances"));
}

// The selected kernel over the run's points: at 1600 px (and narrower) the table has no horizontal scroll; the
// numbers' columns stand whole and the point column takes the rest.
TEST_F(GuiViews, KernelsPerPointTableFitsWithoutHorizontalScroll) {
  for (int width : {1600, 1200}) {
    SCOPED_TRACE(width);
    auto d = open({test::fixture_db()}, View::kernels, width, 1000);
    ASSERT_TRUE(d);
    KernelStatsState& ks = d->ui().kernels;
    ASSERT_FALSE(ks.table.empty());
    ks.selected = ks.table.front().name;
    frames(*d, 4);
    ASSERT_FALSE(ks.over_run.empty());
    ImGuiContext& g = *GImGui;
    ImGuiTable* table = nullptr;
    for (int i = 0; i < g.Tables.GetMapSize(); ++i)
      if (ImGuiTable* tb = g.Tables.TryGetMapData(i); tb && tb->OuterWindow && std::strstr(tb->OuterWindow->Name, "Kernels/run_") &&
                                                    tb->ColumnsCount == 6 && tb->LastFrameActive >= g.FrameCount - 1)
        table = tb;
    ASSERT_NE(table, nullptr) << "the per-point table";
    float r[4];
    ASSERT_TRUE(d->view_rect(View::kernels, r));
    EXPECT_FALSE(table->Flags & ImGuiTableFlags_ScrollX);
    EXPECT_FALSE(table->InnerWindow->ScrollbarX) << "no horizontal scroll bar";
    EXPECT_LE(table->InnerWindow->ScrollMax.x, 0.0f);
    EXPECT_LE(table->OuterRect.Max.x, r[0] + r[2] + 0.5f) << "inside the view";
    for (int c = 1; c < 6; ++c)
      EXPECT_GE(table->Columns[c].WidthGiven, table->Columns[c].WidthAuto - 0.5f) << "column " << c << " is whole";
    EXPECT_GT(table->Columns[0].WidthGiven, 60.0f) << "the point column keeps room";
  }
}

// Roofline: a synthetic profile with declared costs and its run's ceilings. One marker per (kernel, phase) in its
// % of floor colour under the two roofs (their measured numbers in the legend); hovering a marker and clicking it
// selects its kernel, and so does clicking a row of the table below (lost time first, the undeclared last).
TEST_F(GuiViews, RooflineDrawsMarkersUnderTheRoofsAndAClickOnARowOrAMarkerSelectsTheKernel) {
  auto d = open({test::roofline_fixture_db(true)}, View::roofline);
  ASSERT_TRUE(d);
  frames(*d, 3);
  RooflineState& rs = d->ui().roofline;
  ASSERT_TRUE(rs.trace);
  ASSERT_TRUE(rs.plot.has_ceilings());
  ASSERT_EQ(rs.plot.markers.size(), 5u);
  ASSERT_EQ(rs.marker_px.size(), 5u);
  const auto legend = legend_labels();
  EXPECT_TRUE(has(legend, "memory roof: copy 1000 GB/s")) << "the measured bandwidth";
  EXPECT_TRUE(has(legend, "compute roof: bf16 GEMM 100 TFLOP/s")) << "the measured GEMM rate";
  EXPECT_TRUE(has(legend, "0 FLOP (data movement): squares at 0.01 FLOP/byte"));
  float r[4];
  ASSERT_TRUE(d->view_rect(View::roofline, r));
  Image im = shot(*d);
  EXPECT_GT(im.count(rs.plot_rect, roof_color(false), 12), 100) << "the memory roof";
  EXPECT_GT(im.count(rs.plot_rect, roof_color(true), 12), 100) << "the compute roof";
  // Each marker inside the plot, its centre in its % of floor colour (k_reduce sits on k_split: both 100%).
  for (std::size_t i = 0; i < rs.plot.markers.size(); ++i) {
    const auto& mp = rs.marker_px[i];
    const prof::RooflineRow& row = rs.plot.roofline.rows[rs.plot.markers[i].row];
    SCOPED_TRACE(row.kernel);
    EXPECT_GT(mp[0], rs.plot_rect[0]);
    EXPECT_LT(mp[0], rs.plot_rect[0] + rs.plot_rect[2]);
    EXPECT_GT(mp[1], rs.plot_rect[1]);
    EXPECT_LT(mp[1], rs.plot_rect[1] + rs.plot_rect[3]);
    const float centre[4] = {mp[0] - 2, mp[1] - 2, 5, 5};
    EXPECT_GE(im.count(centre, floor_color(rs.plot.pct_floor(row)), 4), 20);
  }
  // The table: lost time first, the undeclared kernel last.
  ASSERT_EQ(rs.table_rows.size(), 6u);
  EXPECT_EQ(rs.table_rows.front().first, "k_gemm");
  EXPECT_EQ(rs.table_rows.back().first, "k_mystery");
  ImGuiIO& io = ImGui::GetIO();
  auto click = [&](float x, float y) {
    io.AddMousePosEvent(std::floor(x), std::floor(y));
    frames(*d, 2);
    io.AddMouseButtonEvent(0, true);
    frames(*d, 1);
    io.AddMouseButtonEvent(0, false);
    frames(*d, 2);
  };
  EXPECT_TRUE(d->ui().kernels.selected.empty());
  for (const auto& [kernel, y] : rs.table_rows)
    if (kernel == "k_norm") click(rs.table_x, y);
  EXPECT_EQ(d->ui().kernels.selected, "k_norm") << "a click on its row";
  // Its marker is outlined in white.
  std::size_t norm = 0;
  for (std::size_t i = 0; i < rs.plot.markers.size(); ++i)
    if (rs.plot.roofline.rows[rs.plot.markers[i].row].kernel == "k_norm") norm = i;
  const auto np = rs.marker_px[norm];
  const float around[4] = {np[0] - np[2] - 3, np[1] - np[2] - 3, 2 * np[2] + 6, 2 * np[2] + 6};
  EXPECT_GT(shot(*d).count(around, ImVec4(1, 1, 1, 1), 10), 10) << "the selected kernel's marker outlined";
  // Hover then click the k_gemm marker.
  std::size_t gemm = 0;
  for (std::size_t i = 0; i < rs.plot.markers.size(); ++i)
    if (rs.plot.roofline.rows[rs.plot.markers[i].row].kernel == "k_gemm") gemm = i;
  io.AddMousePosEvent(std::floor(rs.marker_px[gemm][0]), std::floor(rs.marker_px[gemm][1]));
  frames(*d, 30);  // not a double-click with the row's click
  EXPECT_EQ(rs.hovered, static_cast<int>(gemm)) << "the marker under the pointer";
  click(rs.marker_px[gemm][0], rs.marker_px[gemm][1]);
  EXPECT_EQ(d->ui().kernels.selected, "k_gemm") << "a click on its marker";
  // The selection is the Timeline's and the Kernels view's.
  d->show(View::kernels);
  frames(*d, 3);
  ASSERT_GE(d->ui().kernels.row, 0);
  EXPECT_EQ(d->ui().kernels.table[static_cast<std::size_t>(d->ui().kernels.row)].name, "k_gemm");
  // Inclusive time re-derives the plot (no overlap here, so the same rows).
  d->ui().time_mode = prof::TimeMode::inclusive;
  d->show(View::roofline);
  frames(*d, 3);
  EXPECT_EQ(rs.plot.roofline.mode, prof::TimeMode::inclusive);
}

// A file from before ceilings were recorded: the view says so and plots the achieved rates, grey, with no roofs.
TEST_F(GuiViews, RooflineWithoutCeilingsPlotsAchievedRatesWithNoRoofs) {
  auto d = open({test::roofline_fixture_db(false)}, View::roofline);
  ASSERT_TRUE(d);
  frames(*d, 3);
  RooflineState& rs = d->ui().roofline;
  ASSERT_TRUE(rs.trace);
  EXPECT_FALSE(rs.plot.has_ceilings());
  ASSERT_EQ(rs.plot.markers.size(), 5u);
  for (const auto& l : legend_labels()) EXPECT_EQ(l.find("roof"), std::string::npos) << l;
  const Image im = shot(*d);
  EXPECT_EQ(im.count(rs.plot_rect, roof_color(false), 12), 0) << "no memory roof";
  EXPECT_EQ(im.count(rs.plot_rect, roof_color(true), 12), 0) << "no compute roof";
  const Rgb g = kUndeclaredRgb;
  EXPECT_GT(im.count(rs.plot_rect, ImVec4(g.r, g.g, g.b, 1), 4), 200) << "grey markers: no % of floor";
  float r[4];
  ASSERT_TRUE(d->view_rect(View::roofline, r));
  EXPECT_GT(im.count(r, ImVec4(0.95f, 0.7f, 0.3f, 1), 30), 50) << "the warning that there are no ceilings";
}

// The Timeline's colour toggle, clicked through the input queue: by phase (the default), then each kernel by its
// % of floor -- k_gemm 50% (yellow), k_norm 25%, k_split 100% (green), k_mystery undeclared (grey) -- and back.
TEST_F(GuiViews, TimelineColourToggleColoursKernelsByTheirPercentOfFloor) {
  auto d = open({test::roofline_fixture_db(true)}, View::timeline);
  ASSERT_TRUE(d);
  frames(*d, 2);
  TimelineState& st = d->ui().timeline;
  ASSERT_TRUE(st.timeline.trace);
  ASSERT_TRUE(st.ceilings.has_value()) << "the run's ceilings, from the store";
  EXPECT_EQ(st.colour, TimelineState::Colour::phase) << "phase by default";
  const TimelineLane& lane = st.timeline.lanes[0];
  const prof::ProfileTrace& t = *st.timeline.trace;
  auto rect_of = [&](const std::string& kernel, float out[4]) {  // step 0's instance, less its border
    for (const auto& it : lane.items)
      if (it.kind == ItemKind::kernel && kernel_name(t.kernels[static_cast<std::size_t>(it.index)]) == kernel &&
          t.kernels[static_cast<std::size_t>(it.index)].step == 0) {
        const double ns_per_px = (st.t1 - st.t0) / (st.lanes_x1 - st.lanes_x0);
        const float x0 = st.lanes_x0 + static_cast<float>((static_cast<double>(it.start) - st.t0) / ns_per_px);
        const float x1 = st.lanes_x0 + static_cast<float>((static_cast<double>(it.end) - st.t0) / ns_per_px);
        out[0] = x0 + 2;
        out[1] = st.lane_y[0] + 3;
        out[2] = x1 - x0 - 4;
        out[3] = st.lane_height - 6;
        return;
      }
    FAIL() << kernel;
  };
  float gemm[4], norm[4], split[4], mystery[4];
  rect_of("k_gemm", gemm);
  rect_of("k_norm", norm);
  rect_of("k_split", split);
  rect_of("k_mystery", mystery);
  auto area = [](const float q[4]) { return static_cast<int>(q[2] * q[3]); };
  auto bucket = [](double pct) {
    const Rgb c = floor_bucket_colour(floor_bucket(pct));
    return ImVec4(c.r, c.g, c.b, 1);
  };
  Image im = shot(*d);
  EXPECT_GT(im.count(gemm, phase_color("ffn.up"), 4), area(gemm) / 2) << "by phase: k_gemm in ffn.up's colour";
  ImGuiIO& io = ImGui::GetIO();
  auto click = [&](const float at[2]) {
    io.AddMousePosEvent(std::floor(at[0]), std::floor(at[1]));
    frames(*d, 1);
    io.AddMouseButtonEvent(0, true);
    frames(*d, 1);
    io.AddMouseButtonEvent(0, false);
    frames(*d, 2);
  };
  click(st.colour_button[1]);
  ASSERT_EQ(st.colour, TimelineState::Colour::floor);
  io.AddMousePosEvent(-1, -1);
  frames(*d, 2);
  rect_of("k_gemm", gemm);  // the legend line moved the lanes down
  rect_of("k_norm", norm);
  rect_of("k_split", split);
  rect_of("k_mystery", mystery);
  im = shot(*d);
  EXPECT_GT(im.count(gemm, bucket(50), 4), area(gemm) / 2) << "k_gemm: 50% of floor";
  EXPECT_EQ(im.count(gemm, phase_color("ffn.up"), 4), 0) << "no longer its phase's colour";
  EXPECT_GT(im.count(norm, bucket(25), 4), area(norm) / 2) << "k_norm: 25%";
  EXPECT_GT(im.count(split, bucket(100), 4), area(split) / 2) << "k_split: at the floor";
  const Rgb g = kUndeclaredRgb;
  EXPECT_GT(im.count(mystery, ImVec4(g.r, g.g, g.b, 1), 4), area(mystery) / 2) << "k_mystery: undeclared, grey";
  float r[4];
  ASSERT_TRUE(d->view_rect(View::timeline, r));
  const float legend[4] = {r[0], r[1], r[2], st.lanes_y0 - r[1]};
  EXPECT_GT(im.count(legend, floor_color(0), 6), 20) << "the colour bar's red end";
  EXPECT_GT(im.count(legend, floor_color(100), 6), 20) << "and its green end";
  click(st.colour_button[0]);
  EXPECT_EQ(st.colour, TimelineState::Colour::phase);
  io.AddMousePosEvent(-1, -1);
  frames(*d, 2);
  rect_of("k_gemm", gemm);
  EXPECT_GT(shot(*d).count(gemm, phase_color("ffn.up"), 4), area(gemm) / 2) << "back to phases";
}

TEST_F(GuiViews, ClickSelectsARunAndCtrlClickSetsTheSecond) {
  const std::string other = test::fixture_copy("other.db");
  auto d = open({test::fixture_db(), other}, View::runs);
  ASSERT_TRUE(d);
  UiState& ui = d->ui();
  ASSERT_EQ(ui.run_rows.size(), 2u);
  ImGuiIO& io = ImGui::GetIO();
  auto click = [&](float yy, bool ctrl) {
    if (ctrl) io.AddKeyEvent(ImGuiMod_Ctrl, true);
    io.AddMousePosEvent(ui.run_rows_x + 40, yy);
    frames(*d, 1);
    io.AddMouseButtonEvent(0, true);
    frames(*d, 1);
    io.AddMouseButtonEvent(0, false);
    frames(*d, 1);
    if (ctrl) io.AddKeyEvent(ImGuiMod_Ctrl, false);
    frames(*d, 1);
  };
  const RunRef second = ui.run_rows[1].first;
  const RunRef first = ui.run_rows[0].first;
  click(ui.run_rows[1].second, false);
  ASSERT_EQ(ui.selected.size(), 1u);
  EXPECT_EQ(ui.selected[0], second) << "a click selects the run as A and drops B";
  click(ui.run_rows[0].second, true);
  ASSERT_EQ(ui.selected.size(), 2u);
  EXPECT_EQ(ui.selected[0], second);
  EXPECT_EQ(ui.selected[1], first) << "ctrl-click sets B";
  // The filter hides rows that do not match.
  std::snprintf(ui.run_filter, sizeof ui.run_filter, "%s", "no-such-run");
  frames(*d, 2);
  EXPECT_TRUE(ui.run_rows.empty());
}

TEST_F(GuiViews, RefusedFilesShowTheirErrorInTheWindowAndScreenshotModeExits1) {
  for (const std::string& bad : {test::foreign_db(), test::newer_db(), test::corrupt_db()}) {
    SCOPED_TRACE(bad);
    auto d = open({bad}, View::runs);
    ASSERT_TRUE(d);
    ASSERT_TRUE(d->store().any_error());
    float r[4];
    ASSERT_TRUE(d->view_rect(View::runs, r));
    EXPECT_GT(shot(*d).count(r, ImVec4(1.0f, 0.35f, 0.30f, 1), 30), 100) << "the error in red";
    const std::string png = test::temp_dir() + "/bad.png";
    EXPECT_EQ(test::run_command(std::string(MOCBENCH_GUI_BIN) + " " + bad + " --screenshot " + png + " 2>/dev/null"), 1);
    EXPECT_TRUE(std::filesystem::exists(png)) << "the window with the error is still written";
  }
}

// Issue 27: a damaged file is shown, with the damage in red above the runs and its unreadable run marked,
// and the screenshot mode exits 1 (the picture is still written) with the damage on stderr.
TEST_F(GuiViews, ADamagedFileIsShownInRedAndScreenshotModeExits1) {
  const std::string bad = test::damaged_db();
  auto d = open({bad}, View::runs);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->store().any_error());
  float r[4];
  ASSERT_TRUE(d->view_rect(View::runs, r));
  EXPECT_GT(shot(*d).count(r, ImVec4(1.0f, 0.35f, 0.30f, 1), 30), 100) << "the damage in red";
  const std::string png = test::temp_dir() + "/damaged.png", err = test::temp_dir() + "/damaged.err";
  EXPECT_EQ(test::run_command(std::string(MOCBENCH_GUI_BIN) + " " + bad + " --screenshot " + png + " 2>" + err), 1);
  EXPECT_TRUE(std::filesystem::exists(png));
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("is damaged"), std::string::npos) << text;
}

TEST_F(GuiViews, ScreenshotModeWritesAPngAndRefusesBadArguments) {
  const std::string png = test::temp_dir() + "/memory.png";
  const std::string gui = MOCBENCH_GUI_BIN;
  ASSERT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png +
                              " --view memory --run 1 --point 0 --size 900x600 >/dev/null 2>&1"),
            0);
  std::ifstream in(png, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --view nope 2>/dev/null"), 2);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --size 12 2>/dev/null"), 2);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --time both 2>/dev/null"), 2);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --window 5:1 2>/dev/null"), 2);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --window 5 2>/dev/null"), 2);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png +
                              " --view timeline --window 0:50 >/dev/null 2>&1"),
            0);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --view roofline >/dev/null 2>&1"), 0);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png +
                              " --view timeline --colour floor >/dev/null 2>&1"),
            0);
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + " --colour rainbow 2>/dev/null"), 2);
  // A full disk (/dev/full refuses every write): an error and exit 1, never "wrote" (issue #27: a 0-byte PNG
  // was written and reported).
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot /dev/full --view roofline >/dev/null 2>&1"), 1);
  // A regular file that cannot be written (its folder is missing): exit 1, nothing left behind.
  EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + png + ".missing/x.png 2>/dev/null"), 1);
  // A run, point or run B the databases do not hold: refused, no picture of another run (issue #27).
  const std::string missing = png + ".missing.png";
  for (const char* arg : {" --run 999", " --point 999", " --run-b 999 --view compare"}) {
    EXPECT_EQ(test::run_command(gui + " " + test::fixture_db() + " --screenshot " + missing + arg + " >/dev/null 2>&1"), 2)
        << arg;
    EXPECT_FALSE(std::filesystem::exists(missing)) << arg;
  }
}

}  // namespace
}  // namespace moc::gui

// The dashboard's views: each draws one window from the data model (gui/model) and the shared UI state.
// One file per view; none owns data beyond what it derived for drawing (re-derived when the store's
// generation or the selection changes).
#pragma once
#include <array>
#include <functional>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/table.h"
#include "gui/model/breakdown.h"
#include "gui/model/kernel_stats.h"
#include "gui/model/memory.h"
#include "gui/model/roofline.h"
#include "gui/model/stage_stats.h"
#include "gui/model/store.h"
#include "gui/model/timeline.h"

struct ImVec4;

namespace moc::gui {

enum class View { runs, sweep, breakdown, timeline, kernels, roofline, stages, memory, compare, training };
inline constexpr View kAllViews[] = {View::runs,     View::sweep,  View::breakdown, View::timeline, View::kernels,
                                     View::roofline, View::stages, View::memory,    View::compare,  View::training};
const char* view_title(View v);  // the window title: "Runs", "Sweep", ...
const char* view_key(View v);    // the command-line name: "runs", "sweep", ...
bool view_from_key(const std::string& key, View* out);

struct TimelineState {
  RunRef run;
  std::int64_t point_id = -1;
  bool pinned = false;  // the timeline was set directly (benchmark): do not load it from the store
  Timeline timeline;
  double t0 = 0, t1 = 0;  // the visible window, ns on the trace clock
  bool fit = true;        // fit the window to the trace on the next frame
  // When window_t1_ns > window_t0_ns, the next fit shows [window_t0_ns, window_t1_ns) from the trace's start
  // instead, once (screenshot mode's --window).
  double window_t0_ns = 0, window_t1_ns = 0;
  int sel_lane = -1, sel_item = -1;  // the selected item (its kernel's statistics: UiState::kernels)
  // highlight[i]: the trace's kernel record i is an instance of the selected kernel (outlined); derived for
  // highlight_of in highlight_trace (empty: none selected).
  std::string highlight_of;
  std::shared_ptr<const prof::ProfileTrace> highlight_trace;
  std::vector<char> highlight;
  // The last frame's work, for the benchmark: spans drawn and items they stand for.
  std::size_t spans_drawn = 0;
  float lanes_x0 = 0, lanes_x1 = 0, lanes_y0 = 0;  // screen extent of the lane area (input tests aim here)
  float lane_height = 0;      // the height of one sub-row
  std::vector<float> lane_y;  // screen y of each lane's top (its sub-row r begins at lane_y + r * lane_height)
  // Colouring: by phase (the default) or by each kernel's % of floor (prof::kernel_floor_pct against the run's
  // measured ceilings; grey where undeclared). ceilings: set from the store with the point (a pinned timeline's
  // caller sets it). floor_bucket[i]: kernel record i's colour class (floor_bucket()), derived for floor_of.
  enum class Colour { phase, floor };
  Colour colour = Colour::phase;
  std::optional<db::CeilingsRecord> ceilings;
  std::shared_ptr<const prof::ProfileTrace> ceilings_of;  // what `ceilings` was looked up for (trace, generation)
  std::uint64_t ceilings_generation = ~std::uint64_t{0};
  std::shared_ptr<const prof::ProfileTrace> floor_of;
  prof::TimeMode floor_mode = prof::TimeMode::exclusive;
  prof::Ceilings floor_ceilings;
  std::vector<double> floor_pct;
  std::vector<std::int8_t> floor_bucket;
  float colour_button[2][2] = {};  // screen centre of the "phase" and "% of floor" choices (input tests)
};

// The selected kernel and what the Kernels view and the Timeline show of it, re-derived when the point, the
// time mode, the kernel or the store's generation changes.
struct KernelStatsState {
  std::string selected;  // kernel name ("": none)
  std::shared_ptr<const prof::ProfileTrace> trace;  // the Timeline's point's profile
  prof::TimeMode mode = prof::TimeMode::exclusive;
  std::vector<KernelRow> table;  // every kernel of that profile under `mode`, by total time
  int row = -1;                  // the selected kernel's row of `table` (-1: it did not run there)
  // The selected kernel in every profiled point of `run` (empty for a pinned timeline), and what it is of.
  RunRef run;
  std::uint64_t generation = ~std::uint64_t{0};
  std::string over_run_of;
  prof::TimeMode over_run_mode = prof::TimeMode::exclusive;
  std::vector<KernelPointRow> over_run;
};

// The Stages view's table of the Timeline's point (re-derived when that point's profile changes).
struct StageStatsState {
  std::shared_ptr<const prof::ProfileTrace> trace;
  StageTable table;
};

// The Roofline view's plot of the Timeline's point, re-derived when its profile, the time mode or the ceilings
// change; the table's order, re-derived when the plot or the sort changes.
struct RooflineState {
  std::shared_ptr<const prof::ProfileTrace> trace;
  prof::TimeMode mode = prof::TimeMode::exclusive;
  std::optional<db::CeilingsRecord> ceilings;
  std::uint64_t generation = ~std::uint64_t{0};  // the store's, when `ceilings` was looked up
  RooflinePlot plot;
  bool fit = true;  // set the axes to the plot's limits on the next frame
  RooflineColumn sort = RooflineColumn::lost;
  bool sort_descending = true;
  std::vector<std::size_t> order;  // rows of plot.roofline in table order
  int hovered = -1;                // the marker under the pointer last frame (-1: none)
  // Where the last frame drew things (input tests aim here): each marker's centre and radius (parallel to
  // plot.markers), and each table row's kernel and screen y (centre), at x = table_x.
  std::vector<std::array<float, 3>> marker_px;
  std::vector<std::pair<std::string, float>> table_rows;
  float table_x = 0;
  float plot_rect[4] = {};  // the plot area (x, y, w, h)
};

// What a view derived from a whole run, kept until the run or the store's generation changes (deriving it
// reads every point's profile or memory events: not something to redo each frame).
template <typename T>
struct RunCache {
  RunRef run;
  std::uint64_t generation = ~std::uint64_t{0};
  T data;
  bool stale(const RunRef& r, std::uint64_t g) const { return run != r || generation != g; }
  void set(const RunRef& r, std::uint64_t g, T d) {
    run = r;
    generation = g;
    data = std::move(d);
  }
};

struct UiState {
  std::vector<RunRef> selected;  // [0] the run the views show (A), [1] the one Compare sets beside it (B)
  std::int64_t point_id = -1;    // the selected point of run A (-1: its first)
  char run_filter[128] = {};
  std::string sweep_metric, sweep_axis;
  bool sweep_log_auto = true, sweep_log_x = false, sweep_log_y = false;
  // How per-op device times are counted everywhere (Breakdown's traced bars, Timeline, Kernels).
  prof::TimeMode time_mode = prof::TimeMode::exclusive;
  float time_mode_button[2][2] = {};  // screen centre of the last drawn toggle's two choices (input tests)
  TimelineState timeline;
  KernelStatsState kernels;
  StageStatsState stages;
  RooflineState roofline;
  int memory_mode = 0;  // 0: the point's timeline, 1: peak breakdown across the run's points (Figure 1)
  int training_mode = 0;  // 0: curves of every point (loss, perplexity), 1: one point's trained-gate histograms
  std::string training_series;
  int training_layer = 0;
  bool training_tail = true;  // curves: the last 3/4 of the steps only (the untrained start dwarfs the rest)
  RunCache<BreakdownData> breakdown;
  RunCache<PeakBars> peaks;
  // Where the Runs table drew each run's row last frame (screen y of its centre; input tests aim here).
  std::vector<std::pair<RunRef, float>> run_rows;
  float run_rows_x = 0;
};

// Selection helpers: click = select as A (and drop B), ctrl/shift-click = toggle as B.
void select_run(UiState& ui, const RunRef& r, bool add);
RunRef run_a(const UiState& ui);
RunRef run_b(const UiState& ui);
// The selected point of run A, or its first profiled / first ok point when none is chosen.
std::int64_t current_point(Store& store, UiState& ui, bool want_profile);
// Begins a view's window; false (window already ended) when it is not visible or no run is selected (it then
// says so). On true, *a is run A and the caller ends the window.
bool begin_run_view(View v, const UiState& ui, RunRef* a);
// A point picker (combo) over run A's points; returns true when the selection changed.
bool point_picker(Store& store, UiState& ui, bool want_profile);
// Each line of `label` cut to at most `max_px` wide in the current font, ".." marking a cut.
std::string fit_text(const std::string& label, float max_px);
// The exclusive / inclusive toggle (one state for every view), with what it means on hover.
void time_mode_toggle(UiState& ui);
// The opening of a view of one point of run A (Kernels, Stages, Roofline): its window, "Select a run" when
// there is none, then (with_time) the device-time toggle and the point picker. False: nothing more to draw
// (the window is already ended).
bool begin_point_view(Store& store, UiState& ui, View v, bool with_time);
// A point without a profile: says so and ends the window.
void end_without_profile();
// Brings the kernel statistics up to date with the Timeline's point, the time mode and the selection.
void update_kernel_stats(Store& store, UiState& ui);

void draw_runs_view(Store& store, UiState& ui);
void draw_sweep_view(Store& store, UiState& ui);
void draw_breakdown_view(Store& store, UiState& ui);
void draw_timeline_view(Store& store, UiState& ui);
void draw_kernel_stats_view(Store& store, UiState& ui);
void draw_stage_stats_view(Store& store, UiState& ui);
void draw_roofline_view(Store& store, UiState& ui);
void draw_memory_view(Store& store, UiState& ui);
void draw_compare_view(Store& store, UiState& ui);
void draw_training_view(Store& store, UiState& ui);

// A stacked bar chart: values[item][group], one bar per group labelled labels[group], items stacked bottom up
// in colors[item]; totals (empty, or one per group, NaN for none) drawn as diamonds ("timed total"). Returns
// the group clicked this frame, or -1. groups (empty, or one per bar, equal values adjacent): bars of a group
// stand together, a gap between groups, each group's name on the top axis. Tick labels too wide for their bar
// are shortened ("..") and the full label is in the tooltip.
int stacked_bars(const char* id, const std::vector<std::string>& items, const std::vector<std::vector<double>>& values,
                 const std::vector<std::string>& labels, const char* y_label, const std::vector<ImVec4>& colors,
                 float height, const std::vector<double>& totals = {}, const std::vector<std::string>& groups = {});

// Colours the views share (tests look for them in screenshots).
ImVec4 part_color(int part);                 // gate, up & down, top-K, other
ImVec4 memory_color(const std::string& cls);  // weights, gradients, optimizer_state, activations: <module>, ...
ImVec4 phase_color(const std::string& phase);  // timeline: kernels by phase; "stage: <name>": stage_color
ImVec4 stage_color(const std::string& stage);  // a stamped kernel's stage: gate, up, down, top-K as the parts
ImVec4 verdict_color(bool better);
// A shared table (db/table.h) as an ImGui table -- the cells report::shown gives the CLI's text printers,
// numbers right-aligned -- under "Copy CSV" and "Copy Markdown" buttons that put the same table on the
// clipboard. cell_bg: a cell's background (drawn at 45% opacity), or none.
void draw_report_table(const char* id, const report::Table& t,
                       const std::function<std::optional<ImVec4>(std::size_t row, std::size_t col)>& cell_bg = {});
ImVec4 roof_color(bool compute);  // Roofline: the memory roof (false) and the compute roof (true)
ImVec4 floor_color(double pct);  // % of floor: red (0%) - yellow (50%) - green (100%+); grey for NaN (floor_colour)
// The % of floor scale as a legend: a red-to-green bar labelled 0% / 50% / 100%, and a grey swatch "undeclared".
void floor_color_bar(float width);
}  // namespace moc::gui

// The dashboard's window: a GLFW window with an OpenGL 3.3 context, Dear ImGui (docking) + ImPlot, the data
// model (Store) and the views in a default docked layout -- Runs on the left, the other views as tabs on the
// right. frame() builds and renders one frame; the live loop, the screenshot mode and the tests drive it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui/model/store.h"
#include "gui/views/views.h"

struct GLFWwindow;

namespace moc::gui {

struct DashboardOptions {
  std::vector<std::string> databases;  // opened in this order
  int width = 1600, height = 1000;
  std::optional<View> focus;  // the view tab brought to front
  std::int64_t run = -1;      // run id in the first database to select (default: its newest run)
  int point = -1;             // that run's point (sweep index) to select
  std::int64_t run_b = -1;    // a second run (in the second database when there is one, else the first): Compare's B
  int memory_mode = 0;        // the Memory view: 0 a point's timeline, 1 peaks by point (Figure 1)
  int training_mode = 0;      // the Training view: 0 curves of every point, 1 a point's gate histograms
  std::string kernel;         // the kernel selected at start (Timeline, Kernels)
  prof::TimeMode time_mode = prof::TimeMode::exclusive;  // how per-op device times are counted at start
  bool colour_floor = false;  // the Timeline colours kernels by % of floor (else by phase) at start
  // The Timeline's first window, ns from the trace's start (when window_t1_ns > window_t0_ns; else it fits).
  double window_t0_ns = 0, window_t1_ns = 0;
  double refresh_s = 0.5;     // poll the databases this often
  // Screenshots and tests: the window's own mouse and keyboard are ignored (no hover from wherever the
  // pointer happens to be) and input comes only through ImGui's input queue (io.AddMousePosEvent, ...).
  bool scripted_input = false;
};

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions opts);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Opens the window and the UI contexts; false with a message when there is no display or no OpenGL 3.3.
  bool init(std::string* error);
  // One frame: poll window events, refresh the store when due, build every view, render. Returns the CPU time
  // of building and rendering it (ms), the swap excluded.
  double frame();
  void swap();
  // The last frame's parts: building the UI (views, ImGui, ImPlot; CPU) and rendering it (OpenGL to glFinish).
  double last_build_ms() const { return build_ms_; }
  double last_render_ms() const { return render_ms_; }
  bool should_close() const;
  int run_until_closed();

  // The default framebuffer after the last frame, RGBA, top row first.
  std::vector<unsigned char> pixels(int* width, int* height) const;
  bool write_png(const std::string& path, std::string* error) const;

  // Brings a view's tab to front over the next frames.
  void show(View v);

  std::string renderer() const;  // GL_RENDERER, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"

  Store& store() { return store_; }
  // What --run / --point / --run-b named that the databases do not hold ("" when all were found), once the
  // first frame has made the selection.
  const std::string& selection_error() const { return selection_error_; }
  UiState& ui() { return ui_; }
  GLFWwindow* window() const { return window_; }
  // Screen rectangle of a view's window after the last frame (x, y, w, h); false when not visible.
  bool view_rect(View v, float rect[4]) const;

 private:
  void build_layout(unsigned int dockspace_id);
  void apply_initial_selection();

  DashboardOptions opts_;
  Store store_;
  UiState ui_;
  GLFWwindow* window_ = nullptr;
  bool imgui_ = false, layout_done_ = false, selection_done_ = false;
  std::string selection_error_;
  int frames_ = 0;
  int focus_frames_ = 3;  // frames left that (re)focus opts_.focus
  double last_refresh_ = 0;
  double build_ms_ = 0, render_ms_ = 0;
};

}  // namespace moc::gui

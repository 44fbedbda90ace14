// mocbench-gui [DB ...] [--screenshot out.png [--view NAME] [--run N] [--point N] [--kernel NAME]
//              [--time exclusive|inclusive] [--colour phase|floor] [--window US0:US1] [--size WxH]]
// The dashboard over mocbench results databases (read-only; a run writing the same file shows up live).
// Exit codes: 0 success; 1 a database could not be opened (screenshot mode) or no window could be made;
// 2 bad arguments.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "gui/app/dashboard.h"

int main(int argc, char** argv) {
  using namespace moc::gui;
  CLI::App app{"mocbench-gui: the dashboard over mocbench results databases (runs, sweeps, breakdowns, kernel "
               "timeline, roofline, memory, compare)"};
  std::vector<std::string> dbs;
  std::string screenshot, view_name, size = "1600x1000", kernel, time_mode = "exclusive", window, colour = "phase";
  std::int64_t run = -1, run_b = -1;
  int point = -1, frames = 4;
  app.add_option("DB", dbs, "Results databases to open (default: mocbench.db in the current folder)");
  app.add_option("--screenshot", screenshot, "Render off screen and write this PNG, then exit");
  std::string views_help = "View brought to front: ";
  for (View v : kAllViews) views_help += std::string(view_key(v)) + " ";
  views_help += "memory-peaks (Memory with each point's peak by category: Figure 1) "
                "training-gates (Training with a point's gate histograms: Figure 3)";
  app.add_option("--view", view_name, views_help);
  app.add_option("--run", run, "Run (id in the first database) to select (default: its newest)");
  app.add_option("--run-b", run_b, "Second run for Compare (id in the second database, or the first when one is open)");
  app.add_option("--point", point, "Point (sweep index) of the run to select");
  app.add_option("--kernel", kernel, "Kernel (short name) to select: its statistics in Timeline and Kernels");
  app.add_option("--time", time_mode, "How per-op device times are counted: exclusive (overlaps once) or inclusive (end - start)")
      ->capture_default_str();
  app.add_option("--colour", colour,
                 "Timeline: colour kernels by phase, or by floor (% of floor against the run's measured ceilings: red far "
                 "from it, green at it, grey undeclared)")
      ->capture_default_str();
  app.add_option("--window", window,
                 "Timeline: show US0 to US1 microseconds from the trace's start (e.g. 150:420) instead of the whole trace");
  app.add_option("--size", size, "Window size WxH")->capture_default_str();
  app.add_option("--frames", frames, "Screenshot: frames rendered before the capture")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  DashboardOptions opts;
  opts.databases = dbs.empty() ? std::vector<std::string>{"mocbench.db"} : dbs;
  opts.run = run;
  opts.run_b = run_b;
  opts.point = point;
  opts.kernel = kernel;
  if (!moc::prof::parse_time_mode(time_mode, &opts.time_mode)) {
    std::fprintf(stderr, "mocbench-gui: --time '%s' is not exclusive or inclusive\n", time_mode.c_str());
    return 2;
  }
  if (colour != "phase" && colour != "floor") {
    std::fprintf(stderr, "mocbench-gui: --colour '%s' is not phase or floor\n", colour.c_str());
    return 2;
  }
  opts.colour_floor = colour == "floor";
  if (view_name == "memory-peaks") {
    view_name = "memory";
    opts.memory_mode = 1;
  }
  if (view_name == "training-gates") {
    view_name = "training";
    opts.training_mode = 1;
  }
  if (!view_name.empty()) {
    View v;
    if (!view_from_key(view_name, &v)) {
      std::fprintf(stderr, "mocbench-gui: unknown view '%s'; %s\n", view_name.c_str(), views_help.c_str());
      return 2;
    }
    opts.focus = v;
  }
  if (!window.empty()) {
    double us0 = 0, us1 = 0;
    char end = 0;
    if (std::sscanf(window.c_str(), "%lf:%lf%c", &us0, &us1, &end) != 2 || !(us1 > us0)) {
      std::fprintf(stderr, "mocbench-gui: --window '%s' is not US0:US1 with US0 < US1 (microseconds from the trace's start)\n",
                   window.c_str());
      return 2;
    }
    opts.window_t0_ns = us0 * 1e3;
    opts.window_t1_ns = us1 * 1e3;
  }
  if (std::sscanf(size.c_str(), "%dx%d", &opts.width, &opts.height) != 2 || opts.width < 320 || opts.height < 240 ||
      opts.width > 8192 || opts.height > 8192) {
    std::fprintf(stderr, "mocbench-gui: --size '%s' is not WxH (320x240 to 8192x8192), e.g. 1600x1000\n", size.c_str());
    return 2;
  }
  if (!screenshot.empty()) {
    opts.refresh_s = 1e9;  // one consistent snapshot
    opts.scripted_input = true;
  }
  Dashboard d(opts);
  std::string error;
  if (!d.init(&error)) {
    std::fprintf(stderr, "mocbench-gui: %s\n", error.c_str());
    return 1;
  }
  for (const auto& s : d.store().sources()) {
    if (!s.error.empty()) std::fprintf(stderr, "mocbench-gui: %s\n", s.error.c_str());
    if (!s.damage.empty())
      std::fprintf(stderr, "mocbench-gui: %s is damaged (SQLite's quick_check: %s); what it still holds is shown\n",
                   s.path.c_str(), s.damage.c_str());
  }
  if (screenshot.empty()) return d.run_until_closed();
  for (int i = 0; i < std::max(2, frames); ++i) d.frame();
  if (!d.selection_error().empty()) {  // never a picture of another run than the one asked for
    std::fprintf(stderr, "mocbench-gui: %s; nothing written\n", d.selection_error().c_str());
    return 2;
  }
  if (!d.write_png(screenshot, &error)) {
    std::fprintf(stderr, "mocbench-gui: %s\n", error.c_str());
    return 1;
  }
  std::printf("mocbench-gui: wrote %s\n", screenshot.c_str());
  return d.store().any_error() ? 1 : 0;
}

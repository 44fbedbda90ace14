// Frame time of the dashboard's kernel timeline with N synthetic kernels (default 1M): the whole dashboard is
// built and rendered each frame with the Timeline view in front, fitted (every kernel in view: the merging
// path) and zoomed in (single kernels drawn with names). Needs a display (xvfb-run -a on a headless machine).
// Usage: mocbench_gui_bench [N] [frames] [WxH]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gui/app/dashboard.h"
#include "gui/model/timeline.h"

int main(int argc, char** argv) {
  using namespace moc::gui;
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  const int frames = argc > 2 ? std::atoi(argv[2]) : 60;
  DashboardOptions opts;
  opts.width = 1600;
  opts.height = 1000;
  if (argc > 3 && std::sscanf(argv[3], "%dx%d", &opts.width, &opts.height) != 2) {
    std::fprintf(stderr, "size: WxH\n");
    return 2;
  }
  opts.focus = View::timeline;
  opts.refresh_s = 1e9;
  Dashboard d(opts);
  std::string err;
  if (!d.init(&err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  auto trace = std::make_shared<const moc::prof::ProfileTrace>(synthetic_trace(n, 2));
  // A run is needed for the views to draw: inject the synthetic timeline as the current one.
  TimelineState& st = d.ui().timeline;
  st.pinned = true;
  auto run_case = [&](const char* name, bool fit, double zoom) {
    std::vector<double> ms, build, render;
    for (int i = 0; i < frames + 3; ++i) {
      if (i == 0) {
        st.timeline = build_timeline(trace);
        st.fit = true;
      }
      if (i == 1 && !fit) {
        const double mid = 0.5 * (st.t0 + st.t1), w = (st.t1 - st.t0) * zoom;
        st.t0 = mid - w / 2;
        st.t1 = mid + w / 2;
      }
      const double t = d.frame();
      d.swap();
      if (i >= 3) {
        ms.push_back(t);
        build.push_back(d.last_build_ms());
        render.push_back(d.last_render_ms());
      }
    }
    for (auto* v : {&ms, &build, &render}) std::sort(v->begin(), v->end());
    std::printf("%-22s %zu kernels (+%zu ranges): frame median %.2f ms (p90 %.2f, max %.2f) = UI build %.2f ms "
                "(p90 %.2f) + OpenGL render %.2f ms; %zu spans drawn\n",
                name, trace->kernels.size(), st.timeline.items - trace->kernels.size(), ms[ms.size() / 2],
                ms[ms.size() * 9 / 10], ms.back(), build[build.size() / 2], build[build.size() * 9 / 10],
                render[render.size() / 2], st.spans_drawn);
  };
  run_case("fitted (all in view)", true, 1);
  run_case("zoomed 1/1000", false, 1e-3);
  run_case("zoomed 1/100000", false, 1e-5);
  std::printf("window %dx%d, renderer: %s\n", opts.width, opts.height, d.renderer().c_str());
  return 0;
}

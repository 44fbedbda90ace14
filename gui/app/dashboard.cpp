#include "gui/app/dashboard.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>
#include <imgui_internal.h>
#include <implot.h>
#include <stb/stb_image_write.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>
#include <filesystem>
#include <cstring>
#include <cerrno>
#include <chrono>
#include <cstdio>

namespace moc::gui {

namespace {
std::string g_glfw_error;
void on_glfw_error(int code, const char* what) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "GLFW error %d: %s", code, what);
  g_glfw_error = buf;
}
}  // namespace

Dashboard::Dashboard(DashboardOptions opts) : opts_(std::move(opts)) {
  for (const auto& p : opts_.databases) store_.open(p);
  ui_.memory_mode = opts_.memory_mode;
  ui_.training_mode = opts_.training_mode;
  ui_.kernels.selected = opts_.kernel;
  ui_.time_mode = opts_.time_mode;
  if (opts_.colour_floor) ui_.timeline.colour = TimelineState::Colour::floor;
  ui_.timeline.window_t0_ns = opts_.window_t0_ns;
  ui_.timeline.window_t1_ns = opts_.window_t1_ns;
}

Dashboard::~Dashboard() {
  if (imgui_) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImPlot::DestroyContext();
    ImGui::DestroyContext();
  }
  if (window_) glfwDestroyWindow(window_);
  glfwTerminate();
}

bool Dashboard::init(std::string* error) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    *error = "cannot open a window (" + (g_glfw_error.empty() ? std::string("glfwInit failed") : g_glfw_error) +
             "); is DISPLAY set? Headless: xvfb-run -a mocbench-gui ...";
    return false;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_SCALE_FRAMEBUFFER, GLFW_FALSE);
  window_ = glfwCreateWindow(opts_.width, opts_.height, "mocbench", nullptr, nullptr);
  if (!window_) {
    *error = "cannot create an OpenGL 3.3 window (" + g_glfw_error + ")";
    return false;
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(0);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImPlot::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.ConfigFlags |= ImGuiConfigFlags_DockingEnable;
  io.IniFilename = nullptr;  // the default layout every time; no file written beside the database
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
  ImGui_ImplGlfw_InitForOpenGL(window_, !opts_.scripted_input);
  ImGui_ImplOpenGL3_Init("#version 330");
  imgui_ = true;
  return true;
}

void Dashboard::apply_initial_selection() {
  selection_done_ = true;
  if (store_.runs().empty()) return;
  RunRef a;
  for (const auto& r : store_.runs()) {
    if (r.ref.source != 0) continue;
    if (opts_.run < 0 || r.run.id == opts_.run) {
      a = r.ref;
      break;
    }
  }
  selection_error_.clear();
  if (!a.valid()) {
    if (opts_.run >= 0) selection_error_ = "the first database has no run " + std::to_string(opts_.run);
    a = store_.runs().front().ref;
  }
  select_run(ui_, a, false);
  if (opts_.point >= 0) {
    bool found = false;
    for (const auto& p : store_.points(a))
      if (p.index == opts_.point) {
        ui_.point_id = p.id;
        found = true;
      }
    if (!found && selection_error_.empty())
      selection_error_ = "run " + std::to_string(a.run_id) + " has no point " + std::to_string(opts_.point);
  }
  // B: --run-b in the second database (or the first when only one is open); by default the second
  // database's newest run when two are open.
  const int b_source = store_.sources().size() > 1 ? 1 : 0;
  if (opts_.run_b >= 0 || b_source == 1) {
    bool found = false;
    for (const auto& r : store_.runs())
      if (r.ref.source == b_source && (opts_.run_b < 0 || r.run.id == opts_.run_b) && r.ref != a) {
        select_run(ui_, r.ref, true);
        found = true;
        break;
      }
    if (!found && opts_.run_b >= 0 && selection_error_.empty())
      selection_error_ = std::string(b_source ? "the second database" : "the first database") + " has no run " +
                         std::to_string(opts_.run_b) + " to compare";
  }
}

void Dashboard::build_layout(unsigned int dockspace_id) {
  layout_done_ = true;
  ImGui::DockBuilderRemoveNode(dockspace_id);
  ImGui::DockBuilderAddNode(dockspace_id, ImGuiDockNodeFlags_DockSpace);
  ImGui::DockBuilderSetNodeSize(dockspace_id, ImGui::GetMainViewport()->WorkSize);
  ImGuiID right = 0;
  const ImGuiID left = ImGui::DockBuilderSplitNode(dockspace_id, ImGuiDir_Left, 0.34f, nullptr, &right);
  ImGui::DockBuilderDockWindow(view_title(View::runs), left);
  for (View v : {View::sweep, View::breakdown, View::timeline, View::kernels, View::roofline, View::stages, View::memory,
                 View::compare, View::training})
    ImGui::DockBuilderDockWindow(view_title(v), right);
  ImGui::DockBuilderFinish(dockspace_id);
}

double Dashboard::frame() {
  glfwPollEvents();
  const auto t_start = std::chrono::steady_clock::now();
  const double now = glfwGetTime();
  if (now - last_refresh_ >= opts_.refresh_s) {
    last_refresh_ = now;
    store_.refresh();
  }
  if (!selection_done_ || (ui_.selected.empty() && !store_.runs().empty())) apply_initial_selection();

  ImGui_ImplOpenGL3_NewFrame();
  if (opts_.scripted_input) {
    // What the GLFW backend's NewFrame does, minus reading the pointer and keyboard.
    ImGuiIO& io = ImGui::GetIO();
    int w = 0, h = 0;
    glfwGetFramebufferSize(window_, &w, &h);
    io.DisplaySize = ImVec2(static_cast<float>(w), static_cast<float>(h));
    io.DisplayFramebufferScale = ImVec2(1, 1);
    io.DeltaTime = 1.0f / 60.0f;
  } else {
    ImGui_ImplGlfw_NewFrame();
  }
  ImGui::NewFrame();
  const ImGuiID dock = ImGui::DockSpaceOverViewport(0, ImGui::GetMainViewport());
  if (!layout_done_) build_layout(dock);
  // The focused tab: the first frames after start (the layout settles in two).
  if (focus_frames_ > 0) {
    --focus_frames_;
    ImGui::SetWindowFocus(view_title(opts_.focus ? *opts_.focus : View::sweep));
  }
  draw_runs_view(store_, ui_);
  draw_sweep_view(store_, ui_);
  draw_breakdown_view(store_, ui_);
  draw_timeline_view(store_, ui_);
  draw_kernel_stats_view(store_, ui_);
  draw_roofline_view(store_, ui_);
  draw_stage_stats_view(store_, ui_);
  draw_memory_view(store_, ui_);
  draw_compare_view(store_, ui_);
  draw_training_view(store_, ui_);
  ImGui::Render();
  const auto t_built = std::chrono::steady_clock::now();
  build_ms_ = std::chrono::duration<double, std::milli>(t_built - t_start).count();
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  glFinish();
  ++frames_;
  const auto t_end = std::chrono::steady_clock::now();
  render_ms_ = std::chrono::duration<double, std::milli>(t_end - t_built).count();
  return std::chrono::duration<double, std::milli>(t_end - t_start).count();
}

std::string Dashboard::renderer() const {
  const auto* r = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
  return r ? r : "?";
}

void Dashboard::show(View v) {
  opts_.focus = v;
  focus_frames_ = 2;
}

void Dashboard::swap() { glfwSwapBuffers(window_); }

bool Dashboard::should_close() const { return glfwWindowShouldClose(window_); }

int Dashboard::run_until_closed() {
  glfwSwapInterval(1);
  while (!should_close()) {
    if (glfwGetWindowAttrib(window_, GLFW_ICONIFIED)) {  // nothing to draw (a 0x0 framebuffer): wait
      glfwWaitEventsTimeout(0.1);
      continue;
    }
    frame();
    swap();
  }
  return 0;
}

std::vector<unsigned char> Dashboard::pixels(int* width, int* height) const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  std::vector<unsigned char> raw(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, raw.data());
  // OpenGL's rows start at the bottom.
  std::vector<unsigned char> out(raw.size());
  const std::size_t row = static_cast<std::size_t>(w) * 4;
  for (int y = 0; y < h; ++y)
    std::copy_n(raw.data() + static_cast<std::size_t>(h - 1 - y) * row, row, out.data() + static_cast<std::size_t>(y) * row);
  for (std::size_t i = 3; i < out.size(); i += 4) out[i] = 255;
  *width = w;
  *height = h;
  return out;
}

bool Dashboard::write_png(const std::string& path, std::string* error) const {
  int w = 0, h = 0;
  const auto px = pixels(&w, &h);
  // Encoded in memory, then written with every error checked: stb's own file writer ignores a failed write
  // (a full disk left a 0-byte PNG behind a "wrote" message).
  std::vector<unsigned char> png;
  auto append = [](void* ctx, void* data, int size) {
    auto* v = static_cast<std::vector<unsigned char>*>(ctx);
    v->insert(v->end(), static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + size);
  };
  if (!stbi_write_png_to_func(append, &png, w, h, 4, px.data(), w * 4) || png.empty()) {
    *error = "cannot encode the PNG for " + path;
    return false;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  const bool special = !ec && fs::exists(st) && !fs::is_regular_file(st);  // a device or pipe: written in place
  auto write_all = [&](std::FILE* f) {
    const bool ok = std::fwrite(png.data(), 1, png.size(), f) == png.size() && std::fflush(f) == 0;
    return std::fclose(f) == 0 && ok;
  };
  if (special) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || !write_all(f)) {
      *error = "cannot write " + path + ": " + std::strerror(errno);
      return false;
    }
    return true;
  }
  // A regular file: through a temporary file beside it, renamed over it once whole; a failure leaves nothing
  // new behind and an earlier picture as it was.
  const fs::path target(path);
  std::string tmpl = (target.parent_path().empty() ? fs::path(".") : target.parent_path()).string() + "/." +
                     target.filename().string() + ".XXXXXX";
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  std::FILE* f = ::fdopen(fd, "wb");
  const bool ok = f != nullptr && write_all(f);
  const int err = errno;
  if (!f) ::close(fd);
  if (!ok || ::chmod(tmpl.c_str(), 0644) != 0 || std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(tmpl.c_str());
    *error = "cannot write " + path + ": " + std::strerror(e);
    return false;
  }
  return true;
}

bool Dashboard::view_rect(View v, float rect[4]) const {
  ImGuiWindow* win = ImGui::FindWindowByName(view_title(v));
  if (!win || win->Hidden || !win->Active) return false;
  rect[0] = win->Pos.x;
  rect[1] = win->Pos.y;
  rect[2] = win->Size.x;
  rect[3] = win->Size.y;
  return true;
}

}  // namespace moc::gui

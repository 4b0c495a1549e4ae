// The dashboard window: GLFW + OpenGL 3 + ImGui setup, DPI-aware fonts, the frame loop, polling of
// the runs, machine statistics, keyboard shortcuts and the panel layout.
#include <GLFW/glfw3.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "dashboard/gui_internal.h"
#include "framework/core/error.h"

namespace anelab::dashboard {
namespace fs = std::filesystem;
namespace {

// The OpenGL context: macOS has core profiles 3.2 and up, forward-compatible only, and ImGui's OpenGL 3
// backend then needs GLSL 1.50; elsewhere 3.3 core with GLSL 3.30.
#ifdef __APPLE__
constexpr int kGlMajor = 3, kGlMinor = 2;
constexpr const char* kGlslVersion = "#version 150";
#else
constexpr int kGlMajor = 3, kGlMinor = 3;
constexpr const char* kGlslVersion = "#version 330";
#endif

double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

const char* find_font(const char* const* candidates) {
  for (const char* const* p = candidates; *p; ++p)
    if (fs::exists(*p)) return *p;
  return nullptr;
}

// Scales. Where the framebuffer has more pixels than the window has units (a Retina Mac: window sizes
// and ImGui's coordinates are points, 2 pixels each), the layout stays in points (app.scale = content
// scale / pixels per point, 1 on a Retina Mac) and fonts are rasterised at the framebuffer's density and
// drawn at 1 / pixels per point, so text is sharp. Where window units are pixels (X11, Windows),
// pixels per point is 1 and layout and fonts both follow the monitor's content scale.
float pixels_per_point(GLFWwindow* w) {
  int ww = 0, wh = 0, fw = 0, fh = 0;
  glfwGetWindowSize(w, &ww, &wh);
  glfwGetFramebufferSize(w, &fw, &fh);
  return ww > 0 && fw > ww ? static_cast<float>(fw) / static_cast<float>(ww) : 1.0f;
}
float layout_scale(GLFWwindow* w, float content_scale) { return std::max(1.0f, content_scale / pixels_per_point(w)); }

void load_fonts(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const float density = pixels_per_point(app.window);
  const float font_scale = app.scale * density;  // font pixels per layout unit
  io.FontGlobalScale = 1.0f / density;
  static const char* const sans[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                     "/usr/share/fonts/TTF/DejaVuSans.ttf", "/Library/Fonts/Arial.ttf", nullptr};
  static const char* const mono[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
                                     "/usr/share/fonts/TTF/DejaVuSansMono.ttf", nullptr};
  const float px = std::round(14.0f * font_scale);
  ImFontConfig cfg;
  cfg.OversampleH = 2;
  if (const char* f = find_font(sans)) {
    io.Fonts->AddFontFromFileTTF(f, px, &cfg);
  } else {
    cfg.SizePixels = std::round(13.0f * font_scale);
    io.Fonts->AddFontDefault(&cfg);
  }
  if (const char* f = find_font(mono)) {
    app.mono = io.Fonts->AddFontFromFileTTF(f, std::round(13.0f * font_scale), &cfg);
  } else {
    app.mono = io.Fonts->Fonts[0];
  }
  ImGuiStyle style;
  ImGui::StyleColorsDark(&style);
  style.WindowRounding = 0, style.ChildRounding = 3 * app.scale, style.FrameRounding = 2 * app.scale;
  style.ScaleAllSizes(app.scale);
  ImGui::GetStyle() = style;
}

void on_content_scale(GLFWwindow* w, float xs, float ys) {
  auto* app = static_cast<App*>(glfwGetWindowUserPointer(w));
  if (app && app->opt.scale <= 0) app->scale = layout_scale(w, std::max(xs, ys));
  if (app) app->rebuild_fonts = true;  // the framebuffer density may have changed too
}

void on_glfw_error(int code, const char* msg) {
  std::fprintf(stderr, "anelab dashboard: GLFW error %d: %s\n", code, msg);
}

std::string timestamp_name() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "dashboard-%Y%m%d-%H%M%S.png", std::localtime(&t));
  return buf;
}

void list_experiments(App& app) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(app.opt.experiments_dir, ec))
    if (e.path().extension() == ".toml") app.experiment_configs.push_back(e.path().string());
  std::sort(app.experiment_configs.begin(), app.experiment_configs.end());
}

void main_loop(App& app);
void shutdown(App& app);
}  // namespace

bool gui_available() { return true; }

void CapabilityCheck::start(std::vector<std::string> argv, std::string what) {
  state.store(1);
  worker = std::thread([this, argv = std::move(argv), what = std::move(what)] {
    std::string out;
    int rc = run_and_capture(argv, &out, 5000);
    ok = rc == 0;
    help = out;
    if (!ok)
      reason = "`anelab " + what + "` is not available in this build yet (its --help exited with " +
               std::to_string(rc) + ")";
    state.store(2, std::memory_order_release);
  });
}

ImU32 App::run_color(size_t i) const {
  static const ImU32 palette[] = {IM_COL32(255, 145, 40, 255),  IM_COL32(70, 170, 255, 255),
                                  IM_COL32(90, 215, 110, 255),  IM_COL32(235, 95, 205, 255),
                                  IM_COL32(240, 225, 70, 255),  IM_COL32(60, 215, 205, 255),
                                  IM_COL32(175, 145, 255, 255), IM_COL32(245, 90, 90, 255)};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

bool App::add_run(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return false;
  fs::path p(dir);
  if (fs::is_regular_file(p) && p.filename() == "events.jsonl")
    dir = p.parent_path().empty() ? "." : p.parent_path().string();
  for (const auto& r : runs)
    if (fs::weakly_canonical(r.data->dir) == fs::weakly_canonical(dir)) {
      status_line = "already open: " + dir;
      return false;
    }
  RunView v;
  v.data = std::make_unique<RunData>(dir);
  v.color = run_color(runs.size());
  runs.push_back(std::move(v));
  auto& r = *runs.back().data;
  for (int i = 0; i < 64 && r.poll(); ++i) {  // read what is there now (bounded)
  }
  status_line = "opened " + dir + (r.file_exists ? "" : " (no events.jsonl yet: waiting for it)");
  return true;
}

void App::poll_runs(bool all) {
  if (paused && !all) return;
  for (auto& v : runs) {
    v.data->poll();
    v.data->refresh_status(wall_now());
  }
  last_poll = now;
}

void App::update_caches() {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (auto& v : runs) {
    RunData& r = *v.data;
    if (r.events != v.seen_events || r.steps.size() != v.seen_rows || ema_weight != v.seen_ema) {
      v.loss_ema = ema(r.steps[Col::loss], ema_weight);
      const double t0 = r.first_t;
      v.elapsed.resize(r.steps.size());
      for (size_t i = 0; i < r.steps.size(); ++i) v.elapsed[i] = r.steps[Col::t][i] - t0;
      v.eval_elapsed.resize(r.evals.size());
      for (size_t i = 0; i < r.evals.size(); ++i) v.eval_elapsed[i] = r.evals.t[i] - t0;
      v.marker_x_time.resize(r.markers.size());
      for (size_t i = 0; i < r.markers.size(); ++i) v.marker_x_time[i] = r.markers[i].t - t0;
      v.seen_events = r.events, v.seen_rows = r.steps.size(), v.seen_ema = ema_weight;
    }
    if (!v.visible) continue;
    Range xr = x_range(x_time ? v.elapsed : r.steps[Col::step]);
    if (xr.valid()) lo = std::min(lo, xr.lo), hi = std::max(hi, xr.hi);
  }
  if (!(hi > lo)) {
    if (hi == lo && std::isfinite(lo))
      lo -= 0.5, hi += 0.5;
    else
      lo = 0, hi = 1;
  }
  xv.fit_lo = lo, xv.fit_hi = hi;
}

void App::sample_system() {
  if (now - last_sys < 1.0) return;
  if (sys_t0 == 0) sys_t0 = now;
  last_sys = now;
  bool p = sample_power();
  bool c = cpu.sample();
  mem = platform::machine_memory();
  if (!p && !c) return;
  sys_t.push_back(now - sys_t0);
  power_w.push_back(p ? power_now_w : std::numeric_limits<double>::quiet_NaN());
  cpu_pct.push_back(c ? cpu.pct() : std::numeric_limits<double>::quiet_NaN());
  if (!p)
    for (auto& v : rail_w) v.push_back(std::numeric_limits<double>::quiet_NaN());
  if (sys_t.size() > 3600) {  // keep an hour
    for (auto* v : {&sys_t, &power_w, &cpu_pct}) v->erase(v->begin(), v->begin() + 600);
    for (auto& v : rail_w) v.erase(v.begin(), v.begin() + 600);
  }
}

// Watts over the interval since the last reading; false when there is no new interval (no source, the
// first reading, a self-paced source without a new sample, or a failed read).
bool App::sample_power() {
  if (!meter->available() || !meter_error.empty()) return false;
  power::Reading r;
  try {
    r = meter->energy();
  } catch (const std::exception& e) {
    meter_error = e.what();
    return false;
  }
  const power::Sample s = power::difference(meter_last, r);
  const bool fresh = meter_primed && s.seconds > 1e-3;
  if (!meter_primed || fresh) meter_last = r;
  meter_primed = true;
  if (!fresh) return false;
  power_now_w = s.total_watts();
  for (power::Rail rail : power::kAllRails) rail_w[static_cast<int>(rail)].push_back(s.watts(rail));
  return true;
}

void App::handle_shortcuts() {
  ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;
  for (int i = 0; i < io.InputQueueCharacters.Size; ++i)
    if (io.InputQueueCharacters[i] == '?') show_help = !show_help;
  auto pressed = [](int key) { return ImGui::IsKeyPressed(key, false); };
  if (pressed(GLFW_KEY_F1)) show_help = !show_help;
  if (pressed(GLFW_KEY_ESCAPE) && show_help) show_help = false;
  if (pressed(GLFW_KEY_Q) && io.KeyCtrl) glfwSetWindowShouldClose(window, 1);
  if (io.KeyCtrl) return;
  if (pressed(GLFW_KEY_SPACE)) paused = !paused, status_line = paused ? "following paused" : "following resumed";
  if (pressed(GLFW_KEY_L)) loss_log = !loss_log;
  if (pressed(GLFW_KEY_T)) x_time = !x_time, xv.autofit = true;
  if (pressed(GLFW_KEY_V)) show_val = !show_val;
  if (pressed(GLFW_KEY_W)) show_raw = !show_raw;
  if (pressed(GLFW_KEY_R) || pressed(GLFW_KEY_HOME)) xv.autofit = true;
  if (pressed(GLFW_KEY_O)) focus_path_input = true;
  if (pressed(GLFW_KEY_LEFT_BRACKET)) ema_weight = std::max(0.0f, ema_weight - 0.05f);
  if (pressed(GLFW_KEY_RIGHT_BRACKET)) ema_weight = std::min(0.99f, ema_weight + 0.05f);
  if (pressed(GLFW_KEY_F12)) {
    std::string name = timestamp_name();
    // Taken at the end of this frame (see the main loop).
    status_line = "screenshot: " + name;
    opt.screenshot = name;
  }
  for (int k = 0; k < 9; ++k)
    if (pressed(GLFW_KEY_1 + k) && k < static_cast<int>(runs.size())) focus = k;
  if (pressed(GLFW_KEY_TAB) && !runs.empty()) focus = (focus + 1) % static_cast<int>(runs.size());
  if ((pressed(GLFW_KEY_EQUAL) || pressed(GLFW_KEY_KP_ADD) || pressed(GLFW_KEY_MINUS) ||
       pressed(GLFW_KEY_KP_SUBTRACT))) {
    double f = (ImGui::IsKeyDown(GLFW_KEY_MINUS) || ImGui::IsKeyDown(GLFW_KEY_KP_SUBTRACT)) ? 1 / 0.7 : 0.7;
    double lo = xv.cur_lo(), hi = xv.cur_hi(), mid = (lo + hi) / 2;
    xv.autofit = false, xv.lo = mid - (mid - lo) * f, xv.hi = mid + (hi - mid) * f;
  }
}

void App::record_panel(const std::string& name) {
  ImVec2 p = ImGui::GetWindowPos(), s = ImGui::GetWindowSize(), fb = ImGui::GetIO().DisplayFramebufferScale;
  panels[name] = {p.x * fb.x, p.y * fb.y, s.x * fb.x, s.y * fb.y};
}

void App::record_plot(const std::string& name, ImVec4 r) {
  ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
  plots[name] = {r.x * fb.x, r.y * fb.y, (r.z - r.x) * fb.x, (r.w - r.y) * fb.y};
}

void App::draw() {
  ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("anelab dashboard", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  draw_header(*this);
  const ImGuiStyle& st = ImGui::GetStyle();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const float gap = st.ItemSpacing.x;
  const float left_w = std::floor((avail.x - gap) * 0.66f), right_w = avail.x - gap - left_w;
  const float h = avail.y;
  const float row_a = std::floor((h - 2 * gap) * 0.42f), row_b = std::floor((h - 2 * gap) * 0.29f);
  const float row_c = h - 2 * gap - row_a - row_b;
  const float small_w = std::floor((left_w - 2 * gap) / 3);

  ImGui::BeginGroup();
  draw_loss_panel(*this, {left_w, row_a});
  draw_small_plot_panel(*this, "lr", {small_w, row_b});
  ImGui::SameLine();
  draw_small_plot_panel(*this, "grad", {small_w, row_b});
  ImGui::SameLine();
  draw_small_plot_panel(*this, "ms", {left_w - 2 * small_w - 2 * gap, row_b});
  draw_small_plot_panel(*this, "tokens", {small_w, row_c});
  ImGui::SameLine();
  draw_small_plot_panel(*this, "memory", {small_w, row_c});
  ImGui::SameLine();
  draw_small_plot_panel(*this, "power", {left_w - 2 * small_w - 2 * gap, row_c});
  ImGui::EndGroup();
  ImGui::SameLine();
  ImGui::BeginGroup();
  const float r1 = std::floor((h - 2 * gap) * 0.37f), r2 = std::floor((h - 2 * gap) * 0.35f);
  draw_runs_panel(*this, {right_w, r1});
  draw_samples_panel(*this, {right_w, r2});
  draw_config_panel(*this, {right_w, h - 2 * gap - r1 - r2});
  ImGui::EndGroup();
  ImGui::End();
  if (show_help) draw_help_window(*this);
}

int run_dashboard(const GuiOptions& opt_in) {
  auto app_ptr = std::make_unique<App>();
  App& app = *app_ptr;
  app.opt = opt_in;
  const bool screenshot_mode = !opt_in.screenshot.empty();
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit())
    fail("dashboard", "cannot initialise GLFW (no display? set DISPLAY, or run under xvfb-run -a for screenshots)");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, kGlMajor);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, kGlMinor);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
#ifdef __APPLE__
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);  // macOS gives core profiles only this way
  glfwWindowHint(GLFW_COCOA_RETINA_FRAMEBUFFER, GLFW_TRUE);
#endif
  glfwWindowHint(GLFW_SCALE_TO_MONITOR, GLFW_TRUE);
  app.window = glfwCreateWindow(app.opt.width, app.opt.height, "anelab dashboard", nullptr, nullptr);
  if (!app.window) {
    glfwTerminate();
    fail("dashboard", "cannot create a ", app.opt.width, "x", app.opt.height, " window with OpenGL ", kGlMajor, ".",
         kGlMinor, " core (check the display and the GL driver, e.g. libgl1-mesa-dri)");
  }
  glfwSetWindowUserPointer(app.window, &app);
  glfwMakeContextCurrent(app.window);
  glfwSwapInterval(screenshot_mode ? 0 : 1);
  float xs = 1, ys = 1;
  glfwGetWindowContentScale(app.window, &xs, &ys);
  app.scale = app.opt.scale > 0 ? app.opt.scale : layout_scale(app.window, std::max(xs, ys));
  glfwSetWindowContentScaleCallback(app.window, on_content_scale);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is fixed; nothing to persist
  load_fonts(app);
  ImGui_ImplGlfw_InitForOpenGL(app.window, true);
  ImGui_ImplOpenGL3_Init(kGlslVersion);
  try {
    main_loop(app);
  } catch (...) {
    shutdown(app);
    throw;
  }
  shutdown(app);
  return 0;
}

namespace {
void main_loop(App& app) {
  const bool screenshot_mode = !app.opt.screenshot.empty();
  app.now = mono_now();
  for (const auto& d : app.opt.run_dirs) app.add_run(d);
  std::snprintf(app.run_dir_buf, sizeof app.run_dir_buf, "runs/new-run");
  list_experiments(app);
  if (!app.experiment_configs.empty())
    std::snprintf(app.cfg_buf, sizeof app.cfg_buf, "%s", app.experiment_configs[0].c_str());
  const std::string exe = self_executable();
  app.train_check.start({exe, "train", "--help"}, "train");
  app.infer_check.start({exe, "infer", "generate", "--help"}, "infer generate");
  app.sample_system();

  int frame = 0;
  const double frame_s = 1.0 / 60.0;
  while (!glfwWindowShouldClose(app.window)) {
    double t_frame = mono_now();
    if (screenshot_mode)
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(app.trainer.running() || app.sampler.running() ? 0.05 : 0.1);
    app.now = mono_now();
    if (app.rebuild_fonts) {
      load_fonts(app);
      ImGui_ImplOpenGL3_DestroyFontsTexture();
      ImGui_ImplOpenGL3_CreateFontsTexture();
      app.rebuild_fonts = false;
    }
    if (app.now - app.last_poll >= app.opt.poll_ms / 1000.0) app.poll_runs(false);
    app.trainer.poll();
    app.sampler.poll();
    app.sample_system();
    app.update_caches();

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    if (screenshot_mode) ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);  // no hover in screenshots
    ImGui::NewFrame();
    app.handle_shortcuts();
    app.draw();
    ImGui::Render();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(app.window, &fw, &fh);
    glViewport(0, 0, fw, fh);
    glClearColor(0.08f, 0.08f, 0.09f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    ++frame;
    if (!app.opt.screenshot.empty() && (!screenshot_mode || frame >= app.opt.frames)) {
      write_screenshot(app, app.opt.screenshot, frame);
      if (screenshot_mode) break;
      app.opt.screenshot.clear();
    }
    glfwSwapBuffers(app.window);
    if (screenshot_mode) {  // pace frames so a live run gets time to grow
      double left = frame_s - (mono_now() - t_frame);
      if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
    }
  }
  if (app.trainer.running())
    std::fprintf(stderr, "anelab dashboard: the trainer (pid %d) keeps running; its events are in %s\n",
                 static_cast<int>(app.trainer.pid()), app.trainer_run_dir.c_str());
}

void shutdown(App& app) {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(app.window);
  glfwTerminate();
}
}  // namespace

}  // namespace anelab::dashboard

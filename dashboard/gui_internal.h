// State shared by the dashboard's window code (gui_app.cpp) and its panels (gui_panels.cpp).
#pragma once
#include <imgui.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dashboard/gui.h"
#include "dashboard/gui_plot.h"
#include "dashboard/process.h"
#include "dashboard/run_model.h"
#include "dashboard/system_stats.h"
#include "framework/core/power.h"

struct GLFWwindow;

namespace anelab::dashboard {

// One opened run plus the derived series the plots draw (recomputed when the run changes).
struct RunView {
  std::unique_ptr<RunData> data;
  ImU32 color = 0;
  bool visible = true;
  uint64_t seen_events = ~0ull;  // data->events when the caches below were built
  size_t seen_rows = ~size_t(0);
  double seen_ema = -1;
  std::vector<double> loss_ema, elapsed, eval_elapsed;  // elapsed = t - first_t (seconds)
  std::vector<double> marker_x_time;                    // markers on the time axis
};

// A capability probe that runs `anelab <sub> --help` once in the background.
struct CapabilityCheck {
  std::atomic<int> state{0};  // 0 = not started, 1 = running, 2 = done
  bool ok = false;
  std::string help, reason;
  std::thread worker;
  void start(std::vector<std::string> argv, std::string what);
  bool done() const { return state.load(std::memory_order_acquire) == 2; }
  ~CapabilityCheck() {
    if (worker.joinable()) worker.join();
  }
};

struct Rect {
  float x = 0, y = 0, w = 0, h = 0;
};

struct App {
  GuiOptions opt;
  GLFWwindow* window = nullptr;
  float scale = 1.0f;
  bool rebuild_fonts = false;
  ImFont* mono = nullptr;

  std::vector<RunView> runs;
  int focus = 0;
  XView xv;
  bool x_time = false, loss_log = false, show_raw = true, show_val = true, paused = false, show_help = false;
  bool focus_path_input = false;
  float ema_weight = 0.6f;
  double now = 0, last_poll = 0;
  std::string status_line;  // last action's result (shown in the header)
  char path_buf[1024] = {};

  // Trainer control.
  ChildProcess trainer;
  std::string trainer_run_dir, trainer_msg;
  double trainer_stop_time = 0;
  int trainer_stop_presses = 0;
  char cfg_buf[512] = {}, run_dir_buf[512] = {};
  std::vector<std::string> experiment_configs;
  CapabilityCheck train_check, infer_check;

  // Sample now.
  ChildProcess sampler;
  float temperature = 0.8f, top_p = 0.9f;
  int max_tokens = 64;
  char prompt_buf[512] = {};
  std::string sample_output, sample_model;

  // Machine stats.
  std::unique_ptr<power::Meter> meter = power::default_meter();  // this machine's power source, if any
  power::Reading meter_last;
  bool meter_primed = false;
  std::string meter_error;                                // a read that failed (shown instead of numbers)
  double power_now_w = NAN;                               // last interval's total watts
  std::array<std::vector<double>, power::kRails> rail_w;  // per rail, aligned with sys_t (NaN: no value)
  MachineCpu cpu;
  std::vector<double> sys_t, power_w, cpu_pct, rss_self;  // sampled once a second
  double sys_t0 = 0, last_sys = 0;
  platform::Reading<platform::MachineMemory> mem =
      platform::Reading<platform::MachineMemory>::unavailable("not sampled yet");

  // Rectangles of the last frame (framebuffer pixels), for the screenshot sidecar.
  std::map<std::string, Rect> panels, plots;

  bool add_run(const std::string& dir);
  void poll_runs(bool all);
  void update_caches();
  void sample_system();
  bool sample_power();
  void handle_shortcuts();
  void draw();  // one frame of the UI
  ImU32 run_color(size_t i) const;
  RunView* focused() { return runs.empty() ? nullptr : &runs[static_cast<size_t>(focus) % runs.size()]; }
  void record_panel(const std::string& name);           // call inside a child window
  void record_plot(const std::string& name, ImVec4 r);  // screen coordinates
};

// Panels (gui_panels.cpp).
void draw_header(App& app);
void draw_loss_panel(App& app, ImVec2 size);
void draw_small_plot_panel(App& app, const char* which, ImVec2 size);
void draw_runs_panel(App& app, ImVec2 size);
void draw_samples_panel(App& app, ImVec2 size);
void draw_config_panel(App& app, ImVec2 size);
void draw_help_window(App& app);

// Screenshot (gui_capture.cpp): reads the back buffer and writes PNG + JSON sidecar.
void write_screenshot(App& app, const std::string& png_path, int frames_rendered);

}  // namespace anelab::dashboard

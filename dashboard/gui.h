// The dashboard window (ImGui + GLFW + OpenGL 3). Built only when those libraries are found
// (ANELAB_DASHBOARD_GUI); otherwise run_dashboard() fails with a message naming the packages.
#pragma once
#include <string>
#include <vector>

namespace anelab::dashboard {

struct GuiOptions {
  std::vector<std::string> run_dirs;  // run directories to open (each has events.jsonl)
  std::string screenshot;             // when set: render `frames` frames, write this PNG (+ .json sidecar), exit
  int frames = 30;
  int width = 1280, height = 800;               // window size in screen coordinates
  float scale = 0;                              // UI scale; 0 = from the monitor's content scale (DPI)
  int poll_ms = 200;                            // how often events.jsonl files are polled
  std::string experiments_dir = "experiments";  // where "start run" looks for *.toml configs
};

// Opens the window and runs until closed (or until the screenshot is written). Returns the
// process exit code. Throws anelab::Error when the window cannot be created.
int run_dashboard(const GuiOptions& opt);

// True when this build has the GUI.
bool gui_available();

}  // namespace anelab::dashboard

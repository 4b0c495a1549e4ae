// anelab dashboard: the training dashboard window (dashboard/, docs/dashboard.md).
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "dashboard/gui.h"
#include "framework/core/error.h"

namespace anelab::cli {

void add_dashboard_command(CLI::App& app) {
  auto opt = std::make_shared<dashboard::GuiOptions>();
  auto* cmd =
      app.add_subcommand("dashboard",
                         "Training dashboard: follow one or more run directories (their events.jsonl), plot loss, "
                         "speed, memory, power and samples; start/stop/resume runs. F1 or ? lists the shortcuts.");
  cmd->add_option("run_dirs", opt->run_dirs, "Run directories to open (each holds events.jsonl)");
  cmd->add_option("--screenshot", opt->screenshot,
                  "Render --frames frames, write this PNG (and a .json sidecar with panel rectangles), exit");
  cmd->add_option("--frames", opt->frames, "Frames to render before the screenshot")->capture_default_str();
  cmd->add_option("--width", opt->width, "Window width (screen coordinates)")->capture_default_str();
  cmd->add_option("--height", opt->height, "Window height (screen coordinates)")->capture_default_str();
  cmd->add_option("--scale", opt->scale, "UI scale; 0 = from the monitor's DPI (content scale)")->capture_default_str();
  cmd->add_option("--poll-ms", opt->poll_ms, "How often to poll events.jsonl files (ms)")->capture_default_str();
  cmd->add_option("--experiments", opt->experiments_dir, "Directory with experiment configs (*.toml) for 'start run'")
      ->capture_default_str();
  cmd->callback([opt] {
    if (opt->frames < 1) fail("dashboard", "--frames must be >= 1, got ", opt->frames);
    if (opt->width < 320 || opt->height < 240 || opt->width > 16384 || opt->height > 16384)
      fail("dashboard", "--width/--height must be within 320x240 .. 16384x16384, got ", opt->width, "x", opt->height);
    if (opt->poll_ms < 10) fail("dashboard", "--poll-ms must be >= 10, got ", opt->poll_ms);
    for (auto& d : opt->run_dirs) {
      std::filesystem::path p(d);
      if (std::filesystem::is_regular_file(p) && p.filename() == "events.jsonl") {
        d = p.parent_path().empty() ? "." : p.parent_path().string();  // accept the events file itself
      } else if (std::filesystem::exists(p) && !std::filesystem::is_directory(p)) {
        fail("dashboard", "run directory ", d, " is a file; pass the directory that holds events.jsonl");
      }
    }
    int rc = dashboard::run_dashboard(*opt);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace anelab::cli

// The dashboard's panels: header, loss, small plots (LR, grad norm + loss scale, ms/step breakdown,
// tokens/s, memory + CPU, power), runs (+ trainer control), samples (+ sample now), config, help.
#include <GLFW/glfw3.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dashboard/gui_internal.h"
#include "framework/core/platform.h"

namespace anelab::dashboard {
namespace fs = std::filesystem;
namespace {

const ImU32 kCompile = IM_COL32(150, 150, 160, 150);
const ImU32 kRestart = IM_COL32(255, 70, 70, 220);
const ImU32 kResume = IM_COL32(200, 130, 255, 220);
const ImU32 kCheckpoint = IM_COL32(200, 200, 200, 70);
const ImVec4 kErrText(1.0f, 0.42f, 0.38f, 1.0f);
const ImVec4 kWarnText(1.0f, 0.8f, 0.35f, 1.0f);
const ImVec4 kOkText(0.55f, 0.85f, 0.55f, 1.0f);

double last_finite(const std::vector<double>& v) {
  for (auto it = v.rbegin(); it != v.rend(); ++it)
    if (std::isfinite(*it)) return *it;
  return std::nan("");
}

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void help_marker(const char* text) {
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
    ImGui::TextUnformatted(text);
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

void title(const char* t) { ImGui::TextUnformatted(t); }

// Markers of the visible runs (compile batches, restarts, resumes, errors; checkpoints optional).
std::vector<PlotMarker> run_markers(const App& app, bool checkpoints) {
  std::vector<PlotMarker> out;
  for (const auto& v : app.runs) {
    if (!v.visible) continue;
    const auto& ms = v.data->markers;
    for (size_t i = 0; i < ms.size(); ++i) {
      const Marker& m = ms[i];
      double x = app.x_time ? (i < v.marker_x_time.size() ? v.marker_x_time[i] : 0) : m.step;
      ImU32 c = 0;
      switch (m.kind) {
        case MarkerKind::compile:
          c = kCompile;
          break;
        case MarkerKind::restart:
          c = kRestart;
          break;
        case MarkerKind::resume:
          c = kResume;
          break;
        case MarkerKind::error:
          c = kRestart;
          break;
        case MarkerKind::checkpoint:
          c = checkpoints ? kCheckpoint : 0;
          break;
        case MarkerKind::run_start:
          c = 0;
          break;
      }
      if (c) out.push_back({x, c, v.data->name + ": " + m.label, m.kind == MarkerKind::compile});
    }
  }
  return out;
}

const std::vector<double>& xcol(const App& app, const RunView& v) {
  return app.x_time ? v.elapsed : v.data->steps[Col::step];
}

// Lines of one step-table column for every visible run.
std::vector<PlotLine> column_lines(const App& app, Col c, const char* what, float alpha = 1.0f) {
  std::vector<PlotLine> lines;
  for (const auto& v : app.runs)
    if (v.visible)
      lines.push_back({&xcol(app, v), &v.data->steps[c], with_alpha(v.color, alpha), 1.5f, v.data->name + " " + what});
  return lines;
}

PlotSpec spec_for(const App& app, const char* id) {
  PlotSpec s;
  s.id = id;
  s.x_label = app.x_time ? "s" : "step";
  return s;
}

void plot_column(App& app, const char* id, Col c, const char* what, ImVec2 size, bool from_zero, bool log_y = false) {
  PlotSpec s = spec_for(app, id);
  s.size = size;
  s.y_from_zero = from_zero;
  s.log_y = log_y;
  ImVec4 r = draw_plot(s, app.xv, column_lines(app, c, what), run_markers(app, false), {});  // legend: loss panel
  std::string name = id;
  if (name.size() > 5 && name.substr(name.size() - 5) == "_plot") name.resize(name.size() - 5);
  app.record_plot(name, r);
}
}  // namespace

void draw_header(App& app) {
  RunView* f = app.focused();
  if (!f) {
    ImGui::TextUnformatted(
        "anelab dashboard  |  no run open: pass run directories on the command line or type one "
        "in Runs > open  |  F1 or ? for help");
  } else {
    const RunData& r = *f->data;
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(f->color), "%s", r.name.c_str());
    ImGui::SameLine();
    const auto& s = r.steps;
    double ms = last_finite(s[Col::ms]);
    ImGui::Text("[%s]  step %s  loss %s (ema %s)  val %s  %s ms/step  %s tok/s  compiles %lld  restarts %lld",
                status_name(r.status), fmt("%.0f", last_finite(s[Col::step])).c_str(),
                fmt("%.4f", last_finite(s[Col::loss])).c_str(), fmt("%.4f", last_finite(f->loss_ema)).c_str(),
                fmt("%.4f", last_finite(r.evals.val_loss)).c_str(), fmt("%.1f", ms).c_str(),
                fmt("%.0f", last_finite(s[Col::tokens_per_s])).c_str(), static_cast<long long>(r.compiles_total),
                static_cast<long long>(r.restarts));
  }
  ImGui::SameLine();
  if (app.meter->available() && !std::isnan(app.power_now_w))
    ImGui::Text(" power %.1f W (%s)", app.power_now_w, app.meter->source_name().c_str());
  else
    ImGui::TextDisabled(" power n/a");
  if (app.paused) {
    ImGui::SameLine();
    ImGui::TextColored(kWarnText, " PAUSED (space)");
  }
  const char* hint = "F1 / ? help";
  ImGui::SameLine(std::max(ImGui::GetCursorPosX(), ImGui::GetWindowContentRegionMax().x - ImGui::CalcTextSize(hint).x));
  ImGui::TextDisabled("%s", hint);
  if (!app.status_line.empty()) {
    ImGui::TextDisabled("%s", app.status_line.c_str());
  } else {
    ImGui::NewLine();
  }
}

void draw_loss_panel(App& app, ImVec2 size) {
  ImGui::BeginChild("loss_panel", size, true);
  app.record_panel("loss");
  title("Loss");
  const float s = app.scale;
  ImGui::SameLine(0, 20 * s);
  ImGui::SetNextItemWidth(110 * s);
  ImGui::SliderFloat("EMA", &app.ema_weight, 0.0f, 0.99f, "%.2f");
  help_marker("Exponential moving average of the train loss (debiased); [ and ] change it.");
  ImGui::SameLine();
  ImGui::Checkbox("raw", &app.show_raw);
  ImGui::SameLine();
  ImGui::Checkbox("val", &app.show_val);
  ImGui::SameLine();
  ImGui::Checkbox("log y", &app.loss_log);
  ImGui::SameLine();
  if (ImGui::RadioButton("step", !app.x_time)) app.x_time = false, app.xv.autofit = true;
  ImGui::SameLine();
  if (ImGui::RadioButton("time", app.x_time)) app.x_time = true, app.xv.autofit = true;
  ImGui::SameLine();
  if (ImGui::SmallButton("fit")) app.xv.autofit = true;
  help_marker("Mouse wheel zooms the x axis of every plot, drag pans, double-click (or R) fits the data.");
  std::vector<PlotLine> lines;
  for (const auto& v : app.runs) {
    if (!v.visible) continue;
    const auto& x = xcol(app, v);
    if (app.show_raw) lines.push_back({&x, &v.data->steps[Col::loss], with_alpha(v.color, 0.28f), 1.0f, ""});
    lines.push_back({&x, &v.loss_ema, v.color, 2.2f, v.data->name + " train (ema)"});
    if (app.show_val)
      lines.push_back({app.x_time ? &v.eval_elapsed : &v.data->evals.step, &v.data->evals.val_loss,
                       lighten(v.color, 0.55f), 1.5f, v.data->name + " val", true});
  }
  std::vector<LegendItem> legend;
  for (const auto& v : app.runs)
    if (v.visible) legend.push_back({v.data->name, v.color});
  PlotSpec spec = spec_for(app, "loss_plot");
  spec.log_y = app.loss_log;
  spec.empty_text =
      app.runs.empty() ? "open a run directory (Runs panel, or pass it on the command line)" : "no step events yet";
  ImVec4 r = draw_plot(spec, app.xv, lines, run_markers(app, true), legend);
  app.record_plot("loss", r);
  ImGui::EndChild();
}

namespace {
void draw_ms_panel(App& app) {
  // comm: the communication the training thread waited for (ms_comm_wait); the time the gradient sum took in
  // all (ms_comm, partly hidden behind the backward when overlapped) is the focused run's "comm total" line.
  title("ms/step (kernel | cpu dW | staging | comm wait | other)");
  RunView* f = app.focused();
  PlotStack stack;
  std::vector<PlotLine> lines;
  std::vector<LegendItem> legend;
  static const ImU32 comp[5] = {IM_COL32(86, 156, 214, 200), IM_COL32(214, 110, 70, 200), IM_COL32(170, 200, 90, 200),
                                IM_COL32(200, 140, 220, 200), IM_COL32(160, 160, 170, 200)};
  static const char* names[5] = {"kernel", "cpu dW", "staging", "comm wait", "other"};
  if (f && f->visible) {
    stack.x = &xcol(app, *f);
    const Col cols[5] = {Col::ms_kernel, Col::ms_cpu_dw, Col::ms_staging, Col::ms_comm_wait, Col::ms_other};
    for (int i = 0; i < 5; ++i) {
      stack.ys.push_back(&f->data->steps[cols[i]]);
      stack.colors.push_back(comp[i]);
      stack.labels.push_back(names[i]);
      legend.push_back({names[i], comp[i]});
    }
  }
  for (const auto& v : app.runs)  // total ms of every visible run as a line
    if (v.visible) lines.push_back({&xcol(app, v), &v.data->steps[Col::ms], v.color, 1.2f, v.data->name + " ms"});
  if (f && f->visible) {  // several ranks: the whole communication time as a line
    const auto& comm = f->data->steps[Col::ms_comm];
    if (std::any_of(comm.begin(), comm.end(), [](double v) { return v > 0; }))
      lines.push_back({&xcol(app, *f), &comm, comp[3], 1.0f, f->data->name + " comm total"});
  }
  PlotSpec s = spec_for(app, "ms_plot");
  s.y_from_zero = true;
  ImVec4 r = draw_plot(s, app.xv, lines, run_markers(app, false), legend, stack.x ? &stack : nullptr);
  app.record_plot("ms", r);
}

void draw_memory_panel(App& app) {
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeightWithSpacing(), sp = ImGui::GetStyle().ItemSpacing.y;
  const float h = std::floor(std::max(30.0f, (avail.y - 3 * line - 2 * sp) / 2));
  title("RSS (MB)");
  plot_column(app, "rss_plot", Col::rss_mb, "RSS MB", {0, h}, true);
  title("trainer CPU % (100 = one core)");
  plot_column(app, "cpu_plot", Col::cpu_pct, "CPU %", {0, h}, true);
  char cpu[96] = "", mem[96] = "";
  if (app.cpu.cores() > 0) std::snprintf(cpu, sizeof cpu, "CPU %.0f%% of %d cores", app.cpu.pct(), app.cpu.cores());
  if (app.mem)
    std::snprintf(mem, sizeof mem, "mem %.1f/%.1f GB", (app.mem->total_mb - app.mem->available_mb) / 1024,
                  app.mem->total_mb / 1024);
  ImGui::TextDisabled("machine: %s, %s", app.cpu.cores() > 0 ? cpu : ("CPU not available: " + app.cpu.reason()).c_str(),
                      app.mem ? mem : ("mem not available: " + app.mem.reason).c_str());
}

// Machine watts per rail (this machine's power source) over the dashboard's own time axis.
void draw_machine_watts(App& app, float h) {
  const power::Meter& m = *app.meter;
  if (!m.available() || !app.meter_error.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(kWarnText, "machine power: %s", m.available() ? app.meter_error.c_str() : m.reason().c_str());
    ImGui::PopTextWrapPos();
    ImVec2 p = ImGui::GetCursorScreenPos(), a = ImGui::GetContentRegionAvail();
    app.record_plot("power", {p.x, p.y, p.x + a.x, p.y + std::min(a.y, h)});
    return;
  }
  static XView xv;  // its own time axis (dashboard seconds)
  Range xr = x_range(app.sys_t);
  xv.fit_lo = xr.valid() ? xr.lo : 0, xv.fit_hi = xr.valid() && xr.hi > xr.lo ? xr.hi : xv.fit_lo + 1;
  PlotSpec s;
  s.id = "power_plot";
  s.x_label = "s";
  s.y_from_zero = true;
  s.size = {0, h};
  s.y_fmt = "%.2f W";
  static const ImU32 colors[power::kRails] = {IM_COL32(255, 200, 80, 255), IM_COL32(120, 220, 120, 255),
                                              IM_COL32(230, 110, 230, 255), IM_COL32(110, 170, 255, 255),
                                              IM_COL32(200, 200, 200, 255)};
  std::vector<PlotLine> lines;
  for (power::Rail r : m.rails())
    lines.push_back(
        {&app.sys_t, &app.rail_w[static_cast<int>(r)], colors[static_cast<int>(r)], 1.8f, power::rail_name(r)});
  app.record_plot("power", draw_plot(s, xv, lines, {}, {}));
  std::string now;
  for (power::Rail r : m.rails()) {
    const auto& v = app.rail_w[static_cast<int>(r)];
    now += std::string(power::rail_name(r)) + " " +
           (v.empty() || std::isnan(v.back()) ? "n/a" : fmt("%.1f", v.back())) + " W  ";
  }
  ImGui::TextDisabled("%s", now.c_str());
}

// Joules per step of the focused run (its step events), or why the trainer could not measure them.
void draw_run_energy(App& app) {
  RunView* f = app.focused();
  if (!f) return;
  const RunData& r = *f->data;
  if (r.power_state != PowerState::available) {
    ImGui::PushTextWrapPos(0);
    if (r.power_state == PowerState::not_available)
      ImGui::TextColored(kWarnText, "J/step: %s", r.power_reason.c_str());
    else
      ImGui::TextDisabled("J/step: the run does not say (events without run_start.power)");
    ImGui::PopTextWrapPos();
    return;
  }
  title(
      ("J/step (" + r.power_source + ", " + fmt("%.3g", last_finite(r.steps[Col::j_per_token])) + " J/token)").c_str());
  plot_column(app, "energy_plot", Col::energy_j, "J/step", {0, ImGui::GetContentRegionAvail().y}, true);
}

void draw_power_panel(App& app) {
  title(app.meter->available() ? ("Power (W, " + app.meter->source_name() + ")").c_str() : "Power (W)");
  const float avail = ImGui::GetContentRegionAvail().y, line = ImGui::GetTextLineHeightWithSpacing();
  const bool run_energy = app.focused() != nullptr;
  draw_machine_watts(app, std::max(30.0f, (run_energy ? avail * 0.5f : avail) - 2 * line));
  draw_run_energy(app);
}

void draw_grad_panel(App& app) {
  ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeightWithSpacing(), sp = ImGui::GetStyle().ItemSpacing.y;
  const float h = std::floor(std::max(30.0f, (avail.y - 2 * line - sp) / 2));
  title("grad norm (before clipping)");
  plot_column(app, "grad_plot", Col::grad_norm, "grad norm", {0, h}, true);
  title("loss scale (log)");
  plot_column(app, "scale_plot", Col::loss_scale, "loss scale", {0, h}, false, true);
}
}  // namespace

void draw_small_plot_panel(App& app, const char* which, ImVec2 size) {
  ImGui::BeginChild((std::string(which) + "_panel").c_str(), size, true);
  app.record_panel(which);
  std::string w = which;
  if (w == "lr") {
    title("learning rate");
    plot_column(app, "lr_plot", Col::lr, "lr", {0, 0}, true);
  } else if (w == "grad") {
    draw_grad_panel(app);
  } else if (w == "ms") {
    draw_ms_panel(app);
  } else if (w == "tokens") {
    title("tokens/s");
    plot_column(app, "tokens_plot", Col::tokens_per_s, "tok/s", {0, 0}, true);
  } else if (w == "memory") {
    draw_memory_panel(app);
  } else if (w == "power") {
    draw_power_panel(app);
  }
  ImGui::EndChild();
}

// ---------------------------------------------------------------- runs + trainer control
namespace {
void start_trainer(App& app, bool resume) {
  if (app.trainer.running()) {
    app.trainer_msg = "a trainer started here is still running (pid " + std::to_string(app.trainer.pid()) + ")";
    return;
  }
  std::string dir = app.run_dir_buf, cfg = app.cfg_buf;
  if (dir.empty()) return void(app.trainer_msg = "set a run directory first");
  if (std::string busy = run_dir_busy(dir); !busy.empty()) return void(app.trainer_msg = std::move(busy));
  std::vector<std::string> argv = {self_executable(), "train", "--run-dir", dir};
  if (resume) {  // the trainer resumes from the run directory's saved config and last checkpoint
    if (!fs::exists(dir + "/config.json") && !fs::exists(dir + "/config.toml"))
      return void(app.trainer_msg = "nothing to resume in " + dir + " (no config.json / config.toml)");
    argv.push_back("--resume");
  } else {
    if (cfg.empty()) return void(app.trainer_msg = "choose an experiment config (experiments/*.toml)");
    argv.insert(argv.end(), {"--config", cfg});
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return void(app.trainer_msg = "cannot create " + dir + ": " + ec.message());
  if (!app.trainer.start(argv, dir + "/console.log", false)) return void(app.trainer_msg = app.trainer.error());
  app.trainer_run_dir = dir;
  app.trainer_stop_presses = 0;
  app.trainer_msg = std::string(resume ? "resumed" : "started") + " pid " + std::to_string(app.trainer.pid()) +
                    " (console output: " + dir + "/console.log)";
  app.add_run(dir);
}

void stop_trainer(App& app) {
  int sig = app.trainer_stop_presses++ == 0 ? SIGINT : SIGTERM;
  if (app.trainer.running()) {
    app.trainer.signal(sig);
    app.trainer_msg =
        std::string(sig == SIGINT ? "sent SIGINT (checkpoint and stop); press again for SIGTERM" : "sent SIGTERM") +
        " to pid " + std::to_string(app.trainer.pid());
    return;
  }
  RunView* f = app.focused();
  if (f && f->data->status == RunStatus::running && f->data->pid > 0) {
    const std::string why = platform::send_signal(f->data->pid, sig);
    app.trainer_msg = why.empty() ? std::string("sent ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " to pid " +
                                        std::to_string(f->data->pid) + " (" + f->data->name + ")"
                                  : "cannot signal pid " + std::to_string(f->data->pid) + ": " + why;
  } else {
    app.trainer_msg = "no running trainer to stop";
  }
}

void draw_trainer_controls(App& app) {
  const bool ready = app.train_check.done() && app.train_check.ok;
  if (ImGui::BeginCombo("config", app.cfg_buf[0] ? app.cfg_buf : "(experiments/*.toml)")) {
    for (const auto& c : app.experiment_configs)
      if (ImGui::Selectable(c.c_str(), c == app.cfg_buf))
        std::snprintf(app.cfg_buf, sizeof app.cfg_buf, "%s", c.c_str());
    if (app.experiment_configs.empty()) ImGui::TextDisabled("no *.toml in %s", app.opt.experiments_dir.c_str());
    ImGui::EndCombo();
  }
  ImGui::InputText("config path", app.cfg_buf, sizeof app.cfg_buf);
  ImGui::InputText("run dir", app.run_dir_buf, sizeof app.run_dir_buf);
  const char* why =
      !app.train_check.done() ? "checking whether `anelab train` is available..." : app.train_check.reason.c_str();
  ImGui::BeginDisabled(!ready);
  if (ImGui::Button("Start")) start_trainer(app, false);
  if (!ready) help_marker(why);
  ImGui::SameLine();
  if (ImGui::Button("Resume")) start_trainer(app, true);
  if (!ready) help_marker(why);
  ImGui::EndDisabled();
  ImGui::SameLine();
  RunView* f = app.focused();
  bool can_stop = app.trainer.running() || (f && f->data->status == RunStatus::running && f->data->pid > 0);
  ImGui::BeginDisabled(!can_stop);
  if (ImGui::Button(app.trainer_stop_presses > 0 && app.trainer.running() ? "Terminate" : "Stop")) stop_trainer(app);
  help_marker(
      "First press: SIGINT (the trainer checkpoints and stops); second press: SIGTERM. Without a trainer "
      "started here, signals the focused run's pid (same machine only).");
  ImGui::EndDisabled();
  if (app.trainer.started() && !app.trainer.running() && app.trainer_msg.find("exited") == std::string::npos)
    app.trainer_msg = "trainer exited with status " + std::to_string(app.trainer.exit_status()) + " (see " +
                      app.trainer_run_dir + "/console.log)";
  if (!app.trainer_msg.empty()) ImGui::TextWrapped("%s", app.trainer_msg.c_str());
  if (!ready && app.train_check.done()) ImGui::TextDisabled("%s", why);
}

void colored_wrapped(const ImVec4& c, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, c);
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

void draw_run_errors(const RunView& v) {
  const RunData& r = *v.data;
  if (r.malformed)
    colored_wrapped(kErrText, r.name + ": " + std::to_string(r.malformed) +
                                  " malformed line(s) in events.jsonl; first: line " +
                                  std::to_string(r.first_error.line) + ": " + r.first_error.message);
  if (!r.io_error.empty()) colored_wrapped(kErrText, r.name + ": " + r.events_path + ": " + r.io_error);
  if (!r.fatal_error.empty()) colored_wrapped(kErrText, r.name + ": run failed: " + r.fatal_error);
  if (r.dropped_rows)
    colored_wrapped(kWarnText, r.name + ": resumed from an earlier step; " + std::to_string(r.dropped_rows) +
                                   " superseded points dropped");
}
}  // namespace

void draw_runs_panel(App& app, ImVec2 size) {
  ImGui::BeginChild("runs_panel", size, true);
  app.record_panel("runs");
  title("Runs");
  ImGui::SameLine();
  if (app.focus_path_input) ImGui::SetKeyboardFocusHere(), app.focus_path_input = false;
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Open").x * 2.2f);
  bool enter = ImGui::InputTextWithHint("##open", "run directory to open (O)", app.path_buf, sizeof app.path_buf,
                                        ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if ((ImGui::Button("Open") || enter) && app.path_buf[0]) {
    if (app.add_run(app.path_buf)) app.path_buf[0] = '\0';
  }
  const ImGuiTableFlags tf = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("runs_table", 6, tf)) {
    ImGui::TableSetupColumn("show");
    ImGui::TableSetupColumn("run", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("status");
    ImGui::TableSetupColumn("step");
    ImGui::TableSetupColumn("loss");
    ImGui::TableSetupColumn("errors");
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < app.runs.size(); ++i) {
      RunView& v = app.runs[i];
      const RunData& r = *v.data;
      ImGui::PushID(static_cast<int>(i));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushStyleColor(ImGuiCol_CheckMark, ImGui::ColorConvertU32ToFloat4(v.color));
      ImGui::Checkbox("##vis", &v.visible);
      ImGui::PopStyleColor();
      ImGui::TableNextColumn();
      if (ImGui::Selectable(r.name.c_str(), app.focus == static_cast<int>(i))) app.focus = static_cast<int>(i);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s\n%llu events, %llu bytes read, %llu resets", r.events_path.c_str(),
                          static_cast<unsigned long long>(r.events),
                          static_cast<unsigned long long>(r.follower().offset()),
                          static_cast<unsigned long long>(r.follower().resets()));
      ImGui::TableNextColumn();
      ImVec4 sc = r.status == RunStatus::failed    ? kErrText
                  : r.status == RunStatus::running ? kOkText
                  : r.status == RunStatus::stopped ? kWarnText
                                                   : ImGui::GetStyleColorVec4(ImGuiCol_Text);
      ImGui::TextColored(sc, "%s", status_name(r.status));
      ImGui::TableNextColumn();
      ImGui::Text("%s", fmt("%.0f", last_finite(r.steps[Col::step])).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s", fmt("%.3f", last_finite(v.loss_ema)).c_str());
      ImGui::TableNextColumn();
      if (r.malformed)
        ImGui::TextColored(kErrText, "%llu", static_cast<unsigned long long>(r.malformed));
      else
        ImGui::TextDisabled("0");
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  for (const auto& v : app.runs) draw_run_errors(v);
  if (RunView* f = app.focused(); f && f->data->run_end.is_object()) {
    const auto& e = f->data->run_end;
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s finished: %s steps, %s s wall, %s s compile, %s ms/step, %s GFLOP/s, best val %s",
                       f->data->name.c_str(), fmt("%.0f", num_field(e, "steps")).c_str(),
                       fmt("%.1f", num_field(e, "wall_s")).c_str(), fmt("%.1f", num_field(e, "compile_s")).c_str(),
                       fmt("%.1f", num_field(e, "train_ms_per_step")).c_str(),
                       fmt("%.2f", num_field(e, "gflops")).c_str(), fmt("%.4f", num_field(e, "best_val_loss")).c_str());
    ImGui::PopStyleColor();
  }
  if (ImGui::CollapsingHeader("Trainer: start / stop / resume", ImGuiTreeNodeFlags_DefaultOpen))
    draw_trainer_controls(app);
  ImGui::EndChild();
}

// ---------------------------------------------------------------- samples
namespace {
std::string resolve_model(const RunData& r) {
  for (const std::string& p : {r.best_checkpoint, r.last_checkpoint}) {
    if (p.empty()) continue;
    if (fs::exists(p)) return p;
    if (fs::exists(r.dir + "/" + p)) return r.dir + "/" + p;
    std::string base = fs::path(p).filename().string();
    if (fs::exists(r.dir + "/" + base)) return r.dir + "/" + base;
  }
  return "";
}

void sample_now(App& app, const std::string& model) {
  const std::string& h = app.infer_check.help;
  std::vector<std::string> argv = {self_executable(), "infer", "generate", "--model", model};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", app.temperature);
  argv.insert(argv.end(), {"--temperature", buf});
  std::snprintf(buf, sizeof buf, "%.3g", app.top_p);
  argv.insert(argv.end(), {"--top-p", buf});
  if (h.find("--max-tokens") != std::string::npos)
    argv.insert(argv.end(), {"--max-tokens", std::to_string(app.max_tokens)});
  if (app.prompt_buf[0] && h.find("--prompt") != std::string::npos)
    argv.insert(argv.end(), {"--prompt", app.prompt_buf});
  app.sample_model = model;
  if (!app.sampler.start(argv, "", true)) app.sample_output = app.sampler.error();
}
}  // namespace

void draw_samples_panel(App& app, ImVec2 size) {
  ImGui::BeginChild("samples_panel", size, true);
  app.record_panel("samples");
  title("Sampled text");
  RunView* f = app.focused();
  const float s = app.scale;
  ImGui::SetNextItemWidth(90 * s);
  ImGui::SliderFloat("temp", &app.temperature, 0.0f, 2.0f, "%.2f");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(90 * s);
  ImGui::SliderFloat("top-p", &app.top_p, 0.05f, 1.0f, "%.2f");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(70 * s);
  ImGui::InputInt("tokens", &app.max_tokens, 0);
  app.max_tokens = std::clamp(app.max_tokens, 1, 4096);
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Sample now").x * 1.3f);
  ImGui::InputTextWithHint("##prompt", "prompt (optional)", app.prompt_buf, sizeof app.prompt_buf);
  ImGui::SameLine();
  const std::string model = f ? resolve_model(*f->data) : "";
  const bool infer_ok = app.infer_check.done() && app.infer_check.ok &&
                        app.infer_check.help.find("--temperature") != std::string::npos &&
                        app.infer_check.help.find("--top-p") != std::string::npos &&
                        app.infer_check.help.find("--model") != std::string::npos;
  std::string why;
  if (!app.infer_check.done())
    why = "checking whether `anelab infer generate` is available...";
  else if (!app.infer_check.ok)
    why = app.infer_check.reason;
  else if (!infer_ok)
    why = "`anelab infer generate` lacks --model/--temperature/--top-p in this build";
  else if (!f)
    why = "open a run first";
  else if (model.empty())
    why = "the focused run has no checkpoint file yet (checkpoint events name it)";
  else if (app.sampler.running())
    why = "generating...";
  ImGui::BeginDisabled(!why.empty());
  if (ImGui::Button("Sample now")) sample_now(app, model);
  ImGui::EndDisabled();
  help_marker(why.empty() ? ("generate from " + model + " with `anelab infer generate`").c_str() : why.c_str());
  ImGui::PushFont(app.mono);
  ImGui::BeginChild("samples_scroll", {0, 0}, false);
  if (app.sampler.started()) {
    ImGui::TextColored(kOkText, "sample now (%s)%s", app.sample_model.c_str(),
                       app.sampler.running()       ? " ..."
                       : app.sampler.exit_status() ? " failed"
                                                   : "");
    ImGui::TextWrapped("%s", app.sampler.output().empty() ? app.sample_output.c_str() : app.sampler.output().c_str());
    ImGui::Separator();
  }
  if (f) {
    const auto& ss = f->data->samples;
    if (ss.empty()) ImGui::TextDisabled("no sample events yet");
    for (size_t k = ss.size(); k-- > 0 && ss.size() - k <= 50;) {
      const Sample& sm = ss[k];
      ImGui::TextDisabled("step %.0f  T=%.2f  top-p=%.2f  %s", sm.step, sm.temperature, sm.top_p,
                          sm.prompt.empty() ? "" : ("prompt: " + sm.prompt).c_str());
      ImGui::TextWrapped("%s", sm.text.c_str());
      ImGui::Spacing();
    }
  }
  ImGui::EndChild();
  ImGui::PopFont();
  ImGui::EndChild();
}

// ---------------------------------------------------------------- config
namespace {
void json_tree(const nlohmann::json& j) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = j.is_array() ? std::to_string(std::distance(j.begin(), it)) : it.key();
    if (it->is_structured()) {
      if (ImGui::TreeNode(key.c_str())) {
        json_tree(*it);
        ImGui::TreePop();
      }
    } else {
      ImGui::Text("%s = %s", key.c_str(), it->dump().c_str());
    }
  }
}
}  // namespace

void draw_config_panel(App& app, ImVec2 size) {
  ImGui::BeginChild("config_panel", size, true);
  app.record_panel("config");
  title("Resolved config (run_start)");
  RunView* f = app.focused();
  ImGui::PushFont(app.mono);
  ImGui::BeginChild("config_scroll", {0, 0}, false);
  if (!f) {
    ImGui::TextDisabled("no run open");
  } else {
    const RunData& r = *f->data;
    ImGui::Text("run %s (%s)  backend %s  device %s  strategy %s", r.name.c_str(), r.run.c_str(), r.backend.c_str(),
                r.device.c_str(), r.strategy.c_str());
    if (!r.model.empty()) ImGui::TextWrapped("model %s", r.model.dump().c_str());
    if (r.config.empty()) ImGui::TextDisabled("(no run_start.config yet)");
    json_tree(r.config);
  }
  ImGui::EndChild();
  ImGui::PopFont();
  ImGui::EndChild();
}

void draw_help_window(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({io.DisplaySize.x * 0.5f, io.DisplaySize.y * 0.5f}, ImGuiCond_Always, {0.5f, 0.5f});
  ImGui::SetNextWindowBgAlpha(0.95f);
  if (!ImGui::Begin(
          "Keyboard shortcuts (F1 / ? to close)", &app.show_help,
          ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings)) {
    ImGui::End();
    return;
  }
  static const char* rows[][2] = {{"F1  or  ?", "show / hide this help"},
                                  {"Space", "pause / resume following the event files"},
                                  {"L", "loss plot: log / linear y"},
                                  {"T", "x axis: step / elapsed time"},
                                  {"W", "show / hide the raw (unsmoothed) loss"},
                                  {"V", "show / hide validation loss"},
                                  {"[  ]", "less / more EMA smoothing"},
                                  {"R  or  Home", "fit the x axis to the data"},
                                  {"+  -", "zoom the x axis in / out"},
                                  {"1 .. 9,  Tab", "focus a run (samples, config, ms breakdown)"},
                                  {"O", "type a run directory to open"},
                                  {"F12", "save a screenshot (PNG + .json) in the current directory"},
                                  {"Ctrl+Q", "quit (a trainer started here keeps running)"},
                                  {"mouse wheel", "zoom the x axis of all plots at the cursor"},
                                  {"drag", "pan the x axis"},
                                  {"double-click", "fit the x axis"},
                                  {"hover", "crosshair with values and marker labels"}};
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
    for (auto& r : rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(kOkText, "%s", r[0]);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r[1]);
    }
    ImGui::EndTable();
  }
  ImGui::TextDisabled("Markers: gray dashed = kernel compiles, red = exec-restart / error, violet = resume,");
  ImGui::TextDisabled("faint white (loss plot) = checkpoint.  UI scale %.2f (from the monitor DPI; --scale).",
                      app.scale);
  ImGui::End();
}

}  // namespace anelab::dashboard

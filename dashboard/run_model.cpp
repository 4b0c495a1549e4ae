#include "dashboard/run_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "framework/core/platform.h"

namespace anelab::dashboard {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using nlohmann::json;

std::string str_field(const json& e, const char* key) {
  auto it = e.find(key);
  return (it != e.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

bool bool_field(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_boolean() && it->get<bool>();
}

std::string fmt_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
}  // namespace

const char* col_name(Col c) {
  static const char* names[] = {
      "step",     "t",         "loss",      "lr",         "grad_norm", "loss_scale",   "tokens",   "tokens_per_s",
      "ms",       "ms_kernel", "ms_cpu_dw", "ms_staging", "ms_comm",   "ms_comm_wait", "ms_other", "compiles_total",
      "restarts", "rss_mb",    "cpu_pct",   "skipped",    "energy_j",  "j_per_token"};
  static_assert(sizeof(names) / sizeof(names[0]) == Table::kCols);
  int i = static_cast<int>(c);
  return (i >= 0 && i < Table::kCols) ? names[i] : "?";
}

const char* status_name(RunStatus s) {
  switch (s) {
    case RunStatus::waiting:
      return "waiting for events";
    case RunStatus::running:
      return "running";
    case RunStatus::finished:
      return "finished";
    case RunStatus::failed:
      return "failed";
    case RunStatus::stopped:
      return "stopped";
  }
  return "?";
}

double num_field(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end()) return kNaN;
  if (it->is_number()) return it->get<double>();
  if (it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
  return kNaN;
}

void Table::clear() {
  for (auto& c : cols) c.clear();
}

void Table::drop_after_step(double s) {
  const std::vector<double> st = (*this)[Col::step];
  for (auto& c : cols) {
    size_t w = 0;
    for (size_t i = 0; i < c.size() && i < st.size(); ++i)
      if (!(st[i] > s)) c[w++] = c[i];
    c.resize(w);
  }
}

void EvalTable::drop_after_step(double s) {
  size_t w = 0;
  for (size_t i = 0; i < step.size(); ++i) {
    if (step[i] > s) continue;
    step[w] = step[i], t[w] = t[i], val_loss[w] = val_loss[i], ++w;
  }
  step.resize(w), t.resize(w), val_loss.resize(w);
}

RunData::RunData(std::string d) : dir(std::move(d)), follower_(dir + "/events.jsonl") {
  events_path = follower_.path();
  name = std::filesystem::path(dir).filename().string();
  if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
}

void RunData::reset() {
  steps.clear();
  evals.clear();
  markers.clear();
  samples.clear();
  config = json::object();
  model = json::object();
  run_end = nullptr;
  backend.clear(), device.clear(), strategy.clear(), fatal_error.clear();
  last_checkpoint.clear(), best_checkpoint.clear();
  pid = schema = restarts = starts = compiles_total = compile_budget = compile_kernels = 0;
  compile_ms = first_t = last_t = best_val_loss = 0;
  have_best_val = false;
  power_state = PowerState::unknown, power_source.clear(), power_reason.clear();
  status = RunStatus::waiting;
  events = malformed = ignored = dropped_rows = 0;
  first_error = {};
  recent_errors.clear();
}

bool RunData::poll(size_t max_bytes) {
  PollResult r = follower_.poll(max_bytes);
  bool changed = r.reset || r.exists != file_exists || r.error != io_error;
  file_exists = r.exists;
  io_error = r.error;
  if (r.reset) reset();
  if (!r.lines.empty()) ++polls_with_data;
  for (auto& l : r.lines) {
    if (l.too_long) {
      add_error(l.number, cat_line_too_long());
    } else {
      apply_line(l.text, l.number);
    }
    changed = true;
  }
  return changed;
}

std::string RunData::cat_line_too_long() {
  return "line longer than " + std::to_string(LineFollower::kMaxLine >> 20) + " MiB (skipped)";
}

void RunData::add_error(uint64_t line, std::string msg) {
  ++malformed;
  if (first_error.line == 0) first_error = {line, msg};
  recent_errors.push_back({line, std::move(msg)});
  while (recent_errors.size() > kRecentErrors) recent_errors.pop_front();
}

void RunData::apply_line(std::string_view text, uint64_t line_no) {
  if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank line
  json e;
  try {
    e = json::parse(text.begin(), text.end());
  } catch (const json::exception& ex) {
    std::string m = ex.what();
    auto p = m.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] " prefix
    add_error(line_no, "invalid JSON: " + (p == std::string::npos ? m : m.substr(p + 2)));
    return;
  }
  if (!e.is_object()) return add_error(line_no, "not a JSON object");
  auto ev = e.find("event");
  if (ev == e.end() || !ev->is_string()) return add_error(line_no, "missing string field \"event\"");
  const std::string type = ev->get<std::string>();
  double step = num_field(e, "step"), t = num_field(e, "t");
  if (std::isnan(step)) step = steps.size() ? steps[Col::step].back() : 0;
  if (std::isnan(t)) t = last_t;
  ++events;
  if (first_t == 0 && t > 0) first_t = t;
  if (t > last_t) last_t = t;

  if (type == "step") {
    on_step(e, step, t);
  } else if (type == "run_start") {
    on_run_start(e, step, t);
  } else if (type == "eval") {
    double v = num_field(e, "val_loss");
    evals.step.push_back(step), evals.t.push_back(t), evals.val_loss.push_back(v);
  } else if (type == "compile") {
    double k = num_field(e, "kernels"), ms = num_field(e, "ms"), tot = num_field(e, "compiles_total");
    double b = num_field(e, "budget");
    if (!std::isnan(k)) compile_kernels += static_cast<int64_t>(k);
    if (!std::isnan(ms)) compile_ms += ms;
    if (!std::isnan(tot)) compiles_total = static_cast<int64_t>(tot);
    if (!std::isnan(b)) compile_budget = static_cast<int64_t>(b);
    markers.push_back({MarkerKind::compile, step, t,
                       (std::isnan(k) ? std::string("?") : fmt_num(k)) + " kernels compiled" +
                           (std::isnan(ms) ? "" : " in " + fmt_num(ms) + " ms")});
  } else if (type == "sample") {
    samples.push_back({step, t, num_field(e, "temperature"), num_field(e, "top_p"), num_field(e, "tokens"),
                       str_field(e, "prompt"), str_field(e, "text")});
  } else if (type == "checkpoint") {
    std::string path = str_field(e, "path"), kind = str_field(e, "kind");
    if (kind == "best")
      best_checkpoint = path;
    else
      last_checkpoint = path;
    markers.push_back({MarkerKind::checkpoint, step, t, "checkpoint (" + kind + "): " + path});
  } else if (type == "restart") {
    markers.push_back({MarkerKind::restart, step, t, "exec-restart: " + str_field(e, "reason")});
  } else if (type == "run_end") {
    run_end = e;
    double v = num_field(e, "best_val_loss");
    if (!std::isnan(v)) best_val_loss = v, have_best_val = true;
    status = RunStatus::finished;
  } else if (type == "error") {
    fatal_error = str_field(e, "message");
    markers.push_back({MarkerKind::error, step, t, "error: " + fatal_error});
    status = RunStatus::failed;
  } else {
    ++ignored;
  }
}

void RunData::on_run_start(const json& e, double step, double t) {
  ++starts;
  auto it = e.find("config");
  if (it != e.end() && it->is_object()) config = *it;
  it = e.find("model");
  if (it != e.end() && it->is_object()) model = *it;
  run = str_field(e, "run");
  backend = str_field(e, "backend"), device = str_field(e, "device"), strategy = str_field(e, "strategy");
  double v = num_field(e, "pid");
  pid = std::isnan(v) ? 0 : static_cast<int64_t>(v);
  v = num_field(e, "schema");
  schema = std::isnan(v) ? 0 : static_cast<int64_t>(v);
  v = num_field(e, "restart");
  if (!std::isnan(v)) restarts = static_cast<int64_t>(v);
  compiles_total = 0;  // per process
  on_power(e);
  run_end = nullptr;
  fatal_error.clear();
  status = RunStatus::running;
  const bool resumed = bool_field(e, "resumed");
  // A process that starts at an earlier step than we have repeats those steps: drop the old rows.
  size_t before = steps.size() + evals.size();
  steps.drop_after_step(step);
  evals.drop_after_step(step);
  dropped_rows += before - steps.size() - evals.size();
  if (starts > 1) {
    bool exec_restart = !resumed && restarts > 0;
    markers.push_back({exec_restart ? MarkerKind::restart : MarkerKind::resume, step, t,
                       exec_restart ? "process restarted (exec-restart #" + std::to_string(restarts) + ")"
                                    : (resumed ? "resumed at step " + fmt_num(step) : "trainer started again")});
  } else {
    markers.push_back({MarkerKind::run_start, step, t, resumed ? "resumed at step " + fmt_num(step) : "run start"});
  }
}

void RunData::on_power(const json& e) {
  auto it = e.find("power");
  if (it == e.end() || !it->is_object()) {
    power_state = PowerState::unknown, power_source.clear(), power_reason.clear();
    return;
  }
  const bool ok = bool_field(*it, "available");
  power_state = ok ? PowerState::available : PowerState::not_available;
  power_source = str_field(*it, "source");
  power_reason = str_field(*it, "reason");
  if (!ok && power_reason.empty()) power_reason = "not available (no reason given)";
}

void RunData::on_step(const json& e, double step, double t) {
  for (int c = 0; c < Table::kCols; ++c) {
    Col col = static_cast<Col>(c);
    double v = col == Col::step ? step : col == Col::t ? t : num_field(e, col_name(col));
    if ((col == Col::ms_comm || col == Col::ms_comm_wait) && std::isnan(v))
      v = 0;  // events written before the field: one process, no communication
    steps.cols[c].push_back(v);
  }
  double tot = num_field(e, "compiles_total");
  if (!std::isnan(tot)) compiles_total = static_cast<int64_t>(tot);
  double r = num_field(e, "restarts");
  if (!std::isnan(r)) restarts = std::max(restarts, static_cast<int64_t>(r));
  if (status == RunStatus::waiting) status = RunStatus::running;
}

void RunData::refresh_status(double now_s) {
  if (status != RunStatus::running || pid <= 0) return;
  // Only meaningful when the trainer runs on this machine; a pid that does not exist means the
  // process ended without run_end/error (killed, crashed) -- unless events are still arriving.
  if (!platform::process_alive(pid) && now_s - last_t > 5.0) status = RunStatus::stopped;
}

}  // namespace anelab::dashboard

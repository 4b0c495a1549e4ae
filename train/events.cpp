#include "train/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "framework/core/error.h"
#include "framework/core/platform.h"

namespace anelab::train {

EventLog::EventLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("train", "cannot open events file ", path, ": ", std::strerror(errno));
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

// One write() of the whole line (O_APPEND), so a reader never sees half an event. A short write (disk full,
// file size limit) is undone: the file is cut back to its previous length, then the run stops with one line.
void EventLog::append_line(const std::string& line) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  ssize_t w;
  do w = ::write(fd_, line.data(), line.size());
  while (w < 0 && errno == EINTR);
  if (w == static_cast<ssize_t>(line.size())) return;
  const std::string why = w < 0 ? std::strerror(errno) : "short write (disk full or file size limit)";
  const bool cut = before >= 0 && platform::truncate_file(fd_, before).empty();
  fail("train", "cannot append to ", path_, ": ", why,
       cut ? " (the partial line was removed)" : " (a partial line may remain)",
       "; free space and --resume from the last checkpoint");
}

nlohmann::json EventLog::emit(const std::string& event, int64_t step, nlohmann::json fields) {
  nlohmann::json ev = {{"event", event}, {"t", unix_time()}, {"step", step}};
  for (auto& [k, v] : fields.items()) ev[k] = v;
  if (fd_ >= 0) append_line(ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return ev;
}

namespace {
double num(const nlohmann::json& j, const char* k, double d = 0) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : d;
}
std::string fmt(const char* f, auto... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}
}  // namespace

std::string duration_text(double s) {
  if (!(s >= 0)) s = 0;
  const long long t = (long long)(s + 0.5);
  if (t < 60) return fmt("%llds", t);
  if (t < 3600) return fmt("%lldm%02llds", t / 60, t % 60);
  return fmt("%lldh%02lldm", t / 3600, t / 60 % 60);
}

std::string console_line(const nlohmann::json& ev, int64_t total) {
  const std::string e = ev.value("event", "");
  const int64_t step = ev.value("step", int64_t(0));
  if (e == "step") {
    std::string line =
        fmt("step %5lld/%lld  loss %.4f  lr %.2e  gnorm %.3f  scale %g%s  %7.1f ms  %6.0f tok/s", (long long)step,
            (long long)total, num(ev, "loss"), num(ev, "lr"), num(ev, "grad_norm"), num(ev, "loss_scale"),
            ev.value("skipped", false) ? " SKIPPED" : "", num(ev, "ms"), num(ev, "tokens_per_s"));
    if (ev.contains("elapsed_s")) line += "  elapsed " + duration_text(num(ev, "elapsed_s"));
    if (ev.contains("eta_s")) line += "  eta " + duration_text(num(ev, "eta_s"));
    return line;
  }
  if (e == "eval")
    return fmt("eval  %5lld  val_loss %.4f  (%lld tokens)", (long long)step, num(ev, "val_loss"),
               (long long)num(ev, "val_tokens"));
  if (e == "sample") return fmt("sample %lld: ", (long long)step) + ev.value("text", "");
  if (e == "checkpoint") return fmt("checkpoint %s -> %s", ev.value("kind", "").c_str(), ev.value("path", "").c_str());
  if (e == "restart")
    return fmt("restart: compile budget nearly spent (%lld of %lld used) -> exec --resume",
               (long long)num(ev, "compiles_total"), (long long)num(ev, "budget"));
  if (e == "compile")
    return fmt("compiled %lld kernels in %.1f ms (%lld of %lld this process)", (long long)num(ev, "kernels"),
               num(ev, "ms"), (long long)num(ev, "compiles_total"), (long long)num(ev, "budget"));
  if (e == "memory") {
    const auto mb = [&](const char* k) { return ev.contains(k) && ev[k].is_number() ? num(ev, k) / 1048576.0 : -1.0; };
    std::string line =
        fmt("memory: %s%.1f MB trained + %.1f MB grads + %.1f MB AdamW + ",
            ev.value("lora", false) ? fmt("%.1f MB frozen base (%s%s) + ", mb("base_bytes"),
                                          ev.value("base_types", std::string("fp32")).c_str(),
                                          ev.value("base_compute", std::string()) == "bf16" ? ", products in bf16" : "")
                                          .c_str()
                                    : "",
            mb("trained_bytes"), mb("grad_bytes"), mb("optimizer_bytes"));
    line += mb("activation_bytes") >= 0 ? fmt("%.1f MB activations", mb("activation_bytes"))
                                        : std::string("activations not counted by this engine");
    line += fmt(" (batch %lld x seq %lld) = %.1f MB", (long long)num(ev, "batch_size"), (long long)num(ev, "seq_len"),
                mb("total_bytes"));
    if (mb("file_bytes") >= 0) line += fmt("; model file %.1f MB", mb("file_bytes"));
    return line;
  }
  if (e == "run_start")
    return fmt("run %s: %s %s, %lld params, strategy %s%s", ev.value("run", "").c_str(),
               ev["model"].value("arch", "").c_str(), ev["model"].value("preset", "").c_str(),
               (long long)ev["model"].value("params", int64_t(0)), ev.value("strategy", "").c_str(),
               ev.value("resumed", false) ? fmt(" (resumed at step %lld)", (long long)step).c_str() : "");
  return "";
}

// Energy of this process's steps, or why there is none ("not available", never 0 J).
static std::string energy_line(const nlohmann::json& r) {
  const nlohmann::json p = r.contains("power") && r["power"].is_object() ? r["power"] : nlohmann::json::object();
  if (r.contains("energy_j") && r["energy_j"].is_number())
    return fmt("Energy:        %.1f J, %.4g J/token (%s)\n", num(r, "energy_j"), num(r, "j_per_token"),
               p.value("source", "").c_str());
  return "Energy:        " + p.value("reason", std::string("not available")) + "\n";
}

std::string efficiency_report(const nlohmann::json& r) {
  // Totals (wall, compile, train time) are cumulative over the run's processes (resumes, restarts,
  // extensions); the average per step is this process's.
  const double wall = num(r, "wall_s"), comp = num(r, "compile_s"), ms = num(r, "train_ms_per_step");
  const double steps = num(r, "steps"), train_s = num(r, "train_s");
  const double pct = wall > 0 ? 100.0 / wall : 0;
  std::string s = "=== Efficiency Report ===\n";
  s += fmt("Total steps:   %lld\n", (long long)steps);
  s += fmt("Wall time:     %.1f s\n", wall);
  s += fmt("Compile time:  %.1f s (%.1f%%)\n", comp, comp * pct);
  s += fmt("Train time:    %.1f s (%.1f%%)\n", train_s, train_s * pct);
  s += fmt("Avg train:     %.1f ms/step (this process: %lld steps)\n", ms,
           (long long)num(r, "steps_this_process", steps));
  s += fmt("Achieved:      %.2f GFLOP/s (model FLOPs, fwd+bwd)\n", num(r, "gflops"));
  s += energy_line(r);
  s += fmt("Final loss:    %.4f", num(r, "final_loss"));
  if (r.contains("best_val_loss") && r["best_val_loss"].is_number())
    s += fmt("   best val loss: %.4f", r["best_val_loss"].get<double>());
  return s + "\n";
}

void add_rss(nlohmann::json* ev) {
  const auto m = platform::process_memory();
  (*ev)["rss_mb"] = m ? nlohmann::json(m->rss_mb) : nlohmann::json(nullptr);
  if (m && m->peak) (*ev)["rss_is_peak"] = true;
}

void add_peak_rss(nlohmann::json* ev) {
  const auto m = platform::peak_rss_mb();
  (*ev)["peak_rss_mb"] = m ? nlohmann::json(*m) : nlohmann::json(nullptr);
}

double cpu_seconds() { return platform::process_cpu_seconds(); }

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace anelab::train

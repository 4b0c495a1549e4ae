// anelab power: a small power monitor over framework/core/power.h.
//   anelab power [--interval-ms N] [--samples N] [--powermetrics-file FILE] [--json] [--rapl-root DIR]
// Picks a source (--powermetrics-file > macOS: IOReport, else powermetrics when root > Linux: RAPL when
// readable), says which and why the others are not used, then prints one row per sample and the energy
// totals. --json: one object per sample {sample, source, basis, seconds, cpu_w, gpu_w, ane_w, dram_w,
// core_w} and then one summary object {summary: true, source, detail, basis, samples, seconds, cpu_j,
// gpu_j, ane_j, dram_j, core_j, unavailable}; rails the source does not have are null, never 0.
// A recording is replayed at once (its samples' elapsed_ns are the intervals); --samples 0 = all of it.
// A live source is sampled every --interval-ms; --samples 0 = 10 samples.
// Without any source: one line saying why, exit status 1.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/power.h"

namespace anelab::cli {
namespace {
using nlohmann::json;

struct PowerArgs {
  int interval_ms = 1000;
  int samples = 0;
  std::string powermetrics_file;
  std::string rapl_root;  // "": the system's
  bool json = false;
};

json num_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

std::string cell(double v, const char* fmt) {
  if (std::isnan(v)) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

void print_header(const power::Selection& sel) {
  const power::Source& s = *sel.source;
  std::printf("source: %s (%s)\n", s.name().c_str(), s.detail().c_str());
  for (const auto& u : sel.unavailable) std::printf("  not used: %s\n", u.c_str());
  std::printf("%6s %9s", "sample", "seconds");
  for (power::Rail r : power::kAllRails) std::printf(" %8s", (std::string(power::rail_name(r)) + " W").c_str());
  std::printf("\n");
}

void print_sample(const PowerArgs& a, const power::Source& src, int i, const power::Sample& s) {
  if (a.json) {
    json j = {{"sample", i}, {"source", src.name()}, {"basis", src.basis()}, {"seconds", s.seconds}};
    for (power::Rail r : power::kAllRails) j[std::string(power::rail_name(r)) + "_w"] = num_or_null(s.watts(r));
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%6d %9.3f", i, s.seconds);
    for (power::Rail r : power::kAllRails) std::printf(" %8s", cell(s.watts(r), "%.3f").c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

void print_summary(const PowerArgs& a, const power::Selection& sel, int n, const power::Sample& total) {
  const power::Source& src = *sel.source;
  if (a.json) {
    json j = {{"summary", true}, {"source", src.name()},     {"detail", src.detail()},        {"basis", src.basis()},
              {"samples", n},    {"seconds", total.seconds}, {"unavailable", sel.unavailable}};
    for (power::Rail r : power::kAllRails) j[std::string(power::rail_name(r)) + "_j"] = num_or_null(total.joules[r]);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%6s %9.3f", "total", total.seconds);
  for (power::Rail r : power::kAllRails) std::printf(" %8s", cell(total.joules[r], "%.3f").c_str());
  std::printf("  (joules; from %s)\n", src.basis().c_str());
}

void run_power(const PowerArgs& a) {
  if (a.interval_ms < 10) fail("power", "--interval-ms must be >= 10, got ", a.interval_ms);
  if (a.samples < 0) fail("power", "--samples must be >= 0, got ", a.samples);
  power::SourceOptions o;
  o.powermetrics_file = a.powermetrics_file;
  o.interval_ms = a.interval_ms;
  o.rapl_root = a.rapl_root;
  power::Selection sel = power::select_source(o);
  if (!sel.source) fail("power", "no power source available on this machine: ", sel.reason());
  power::Source& src = *sel.source;
  const bool paced = src.self_paced();
  const int want = a.samples > 0 ? a.samples : (paced ? -1 : 10);
  power::Reading first, prev, cur;
  if (!paced) src.next(&first);  // counters: the zero point
  prev = first;
  if (!a.json) print_header(sel);
  int n = 0;
  while (want < 0 || n < want) {
    if (!paced) std::this_thread::sleep_for(std::chrono::milliseconds(a.interval_ms));
    if (!src.next(&cur)) break;
    print_sample(a, src, ++n, power::difference(prev, cur));
    prev = cur;
  }
  print_summary(a, sel, n, power::difference(first, prev));
}
}  // namespace

void add_power_command(CLI::App& app) {
  auto a = std::make_shared<PowerArgs>();
  CLI::App* cmd = app.add_subcommand(
      "power", "Power monitor: watts per rail (CPU, GPU, ANE; RAPL: package as cpu, core, dram) and energy totals");
  cmd->add_option("--interval-ms", a->interval_ms, "Sampling interval of a live source (ms)")->capture_default_str();
  cmd->add_option("--samples", a->samples, "Samples to take; 0 = a whole recording, or 10 from a live source")
      ->capture_default_str();
  cmd->add_option("--powermetrics-file", a->powermetrics_file,
                  "Replay a recorded `powermetrics --samplers cpu_power,gpu_power,ane_power -f plist` stream");
  cmd->add_option("--rapl-root", a->rapl_root, "Where the RAPL zones are (default: the system's powercap tree)");
  cmd->add_flag("--json", a->json, "One JSON object per sample, then a summary object");
  cmd->callback([a] { run_power(*a); });
}

}  // namespace anelab::cli

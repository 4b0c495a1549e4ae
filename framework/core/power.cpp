// Power sources: rails, readings, source selection and the Meter (see power.h).
#include "framework/core/power.h"

#include <unistd.h>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"

namespace anelab::power {

const char* rail_name(Rail r) {
  switch (r) {
    case Rail::cpu:
      return "cpu";
    case Rail::gpu:
      return "gpu";
    case Rail::ane:
      return "ane";
    case Rail::dram:
      return "dram";
    case Rail::core:
      return "core";
  }
  return "?";
}

bool RailEnergy::any() const {
  for (Rail r : kAllRails)
    if (has(r)) return true;
  return false;
}

double RailEnergy::total() const {
  double t = 0;
  bool any = false;
  for (Rail r : {Rail::cpu, Rail::gpu, Rail::ane, Rail::dram})
    if (has(r)) t += (*this)[r], any = true;
  return any ? t : NAN;
}

Sample difference(const Reading& before, const Reading& after) {
  Sample s;
  s.seconds = after.seconds - before.seconds;
  for (Rail r : kAllRails)
    if (after.joules.has(r)) s.joules[r] = after.joules[r] - (before.joules.has(r) ? before.joules[r] : 0.0);
  return s;
}

std::string Selection::reason() const {
  std::string s;
  for (const auto& u : unavailable) s += (s.empty() ? "" : "; ") + u;
  return s;
}

Selection select_source(const SourceOptions& o) {
  Selection sel;
  if (!o.powermetrics_file.empty()) {
    sel.source = open_powermetrics_file(o.powermetrics_file);
    sel.unavailable.push_back("others: not tried (--powermetrics-file replays a recording)");
    return sel;
  }
  // In order of preference; the first one that opens is used, the others say why they were not.
  const std::vector<std::pair<const char*, std::function<Opened()>>> openers = {
      {"ioreport", [] { return open_ioreport(); }},
      {"powermetrics", [&] { return open_powermetrics_live(o.interval_ms); }},
      {"rapl", [&] { return open_rapl(o.rapl_root); }},
  };
  for (const auto& [name, open] : openers) {
    if (sel.source) {
      sel.unavailable.push_back(cat(name, ": not tried (", sel.source->name(), " is preferred)"));
      continue;
    }
    Opened op = open();
    if (op.source)
      sel.source = std::move(op.source);
    else
      sel.unavailable.push_back(op.reason);
  }
  return sel;
}

Meter::Meter(Selection s) : source_(std::move(s.source)) {
  if (!source_) {
    reason_ = "not available on this machine: " + s.reason();
    return;
  }
  if (!source_->self_paced()) {
    try {
      source_->next(&last_);  // the zero point
    } catch (const std::exception& e) {
      reason_ = cat("not available: the ", source_->name(), " source failed: ", e.what());
      source_.reset();
    }
    return;
  }
  worker_ = start_thread(
      [this] {
        try {
          Reading r;
          while (!stop_.load() && source_->next(&r)) {
            std::lock_guard<std::mutex> lock(mu_);
            last_ = r;
          }
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu_);
          worker_error_ = e.what();
        }
      },
      "the power meter's sampling thread");
}

Meter::~Meter() {
  stop_.store(true);
  if (source_) source_->interrupt();
  if (worker_.joinable()) worker_.join();
}

std::vector<Rail> Meter::rails() const { return source_ ? source_->rails() : std::vector<Rail>{}; }

Reading Meter::energy() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!source_) fail("power", "no power source: ", reason_);
  if (!worker_error_.empty()) fail("power", "power source ", source_->name(), " failed: ", worker_error_);
  if (!source_->self_paced()) source_->next(&last_);
  return last_;
}

std::unique_ptr<Meter> default_meter() { return std::make_unique<Meter>(select_source({})); }

}  // namespace anelab::power

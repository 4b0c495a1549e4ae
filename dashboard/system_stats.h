// Machine statistics for the dashboard, measured (never estimated). Power lives in framework/core/power.h.
// - CPU use of the whole machine: deltas of platform::cpu_ticks (framework/core/platform.h, per OS); machine
//   memory and process RSS come straight from the platform layer (platform::machine_memory, process_memory).
// The CPU tick source is a parameter so tests can use fake readings.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/platform.h"

namespace anelab::dashboard {

// Whole-machine CPU use in percent of one core (100 = one core busy), from deltas of the tick source.
class MachineCpu {
 public:
  using TickSource = std::function<platform::Reading<platform::CpuTicks>()>;
  explicit MachineCpu(TickSource source = [] { return platform::cpu_ticks(); });
  bool sample();  // true when pct() was updated
  double pct() const { return pct_; }
  int cores() const { return cores_; }                   // 0 until a sample succeeded
  const std::string& reason() const { return reason_; }  // why the last sample gave no figure ("" when it did)

 private:
  TickSource source_;
  platform::CpuTicks last_;
  bool primed_ = false;
  double pct_ = 0;
  int cores_ = 0;
  std::string reason_;
};

}  // namespace anelab::dashboard

// Machine statistics for the dashboard, Linux only, measured (never estimated):
// - power from the RAPL energy counters (/sys/class/powercap/intel-rapl:N[/...]/energy_uj, in
//   microjoules, wrapping at max_energy_range_uj): watts = delta energy / delta time. When the
//   counters are missing or not readable (root-only on Linux >= 5.10) `available()` is false and
//   `reason()` says why; nothing is invented.
// - CPU use of the whole machine: deltas of platform::cpu_ticks (framework/core/platform.h, per OS); machine
//   memory and process RSS come straight from the platform layer (platform::machine_memory, process_memory).
// The sysfs root is a parameter so tests can use fake trees; the CPU tick source is one too.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/platform.h"

namespace anelab::dashboard {

struct PowerDomain {
  std::string name;   // contents of `name`, e.g. package-0, dram, core
  std::string path;   // directory
  bool top_level = false;
  uint64_t max_range_uj = 0;
  uint64_t last_uj = 0;
  double watts = 0;   // over the last interval
};

class RaplPower {
 public:
  explicit RaplPower(std::string root = "/sys/class/powercap");
  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }  // why not available
  // Reads all counters at time now_s (seconds, monotonic). Returns true when watts were updated
  // (needs a previous sample). total_watts(): sum of package domains (top-level zones).
  bool sample(double now_s);
  double total_watts() const { return total_; }
  const std::vector<PowerDomain>& domains() const { return domains_; }

 private:
  std::vector<PowerDomain> domains_;
  bool available_ = false, primed_ = false;
  std::string reason_;
  double last_s_ = 0, total_ = 0;
};

// Whole-machine CPU use in percent of one core (100 = one core busy), from deltas of the tick source.
class MachineCpu {
 public:
  using TickSource = std::function<platform::Reading<platform::CpuTicks>()>;
  explicit MachineCpu(TickSource source = [] { return platform::cpu_ticks(); });
  bool sample();  // true when pct() was updated
  double pct() const { return pct_; }
  int cores() const { return cores_; }          // 0 until a sample succeeded
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

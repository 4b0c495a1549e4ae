// Machine statistics for the dashboard, Linux only, measured (never estimated):
// - power from the RAPL energy counters (/sys/class/powercap/intel-rapl:N[/...]/energy_uj, in
//   microjoules, wrapping at max_energy_range_uj): watts = delta energy / delta time. When the
//   counters are missing or not readable (root-only on Linux >= 5.10) `available()` is false and
//   `reason()` says why; nothing is invented.
// - CPU use of the whole machine (/proc/stat) and of a process (/proc/<pid>/stat), memory (RSS) of a
//   process (/proc/<pid>/status VmRSS).
// The sysfs/procfs roots are parameters so tests can use fake trees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

// Whole-machine CPU use in percent of one core (100 = one core busy), from /proc/stat deltas.
class MachineCpu {
 public:
  explicit MachineCpu(std::string proc_root = "/proc");
  bool sample();  // true when pct() was updated
  double pct() const { return pct_; }
  int cores() const { return cores_; }

 private:
  std::string root_;
  uint64_t last_busy_ = 0, last_total_ = 0;
  bool primed_ = false;
  double pct_ = 0;
  int cores_ = 0;
};

// Resident set size of a process in MiB; negative when it cannot be read.
double process_rss_mb(int64_t pid, const std::string& proc_root = "/proc");
// Machine memory: total and available MiB (from /proc/meminfo); false when unreadable.
bool machine_memory_mb(double* total, double* available, const std::string& proc_root = "/proc");

}  // namespace anelab::dashboard

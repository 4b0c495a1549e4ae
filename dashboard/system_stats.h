// Machine statistics for the dashboard, Linux only, measured (never estimated). Power lives in
// framework/core/power.h.
// - CPU use of the whole machine (/proc/stat) and of a process (/proc/<pid>/stat), memory (RSS) of a
//   process (/proc/<pid>/status VmRSS).
// The sysfs/procfs roots are parameters so tests can use fake trees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace anelab::dashboard {

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

#include "dashboard/system_stats.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace anelab::dashboard {

MachineCpu::MachineCpu(std::string proc_root) : root_(std::move(proc_root)) {}

bool MachineCpu::sample() {
  std::ifstream f(root_ + "/stat");
  if (!f) return false;
  std::string line;
  uint64_t busy = 0, total = 0;
  int cores = 0;
  bool got = false;
  while (std::getline(f, line)) {
    if (line.rfind("cpu ", 0) == 0) {
      std::istringstream is(line.substr(4));
      uint64_t v[10] = {};
      for (int i = 0; i < 10 && (is >> v[i]); ++i) {
      }
      // user nice system idle iowait irq softirq steal guest guest_nice (guest included in user)
      uint64_t idle = v[3] + v[4];
      total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
      busy = total - idle;
      got = true;
    } else if (line.rfind("cpu", 0) == 0 && line.size() > 3 && std::isdigit(static_cast<unsigned char>(line[3]))) {
      ++cores;
    }
  }
  if (!got) return false;
  cores_ = cores;
  bool update = primed_ && total > last_total_;
  if (update) pct_ = 100.0 * cores * static_cast<double>(busy - last_busy_) / static_cast<double>(total - last_total_);
  last_busy_ = busy, last_total_ = total, primed_ = true;
  return update;
}

double process_rss_mb(int64_t pid, const std::string& proc_root) {
  if (pid <= 0) return -1;
  std::ifstream f(proc_root + "/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream is(line.substr(6));
      double kb = -1;
      if (is >> kb) return kb / 1024.0;
    }
  }
  return -1;
}

bool machine_memory_mb(double* total, double* available, const std::string& proc_root) {
  std::ifstream f(proc_root + "/meminfo");
  std::string key;
  double v = 0;
  std::string unit;
  bool t = false, a = false;
  while (f >> key >> v) {
    std::getline(f, unit);
    if (key == "MemTotal:") *total = v / 1024.0, t = true;
    if (key == "MemAvailable:") *available = v / 1024.0, a = true;
  }
  return t && a;
}

}  // namespace anelab::dashboard

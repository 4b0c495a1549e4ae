#include "dashboard/system_stats.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace anelab::dashboard {
namespace fs = std::filesystem;
namespace {

bool read_u64(const std::string& path, uint64_t* v, int* err) {
  std::ifstream f(path);
  if (!f) {
    if (err) *err = errno;
    return false;
  }
  unsigned long long x = 0;
  if (!(f >> x)) {
    if (err) *err = EIO;
    return false;
  }
  *v = x;
  return true;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}
}  // namespace

RaplPower::RaplPower(std::string root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    reason_ = "power not available on this machine: no " + root + " (RAPL energy counters; Linux on Intel/AMD)";
    return;
  }
  std::vector<fs::path> zones;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind("intel-rapl:", 0) == 0 && fs::exists(e.path() / "energy_uj", ec)) zones.push_back(e.path());
  }
  std::sort(zones.begin(), zones.end());
  if (zones.empty()) {
    reason_ = "power not available on this machine: no RAPL zones (intel-rapl:*) under " + root;
    return;
  }
  int last_err = 0;
  for (const auto& z : zones) {
    PowerDomain d;
    d.path = z.string();
    d.name = read_line((z / "name").string());
    if (d.name.empty()) d.name = z.filename().string();
    // intel-rapl:0 is a top-level (package/psys) zone; intel-rapl:0:1 a sub-zone inside it.
    d.top_level = std::count(d.path.begin() + static_cast<long>(d.path.rfind('/') + 1), d.path.end(), ':') == 1;
    read_u64((z / "max_energy_range_uj").string(), &d.max_range_uj, nullptr);
    int err = 0;
    if (read_u64((z / "energy_uj").string(), &d.last_uj, &err)) {
      domains_.push_back(d);
    } else {
      last_err = err;
    }
  }
  if (domains_.empty()) {
    reason_ = "power not available on this machine: RAPL counters under " + root + " are not readable (" +
              std::strerror(last_err ? last_err : EACCES) +
              "; root-only since Linux 5.10 -- run as root or make energy_uj readable)";
    return;
  }
  available_ = true;
}

bool RaplPower::sample(double now_s) {
  if (!available_) return false;
  double dt = now_s - last_s_;
  bool update = primed_ && dt > 1e-3;
  double total = 0;
  bool any_package = false;
  for (auto& d : domains_) {
    uint64_t cur = 0;
    if (!read_u64(d.path + "/energy_uj", &cur, nullptr)) continue;
    if (update) {
      uint64_t delta = cur >= d.last_uj ? cur - d.last_uj
                                        : (d.max_range_uj > d.last_uj ? d.max_range_uj - d.last_uj + cur : cur);
      d.watts = static_cast<double>(delta) * 1e-6 / dt;
      // psys covers the whole platform and would double count the packages.
      if (d.top_level && d.name != "psys") total += d.watts, any_package = true;
    }
    d.last_uj = cur;
  }
  if (update) {
    if (!any_package)
      for (auto& d : domains_)
        if (d.top_level) total += d.watts;
    total_ = total;
  }
  last_s_ = now_s;
  primed_ = true;
  return update;
}

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

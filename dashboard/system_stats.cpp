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

MachineCpu::MachineCpu(TickSource source) : source_(std::move(source)) {}

bool MachineCpu::sample() {
  const auto t = source_();
  if (!t) {
    reason_ = t.reason;
    return false;
  }
  cores_ = t->cores;
  const auto pct = primed_ ? platform::cpu_percent(last_, *t) : platform::Reading<double>::unavailable("first sample");
  last_ = *t, primed_ = true;
  reason_ = pct ? "" : pct.reason;
  if (pct) pct_ = *pct;
  return bool(pct);
}

}  // namespace anelab::dashboard

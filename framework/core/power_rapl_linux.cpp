// RAPL energy counters (Linux on Intel/AMD): /sys/class/powercap/intel-rapl:N[:M]/energy_uj, in
// microjoules, wrapping at max_energy_range_uj. Zone intel-rapl:N is a top-level zone (a package, or
// psys = the whole platform), intel-rapl:N:M a sub-zone inside it (core, uncore, dram).
//   cpu  = sum of the top-level zones except psys (psys would double count the packages; used alone
//          when it is the only top-level zone),
//   core = sum of the `core` sub-zones, dram = sum of the `dram` zones (top-level or sub-zone).
// The counters are root-only since Linux 5.10 (CVE-2020-8694); unreadable counters are reported as
// such. Plain file reads, so a fake tree under any root serves the tests.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "framework/core/clock.h"
#include "framework/core/error.h"
#include "framework/core/power.h"

namespace anelab::power {
namespace {
namespace fs = std::filesystem;

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

struct Zone {
  std::string name;  // contents of `name`, e.g. package-0, dram, core, psys
  std::string path;  // directory
  bool top_level = false;
  uint64_t max_range_uj = 0, last_uj = 0;
  double joules = 0;  // accumulated since open (wrap-arounds unfolded)
  Rail rail = Rail::cpu;
  bool counted = false;  // adds to its rail
};

class RaplSource final : public Source {
 public:
  RaplSource(std::vector<Zone> zones, std::string root, Clock clock)
      : zones_(std::move(zones)), root_(std::move(root)), clock_(std::move(clock)), t0_(clock_()) {
    assign_rails();
  }
  std::string name() const override { return "rapl"; }
  std::string detail() const override {
    std::string s = "RAPL energy counters under " + root_ + ":";
    for (const auto& z : zones_) s += " " + z.name + (z.counted ? std::string("->") + rail_name(z.rail) : "");
    return s;
  }
  std::string basis() const override { return "energy counters (uJ)"; }
  bool self_paced() const override { return false; }
  std::vector<Rail> rails() const override {
    std::vector<Rail> r;
    for (Rail x : kAllRails)
      if (std::any_of(zones_.begin(), zones_.end(), [&](const Zone& z) { return z.counted && z.rail == x; }))
        r.push_back(x);
    return r;
  }

  bool next(Reading* out) override {
    for (auto& z : zones_) {
      uint64_t cur = 0;
      int err = 0;
      if (!read_u64(z.path + "/energy_uj", &cur, &err))
        fail("power", "cannot read ", z.path, "/energy_uj: ", std::strerror(err ? err : EIO));
      const uint64_t delta =
          cur >= z.last_uj ? cur - z.last_uj : (z.max_range_uj > z.last_uj ? z.max_range_uj - z.last_uj + cur : cur);
      z.joules += static_cast<double>(delta) * 1e-6;
      z.last_uj = cur;
    }
    Reading r;
    r.seconds = clock_() - t0_;
    for (Rail x : rails()) r.joules[x] = 0;
    for (const auto& z : zones_)
      if (z.counted) r.joules[z.rail] += z.joules;
    *out = r;
    return true;
  }

 private:
  void assign_rails() {
    const bool packages = std::any_of(zones_.begin(), zones_.end(), [](const Zone& z) {
      return z.top_level && z.name != "psys" && z.name != "dram";
    });
    for (auto& z : zones_) {
      if (z.name == "dram")
        z.rail = Rail::dram, z.counted = true;
      else if (z.name == "core" && !z.top_level)
        z.rail = Rail::core, z.counted = true;
      else if (z.top_level && (z.name != "psys" || !packages))
        z.rail = Rail::cpu, z.counted = true;
    }
  }

  std::vector<Zone> zones_;
  std::string root_;
  Clock clock_;
  double t0_ = 0;
};

}  // namespace

Opened open_rapl(const std::string& root_arg, Clock clock) {
  const std::string root = root_arg.empty() ? "/sys/class/powercap" : root_arg;
  Opened o;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    o.reason = "rapl: no " + root + " (RAPL energy counters exist on Linux on Intel/AMD)";
    return o;
  }
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("intel-rapl:", 0) == 0 && fs::exists(e.path() / "energy_uj", ec)) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    o.reason = "rapl: no RAPL zones (intel-rapl:*) under " + root;
    return o;
  }
  std::vector<Zone> zones;
  int last_err = 0;
  for (const auto& d : dirs) {
    Zone z;
    z.path = d.string();
    z.name = read_line((d / "name").string());
    if (z.name.empty()) z.name = d.filename().string();
    const std::string base = d.filename().string();
    z.top_level = std::count(base.begin(), base.end(), ':') == 1;
    read_u64((d / "max_energy_range_uj").string(), &z.max_range_uj, nullptr);
    int err = 0;
    if (read_u64((d / "energy_uj").string(), &z.last_uj, &err))
      zones.push_back(z);
    else
      last_err = err;
  }
  if (zones.empty()) {
    o.reason = "rapl: the counters under " + root + " are not readable (" +
               std::strerror(last_err ? last_err : EACCES) +
               "; root-only since Linux 5.10: run as root or make energy_uj readable)";
    return o;
  }
  o.source = std::make_unique<RaplSource>(std::move(zones), root, clock ? std::move(clock) : Clock(steady_seconds));
  return o;
}

}  // namespace anelab::power

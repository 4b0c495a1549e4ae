// Linux procfs parsers with the root as a parameter. Plain file reads (procfs files report size 0 in stat:
// they are read to EOF, never by size), so they build and are tested against fake trees on every POSIX OS.
#include "framework/core/platform.h"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

namespace anelab::platform::procfs {
namespace {

// Reads a whole procfs file; false (and *why) when it cannot be opened or is empty.
bool slurp(const std::string& path, std::string* out, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  if (out->empty()) {
    *why = path + " is empty";
    return false;
  }
  return true;
}

// Value of a "Key:   123 kB" line (kB), or nullopt when the key is missing or its value is not a number.
std::optional<double> kb_field(const std::string& text, const std::string& key, std::string* why,
                               const std::string& path) {
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream vs(line.substr(key.size()));
    double kb = 0;
    std::string unit;
    if (!(vs >> kb) || kb < 0) {
      *why = path + ": malformed " + key + " line '" + line + "'";
      return std::nullopt;
    }
    if ((vs >> unit) && unit != "kB") {
      *why = path + ": " + key + " in unit '" + unit + "', expected kB";
      return std::nullopt;
    }
    return kb;
  }
  *why = path + ": no " + key + " line";
  return std::nullopt;
}

}  // namespace

Reading<ProcessMemory> self_memory(const std::string& root) {
  using R = Reading<ProcessMemory>;
  const std::string path = root + "/self/statm";
  std::string text, why;
  if (!slurp(path, &text, &why)) return R::unavailable(why);
  std::istringstream is(text);
  long long size = 0, resident = 0;
  if (!(is >> size >> resident) || size < 0 || resident < 0)
    return R::unavailable(path + ": malformed (expected 'size resident ...' in pages), got '" + text.substr(0, 60) +
                          "'");
  const double page = double(::sysconf(_SC_PAGESIZE));
  return R::ok({double(resident) * page / (1024.0 * 1024.0), false});
}

Reading<ProcessMemory> pid_memory(const std::string& root, int64_t pid) {
  using R = Reading<ProcessMemory>;
  if (pid <= 0) return R::unavailable("no process (pid " + std::to_string(pid) + ")");
  const std::string path = root + "/" + std::to_string(pid) + "/status";
  std::string text, why;
  if (!slurp(path, &text, &why)) return R::unavailable(why);
  const auto kb = kb_field(text, "VmRSS:", &why, path);
  if (!kb) return R::unavailable(why);
  return R::ok({*kb / 1024.0, false});
}

Reading<CpuTicks> cpu_ticks(const std::string& root) {
  using R = Reading<CpuTicks>;
  const std::string path = root + "/stat";
  std::string text, why;
  if (!slurp(path, &text, &why)) return R::unavailable(why);
  std::istringstream is(text);
  std::string line;
  CpuTicks t;
  bool got = false;
  while (std::getline(is, line)) {
    if (line.rfind("cpu ", 0) == 0) {
      // user nice system idle iowait irq softirq steal [guest guest_nice: already counted in user/nice]
      std::istringstream vs(line.substr(4));
      uint64_t v[8] = {};
      int n = 0;
      while (n < 8 && (vs >> v[n])) ++n;
      if (n < 4) return R::unavailable(path + ": malformed 'cpu' line '" + line + "' (fewer than 4 counters)");
      const uint64_t idle = v[3] + v[4];
      t.total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
      t.busy = t.total - idle;
      got = true;
    } else if (line.size() > 3 && line.rfind("cpu", 0) == 0 && std::isdigit(static_cast<unsigned char>(line[3]))) {
      ++t.cores;
    }
  }
  if (!got) return R::unavailable(path + ": no 'cpu ' summary line");
  if (t.cores == 0) return R::unavailable(path + ": no per-core 'cpuN' lines");
  return R::ok(t);
}

Reading<MachineMemory> machine_memory(const std::string& root) {
  using R = Reading<MachineMemory>;
  const std::string path = root + "/meminfo";
  std::string text, why;
  if (!slurp(path, &text, &why)) return R::unavailable(why);
  const auto total = kb_field(text, "MemTotal:", &why, path);
  if (!total) return R::unavailable(why);
  const auto avail = kb_field(text, "MemAvailable:", &why, path);
  if (!avail) return R::unavailable(why);
  return R::ok({*total / 1024.0, *avail / 1024.0});
}

Reading<std::string> self_exe(const std::string& root) {
  const std::string path = root + "/self/exe";
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return Reading<std::string>::unavailable("readlink " + path + ": " + std::strerror(errno));
  buf[n] = '\0';
  return Reading<std::string>::ok(buf);
}

Reading<double> self_anon_huge_mb(const std::string& root) {
  const std::string path = root + "/self/smaps_rollup";
  std::string text, why;
  if (!slurp(path, &text, &why)) return Reading<double>::unavailable(why);
  const auto kb = kb_field(text, "AnonHugePages:", &why, path);
  if (!kb) return Reading<double>::unavailable(why);
  return Reading<double>::ok(*kb / 1024.0);
}

Reading<std::string> sysfs_mode(const std::string& path) {
  std::string text, why;
  if (!slurp(path, &text, &why)) return Reading<std::string>::unavailable(why);
  const size_t b = text.find('['), e = text.find(']', b == std::string::npos ? 0 : b);
  if (b == std::string::npos || e == std::string::npos || e == b + 1)
    return Reading<std::string>::unavailable(path + ": no [selected] mode in '" + text.substr(0, 80) + "'");
  return Reading<std::string>::ok(text.substr(b + 1, e - b - 1));
}

}  // namespace anelab::platform::procfs
#endif

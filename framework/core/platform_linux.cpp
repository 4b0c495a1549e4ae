// Linux: procfs where it is mounted, POSIX fallbacks (argv[0], getrusage) where it is not.
#include "framework/core/platform.h"

#if defined(__linux__)
namespace anelab::platform {

Reading<std::string> executable_path() {
  auto p = procfs::self_exe(procfs::kRoot);
  const std::string deleted = " (deleted)";  // the file was replaced (a rebuild) or removed since exec
  if (p && !(p->size() > deleted.size() && p->compare(p->size() - deleted.size(), deleted.size(), deleted) == 0))
    return p;
  if (p) p = Reading<std::string>::unavailable("/proc/self/exe: " + *p);
  auto a = executable_from_argv0();  // /proc hidden or not mounted (containers, sandboxes)
  if (a) return a;
  return Reading<std::string>::unavailable(p.reason + "; " + a.reason);
}

Reading<ProcessMemory> process_memory() {
  auto m = procfs::self_memory(procfs::kRoot);
  if (m) return m;
  const auto peak = peak_rss_mb();
  if (!peak) return Reading<ProcessMemory>::unavailable(m.reason + "; " + peak.reason);
  return Reading<ProcessMemory>::ok({*peak, true});
}

Reading<ProcessMemory> process_memory(int64_t pid) { return procfs::pid_memory(procfs::kRoot, pid); }
Reading<CpuTicks> cpu_ticks() { return procfs::cpu_ticks(procfs::kRoot); }
Reading<MachineMemory> machine_memory() { return procfs::machine_memory(procfs::kRoot); }

}  // namespace anelab::platform
#endif

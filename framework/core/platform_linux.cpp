// Linux: procfs where it is mounted, POSIX fallbacks (argv[0], getrusage) where it is not.
#include "framework/core/platform.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace anelab::platform {

HostInfo host_info() {
  HostInfo h = uname_host();
  // The distribution's name from /etc/os-release (PRETTY_NAME), e.g. "Debian GNU/Linux 12 (bookworm)".
  std::FILE* f = std::fopen("/etc/os-release", "r");
  if (!f) return h;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    std::string v = line;
    if (v.rfind("PRETTY_NAME=", 0) != 0) continue;
    v = v.substr(12);
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    if (!v.empty()) h.os_version = v;
    break;
  }
  std::fclose(f);
  return h;
}

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

Reading<std::string> transparent_huge_pages() {
  using R = Reading<std::string>;
  const auto mode = procfs::sysfs_mode(procfs::kThpEnabled);
  if (!mode) return R::unavailable("transparent huge pages unknown: " + mode.reason);
  if (*mode == "never")
    return R::unavailable("transparent huge pages are off (" + std::string(procfs::kThpEnabled) + ": never)");
  return R::ok("THP " + *mode);
}

Reading<std::string> advise_huge_pages(void* p, size_t bytes) {
  auto thp = transparent_huge_pages();
  if (!thp) return thp;
  if (::madvise(p, bytes, MADV_HUGEPAGE) != 0)
    return Reading<std::string>::unavailable(std::string("madvise(MADV_HUGEPAGE): ") + std::strerror(errno));
  return thp;
}

Reading<double> anon_huge_pages_mb() { return procfs::self_anon_huge_mb(procfs::kRoot); }
Reading<CpuTicks> cpu_ticks() { return procfs::cpu_ticks(procfs::kRoot); }

Reading<std::string> release_free_memory() {
#ifdef __GLIBC__
  // Every arena: free chunks consolidated, their whole free pages given back, the main arena's top trimmed.
  ::malloc_trim(0);
  // A per-thread arena's free top is trimmed only by a free of >= 64 KiB that reaches it (glibc's heap_trim;
  // malloc_trim leaves it), so one such block of the calling thread's arena is freed: below the 128 KiB mmap threshold
  // of limit_heap_retention, it comes from the arena. Called through a volatile pointer so that it is not elided.
  void* (*volatile alloc)(size_t) = std::malloc;
  if (void* p = alloc(96 * 1024)) {
    static_cast<volatile char*>(p)[0] = 0;
    std::free(p);
  }
  return Reading<std::string>::ok("glibc malloc_trim + this thread's arena top");
#else
  return Reading<std::string>::unavailable("no malloc_trim in this C library (not glibc)");
#endif
}

Reading<std::string> limit_heap_retention(size_t bytes) {
#ifdef __GLIBC__
  const int b = static_cast<int>(std::min<size_t>(bytes, size_t(1) << 30));
  if (::mallopt(M_MMAP_THRESHOLD, b) != 1 || ::mallopt(M_TRIM_THRESHOLD, b) != 1)
    return Reading<std::string>::unavailable("mallopt refused a threshold of " + std::to_string(b) + " bytes");
  return Reading<std::string>::ok("glibc mallopt M_MMAP_THRESHOLD = M_TRIM_THRESHOLD = " + std::to_string(b));
#else
  (void)bytes;
  return Reading<std::string>::unavailable("no mallopt thresholds in this C library (not glibc)");
#endif
}
Reading<MachineMemory> machine_memory() { return procfs::machine_memory(procfs::kRoot); }

Reading<std::string> request_amx_tile_state() {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // arch/x86/include/uapi/asm/prctl.h
  if (::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return Reading<std::string>::unavailable(std::string("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): ") +
                                             std::strerror(errno));
  return Reading<std::string>::ok("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) granted");
#else
  return Reading<std::string>::unavailable("no AMX on this architecture");
#endif
}

}  // namespace anelab::platform
#endif

// Any OS other than Linux and macOS: the POSIX parts (platform_posix.cpp) work, the rest says so.
#include "framework/core/platform.h"

#if !defined(__linux__) && !defined(__APPLE__)
namespace anelab::platform {
namespace {
const char* kWhy = "not implemented for this OS (framework/core/platform_*.cpp cover Linux and macOS)";
}

Reading<std::string> executable_path() { return executable_from_argv0(); }
HostInfo host_info() { return uname_host(); }
Reading<ProcessMemory> process_memory() {
  const auto peak = peak_rss_mb();
  if (!peak) return Reading<ProcessMemory>::unavailable(peak.reason);
  return Reading<ProcessMemory>::ok({*peak, true});
}
Reading<ProcessMemory> process_memory(int64_t) { return Reading<ProcessMemory>::unavailable(kWhy); }
Reading<CpuTicks> cpu_ticks() { return Reading<CpuTicks>::unavailable(kWhy); }
Reading<MachineMemory> machine_memory() { return Reading<MachineMemory>::unavailable(kWhy); }
Reading<std::string> transparent_huge_pages() { return Reading<std::string>::unavailable(kWhy); }
Reading<std::string> advise_huge_pages(void*, size_t) { return Reading<std::string>::unavailable(kWhy); }
Reading<double> anon_huge_pages_mb() { return Reading<double>::unavailable(kWhy); }
Reading<std::string> release_free_memory() { return Reading<std::string>::unavailable(kWhy); }
Reading<std::string> limit_heap_retention(size_t) { return Reading<std::string>::unavailable(kWhy); }
Reading<std::string> request_amx_tile_state() { return Reading<std::string>::unavailable(kWhy); }

}  // namespace anelab::platform
#endif

// macOS: Mach and sysctl queries (no procfs there).
#include "framework/core/platform.h"

#if defined(__APPLE__)
#include <libproc.h>
#include <mach-o/dyld.h>
#include <mach/mach.h>
#include <sys/sysctl.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace anelab::platform {
namespace {

std::string kr_text(const char* call, kern_return_t kr) {
  return std::string(call) + " failed: " + mach_error_string(kr) + " (" + std::to_string(kr) + ")";
}

mach_port_t host_port() {  // one send right for the process (mach_host_self() adds a reference per call)
  static const mach_port_t port = mach_host_self();
  return port;
}

}  // namespace

HostInfo host_info() {
  HostInfo h = uname_host();
  char ver[64] = {};
  size_t n = sizeof ver;
  if (sysctlbyname("kern.osproductversion", ver, &n, nullptr, 0) == 0) h.os_version = ver;
  char brand[128] = {};
  n = sizeof brand;
  if (sysctlbyname("machdep.cpu.brand_string", brand, &n, nullptr, 0) == 0) h.chip = brand;
  return h;
}

Reading<std::string> executable_path() {
  using R = Reading<std::string>;
  uint32_t size = 0;
  _NSGetExecutablePath(nullptr, &size);  // sets the size it needs
  std::string buf(size + 1, '\0');
  if (_NSGetExecutablePath(buf.data(), &size) != 0) return R::unavailable("_NSGetExecutablePath failed");
  buf.resize(std::strlen(buf.c_str()));
  char real[PATH_MAX];
  if (!::realpath(buf.c_str(), real)) {  // the binary was moved or deleted since it started: try argv[0]
    auto a = executable_from_argv0();
    if (a) return a;
    return R::unavailable("realpath(" + buf + "): " + std::strerror(errno) + "; " + a.reason);
  }
  return R::ok(real);
}

Reading<ProcessMemory> process_memory() {
  mach_task_basic_info_data_t info{};
  mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
  const kern_return_t kr =
      task_info(mach_task_self(), MACH_TASK_BASIC_INFO, reinterpret_cast<task_info_t>(&info), &count);
  if (kr != KERN_SUCCESS) return Reading<ProcessMemory>::unavailable(kr_text("task_info(MACH_TASK_BASIC_INFO)", kr));
  return Reading<ProcessMemory>::ok({double(info.resident_size) / (1024.0 * 1024.0), false});
}

Reading<ProcessMemory> process_memory(int64_t pid) {
  using R = Reading<ProcessMemory>;
  if (pid <= 0) return R::unavailable("no process (pid " + std::to_string(pid) + ")");
  proc_taskinfo ti{};
  const int n = proc_pidinfo(static_cast<int>(pid), PROC_PIDTASKINFO, 0, &ti, sizeof ti);
  if (n != static_cast<int>(sizeof ti))
    return R::unavailable("proc_pidinfo(" + std::to_string(pid) + ", PROC_PIDTASKINFO): " + std::strerror(errno));
  return R::ok({double(ti.pti_resident_size) / (1024.0 * 1024.0), false});
}

Reading<CpuTicks> cpu_ticks() {
  natural_t ncpu = 0;
  processor_info_array_t info = nullptr;
  mach_msg_type_number_t count = 0;
  const kern_return_t kr = host_processor_info(host_port(), PROCESSOR_CPU_LOAD_INFO, &ncpu, &info, &count);
  if (kr != KERN_SUCCESS)
    return Reading<CpuTicks>::unavailable(kr_text("host_processor_info(PROCESSOR_CPU_LOAD_INFO)", kr));
  const auto* load = reinterpret_cast<const processor_cpu_load_info_data_t*>(info);
  CpuTicks t;
  t.cores = static_cast<int>(ncpu);
  for (natural_t i = 0; i < ncpu; ++i) {
    const unsigned int* c = load[i].cpu_ticks;
    const uint64_t busy = uint64_t(c[CPU_STATE_USER]) + c[CPU_STATE_SYSTEM] + c[CPU_STATE_NICE];
    t.busy += busy;
    t.total += busy + c[CPU_STATE_IDLE];
  }
  vm_deallocate(mach_task_self(), reinterpret_cast<vm_address_t>(info), count * sizeof(integer_t));
  return Reading<CpuTicks>::ok(t);
}

// macOS has no MemAvailable: available = free + inactive + purgeable + speculative pages (what can be handed
// out without swapping; close to Activity Monitor's "memory free + cached files").
Reading<MachineMemory> machine_memory() {
  using R = Reading<MachineMemory>;
  uint64_t memsize = 0;
  size_t len = sizeof memsize;
  if (sysctlbyname("hw.memsize", &memsize, &len, nullptr, 0) != 0)
    return R::unavailable(std::string("sysctlbyname(hw.memsize): ") + std::strerror(errno));
  vm_statistics64_data_t vm{};
  mach_msg_type_number_t cnt = HOST_VM_INFO64_COUNT;
  const kern_return_t kr = host_statistics64(host_port(), HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm), &cnt);
  if (kr != KERN_SUCCESS) return R::unavailable(kr_text("host_statistics64(HOST_VM_INFO64)", kr));
  vm_size_t page = 0;
  if (host_page_size(host_port(), &page) != KERN_SUCCESS || page == 0) return R::unavailable("host_page_size failed");
  const double pages = double(vm.free_count) + vm.inactive_count + vm.purgeable_count + vm.speculative_count;
  return R::ok({double(memsize) / (1024.0 * 1024.0), pages * double(page) / (1024.0 * 1024.0)});
}

// macOS gives user processes no transparent huge pages to ask for (superpages only through Mach VM flags on
// x86): weights read into anonymous memory stay on the base page size (16 KiB on Apple Silicon).
constexpr const char* kNoThp = "no transparent huge pages on macOS";
Reading<std::string> transparent_huge_pages() { return Reading<std::string>::unavailable(kNoThp); }
Reading<std::string> advise_huge_pages(void*, size_t) { return Reading<std::string>::unavailable(kNoThp); }
Reading<double> anon_huge_pages_mb() { return Reading<double>::unavailable(kNoThp); }
// macOS's malloc returns free pages to the OS by itself (madvise of free regions); nothing to ask here.
Reading<std::string> release_free_memory() {
  return Reading<std::string>::unavailable("not needed on macOS (its malloc gives free pages back itself)");
}
Reading<std::string> limit_heap_retention(size_t) {
  return Reading<std::string>::unavailable("not needed on macOS (its malloc gives free pages back itself)");
}
Reading<std::string> request_amx_tile_state() { return Reading<std::string>::unavailable("no AMX on macOS"); }

}  // namespace anelab::platform
#endif

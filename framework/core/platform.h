// The OS platform layer: every figure anelab asks the operating system for, per OS, behind one interface.
// No other source names /proc, /sys or an OS-specific call (Mach, sysctl, libproc); docs/architecture.md lists
// the POSIX calls made elsewhere (descriptor I/O, sockets, child processes) and why.
//
//   platform_posix.cpp   saved argv + initial cwd, argv[0] resolution (cwd, $PATH), load average
//                        (getloadavg), process CPU seconds and peak RSS (getrusage), process CPU ms
//                        (clock_gettime), isatty, uname, process_alive (kill 0),
//                        anonymous memory (mmap MAP_ANONYMOUS), file locks (fcntl F_SETLK), SIGXFSZ,
//                        SIGPIPE, the stop signals (sigmask), signals to other processes (kill), execv,
//                        read-only file mappings (mmap), ftruncate
//   platform_procfs.cpp  Linux procfs parsers with the root as a parameter (tests point them at fake trees;
//                        they are plain file reads, so they compile and are tested on every OS)
//   platform_linux.cpp   Linux: executable (/proc/self/exe, else argv[0]), RSS, CPU ticks, memory via procfs,
//                        the distribution's name (/etc/os-release),
//                        transparent huge pages (madvise MADV_HUGEPAGE, sysfs THP mode, smaps_rollup),
//                        free heap memory given back (glibc malloc_trim), the AMX tile permission (arch_prctl)
//   platform_macos.cpp   macOS: _NSGetExecutablePath, mach_task_basic_info, host_processor_info, OS version
//                        and chip (sysctl kern.osproductversion, machdep.cpu.brand_string),
//                        hw.memsize + host_statistics64, proc_pidinfo
//   platform_other.cpp   any other OS: everything "unavailable on this OS" except the POSIX parts
//
// Every reader returns a Reading: a value, or the reason it is unavailable (never a made-up zero).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace anelab::platform {

template <typename T>
struct Reading {
  std::optional<T> value;
  std::string reason;  // why `value` is empty ("" when it is set)

  static Reading ok(T v) { return Reading{std::move(v), {}}; }
  static Reading unavailable(std::string why) { return Reading{std::nullopt, std::move(why)}; }
  explicit operator bool() const { return value.has_value(); }
  const T& operator*() const { return *value; }
  const T* operator->() const { return &*value; }
};

// ---- the process's own invocation --------------------------------------------------------------

// Saves argv, the current directory and $PATH as they are at start-up; call first thing in main().
void save_argv(int argc, char** argv);
// The argv given to save_argv (empty when it was never called).
std::vector<std::string> saved_argv();
// The working directory at save_argv time ("" when unknown).
std::string saved_cwd();

// Absolute path of the running executable, symlinks resolved. Linux: /proc/self/exe, else argv[0] resolved
// against the initial cwd and $PATH; macOS: _NSGetExecutablePath + realpath.
Reading<std::string> executable_path();

// The argv[0] fallback of executable_path(): resolve_program(saved argv[0], saved cwd, saved $PATH).
Reading<std::string> executable_from_argv0();
// Resolves a program name as execvp would find it: with a '/' against `cwd` (when relative), else through the
// directories of `path_env` (empty entries mean the cwd); returns the realpath of the first executable match.
Reading<std::string> resolve_program(const std::string& argv0, const std::string& cwd, const std::string& path_env);

// ---- memory and CPU of a process --------------------------------------------------------------

struct ProcessMemory {
  double rss_mb = 0;  // resident set size, MiB
  bool peak = false;  // true: the peak RSS so far (getrusage fallback), not the current one
};
// The current process's RSS (Linux: /proc/self/statm, else getrusage's peak, labelled so).
Reading<ProcessMemory> process_memory();
// RSS of another process (Linux: /proc/<pid>/status VmRSS; macOS: proc_pidinfo).
Reading<ProcessMemory> process_memory(int64_t pid);
// Peak RSS of the current process (getrusage; kilobytes on Linux, bytes on macOS, converted here).
Reading<double> peak_rss_mb();
// User + system CPU seconds of the current process (getrusage).
double process_cpu_seconds();
// CPU time of the whole process (all threads) in ms at nanosecond resolution (clock_gettime
// CLOCK_PROCESS_CPUTIME_ID): for timing short phases on a shared, loaded machine.
double process_cpu_ms();
// True when the descriptor (0 stdin, 1 stdout, 2 stderr) is a terminal (isatty).
bool is_terminal(int fd);

// What the host is: "os" (uname sysname), "kernel" (release), "machine" (arm64, x86_64), "os_version" (Linux:
// /etc/os-release PRETTY_NAME; macOS: kern.osproductversion; else the release), "chip" (macOS:
// machdep.cpu.brand_string; else the machine). Fields the OS does not give are left empty.
struct HostInfo {
  std::string os, kernel, machine, os_version, chip;
};
HostInfo host_info();
HostInfo uname_host();  // host_info()'s POSIX part (uname), which each OS's file completes

int64_t process_id();  // getpid()

// True while a process with this pid exists (POSIX kill(pid, 0): alive, or alive but not ours); false
// for pid <= 0 and for pids no process has. Used to tell a dead writer's temp file from a live one's.
bool process_alive(int64_t pid);

// Sends signal `sig` (SIGINT, SIGTERM, ...) to process `pid` (kill): "" when sent, else the reason.
std::string send_signal(int64_t pid, int sig);
// Replaces the running process with `exe` run with `argv` (argv[0] included; execv): returns only when that
// fails, with the reason.
std::string exec_replace(const std::string& exe, const std::vector<std::string>& argv);

// ---- signals --------------------------------------------------------------------------------------

// Writes to a closed pipe or socket fail with EPIPE instead of killing the process (SIGPIPE ignored).
void ignore_broken_pipe_signal();
// SIGINT and SIGTERM held pending in the calling thread and in every thread it starts after this (sigmask), so
// that one thread can take them with take_stop_signal().
void block_stop_signals();
// A pending SIGINT / SIGTERM taken (sigwait): the signal, or 0 when none is pending. Never blocks.
int take_stop_signal();

// ---- one writer per file ------------------------------------------------------------------------

// An exclusive lock on a file (created when missing): a POSIX fcntl record lock over the whole file, taken
// without waiting. It belongs to the process: the kernel drops it when the process dies (kill -9 included),
// and it survives exec() because its descriptor is not close-on-exec, so an exec-restarted process still
// holds it and taking it again there succeeds. Caveat of fcntl locks: closing ANY descriptor of the file in
// the holding process releases it, so the holder must not open the file elsewhere.
struct FileLock {
  int fd = -1;             // >= 0: held; keep it open while the lock is needed (release_file_lock ends it)
  int64_t holder_pid = 0;  // > 0: another process holds it (this pid)
  std::string error;       // neither: why it could not be tried (open / fcntl error)
};
FileLock lock_file(const std::string& path);
void release_file_lock(FileLock& l);  // closes the descriptor (no-op when not held)
// The pid of the process holding an exclusive lock on `path` (fcntl F_GETLK), 0 when none holds it or the
// file is missing, unavailable when it cannot be asked. Called from the holder itself it says 0.
Reading<int64_t> file_lock_holder(const std::string& path);

// Writes past the process's file-size limit (RLIMIT_FSIZE, `ulimit -f`) fail with EFBIG instead of killing the
// process with SIGXFSZ, so they are reported like a full disk (one line, temp files removed).
void ignore_file_size_signal();

// Cuts the open file `fd` to `bytes` (ftruncate): "" when done, else the reason.
std::string truncate_file(int fd, int64_t bytes);
// Maps `bytes` (> 0) of the open file `fd` read-only and private (mmap): the address, or why not (the OS's
// error). The mapping outlives the descriptor; give it back with unmap_file.
Reading<const void*> map_file_readonly(int fd, size_t bytes);
void unmap_file(const void* p, size_t bytes);

// ---- anonymous memory for large, read-mostly buffers (model weights) -------------------------------

// A region from map_anonymous; give it back with unmap_anonymous.
struct AnonRegion {
  void* data = nullptr;  // `size` usable bytes (zero-filled); 2 MiB aligned when huge pages were asked for
  size_t size = 0;
  void* base = nullptr;  // the whole mapping (data rounded in to the alignment)
  size_t mapped = 0;
  Reading<std::string> huge_pages;  // the huge-page advice taken ("THP madvise"), or why there is none
};
// Anonymous, zero-filled memory of `bytes` for a buffer written once and then streamed many times. With
// `huge_pages` the region is 2 MiB aligned and its whole 2 MiB pages (not the tail) are advised for transparent
// huge pages where the OS has them (Linux: madvise MADV_HUGEPAGE, which THP "always" and "madvise" honour): a
// decode GEMV that streams every weight once per token then misses the TLB once per 2 MiB instead of once per
// 4 KiB. macOS has no such advice (the region is plain anonymous memory; region.huge_pages says so).
// Unavailable (with the reason) when the mapping fails.
Reading<AnonRegion> map_anonymous(size_t bytes, bool huge_pages);
void unmap_anonymous(AnonRegion& r);  // no-op on an empty region; leaves it empty
// Whether advised anonymous memory can get transparent huge pages: the THP mode ("THP madvise", "THP always";
// Linux: /sys/kernel/mm/transparent_hugepage/enabled), else why not ("... never", "no transparent huge pages
// on macOS").
Reading<std::string> transparent_huge_pages();
// Advises [p, p + bytes) for transparent huge pages (Linux: madvise MADV_HUGEPAGE): the THP mode when taken,
// else why not (transparent_huge_pages()'s reason, or madvise's error).
Reading<std::string> advise_huge_pages(void* p, size_t bytes);
// MiB of the process's anonymous memory that huge pages back now (Linux: smaps_rollup AnonHugePages).
Reading<double> anon_huge_pages_mb();
// Gives the allocator's free memory back to the OS, so that RSS returns near idle after a burst of many
// short-lived allocations (glibc: malloc_trim(0), which gives back the free pages of every arena and the main
// arena's free top, then a 96 KiB block freed in the calling thread's arena, which makes glibc trim that arena's
// free top too; call it on the thread that did the allocating).
// The allocator used ("glibc malloc_trim"), or why nothing was done (another libc, macOS, another OS).
Reading<std::string> release_free_memory();
// Makes the allocator give memory back as it is freed rather than keep it for reuse, for a long-running
// process whose bursts must not stay resident (glibc: M_MMAP_THRESHOLD and M_TRIM_THRESHOLD fixed at `bytes`,
// which also stops glibc from raising them after large frees: blocks of at least `bytes` get their own
// mapping, unmapped on free, and a free top of any arena, per-thread ones included, above `bytes` is
// returned on free; malloc_trim cannot shrink those tops). The allocator tuned, or why nothing was done.
Reading<std::string> limit_heap_retention(size_t bytes);

// ---- the CPU's state -----------------------------------------------------------------------------

// Asks the OS for the AMX tile data state of this process (Linux x86-64: arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA), kernel 5.16+; the kernel's Documentation/arch/x86/xstate.rst), so that AMX instructions do not
// fault. Once per process is enough (the permission is the process's). What was granted, or why not (any other OS
// or CPU: unavailable).
Reading<std::string> request_amx_tile_state();

// ---- the machine ------------------------------------------------------------------------------

struct LoadAverage {
  double one = 0, five = 0, fifteen = 0;
};
Reading<LoadAverage> load_average();                     // getloadavg
std::string format_load(const Reading<LoadAverage>& l);  // "0.52 0.61 0.70" or "unavailable (reason)"

// Cumulative CPU time of the whole machine in ticks; CPU use = delta busy / delta total.
struct CpuTicks {
  uint64_t busy = 0, total = 0;
  int cores = 0;
};
Reading<CpuTicks> cpu_ticks();  // Linux /proc/stat; macOS host_processor_info
// Percent of one core (100 = one core busy) between two samples; unavailable when no time passed.
Reading<double> cpu_percent(const CpuTicks& before, const CpuTicks& after);

struct MachineMemory {
  double total_mb = 0, available_mb = 0;
};
Reading<MachineMemory> machine_memory();  // Linux /proc/meminfo; macOS hw.memsize + host_statistics64

// ---- Linux procfs parsers (root = "/proc" normally; tests use fake trees) ----------------------

namespace procfs {
inline constexpr const char* kRoot = "/proc";
Reading<ProcessMemory> self_memory(const std::string& root);              // root/self/statm (pages)
Reading<ProcessMemory> pid_memory(const std::string& root, int64_t pid);  // root/<pid>/status VmRSS
Reading<CpuTicks> cpu_ticks(const std::string& root);                     // root/stat
Reading<MachineMemory> machine_memory(const std::string& root);           // root/meminfo
Reading<std::string> self_exe(const std::string& root);                   // readlink root/self/exe
Reading<double> self_anon_huge_mb(const std::string& root);               // root/self/smaps_rollup AnonHugePages
// The selected word of a sysfs mode file such as /sys/kernel/mm/transparent_hugepage/enabled
// ("always [madvise] never" -> "madvise").
Reading<std::string> sysfs_mode(const std::string& path);
inline constexpr const char* kThpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled";
}  // namespace procfs

}  // namespace anelab::platform

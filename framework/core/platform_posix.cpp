// The POSIX parts of the platform layer (Linux and macOS alike): saved argv, argv[0] resolution,
// load average, getrusage figures, whether a pid is alive, anonymous memory.
#include "framework/core/platform.h"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

namespace anelab::platform {
namespace {

struct Saved {
  std::mutex mu;
  std::vector<std::string> argv;
  std::string cwd, path_env;
};
Saved& saved() {
  static Saved s;
  return s;
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

Reading<std::string> real(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf))
    return Reading<std::string>::unavailable("realpath(" + p + "): " + std::strerror(errno));
  return Reading<std::string>::ok(buf);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

void save_argv(int argc, char** argv) {
  Saved& s = saved();
  std::lock_guard<std::mutex> lk(s.mu);
  s.argv.assign(argv, argv + (argc > 0 ? argc : 0));
  char buf[PATH_MAX];
  s.cwd = ::getcwd(buf, sizeof buf) ? buf : "";
  const char* path = std::getenv("PATH");
  s.path_env = path ? path : "";
}

std::vector<std::string> saved_argv() {
  Saved& s = saved();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.argv;
}

std::string saved_cwd() {
  Saved& s = saved();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.cwd;
}

Reading<std::string> resolve_program(const std::string& argv0, const std::string& cwd, const std::string& path_env) {
  using R = Reading<std::string>;
  if (argv0.empty()) return R::unavailable("argv[0] is empty");
  if (argv0.find('/') != std::string::npos) {
    if (argv0[0] != '/' && cwd.empty())
      return R::unavailable("argv[0] '" + argv0 + "' is relative and the initial cwd is unknown");
    const std::string p = argv0[0] == '/' ? argv0 : join(cwd, argv0);
    if (!is_executable_file(p))
      return R::unavailable("argv[0] '" + argv0 + "' resolves to " + p + ", not an executable file");
    return real(p);
  }
  if (path_env.empty()) return R::unavailable("argv[0] '" + argv0 + "' has no '/' and $PATH is empty");
  for (size_t b = 0; b <= path_env.size();) {
    const size_t e = std::min(path_env.find(':', b), path_env.size());
    std::string dir = path_env.substr(b, e - b);
    b = e + 1;
    if (dir.empty()) dir = cwd;  // an empty $PATH entry means the current directory
    if (dir.empty()) continue;
    if (dir[0] != '/' && !cwd.empty()) dir = join(cwd, dir);
    const std::string p = join(dir, argv0);
    if (is_executable_file(p)) return real(p);
  }
  return R::unavailable("argv[0] '" + argv0 + "' not found in $PATH");
}

// The argv[0] fallback of executable_path() (used where the OS has no direct query or it failed).
Reading<std::string> executable_from_argv0() {
  Saved& s = saved();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.argv.empty()) return Reading<std::string>::unavailable("argv was not saved (platform::save_argv not called)");
  return resolve_program(s.argv[0], s.cwd, s.path_env);
}

Reading<LoadAverage> load_average() {
  double l[3];
  if (::getloadavg(l, 3) != 3) return Reading<LoadAverage>::unavailable("getloadavg failed");
  return Reading<LoadAverage>::ok({l[0], l[1], l[2]});
}

std::string format_load(const Reading<LoadAverage>& l) {
  if (!l) return "unavailable (" + l.reason + ")";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l->one, l->five, l->fifteen);
  return buf;
}

Reading<double> peak_rss_mb() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0)
    return Reading<double>::unavailable(std::string("getrusage: ") + std::strerror(errno));
#if defined(__APPLE__)
  const double bytes = double(u.ru_maxrss);  // bytes on macOS
#else
  const double bytes = double(u.ru_maxrss) * 1024.0;  // kilobytes on Linux
#endif
  return Reading<double>::ok(bytes / (1024.0 * 1024.0));
}

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

Reading<AnonRegion> map_anonymous(size_t bytes, bool huge_pages) {
  using R = Reading<AnonRegion>;
  AnonRegion r;
  if (bytes == 0) return R::ok(std::move(r));
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = huge_pages ? kHuge : 1;
  const size_t len = huge_pages ? (bytes + kHuge - 1) / kHuge * kHuge + kHuge : bytes;  // room to align
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return R::unavailable("mmap of " + std::to_string(bytes) + " bytes of anonymous memory: " + std::strerror(errno));
  r.base = p, r.mapped = len, r.size = bytes;
  r.data = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + align - 1) / align * align);
  // Only the whole 2 MiB pages are advised: the tail stays on base pages, so the region costs its size, not
  // its size rounded up to 2 MiB.
  const size_t whole = bytes / kHuge * kHuge;
  r.huge_pages = !huge_pages  ? Reading<std::string>::unavailable("huge pages not asked for")
                 : whole == 0 ? Reading<std::string>::unavailable("smaller than one huge page (2 MiB)")
                              : advise_huge_pages(r.data, whole);
  return R::ok(std::move(r));
}

void unmap_anonymous(AnonRegion& r) {
  if (r.base) ::munmap(r.base, r.mapped);
  r = AnonRegion{};
}

FileLock lock_file(const std::string& path) {
  FileLock l;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // not O_CLOEXEC: the lock survives exec()
  if (fd < 0) {
    l.error = "cannot open " + path + ": " + std::strerror(errno);
    return l;
  }
  struct flock fl {};
  fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET, fl.l_start = 0, fl.l_len = 0;
  if (::fcntl(fd, F_SETLK, &fl) == 0) {
    l.fd = fd;
    return l;
  }
  const int e = errno;
  struct flock q {};
  q.l_type = F_WRLCK, q.l_whence = SEEK_SET, q.l_start = 0, q.l_len = 0;
  if ((e == EACCES || e == EAGAIN) && ::fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
    l.holder_pid = q.l_pid > 0 ? q.l_pid : -1;
  else
    l.error = "cannot lock " + path + ": " + std::strerror(e);
  ::close(fd);
  return l;
}

void release_file_lock(FileLock& l) {
  if (l.fd >= 0) ::close(l.fd);
  l.fd = -1;
}

Reading<int64_t> file_lock_holder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? Reading<int64_t>::ok(0)
                           : Reading<int64_t>::unavailable("cannot open " + path + ": " + std::strerror(errno));
  struct flock q {};
  q.l_type = F_WRLCK, q.l_whence = SEEK_SET, q.l_start = 0, q.l_len = 0;
  const int rc = ::fcntl(fd, F_GETLK, &q);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return Reading<int64_t>::unavailable("cannot query the lock of " + path + ": " + std::strerror(e));
  return Reading<int64_t>::ok(q.l_type == F_UNLCK ? 0 : q.l_pid);
}

int64_t process_id() { return ::getpid(); }

void ignore_file_size_signal() { ::signal(SIGXFSZ, SIG_IGN); }

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

HostInfo uname_host() {  // the POSIX part of host_info() (platform_*.cpp adds what its OS knows)
  HostInfo h;
  struct utsname u {};
  if (uname(&u) == 0) h.os = u.sysname, h.kernel = u.release, h.machine = u.machine, h.os_version = u.release;
  h.chip = h.machine;
  return h;
}

void ignore_broken_pipe_signal() { ::signal(SIGPIPE, SIG_IGN); }

namespace {
sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void block_stop_signals() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int take_stop_signal() {  // POSIX (macOS has no sigtimedwait): sigwait only once one is pending
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) != 0 || !(sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM))) return 0;
  const sigset_t set = stop_signal_set();
  int s = 0;
  return sigwait(&set, &s) == 0 ? s : 0;
}

std::string send_signal(int64_t pid, int sig) {
  if (pid <= 0 || pid > INT_MAX) return "no such process id " + std::to_string(pid);
  return ::kill(static_cast<pid_t>(pid), sig) == 0 ? std::string() : std::strerror(errno);
}

std::string exec_replace(const std::string& exe, const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(exe.c_str(), args.data());
  return std::strerror(errno);
}

std::string truncate_file(int fd, int64_t bytes) {
  return ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? std::string() : std::strerror(errno);
}

Reading<const void*> map_file_readonly(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return Reading<const void*>::unavailable(std::strerror(errno));
  return Reading<const void*>::ok(p);
}

void unmap_file(const void* p, size_t bytes) {
  if (p) ::munmap(const_cast<void*>(p), bytes);
}

Reading<double> cpu_percent(const CpuTicks& before, const CpuTicks& after) {
  if (after.total <= before.total || after.busy < before.busy)
    return Reading<double>::unavailable("no CPU time passed between the two samples");
  const double cores = double(after.cores > 0 ? after.cores : 1);
  return Reading<double>::ok(100.0 * cores * double(after.busy - before.busy) / double(after.total - before.total));
}

}  // namespace anelab::platform
#endif

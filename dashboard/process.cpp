#include "dashboard/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "framework/core/platform.h"
#include "train/run_dir.h"  // kRunLockFile only (header-only: no link to the trainer)

extern char** environ;

namespace anelab::dashboard {

std::string self_executable() {
  const auto p = platform::executable_path();
  return p ? *p : "anelab";
}

ChildProcess::~ChildProcess() {
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ChildProcess::start(const std::vector<std::string>& argv, const std::string& log_path, bool capture) {
  argv_ = argv;
  error_.clear();
  output_.clear();
  exited_ = false;
  exit_status_ = 0;
  if (argv.empty()) {
    error_ = "empty command";
    return false;
  }
  // posix_spawn reports a program that cannot be executed only where the C library sees the child's exec
  // fail (glibc's CLONE_VFORK path); under qemu-user the child is forked and the spawn "succeeds" with a
  // child that exits 127. Checking a path first gives the same error everywhere.
  if (argv[0].find('/') != std::string::npos && ::access(argv[0].c_str(), X_OK) != 0) {
    error_ = "cannot start " + argv[0] + ": " + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else if (capture) {
    if (::pipe(pipe_fds) != 0 || ::fcntl(pipe_fds[0], F_SETFD, FD_CLOEXEC) != 0 ||
        ::fcntl(pipe_fds[1], F_SETFD, FD_CLOEXEC) != 0) {  // POSIX; macOS has no pipe2
      error_ = std::string("pipe: ") + std::strerror(errno);
      posix_spawn_file_actions_destroy(&fa);
      return false;
    }
    posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = argv[0].find('/') == std::string::npos
               ? posix_spawnp(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ)
               : posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (rc != 0) {
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    error_ = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return false;
  }
  pid_ = pid;
  if (pipe_fds[0] >= 0) {
    out_fd_ = pipe_fds[0];
    ::fcntl(out_fd_, F_SETFL, ::fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  }
  return true;
}

void ChildProcess::drain() {
  if (out_fd_ < 0) return;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      if (output_.size() < (4u << 20)) output_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // EOF
      ::close(out_fd_);
      out_fd_ = -1;
    }
    break;
  }
}

bool ChildProcess::poll() {
  drain();
  if (pid_ <= 0 || exited_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1;
    drain();
  } else if (r < 0 && errno == ECHILD) {
    exited_ = true;
    exit_status_ = -1;
  }
  return !exited_;
}

bool ChildProcess::signal(int sig) {
  if (!running()) return false;
  return ::kill(pid_, sig) == 0;
}

bool ChildProcess::wait_for(int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (poll()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    if (out_fd_ >= 0) {
      struct pollfd p {
        out_fd_, POLLIN, 0
      };
      ::poll(&p, 1, 10);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return true;
}

int run_and_capture(const std::vector<std::string>& argv, std::string* out, int timeout_ms) {
  ChildProcess p;
  if (!p.start(argv, "", true)) {
    if (out) *out = p.error();
    return -1;
  }
  if (!p.wait_for(timeout_ms)) {
    p.signal(SIGKILL);
    p.wait_for(2000);
    if (out) *out = p.output();
    return -1;
  }
  if (out) *out = p.output();
  return p.exit_status();
}

std::string run_dir_busy(const std::string& dir) {
  const std::string lock = dir + "/" + train::kRunLockFile;
  const platform::Reading<int64_t> holder = platform::file_lock_holder(lock);
  if (!holder) return "cannot tell whether " + dir + " is in use: " + holder.reason;
  if (*holder == 0) return "";
  return "run dir " + dir + " is in use by another trainer (pid " + std::to_string(*holder) + ", holding " + lock +
         "): stop it first or choose another run directory";
}

}  // namespace anelab::dashboard

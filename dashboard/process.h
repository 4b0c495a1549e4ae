// Child processes started by the dashboard: the trainer (`anelab train ...`, output to a log file in
// the run directory; the dashboard reads the trainer's events, not its console) and short helpers
// whose standard output is captured (`anelab infer generate ...` for "sample now").
// posix_spawn, non-blocking status polling, signals. Never blocks the GUI thread.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace anelab::dashboard {

// Path of the running executable (platform::executable_path), or "anelab" (found through PATH) when unknown.
std::string self_executable();

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();  // closes the pipe; does not kill or wait for a still-running child
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] (searched in PATH when it has no '/') with argv. Output: to `log_path` (appended,
  // both stdout and stderr) when not empty, else captured through a pipe when `capture`, else
  // inherited. Returns false and sets error() when the spawn fails.
  bool start(const std::vector<std::string>& argv, const std::string& log_path, bool capture);

  // Reaps the child if it exited (non-blocking) and drains captured output. True while running.
  bool poll();
  bool running() const { return pid_ > 0 && !exited_; }
  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Exit code (0..255) or -signal when killed by a signal; meaningful after the child exited.
  int exit_status() const { return exit_status_; }
  bool signal(int sig);                                  // sends a signal to a running child
  const std::string& output() const { return output_; }  // captured stdout+stderr so far
  const std::string& error() const { return error_; }
  const std::vector<std::string>& argv() const { return argv_; }
  // Waits (blocking) up to timeout_ms for the child to exit; true if it did.
  bool wait_for(int timeout_ms);

 private:
  void drain();
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool exited_ = false;
  int exit_status_ = 0;
  std::string output_, error_;
  std::vector<std::string> argv_;
};

// Why the Start / Resume buttons must not start a trainer in run directory `dir`: another process holds its
// run.lock (the trainer's one-writer lock, train/run_dir.h), as one line naming that process's pid; or why the
// lock could not be asked; "" when the directory is free (or has no run.lock yet).
std::string run_dir_busy(const std::string& dir);

// Runs a command to completion (with a timeout, killing it after) and returns its exit status;
// captured output in *out. Used for capability checks such as `anelab infer generate --help`.
int run_and_capture(const std::vector<std::string>& argv, std::string* out, int timeout_ms);

}  // namespace anelab::dashboard

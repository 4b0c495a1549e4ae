// Child processes: captured output, exit codes, log files, signals, spawn failures.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dashboard/process.h"
#include "framework/core/platform.h"
#include "tests/common/test_data.h"

namespace anelab::dashboard {
namespace {

TEST(Process, CapturesOutputAndExitCode) {
  std::string out;
  EXPECT_EQ(run_and_capture({"/bin/sh", "-c", "echo hello; echo err >&2; exit 3"}, &out, 5000), 3);
  EXPECT_NE(out.find("hello"), std::string::npos);
  EXPECT_NE(out.find("err"), std::string::npos);
}

TEST(Process, MissingProgramFailsToStart) {
  ChildProcess p;
  EXPECT_FALSE(p.start({"/nonexistent/anelab-xyz"}, "", false));
  EXPECT_NE(p.error().find("cannot start"), std::string::npos);
  EXPECT_FALSE(p.start({}, "", false));
}

TEST(Process, LogFileAndSignals) {
  auto dir = test::temp_dir("proc_log");
  auto log = (dir / "console.log").string();
  ChildProcess p;
  ASSERT_TRUE(p.start({"/bin/sh", "-c", "echo started; exec sleep 30"}, log, false));
  EXPECT_TRUE(p.running());
  EXPECT_FALSE(p.wait_for(200));
  EXPECT_TRUE(p.signal(SIGTERM));
  EXPECT_TRUE(p.wait_for(5000));
  EXPECT_FALSE(p.running());
  EXPECT_EQ(p.exit_status(), -SIGTERM);
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("started"), std::string::npos);
  EXPECT_FALSE(p.signal(SIGTERM));  // not running any more
}

TEST(Process, TimeoutKillsTheChild) {
  std::string out;
  EXPECT_EQ(run_and_capture({"sleep", "30"}, &out, 200), -1);
}

TEST(Process, SelfExecutableIsAbsolute) { EXPECT_EQ(self_executable().front(), '/'); }

TEST(Process, StartRefusedWhileAnotherProcessHoldsTheRunLock) {
  // The Start / Resume buttons ask run_dir_busy first: a run dir whose run.lock another process holds (a
  // trainer started elsewhere) is refused with one line naming that pid; free again once the holder is gone.
  const auto dir = test::temp_dir("dash_lock");
  EXPECT_EQ(run_dir_busy(dir.string()), "");  // no run.lock yet
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {  // the "trainer": takes the lock the way train/run_dir.cpp does, then waits to be killed
    platform::FileLock l = platform::lock_file((dir / "run.lock").string());
    const char c = l.fd >= 0 ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  const std::string busy = run_dir_busy(dir.string());
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_NE(busy.find("in use by another trainer (pid " + std::to_string(holder) + ","), std::string::npos) << busy;
  EXPECT_EQ(busy.find('\n'), std::string::npos) << busy;
  EXPECT_EQ(run_dir_busy(dir.string()), "");  // the kernel dropped the lock with the holder
}

}  // namespace
}  // namespace anelab::dashboard

// Child processes: captured output, exit codes, log files, signals, spawn failures.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dashboard/process.h"
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

}  // namespace
}  // namespace anelab::dashboard

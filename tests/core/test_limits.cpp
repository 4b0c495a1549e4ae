// Edge cases of the OS that must end in one clean error line, not a hang or std::terminate: a thread pool
// whose threads cannot be created (address-space limit), and input paths that are FIFOs, devices or
// directories where a file is expected.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/thread_pool.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {

// Runs fn in a child process and returns its exit status (128 + signal when it was killed, e.g. by abort).
int in_child(const std::function<int()>& fn) {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(fn());
  int st = 0;
  ::waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(Limits, ThreadCreationFailureIsOneErrorNamingTheThreadCount) {
#if !defined(__linux__)
  GTEST_SKIP() << "needs /proc/self/statm and an enforced RLIMIT_AS (Linux)";
#else
  const auto dir = test::temp_dir("threads");
  const std::string msg = (dir / "msg.txt").string();
  const int rc = in_child([&] {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // first field: the address-space size in pages
    // 16 MiB above today's address space: a couple of 8 MiB thread stacks fit, 64 do not.
    const rlim_t lim = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (16u << 20);
    const rlimit rl{lim, lim};
    if (::setrlimit(RLIMIT_AS, &rl) != 0) return 3;
    try {
      ThreadPool pool(64);
      return 2;  // every thread started: the limit did not bite
    } catch (const Error& e) {
      std::FILE* f = std::fopen(msg.c_str(), "w");
      if (!f) return 4;
      std::fputs(e.what(), f);
      std::fclose(f);
      return 0;
    }
  });
  // Where the limit does not bite (qemu-user maps guest threads inside its own reservation) there is nothing
  // to test; without the fix the outcome is SIGABRT (std::terminate), never 2.
  if (rc == 2) GTEST_SKIP() << "RLIMIT_AS did not stop thread creation on this host";
  ASSERT_EQ(rc, 0) << "expected anelab::Error from ThreadPool(64) under RLIMIT_AS (6+128 = SIGABRT: std::terminate)";
  const std::string why = read_file_text(msg);
  EXPECT_EQ(why.rfind("[threads] ", 0), 0u) << why;
  EXPECT_NE(why.find("--threads 64"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  std::filesystem::remove_all(dir);
#endif
}

TEST(Limits, NonRegularFilesAreRefusedWithoutOpening) {
  const auto dir = test::temp_dir("fifo");
  const std::string fifo = (dir / "model.bin").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/null"), dir.string()}) {
    const int rc = in_child([&] {
      ::alarm(10);  // before the check, opening the FIFO blocked until a writer came (there is none)
      try {
        MappedFile f(p);
        return 1;
      } catch (const Error& e) {
        return std::string(e.what()).find(p + " is ") != std::string::npos ? 0 : 2;
      }
    });
    EXPECT_EQ(rc, 0) << p << (rc == 1 ? ": accepted" : rc == 2 ? ": error does not name it" : ": blocked or crashed");
  }
  std::filesystem::remove_all(dir);
}

TEST(Limits, InfoOnAFifoFailsQuicklyNamingThePath) {
  const std::string bin = std::string(ANELAB_BINARY_DIR) + "/bin/anelab";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "no anelab binary at " << bin;
  const auto dir = test::temp_dir("fifo_info");
  const std::string fifo = (dir / "model.gguf").string(), out = (dir / "out.txt").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string cmd = "timeout 20 " + bin + " info " + fifo + " > " + out + " 2>&1";
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_NE(WEXITSTATUS(st), 124) << "anelab info blocked on the FIFO until the timeout";
  EXPECT_NE(WEXITSTATUS(st), 0);
  const std::string text = read_file_text(out);
  EXPECT_NE(text.find(fifo), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

// Files of a run under adverse conditions: temp files of a checkpoint writer that was killed between write
// and rename are removed when the run starts again (those of a live writer stay); a full disk (here a file
// size limit) while appending events.jsonl leaves no torn line and fails with one line naming the file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/events.h"
#include "train/trainer.h"

namespace anelab {
namespace {
namespace fs = std::filesystem;

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  ::waitpid(p, nullptr, 0);
  return p;
}

TEST(RunFiles, StaleTempFilesOfDeadWritersAreRemovedOnResume) {
  const auto dir = test::temp_dir("stale_tmp").string();
  const std::string data = test::write_tokens(dir, 3000, 512, 12);
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir + "/run", c.run = "t";
  c.steps = 1, c.batch_size = 2, c.seq_len = 16, c.eval_every = 0, c.eval_batches = 0;
  train::validate(c);
  train::run_training(c, {false, false});
  const std::string dead = c.run_dir + "/last.ckpt.tmp." + std::to_string(dead_pid());
  const std::string live = c.run_dir + "/last.ckpt.tmp." + std::to_string(::getppid());
  const std::string other = c.run_dir + "/notes.tmp.txt";  // not a writer's temp file
  for (const auto& p : {dead, live, other}) test::put(p, "partial");
  c.resume = true, c.steps = 2;
  train::run_training(c, {false, false});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  fs::remove_all(dir);
}

// In a child process with RLIMIT_FSIZE = `limit` bytes (SIGXFSZ ignored, so writes past it fail with EFBIG
// or come back short), emits events until EventLog throws; the child writes the error to `msg_path`.
int emit_until_full(const std::string& path, const std::string& msg_path, rlim_t limit) {
  const pid_t p = ::fork();
  if (p == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(3);
    try {
      train::EventLog log(path);
      for (int i = 0; i < 1000; ++i) log.emit("step", i, {{"pad", std::string(97, 'x')}});
    } catch (const Error& e) {
      std::ofstream(msg_path) << e.what();  // shorter than the limit
      ::_exit(0);
    }
    ::_exit(2);
  }
  int st = 0;
  ::waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(RunFiles, FullDiskLeavesNoTornEventLine) {
  const auto dir = test::temp_dir("events_full").string();
  const std::string path = dir + "/events.jsonl", msg = dir + "/msg.txt";
  const rlim_t limit = 1000;  // each line is ~170 bytes: the 6th line crosses the limit
  ASSERT_EQ(emit_until_full(path, msg, limit), 0) << "EventLog did not throw anelab::Error at the size limit";
  const std::string text = read_file_text(path), why = read_file_text(msg);
  EXPECT_LE(text.size(), limit);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "torn last line: " << text.substr(text.rfind('\n') + 1);
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n)
    EXPECT_TRUE(nlohmann::json::accept(line)) << "line " << n << ": " << line;
  EXPECT_GE(n, 5);
  EXPECT_NE(why.find(path), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab

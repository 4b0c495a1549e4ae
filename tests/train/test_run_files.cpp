// Files of a run under adverse conditions: temp files of a checkpoint writer that was killed between write
// and rename are removed when the run starts again (those of a live writer stay); a full disk (here a file
// size limit) while appending events.jsonl leaves no torn line and fails with one line naming the file.
// Issue 34: one writer per run directory (run.lock), no fresh start in a directory that is not a run, only
// the trainer's own temp files deleted, paths saved absolute, `ulimit -f` like a full disk, and --resume
// before the first checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
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

// `anelab ARGS` from directory `cwd` (after `pre`, e.g. a ulimit), stdout and stderr together.
struct Cli {
  int rc;
  std::string out;
};
Cli run_cli(const std::string& dir, const std::string& args, const std::string& cwd = ".",
            const std::string& pre = "") {
  const std::string log = dir + "/cli.txt";
  const std::string cmd = "cd " + cwd + " && " + pre + std::string(ANELAB_BINARY_DIR) + "/bin/anelab train " + args +
                          " < /dev/null > " + log + " 2>&1";
  const int st = std::system(("bash -c '" + cmd + "'").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), read_file_text(log)};
}
int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
// The lines of s that are errors ("anelab: error: ..."); the run's progress lines may precede them.
int error_lines(const std::string& s) {
  int n = 0;
  for (size_t at = s.find("anelab: error: "); at != std::string::npos; at = s.find("anelab: error: ", at + 1)) ++n;
  return n;
}

train::TrainConfig tiny_run(const std::string& run_dir, const std::string& data) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = run_dir, c.run = "t";
  c.steps = 1, c.batch_size = 2, c.seq_len = 16, c.eval_every = 0, c.eval_batches = 0;
  train::validate(c);
  return c;
}

// A child process that holds DIR/run.lock (as a trainer at work does) until it is killed; its pid, or -1 when it
// could not take the lock.
pid_t hold_run_lock(const std::string& dir) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t holder = ::fork();
  if (holder == 0) {
    platform::FileLock l = platform::lock_file(dir + "/run.lock");
    const char b = l.fd >= 0 ? 'y' : 'n';
    if (::write(fds[1], &b, 1) != 1) ::_exit(2);
    ::sleep(120);
    ::_exit(0);
  }
  char b = 0;
  const bool ok = ::read(fds[0], &b, 1) == 1 && b == 'y';
  ::close(fds[0]), ::close(fds[1]);
  return ok ? holder : -1;
}

// Item 1: while another process holds the run directory's lock (as a trainer at work does), a --resume and a
// fresh start refuse with one line naming its pid, and nothing is written; once it dies (kill -9), the
// lock is gone and the run resumes.
TEST(RunFiles, OneWriterPerRunDirectory) {
  const auto dir = test::temp_dir("one_writer").string();
  const std::string data = test::write_tokens(dir, 3000, 512, 13);
  auto c = tiny_run(dir + "/run", data);
  train::run_training(c, {false, false});
  const pid_t holder = hold_run_lock(c.run_dir);
  ASSERT_GT(holder, 0);
  const std::string events = read_file_text(c.run_dir + "/events.jsonl");
  for (const std::string& args : {"--run-dir " + c.run_dir + " --resume --steps 3 --lr 1e-3",
                                  "--preset stories260k --data " + data + " --run-dir " + c.run_dir}) {
    const Cli r = run_cli(dir, args);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("in use by another trainer (pid " + std::to_string(holder)), std::string::npos) << r.out;
  }
  c.resume = true, c.steps = 2;
  EXPECT_THROW(train::run_training(c, {false, false}), Error);
  EXPECT_EQ(read_file_text(c.run_dir + "/events.jsonl"), events);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(train::run_training(c, {false, false}).steps, 2);
  EXPECT_EQ(test::read_events(c.run_dir, "run_start").size(), 2u);
  fs::remove_all(dir);
}

// Item 1, before the first checkpoint: a --resume of a run whose trainer is still at its first steps (the lock held,
// no last.ckpt yet) names the holder, not "nothing to resume".
TEST(RunFiles, ResumeBeforeTheFirstCheckpointOfARunningTrainerNamesIt) {
  const auto dir = test::temp_dir("one_writer_early").string();
  const std::string run = dir + "/run";
  fs::create_directories(run);
  const pid_t holder = hold_run_lock(run);
  ASSERT_GT(holder, 0);
  const Cli r = run_cli(dir, "--run-dir " + run + " --resume --steps 3");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("in use by another trainer (pid " + std::to_string(holder)), std::string::npos) << r.out;
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  const Cli after = run_cli(dir, "--run-dir " + run + " --resume --steps 3");  // no trainer: nothing to resume
  EXPECT_EQ(after.rc, 1) << after.out;
  EXPECT_NE(after.out.find("has no checkpoint (last.ckpt) yet"), std::string::npos) << after.out;
  fs::remove_all(dir);
}

// Item 2: a fresh start refuses a non-empty directory that is not a run (a Hugging Face model directory here)
// and changes nothing in it; with --force it writes the run there, and deletes no file of another naming
// scheme (a dead pid's "model.safetensors.tmp.<pid>" is not the trainer's).
TEST(RunFiles, FreshStartRefusesADirectoryThatIsNotARun) {
  const auto dir = test::temp_dir("not_a_run").string();
  const std::string data = test::write_tokens(dir, 3000, 512, 14);
  const std::string hf = dir + "/hf";
  const std::string foreign_tmp = hf + "/model.safetensors.tmp." + std::to_string(dead_pid());
  test::put(hf + "/config.json", "{\"model_type\": \"llama\"}\n");
  test::put(foreign_tmp, "partial");
  const Cli r = run_cli(dir, "--preset stories260k --data " + data + " --steps 1 --run-dir " + hf);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("not an anelab run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  EXPECT_EQ(read_file_text(hf + "/config.json"), "{\"model_type\": \"llama\"}\n");
  EXPECT_FALSE(fs::exists(hf + "/events.jsonl"));
  EXPECT_FALSE(fs::exists(hf + "/run.lock"));
  auto c = tiny_run(hf, data);
  c.force = true;
  train::run_training(c, {false, false});
  EXPECT_TRUE(fs::exists(hf + "/last.ckpt"));
  EXPECT_TRUE(fs::exists(foreign_tmp)) << "not a file of the trainer's naming scheme";
  fs::remove_all(dir);
}

// Item 8: relative --data / --run-dir are saved absolute, so --resume works from another directory.
TEST(RunFiles, RelativePathsAreSavedAbsolute) {
  const auto dir = test::temp_dir("rel_paths").string();
  const std::string data_name = fs::path(test::write_tokens(dir, 3000, 512, 15)).filename().string();
  Cli r = run_cli(
      dir, "--preset stories260k --data " + data_name + " --steps 1 --batch-size 2 --seq-len 16 --run-dir run", dir);
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(read_file_text(dir + "/run/config.json"));
  EXPECT_EQ(j["data"].get<std::string>(), (fs::path(dir) / data_name).lexically_normal().string());
  r = run_cli(dir, "--run-dir " + dir + "/run --resume --steps 2", "/");
  EXPECT_EQ(r.rc, 0) << r.out;
  fs::remove_all(dir);
}

// Item 8: a write past `ulimit -f` (SIGXFSZ) fails like a full disk: exit 1 with one line, an error event, no
// temp file left. The run then has no checkpoint: --resume says so and how to start it, and that works.
TEST(RunFiles, FileSizeLimitFailsLikeAFullDiskAndResumeSaysHowToStart) {
  const auto dir = test::temp_dir("fsize").string();
  const std::string data = test::write_tokens(dir, 3000, 512, 16);
  const std::string run = dir + "/run";
  // stories260k's checkpoint is ~3 MiB; the other files fit in 200 KiB.
  Cli r =
      run_cli(dir, "--preset stories260k --data " + data + " --steps 1 --batch-size 2 --seq-len 16 --run-dir " + run,
              ".", "ulimit -f 200; ");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(error_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.substr(r.out.rfind("anelab: error: ")).find("File too large"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(run + "/events.jsonl"));
  EXPECT_EQ(test::read_events(run, "error").size(), 1u);
  for (const auto& e : fs::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  EXPECT_FALSE(fs::exists(run + "/last.ckpt"));
  r = run_cli(dir, "--run-dir " + run + " --resume");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("has no checkpoint"), std::string::npos) << r.out;
  const std::string start = "--config " + run + "/config.toml";
  EXPECT_NE(r.out.find("anelab train " + start), std::string::npos) << r.out;
  r = run_cli(dir, start);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(run + "/last.ckpt"));
  r = run_cli(dir, "--run-dir " + dir + "/never --resume");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("has no checkpoint"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab

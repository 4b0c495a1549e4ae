// exec-restart without /proc: the real `anelab` binary, static strategy, a tiny --compile-budget,
// run in a private mount namespace with an empty tmpfs over /proc (`unshare -m`, needs root or user
// namespaces; skipped with the reason otherwise). The restarted run must equal an unrestarted in-process run
// bit for bit. Also: invoked through a relative path to a symlink from another cwd, through $PATH, and with an
// argv[0] that leads nowhere (a one-line error naming what failed).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "framework/core/file.h"
#include "framework/core/thread_pool.h"
#include "tests/common/emulation.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/trainer.h"

namespace anelab {
namespace {
namespace fs = std::filesystem;

std::string anelab_binary() { return std::string(ANELAB_BINARY_DIR) + "/bin/anelab"; }

// "" when `unshare -m` + a tmpfs over /proc works here, else why not.
std::string hidden_proc_unavailable() {
  const std::string out = (fs::temp_directory_path() / "anelab_unshare_probe.txt").string();
  const std::string cmd = "unshare -m sh -c 'mount -t tmpfs none /proc && test ! -e /proc/self/exe' > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string why;
  if (rc != 0) {
    why = "unshare -m + tmpfs over /proc does not work here (not root, or no mount namespaces): ";
    try {
      why += read_file_text(out);
    } catch (const std::exception&) {
      why += "exit status " + std::to_string(rc);
    }
  }
  fs::remove(out);
  return why;
}

// The shell command that runs `inner` (a sh command line) with /proc hidden.
std::string with_hidden_proc(const std::string& inner) {
  return "unshare -m sh -c " + test::sh_quote("mount -t tmpfs none /proc && " + inner);
}

// Same thread count as this process's pool (the in-process reference run): results are bitwise only per count.
std::string env_prefix() { return "ANELAB_THREADS=" + std::to_string(ThreadPool::global().size()) + " "; }

std::string train_args(const std::string& data, const std::string& run_dir, int steps) {
  return " train --preset stories260k --data " + test::sh_quote(data) + " --run-dir " + test::sh_quote(run_dir) +
         " --run t --steps " + std::to_string(steps) +
         " --accum-steps 2 --batch-size 2 --seq-len 64 --lr 2e-3 --warmup-steps 2 --eval-batches 0"
         " --strategy static --compile-budget 75 --quiet";
}

// The unrestarted reference: the same run in-process with an unlimited budget.
void straight_run(const std::string& dir, const std::string& data, int steps) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "t", c.strategy = "static";
  c.steps = steps, c.accum_steps = 2, c.batch_size = 2, c.seq_len = 64, c.lr = 2e-3, c.warmup_steps = 2;
  c.eval_batches = 0, c.compile_budget = 100000;
  train::validate(c);
  train::run_training(c, {false, false});
}

TEST(RestartNoProc, StaticExecRestartsWithProcHiddenEqualUnrestartedRun) {
  if (const auto why = hidden_proc_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("noproc").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 4);
  straight_run(dir + "/straight", data, 8);
  // 5 layers: 37 compiles for a process's first step, 35 per further update; budget 75 fits two steps, so 8
  // steps take 4 processes (3 exec-restarts), each found without /proc.
  const std::string cmd = with_hidden_proc(env_prefix() + "exec " + test::sh_quote(anelab_binary()) +
                                           train_args(data, dir + "/restarted", 8)) +
                          " > " + dir + "/log.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file_text(dir + "/log.txt");
  EXPECT_EQ(test::read_events(dir + "/restarted", "restart").size(), 3u);
  EXPECT_EQ(test::read_events(dir + "/restarted", "run_start").size(), 4u);
  // Proof that /proc really was hidden: RSS came from getrusage's peak, labelled so.
  const auto steps = test::read_events(dir + "/restarted", "step");
  ASSERT_EQ(steps.size(), 8u);
  for (const auto& s : steps) EXPECT_TRUE(s.value("rss_is_peak", false)) << s.dump();
  test::expect_same_state(dir + "/straight", dir + "/restarted");
  fs::remove_all(dir);
}

// A relative path to a symlink, from a cwd that is not the binary's directory, then through $PATH; /proc hidden
// where that works (else /proc/self/exe is used, and the argv handling is still exercised).
TEST(RestartNoProc, RelativeSymlinkAndPathInvocationsRestart) {
  const std::string why = hidden_proc_unavailable();
  const auto dir = test::temp_dir("noproc_link").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 5);
  straight_run(dir + "/straight", data, 4);
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/work/sub");
  fs::create_symlink(anelab_binary(), dir + "/bin/anelab-link");
  const auto wrap = [&](const std::string& inner) {
    return why.empty() ? with_hidden_proc(inner) : "sh -c " + test::sh_quote(inner);
  };
  const std::string rel = wrap("cd " + test::sh_quote(dir + "/work/sub") + " && " + env_prefix() +
                               "exec ../../bin/anelab-link" + train_args(data, dir + "/rel", 4));
  ASSERT_EQ(std::system((rel + " > " + dir + "/rel.txt 2>&1").c_str()), 0) << read_file_text(dir + "/rel.txt");
  const std::string via_path =
      wrap("cd " + test::sh_quote(dir + "/work") + " && PATH=" + test::sh_quote(dir + "/bin") + ":\"$PATH\" " +
           env_prefix() + "exec anelab-link" + train_args(data, dir + "/path", 4));
  ASSERT_EQ(std::system((via_path + " > " + dir + "/path.txt 2>&1").c_str()), 0) << read_file_text(dir + "/path.txt");
  for (const std::string r : {"rel", "path"}) {
    EXPECT_EQ(test::read_events(dir + "/" + r, "restart").size(), 1u) << r;
    test::expect_same_state(dir + "/straight", dir + "/" + r);
  }
  if (!why.empty()) std::fprintf(stderr, "note: ran with /proc visible: %s\n", why.c_str());
  fs::remove_all(dir);
}

// Non-empty under user-mode emulation: qemu-user answers readlink("/proc/self/exe") itself, so hiding /proc
// cannot take the running executable's path away from an emulated process.
std::string emulated_host() {
  const auto why = test::user_mode_emulation();
  return why.empty() ? ""
                     : "runs under " + why +
                           ": qemu-user emulates readlink(/proc/self/exe), so the executable "
                           "stays resolvable with /proc hidden";
}

// argv[0] that names nothing on $PATH, with /proc hidden: the restart fails with one line naming both tries.
TEST(RestartNoProc, UnresolvableExecutableGivesOneLineError) {
  if (const auto why = hidden_proc_unavailable(); !why.empty()) GTEST_SKIP() << why;
  if (const auto why = emulated_host(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("noproc_err").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 6);
  // bash's `exec -a NAME` sets argv[0]; sh may be dash, so bash runs the exec.
  const std::string cmd =
      with_hidden_proc("exec bash -c " + test::sh_quote("exec -a no-such-anelab " + test::sh_quote(anelab_binary()) +
                                                        train_args(data, dir + "/run", 4))) +
      " > " + dir + "/log.txt 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string log = read_file_text(dir + "/log.txt");
  EXPECT_NE(log.find("[train] exec-restart: cannot find the running executable: readlink /proc/self/exe"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("argv[0] 'no-such-anelab' not found in $PATH"), std::string::npos) << log;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab

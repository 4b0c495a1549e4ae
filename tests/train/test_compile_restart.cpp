// Compile failures during training: the real `anelab`
// binary trains with `--backend ane --strategy static` over the fake shim (ANELAB_ANE_SHIM=fake), which fails
// the compiles of the run that the test draws at random (ANELAB_FAKE_ANE_FAIL_COMPILES). Every failure
// checkpoints the last completed step and exec-restarts; the run must end in the state of an uninjected run,
// bit for bit, and the programs loaded at each exec-restart are not compiled again. A failure that repeats
// right after its restart is an error, not a restart loop.
//
// Compile counts (stories260k, 5 layers, static): a process's first step compiles 2 shared + 35 per-layer
// kernels, each further update 35 (fewer where programs coincide: the all-ones RMSNorm weights of the first
// step make the 5 layers' norm-backward kernels one program, a cache hit). With the default budget of 100 a
// process does 2 steps and exec-restarts. The shared kernels are still loaded at every exec, and so are the
// per-layer kernels compiled before a failure: none of them is compiled again after the restart. So the run
// compiles exactly as many programs as the same run in one process, plus one per injected failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "framework/core/file.h"
#include "framework/core/thread_pool.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace anelab {
namespace {
namespace fs = std::filesystem;

constexpr int kSteps = 8;

// The binary over the fake shim in fake_dir, failing the listed compiles of the run ("" = none). one_process:
// no budget and no compile limit (the reference count of compiles without restarts).
int run_fake(const std::string& data, const std::string& run_dir, const std::string& fake_dir,
             const std::string& failures, const std::string& log, bool one_process = false) {
  const std::string env = "ANELAB_THREADS=" + std::to_string(ThreadPool::global().size()) +
                          " ANELAB_ANE_SHIM=fake ANELAB_FAKE_ANE_DIR=" + test::sh_quote(fake_dir) +
                          " ANELAB_FAKE_ANE_FAIL_COMPILES=" + test::sh_quote(failures) +
                          (one_process ? " ANELAB_FAKE_ANE_COMPILE_LIMIT=100000" : "") + " ";
  const std::string cmd =
      env + test::sh_quote(std::string(ANELAB_BINARY_DIR) + "/bin/anelab") + " train --preset stories260k --data " +
      test::sh_quote(data) + " --run-dir " + test::sh_quote(run_dir) + " --run t --steps " + std::to_string(kSteps) +
      " --accum-steps 2 --batch-size 2 --seq-len 64 --lr 2e-3 --warmup-steps 2 --eval-batches 0"
      " --strategy static --backend ane" +
      (one_process ? " --compile-budget 100000" : "") + " --quiet > " + test::sh_quote(log) + " 2>&1";
  return std::system(cmd.c_str());
}

// Compiles that reached the fake compiler over the whole run (the fake keeps the count in its directory).
int64_t run_compiles(const std::string& fake_dir) {
  return std::stoll(read_file_text(fake_dir + "/fake_compile_count"));
}

// The uninjected reference: the same run in-process on the emulator, without a budget (one process).
void straight_run(const std::string& dir, const std::string& data) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "t", c.strategy = "static";
  c.steps = kSteps, c.accum_steps = 2, c.batch_size = 2, c.seq_len = 64, c.lr = 2e-3, c.warmup_steps = 2;
  c.eval_batches = 0, c.compile_budget = 100000;
  train::validate(c);
  train::run_training(c, {false, false});
}

TEST(CompileRestart, InjectedFailuresGiveTheLossesOfAnUninjectedRun) {
  const auto dir = test::temp_dir("compile_restart").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 7);
  straight_run(dir + "/straight", data);

  // Over the fake in one process (no budget): the compiles the run needs.
  ASSERT_EQ(run_fake(data, dir + "/one", dir + "/fake_one", "", dir + "/one.txt", true), 0)
      << read_file_text(dir + "/one.txt");
  test::expect_same_state(dir + "/straight", dir + "/one");
  EXPECT_EQ(test::read_events(dir + "/one", "restart").size(), 0u);
  const int64_t needed = run_compiles(dir + "/fake_one");
  // Uninjected with the default budget: the planned restarts (4 processes of 2 steps) compile nothing twice.
  ASSERT_EQ(run_fake(data, dir + "/plain", dir + "/fake_plain", "", dir + "/plain.txt"), 0)
      << read_file_text(dir + "/plain.txt");
  test::expect_same_state(dir + "/straight", dir + "/plain");
  EXPECT_EQ(test::read_events(dir + "/plain", "restart").size(), 3u);
  EXPECT_EQ(run_compiles(dir + "/fake_plain"), needed) << "programs loaded at an exec-restart were compiled again";

  // Failures at random compiles of the run, at least 38 apart: a restarted process's first step needs at most
  // 37 compiles (2 shared + 35 when the failure hit the first compile), so each failure is followed by a
  // completed step before the next one.
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::vector<int64_t> at;
  for (int64_t g = std::uniform_int_distribution<int64_t>(1, 70)(rng); g < needed;
       g += 38 + std::uniform_int_distribution<int64_t>(0, 60)(rng))
    at.push_back(g);
  std::string spec;
  for (int64_t g : at) spec += (spec.empty() ? "" : ",") + std::to_string(g);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", failing compiles " + spec);
  ASSERT_EQ(run_fake(data, dir + "/injected", dir + "/fake_injected", spec, dir + "/injected.txt"), 0)
      << read_file_text(dir + "/injected.txt");
  test::expect_same_state(dir + "/straight", dir + "/injected");
  size_t failure_restarts = 0;
  for (const auto& r : test::read_events(dir + "/injected", "restart"))
    failure_restarts += r["reason"] == "compile_failure";
  EXPECT_EQ(failure_restarts, at.size());
  EXPECT_EQ(test::read_events(dir + "/injected", "run_end").size(), 1u);
  // Nothing loaded at an exec-restart is compiled again: the failed attempts are the only extra compiles.
  EXPECT_EQ(run_compiles(dir + "/fake_injected"), needed + int64_t(at.size()));
  fs::remove_all(dir);
}

TEST(CompileRestart, FailureRightAfterItsRestartIsAnErrorNotALoop) {
  const auto dir = test::temp_dir("compile_restart_twice").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 8);
  // Compile 50 is in step 2 of the first process; after its restart the first compile (51) fails again.
  EXPECT_NE(run_fake(data, dir + "/run", dir + "/fake", "50,51", dir + "/log.txt"), 0);
  const std::string log = read_file_text(dir + "/log.txt");
  EXPECT_NE(log.find("compile failed again right after the exec-restart for a compile failure at step 1"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("injected at compile 51 of the run"), std::string::npos) << log;
  EXPECT_EQ(test::read_events(dir + "/run", "run_start").size(), 2u);
  EXPECT_EQ(test::read_events(dir + "/run", "restart").size(), 1u);
  EXPECT_EQ(test::read_events(dir + "/run", "error").size(), 1u);
  EXPECT_EQ(train::read_checkpoint(dir + "/run/last.ckpt").step, 1);  // the last completed step is kept
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab

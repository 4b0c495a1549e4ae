// Data-parallel training over MPI (train/dist.h): `mpirun -np 2 anelab train` on this host (loopback) against
// one process accumulating the same micro-batches, bit for bit; a rank killed with SIGKILL stops the job and
// --resume continues it bit-exactly; the static strategy's compile budget restarts the job through
// scripts/mpi_train.sh; the gradient sum overlapped with the backward gives the bits of the sum after it.
// Skipped (with the reason) in a build without MPI or without its launcher (OverlappedSum.* runs in any build).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "framework/core/file.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/dist_overlap.h"
#include "train/trainer.h"

namespace anelab {
namespace {

// Open MPI as root on a 2-core container: allow root, more ranks than cores, and no cross-memory-attach
// (ptrace is often denied in containers); ignored by MPICH.
const char* kOmpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
    "OMPI_MCA_btl_vader_single_copy_mechanism=none ";

std::string mpi_skip_reason() {
  if (!ANELAB_HAVE_MPI) return "this build has no MPI (install libopenmpi-dev openmpi-bin and reconfigure)";
  if (std::string(ANELAB_MPIEXEC).empty() || !std::filesystem::exists(ANELAB_MPIEXEC)) return "no mpiexec/mpirun found";
  return "";
}

train::TrainConfig base(const std::string& dir, const std::string& data, const std::string& strategy) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "t", c.strategy = strategy;
  c.steps = 10, c.batch_size = 2, c.seq_len = 64, c.accum_steps = 2, c.lr = 2e-3, c.warmup_steps = 2;
  c.loss_scale = "dynamic:256:3", c.eval_batches = 0, c.launcher = "none";
  train::validate(c);
  return c;
}

// `anelab train` as `base` with `accum` micro-batches per rank (2 ranks x 1: the same 2 micro-batches per step).
std::string train_args(const std::string& dir, const std::string& data, const std::string& strategy, int steps,
                       int accum = 1) {
  return std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data + " --run-dir " +
         dir + " --run t --strategy " + strategy + " --steps " + std::to_string(steps) +
         " --batch-size 2 --seq-len 64 "
         "--accum-steps " +
         std::to_string(accum) + " --lr 2e-3 --warmup-steps 2 --loss-scale dynamic:256:3 --eval-batches 0 --quiet";
}
std::string mpirun2() { return std::string(ANELAB_MPIEXEC) + " -np 2 "; }

int sh(const std::string& cmd) { return std::system((std::string(kOmpiEnv) + cmd).c_str()); }

TEST(Mpi, TwoRanksEqualOneProcessAccumulating) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_eq").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 11);
  // dynamic: the kernel strategy accumulates every sequence's dW into the gradient buffer in turn, so the
  // rank sum must reproduce the one-process micro-batch order exactly: 2 ranks x 2 micro-batches = one process
  // x 4 in the order (round 0: rank 0, rank 1), (round 1: rank 0, rank 1)
  auto one = base(dir + "/one", data, "dynamic");
  one.accum_steps = 4;
  train::run_training(one, {false, false});
  ASSERT_EQ(
      sh(mpirun2() + train_args(dir + "/two", data, "dynamic", 10, 2) + " --launcher mpi > " + dir + "/log.txt 2>&1"),
      0)
      << read_file_text(dir + "/log.txt");
  test::expect_same_state(dir + "/one", dir + "/two");
  const auto start = test::read_events(dir + "/two", "run_start");
  ASSERT_EQ(start.size(), 1u);  // rank 0 alone writes events
  EXPECT_EQ(start[0]["ranks"].get<int>(), 2);
  const auto steps = test::read_events(dir + "/two", "step");
  ASSERT_EQ(steps.size(), 10u);
  EXPECT_EQ(steps[0]["tokens"].get<int64_t>(), 2 * 2 * 2 * 64);  // global: ranks x accum x batch x seq
  EXPECT_GT(steps[0]["ms_comm"].get<double>(), 0.0);
  std::filesystem::remove_all(dir);
}

// The ranks' gradient sum started layer by layer during the backward (the default) against the sum after
// the whole backward (--comm-overlap off): the same weights, moments and losses, bit for bit. The cpu engine
// reports each layer on the training thread; the dynamic one from its dW worker, after that layer's tasks.
TEST(Mpi, OverlappedSumEqualsTheSumAfterTheBackward) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_overlap").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 16);
  for (const std::string strategy : {"cpu", "dynamic"}) {
    for (const std::string overlap : {"off", "on"}) {
      const std::string run = dir + "/" + strategy + "_" + overlap;
      ASSERT_EQ(sh(mpirun2() + train_args(run, data, strategy, 6, 2) + " --comm-overlap " + overlap + " > " + dir +
                   "/log.txt 2>&1"),
                0)
          << read_file_text(dir + "/log.txt");
      const auto start = test::read_events(run, "run_start");
      ASSERT_EQ(start.size(), 1u);
      EXPECT_EQ(start[0]["comm_overlap"].get<bool>(), overlap == "on");
      for (const auto& e : test::read_events(run, "step")) {
        EXPECT_GT(e["ms_comm"].get<double>(), 0.0);
        // nothing hidden without overlap: the training thread waits for all of it
        if (overlap == "off") {
          EXPECT_EQ(e["ms_comm_wait"].get<double>(), e["ms_comm"].get<double>());
        }
      }
    }
    test::expect_same_state(dir + "/" + strategy + "_off", dir + "/" + strategy + "_on");
  }
  std::filesystem::remove_all(dir);
}

// OverlappedSum over a group of one (no MPI): buckets handed to the communication thread in pieces, in any
// pattern of reports, leave the bits of acc + x.
TEST(OverlappedSum, BucketsGiveTheBitsOfOneSum) {
  auto group = train::dist::open_group("none");
  const std::vector<int64_t> bounds = {1000, 900, 517, 516, 516, 100, 0};  // an empty bucket too
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(1000), acc0(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng), acc0[i] = nd(rng);
  std::vector<float> want(acc0);
  for (size_t i = 0; i < x.size(); ++i) want[i] += x[i];
  for (const std::vector<int64_t>& reports :
       std::vector<std::vector<int64_t>>{{}, {950, 900, 600, 516, 99}, {0}, {516}}) {
    for (bool overlap : {false, true}) {
      train::dist::OverlappedSum sum(*group, bounds, overlap);
      EXPECT_EQ(sum.overlap(), overlap);
      for (int round = 0; round < 2; ++round) {  // the second round reuses the thread and the buffers
        std::vector<float> acc(acc0);
        sum.begin(x.data(), acc.data());
        for (int64_t from : reports) sum.final_from(from);
        const auto ms = sum.finish();
        EXPECT_GE(ms.total, 0.0);
        EXPECT_TRUE(acc == want) << "overlap " << overlap << ", " << reports.size() << " reports, round " << round;
      }
    }
  }
}

TEST(Mpi, ResumeWithAnotherRankCount) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_n").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 12);
  train::run_training(base(dir + "/one", data, "cpu"), {false, false});
  ASSERT_EQ(sh(mpirun2() + train_args(dir + "/mixed", data, "cpu", 10) + " --stop-after 4 > " + dir + "/log.txt 2>&1"),
            0)
      << read_file_text(dir + "/log.txt");
  auto rest = base(dir + "/mixed", data, "cpu");  // 1 process x 2 micro-batches continues 2 ranks x 1
  rest.resume = true;
  train::run_training(rest, {false, false});
  test::expect_same_state(dir + "/one", dir + "/mixed");
  std::filesystem::remove_all(dir);
}

// The loss of each step (the last event of each step number: a killed run repeats the steps after its checkpoint).
std::map<int64_t, double> losses_by_step(const std::string& dir) {
  std::map<int64_t, double> m;
  for (const auto& e : test::read_events(dir, "step")) m[e["step"].get<int64_t>()] = e["loss"].get<double>();
  return m;
}

TEST(Mpi, KilledRankStopsTheJobAndResumeIsBitExact) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_kill").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 13);
  auto straight = base(dir + "/one", data, "dynamic");
  straight.steps = 40;
  train::run_training(straight, {false, false});
  const std::string run = dir + "/killed";
  const std::string cmd = mpirun2() + train_args(run, data, "dynamic", 40) + " --checkpoint-every 2";
  const std::string full = std::string(kOmpiEnv) + cmd + " > " + dir + "/log.txt 2>&1";
  const pid_t job = ::fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Once step 5 is logged (last.ckpt holds step 4), SIGKILL rank 1 (its pid is in run_start.rank_pids).
  bool killed = false;
  for (int i = 0; i < 60000 && !killed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!std::filesystem::exists(run + "/events.jsonl")) continue;
    const auto start = test::read_events(run, "run_start");
    if (start.empty() || test::read_events(run, "step").size() < 5) continue;
    ASSERT_EQ(::kill(pid_t(start[0]["rank_pids"][1].get<int64_t>()), SIGKILL), 0);
    killed = true;
  }
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  // What a failure below needs to be understood: the job's output and its events.
  const auto text = [](const std::string& path) {
    try {
      return read_file_text(path);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  const auto diag = [&] {
    return "\n--- log.txt:\n" + text(dir + "/log.txt") + "\n--- events.jsonl:\n" + text(run + "/events.jsonl");
  };
  ASSERT_TRUE(killed) << diag();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the job went on without rank 1" << diag();
  EXPECT_TRUE(test::read_events(run, "run_end").empty()) << "the job finished before the kill (too fast?)" << diag();
  const int64_t at = train::read_checkpoint(run + "/last.ckpt").step;
  EXPECT_GE(at, 4) << diag();
  EXPECT_LT(at, 40) << diag();
  const std::string resume = cmd + " --resume > " + dir + "/log2.txt 2>&1";
  ASSERT_EQ(sh(resume), 0) << read_file_text(dir + "/log2.txt") << diag();
  const auto x = train::read_checkpoint(dir + "/one/last.ckpt"), y = train::read_checkpoint(run + "/last.ckpt");
  EXPECT_EQ(y.step, 40);
  EXPECT_TRUE(x.weights == y.weights) << "weights differ";
  EXPECT_TRUE(x.m == y.m && x.v == y.v) << "moments differ";
  EXPECT_EQ(x.data_state, y.data_state);
  EXPECT_EQ(losses_by_step(dir + "/one"), losses_by_step(run)) << diag();
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);  // kept for a look when something failed
}

TEST(Mpi, StaticCompileBudgetRestartsThroughTheLauncher) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_static").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 14);
  auto one = base(dir + "/one", data, "static");
  one.steps = 8, one.compile_budget = 100000;
  train::run_training(one, {false, false});
  // 5 layers: a process compiles 2 + 35 kernels for its first step and 35 per further update; a budget of
  // 75 fits two steps, so 8 steps take 4 jobs (3 restarts with exit status 75, each rerun with --resume).
  const std::string cmd = "MPIRUN=" + std::string(ANELAB_MPIEXEC) + " " + ANELAB_SOURCE_DIR +
                          "/scripts/mpi_train.sh -np 2 -- " + train_args(dir + "/two", data, "static", 8) +
                          " --compile-budget 75 > " + dir + "/log.txt 2>&1";
  ASSERT_EQ(sh(cmd), 0) << read_file_text(dir + "/log.txt");
  EXPECT_EQ(test::read_events(dir + "/two", "restart").size(), 3u);
  EXPECT_EQ(test::read_events(dir + "/two", "run_start").size(), 4u);
  test::expect_same_state(dir + "/one", dir + "/two");
  std::filesystem::remove_all(dir);
}

TEST(Mpi, RanksWithDifferentOptionsAreRefused) {
  if (const auto why = mpi_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mpi_diff").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 15);
  const std::string args = train_args(dir + "/run", data, "cpu", 4);
  // MPMD: rank 0 and rank 1 get different --seed values
  const std::string cmd = std::string(ANELAB_MPIEXEC) + " -np 1 " + args + " --seed 1 : -np 1 " + args +
                          " --seed 2 > " + dir + "/log.txt 2>&1";
  EXPECT_NE(sh(cmd), 0);
  const std::string log = read_file_text(dir + "/log.txt");
  EXPECT_NE(log.find("[train] rank 1 differs from rank 0 in its options"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/last.ckpt"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

// Whole runs: resume bit-exactness, exec-restart equality (the real binary with a simulated compile
// budget), dynamic loss scaling on overflow, CLI errors, and fine-tuning stories260K on TinyStories.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <utility>

#include "framework/core/file.h"
#include "models/formats/llama2c.h"
#include "models/presets.h"
#include "models/tokenizer/token_file.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/trainer.h"

namespace anelab {
namespace {

train::TrainConfig runs_config(const std::string& dir, const std::string& data) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "t";
  c.steps = 8, c.batch_size = 2, c.seq_len = 32, c.accum_steps = 2, c.lr = 1e-3, c.warmup_steps = 2;
  c.loss_scale = "dynamic:256:3", c.eval_every = 4, c.eval_batches = 2;
  train::validate(c);
  return c;
}

TEST(TrainRuns, ResumeIsBitExact) {
  const auto dir = test::temp_dir("resume").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 3);
  train::run_training(runs_config(dir + "/straight", data), {false, false});
  auto half = runs_config(dir + "/split", data);
  half.stop_after = 4;
  const auto o1 = train::run_training(half, {false, false});
  EXPECT_FALSE(o1.finished);
  EXPECT_EQ(o1.steps, 4);
  half.resume = true;
  half.stop_after = 0;
  const auto o2 = train::run_training(half, {false, false});
  EXPECT_TRUE(o2.finished);
  test::expect_same_state(dir + "/straight", dir + "/split");
  EXPECT_EQ(test::read_events(dir + "/split", "run_start").size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(TrainRuns, ExecRestartEqualsUnrestartedRun) {
  const auto dir = test::temp_dir("restart").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 4);
  train::run_training(runs_config(dir + "/straight", data), {false, false});
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data +
                          " --run-dir " + dir +
                          "/restarted --run t --steps 8 --batch-size 2 --seq-len 32 "
                          "--accum-steps 2 --lr 1e-3 --warmup-steps 2 --loss-scale dynamic:256:3 --eval-every 4 "
                          "--eval-batches 2 --compile-budget 3 --quiet > " +
                          dir + "/log.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file_text(dir + "/log.txt");
  const auto restarts = test::read_events(dir + "/restarted", "restart");
  EXPECT_EQ(restarts.size(), 2u);  // 8 steps at 3 (simulated) compiles per process: 3 + 3 + 2
  EXPECT_EQ(test::read_events(dir + "/restarted", "run_end").size(), 1u);
  test::expect_same_state(dir + "/straight", dir + "/restarted");
  std::filesystem::remove_all(dir);
}

TEST(TrainRuns, DynamicLossScaleSkipsOverflowingSteps) {
  const auto dir = test::temp_dir("overflow").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 5);
  auto c = runs_config(dir + "/run", data);
  c.loss_scale = "dynamic:1e39:1000";  // > FLT_MAX: scaled gradients overflow to inf/NaN -> skip + halve
  c.steps = 4, c.eval_every = 0, c.eval_batches = 0;
  train::run_training(c, {false, false});
  const auto ck = train::read_checkpoint(c.run_dir + "/last.ckpt");
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_TRUE(steps[0]["skipped"].get<bool>());  // 1e39, then 5e38: both overflow fp32
  EXPECT_TRUE(steps[1]["skipped"].get<bool>());
  EXPECT_FALSE(steps[2]["skipped"].get<bool>());  // 2.5e38 fits
  EXPECT_EQ(steps[2]["loss_scale"].get<double>(), 2.5e38);
  EXPECT_EQ(ck.adam_t, 2);
  for (float w : ck.weights) ASSERT_TRUE(std::isfinite(w));
  std::filesystem::remove_all(dir);
}

TEST(TrainRuns, BadFlagsGiveOneLineAndNonZeroExit) {
  const auto dir = test::temp_dir("badflags").string();
  const std::string bin = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train ";
  for (const std::string& args : std::vector<std::string>{
           "--preset stories260k --data x.bin --strategy gpu", "--preset stories260k --data x.bin --steps abc",
           "--preset nope --data x.bin --run-dir " + dir + "/r",
           "--preset stories260k --data /nonexistent.bin --run-dir " + dir + "/r2"}) {
    const std::string cmd = bin + args + " > " + dir + "/out.txt 2>&1";
    EXPECT_NE(std::system(cmd.c_str()), 0) << args;
    const std::string out = read_file_text(dir + "/out.txt");
    EXPECT_EQ(out.rfind("anelab: error: [", 0), 0u) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
  // A failed start leaves no (empty) run directory behind.
  EXPECT_FALSE(std::filesystem::exists(dir + "/r"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/r2"));
  std::filesystem::remove_all(dir);
}

// --resume of a run that already reached --steps says so and changes nothing: no events (no zero report,
// no run_end with final_loss 0), no rewritten config, no new checkpoint.
TEST(TrainRuns, ResumeOfAFinishedRunChangesNothing) {
  const auto dir = test::temp_dir("resume_done").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 6);
  auto c = runs_config(dir + "/run", data);
  c.steps = 4;
  train::run_training(c, {false, false});
  const std::vector<std::string> files = {"events.jsonl", "config.json", "config.toml", "last.ckpt"};
  std::vector<std::string> before;
  for (const auto& f : files) before.push_back(read_file_text(c.run_dir + "/" + f));
  c.resume = true;
  const auto o = train::run_training(c, {false, false});
  EXPECT_EQ(o.steps, 4);
  for (size_t i = 0; i < files.size(); ++i)
    EXPECT_EQ(read_file_text(c.run_dir + "/" + files[i]), before[i]) << files[i];
  EXPECT_EQ(test::read_events(c.run_dir, "run_end").size(), 1u);
  // The CLI says so on stdout and exits 0.
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --run-dir " + c.run_dir + " --resume > " +
                          dir + "/out.txt 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = read_file_text(dir + "/out.txt");
  EXPECT_NE(out.find("already finished"), std::string::npos) << out;
  EXPECT_EQ(out.find("Efficiency Report"), std::string::npos) << out;
  for (size_t i = 0; i < files.size(); ++i)
    EXPECT_EQ(read_file_text(c.run_dir + "/" + files[i]), before[i]) << files[i];
  std::filesystem::remove_all(dir);
}

// Issue 33 item 7: one command line that can be run again (the demo's "longer run" suggestion): with
// --resume-or-start it starts the run, continues it after a stop (here --stop-after), and does nothing
// once the run is finished; each time it exits 0.
TEST(TrainRuns, ResumeOrStartMakesACommandResumable) {
  const auto dir = test::temp_dir("resume_or_start").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 8);
  const std::string line = std::string(ANELAB_BINARY_DIR) + "/bin/anelab train --preset stories260k --data " + data +
                           " --steps 4 --batch-size 2 --seq-len 32 --run-dir " + dir + "/run --resume-or-start";
  auto run = [&](const std::string& extra) {
    const std::string cmd = line + extra + " > " + dir + "/out.txt 2>&1";
    const int rc = std::system(cmd.c_str());
    return std::make_pair(rc, read_file_text(dir + "/out.txt"));
  };
  auto [rc, out] = run(" --stop-after 2");  // started, then stopped (as by a kill after a checkpoint)
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(train::read_checkpoint(dir + "/run/last.ckpt").step, 2);
  std::tie(rc, out) = run("");  // the same command again continues the run
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(train::read_checkpoint(dir + "/run/last.ckpt").step, 4);
  const auto starts = test::read_events(dir + "/run", "run_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_FALSE(starts[0]["resumed"].get<bool>());
  EXPECT_TRUE(starts[1]["resumed"].get<bool>());
  std::tie(rc, out) = run("");  // and once more: finished, nothing to do
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("already finished"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// Extending a finished run (--resume with a larger --steps): the report's and checkpoint's train time is
// the sum over both processes' steps; step events carry elapsed / ETA.
TEST(TrainRuns, ExtendedRunAccountsTrainTimeOverProcesses) {
  const auto dir = test::temp_dir("extend").string();
  const std::string data = test::write_tokens(dir, 5000, 512, 7);
  auto c = runs_config(dir + "/run", data);
  c.steps = 4;
  train::run_training(c, {false, false});
  c.resume = true;
  c.steps = 8;
  const auto o = train::run_training(c, {false, false});
  EXPECT_TRUE(o.finished);
  EXPECT_EQ(o.steps, 8);
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(steps.size(), 8u);
  double sum_ms = 0;
  for (const auto& e : steps) {
    sum_ms += e["ms"].get<double>();
    EXPECT_TRUE(e.contains("elapsed_s") && e.contains("eta_s")) << e.dump();
  }
  EXPECT_EQ(steps.back()["eta_s"].get<double>(), 0.0);
  EXPECT_GE(steps.back()["elapsed_s"].get<double>(), steps[3]["elapsed_s"].get<double>());
  const auto ends = test::read_events(c.run_dir, "run_end");
  ASSERT_EQ(ends.size(), 2u);
  const double train_s = ends.back()["train_s"].get<double>();
  EXPECT_NEAR(train_s, sum_ms / 1000.0, 1e-9 * std::max(1.0, train_s));
  EXPECT_NEAR(train::read_checkpoint(c.run_dir + "/last.ckpt").train_s, train_s, 1e-9 * std::max(1.0, train_s));
  EXPECT_EQ(ends.back()["steps_this_process"], 4);
  std::filesystem::remove_all(dir);
}

TEST(TrainRuns, FineTuneStories260KLowersValidationLoss) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  ANELAB_REQUIRE_DATA("tinystories/tinystories_valid_prefix.txt");
  const auto dir = test::temp_dir("finetune").string();
  const auto tok = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  const std::string text = read_file_text(test::data_path("tinystories/tinystories_valid_prefix.txt"));
  tok::write_token_file(*tok, text, dir + "/ts.bin", "tok512");
  train::TrainConfig c;
  c.init = test::data_path("llama2c/stories260K.bin"), c.data = dir + "/ts.bin", c.run_dir = dir + "/run";
  c.steps = 16, c.batch_size = 4, c.seq_len = 128, c.lr = 3e-4, c.warmup_steps = 2, c.eval_batches = 4;
  c.weight_decay = 0.0;  // measured: val 1.970 -> 1.935 (lr 1e-3 overshoots and raises it)
  c.val_frac = 0.05;
  train::validate(c);
  // validation loss of the initial weights, on the same held-out windows the trainer evaluates
  const train::ParamLayout layout(models::read_llama2c(c.init).config);
  const auto w0 = train::init_from_model(layout, models::read_llama2c(c.init));
  train::TokenData td(c.data, c.val_frac, c.seq_len);
  train::Batcher bt(td, c.batch_size, c.seq_len, true, 0);
  train::CpuModel m(layout);
  double v0 = 0;
  train::Batch b;
  for (int i = 0; i < c.eval_batches; ++i) {
    ASSERT_TRUE(bt.val_batch(i, &b));
    v0 += m.loss(w0.data(), b) / c.eval_batches;
  }
  const auto o = train::run_training(c, {false, false});
  ASSERT_TRUE(o.last_val_loss.has_value());
  EXPECT_LT(*o.last_val_loss, v0 - 0.01) << "initial val loss " << v0;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

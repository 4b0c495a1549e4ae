// The trainer against an independent PyTorch implementation (scripts/train_reference.py):
// whole-model gradients after one step, and a 20-step AdamW loss trajectory.
//
// Tolerances (fp32 everywhere, both sides): gradients are sums over B*T = 64 positions through up to 5
// layers of softmax/RMSNorm/matmul chains; reassociation differences between Eigen and PyTorch are
// O(sqrt(K) * 2^-24) per dot product, amplified by the depth, so a per-tensor relative L2 error < 1e-4
// (~800 ulps) is tight for fp32 and far below any formula error (a wrong term gives >= 1e-2).
// The trajectory drifts through Adam's sqrt(v) normalisation (which amplifies tiny gradients' relative
// error); losses must agree to 1e-4 relative for 20 steps and final weights to 1e-3 relative L2.
// The Llama 3.x and Qwen3 shapes are 2 layers deep (shallower than stories260K's 5); Qwen3's per-head norms are
// one more RMSNorm on the q/k paths, the same kind of fp32 chain: the same bounds apply (measured worst tensor
// 4.9e-7 llama3, 5.0e-7 qwen3; without the llama3 scaling 0.6, without the per-head norm backward 1.0). The Gemma 3
// shape adds the soft-cap's tanh, the GELU's tanh and the 6.9x embedding scale to the same kind of fp32 chain
// (measured worst 2.7e-6; each Gemma part left out of the backward gives 0.2 .. 1.9).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "framework/core/npy.h"
#include "models/formats/anelab_file.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/trainer.h"

namespace anelab {
namespace {

void check_grads_against_torch(const models::ModelConfig& cfg, int64_t B, int64_t T, const std::string& tag,
                               bool norm_noise = false) {
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = norm_noise ? test::init_with_norm_noise(layout, 7) : train::init_random(layout, 7);
  train::Rng rng{99};
  train::Batch b{B, T, std::vector<int32_t>(size_t(B * (T + 1)))};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(cfg.vocab_size));
  test::expect_grads_match_reference(layout, w, b, tag);
}

TEST(TrainReference, GradientsMatchTorchStories260kShape) {
  check_grads_against_torch(models::preset("stories260k"), 2, 32, "260k");
}

TEST(TrainReference, GradientsMatchTorchGqaRotateHalfUntied) {
  check_grads_against_torch(test::gqa_test_config(), 2, 24, "gqa");
}

// Llama 3.x: llama3 RoPE scaling with an original context (32) shorter than the sequence (64).
TEST(TrainReference, GradientsMatchTorchLlama3ScaledRope) {
  check_grads_against_torch(test::llama3_test_config(), 2, 64, "llama3", true);
}

// Qwen3: per-head q/k RMSNorm before RoPE (weights away from 1 so their use shows in every gradient).
TEST(TrainReference, GradientsMatchTorchQwen3QkNorm) {
  check_grads_against_torch(test::qwen3_test_config(), 2, 32, "qwen3", true);
}

// Gemma 3 on the CPU engine: every part of the architecture at once (window 8 < T = 32, two RoPE tables).
TEST(TrainReference, GradientsMatchTorchGemma3) {
  check_grads_against_torch(test::gemma3_test_config(), 2, 32, "gemma3", true);
}

// `n_steps` AdamW steps of `anelab train` (CPU engine) against torch.optim.AdamW on the same windows.
void check_trajectory_against_torch(const models::ModelConfig& cfg, int n_steps, const std::string& tag) {
  const auto dir = test::temp_dir("traj_" + tag).string();
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  const std::string data = test::write_tokens(dir, 6000, cfg.vocab_size, 5);
  train::TrainConfig c;
  c.init = init, c.data = data, c.run_dir = dir + "/run", c.run = "traj";
  c.steps = n_steps, c.batch_size = 2, c.seq_len = 32, c.accum_steps = 2, c.lr = 2e-3, c.warmup_steps = 3;
  c.grad_clip = 1.0, c.batching = "sequential", c.eval_batches = 0, c.loss_scale = "static:256";
  train::validate(c);
  train::run_training(c, {false, false});

  // The same windows the sequential batcher produced, in order.
  const train::ParamLayout layout(cfg);
  const auto w0 = train::init_from_model(layout, models::load_any_model(init));
  const std::vector<train::Batch> batches = test::sequential_batches(c);
  const nlohmann::json optim = test::reference_optim(c);
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir + "/ref", layout, w0, batches, optim, "train", &log)) << log;
  const auto ref_losses = read_npy(dir + "/ref/out/losses.npy").data;
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(steps.size(), size_t(c.steps));
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_NEAR(steps[i]["loss"].get<double>(), ref_losses[i], 1e-4 * ref_losses[i]) << "step " << i + 1;
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>());  // it learned something
  const auto ck = train::read_checkpoint(c.run_dir + "/last.ckpt");
  for (const auto& p : layout.params()) {
    const NpyArray ref = read_npy(dir + "/ref/out/final." + p.name + ".npy");
    EXPECT_LT(test::rel_err(ck.weights.data() + p.offset, ref.data.data(), p.numel), 1e-3) << p.name;
  }
  std::filesystem::remove_all(dir);
}

TEST(TrainReference, TwentyStepTrajectoryMatchesTorchAdamW) {
  check_trajectory_against_torch(models::preset("stories260k"), 20, "260k");
}

TEST(TrainReference, Qwen3TenStepTrajectoryMatchesTorchAdamW) {
  check_trajectory_against_torch(test::qwen3_test_config(), 10, "qwen3");
}

TEST(TrainReference, Gemma3TenStepTrajectoryMatchesTorchAdamW) {
  check_trajectory_against_torch(test::gemma3_test_config(), 10, "gemma3");
}

}  // namespace
}  // namespace anelab

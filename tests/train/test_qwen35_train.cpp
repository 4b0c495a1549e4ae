// Qwen3.5 trained by the CPU strategy against autograd: scripts/qwen35_reference.py --train runs the model in
// float64 (its forward is the oracle of the inference tests too) and gives the loss, every parameter's gradient and
// a 10-step AdamW trajectory.
//
// The model: 4 layers, full_attention_interval 4 (3 Gated DeltaNet layers, then one gated full-attention layer with
// q/k norms and partial RoPE on 4 of 16 dims), GQA (4 heads, 2 kv heads), linear 2 key heads of 8 and 4 value heads
// of 12 (key dim != value dim, two value heads per key head). Weights of unit-scale activations (matrices
// U(±sqrt(3/in)), norms 0.5 ± 0.25 so that (1 + w) and w differ, A_log in [-1, 0.5], dt_bias in [-1, 1], conv taps
// U(±0.5)), so the decays exp(g) spread over (0, 1) and every nonlinearity is away from its linear range.
//
// Tolerances. The reference is float64, anelab fp32: each gradient is a sum over B*T = 32 positions of chains
// through up to 4 layers (delta-rule recurrences of 16 steps, RMSNorm/L2 norms, softmax, SiLU/sigmoid/softplus),
// each op rounding at 2^-24 ≈ 6e-8 relative; K-term dot products add O(sqrt(K)) of it, the recurrence one rounding
// per step and the depth multiplies the chain. That leaves the fp32 result some 1e-6 .. 1e-5 from the exact value (the
// measured worst tensor is printed), while a wrong term (a dropped beta factor, a missing decay, the gate's
// derivative) moves a gradient by far more than 1e-2: a relative L2 bound of 1e-4 (~1600 ulps) passes fp32
// rounding only (measured worst 1.8e-5, layer 2's dt_bias; with the beta factor of dk_t dropped in the backward
// layer 2's ssm_qkv misses by 1.0 and every tensor before it by 0.3 .. 2.4). The loss (a mean of 32 log-softmaxes) is
// held to 1e-5 relative. The trajectory: `anelab train`'s 10 AdamW steps (2 micro-batches each, loss scale 256,
// clipping, warm-up) from the seeded random init of the other trajectories (tests/train/test_reference.cpp) drift
// through Adam's normalisation of small gradients: losses to 1e-4 relative (measured 3e-6), final weights to 1e-3.
// (From the unit-scale weights above the loss sits above ln(vocab) and Adam's first, sign-like steps flip on near-zero
// gradient elements: the trajectories part by 3e-4 at step 7 there, which is that chaos, not a formula error - step 1
// agrees to 1e-7.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "models/formats/anelab_file.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/lora.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

// The small Qwen3.5 above: the preset with shape overrides (the architecture's own fields, norms, gate and q/k
// norms stay the preset's).
models::ModelConfig qwen35_small_config() {
  models::ModelConfig c = models::preset("qwen3.5-0.8b");
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 97, c.max_seq_len = 64;
  c.linear_k_heads = 2, c.linear_v_heads = 4, c.linear_k_dim = 8, c.linear_v_dim = 12, c.linear_conv_kernel = 4;
  return c;
}

// The unit-scale weights above, deterministic in seed.
std::vector<float> qwen35_train_init(const train::ParamLayout& layout, uint64_t seed) {
  std::vector<float> w(size_t(layout.total()));
  train::Rng rng{seed};
  auto uni = [&](float lo, float hi) { return lo + (hi - lo) * float(rng.next() >> 40) / 16777216.0f; };
  for (const auto& p : layout.params()) {
    float* x = w.data() + p.offset;
    const std::string& n = p.name;
    for (int64_t i = 0; i < p.numel; ++i) {
      if (n.ends_with("ssm_a_log"))
        x[i] = uni(-1.0f, 0.5f);
      else if (n.ends_with("ssm_dt_bias"))
        x[i] = uni(-1.0f, 1.0f);
      else if (n.ends_with("ssm_conv"))
        x[i] = uni(-0.5f, 0.5f);
      else if (p.shape.size() == 1)  // the norms
        x[i] = uni(0.25f, 0.75f);
      else if (n == "tok_embeddings")  // (tied: the classifier too; logits of a few units)
        x[i] = uni(-0.25f, 0.25f);
      else {
        const float a = std::sqrt(3.0f / float(p.shape[1]));
        x[i] = uni(-a, a);
      }
    }
  }
  return w;
}

constexpr const char* kQwen35Oracle = "qwen35_reference.py --train";

// Every gradient of a batch of B sequences of T tokens against the float64 oracle (bounds above).
void qwen35_check_grads(int64_t B, int64_t T, const std::string& tag) {
  const models::ModelConfig cfg = qwen35_small_config();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = qwen35_train_init(layout, 36);
  train::Rng rng{77};
  train::Batch b{B, T, std::vector<int32_t>(size_t(B * (T + 1)))};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(cfg.vocab_size));
  test::expect_grads_match_reference(layout, w, b, "qwen35_" + tag, 1e-4, kQwen35Oracle);
}

TEST(TrainQwen35, GradientsMatchAutogradFloat64) { qwen35_check_grads(2, 16, "2x16"); }

// Sequences shorter than the conv kernel (4) and stretches of the state recomputation that do not divide T (L = 2).
TEST(TrainQwen35, ShortSequenceGradientsMatchAutogradFloat64) { qwen35_check_grads(3, 3, "3x3"); }

TEST(TrainQwen35, TenStepTrajectoryMatchesAutogradAdamW) {
  const models::ModelConfig cfg = qwen35_small_config();
  const auto dir = test::temp_dir("qwen35_traj").string();
  const train::ParamLayout layout(cfg);
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  const std::string data = test::write_tokens(dir, 6000, cfg.vocab_size, 5);
  train::TrainConfig c;
  c.init = init, c.data = data, c.run_dir = dir + "/run", c.run = "traj";
  c.steps = 10, c.batch_size = 2, c.seq_len = 16, c.accum_steps = 2, c.lr = 2e-3, c.warmup_steps = 3;
  c.grad_clip = 1.0, c.batching = "sequential", c.eval_batches = 0, c.loss_scale = "static:256";
  train::validate(c);
  train::run_training(c, {false, false});

  const auto w0 = train::init_from_model(layout, models::load_any_model(init));
  const std::vector<train::Batch> batches = test::sequential_batches(c);
  const nlohmann::json optim = test::reference_optim(c);
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir + "/ref", layout, w0, batches, optim, "train", &log, kQwen35Oracle)) << log;
  const auto ref_losses = read_npy(dir + "/ref/out/losses.npy").data;
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(steps.size(), size_t(c.steps));
  for (size_t i = 0; i < steps.size(); ++i) {
    std::printf("[qwen35] step %zu loss %.6f float64 %.6f\n", i + 1, steps[i]["loss"].get<double>(),
                double(ref_losses[i]));
    EXPECT_NEAR(steps[i]["loss"].get<double>(), ref_losses[i], 1e-4 * ref_losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>());
  const auto ck = train::read_checkpoint(c.run_dir + "/last.ckpt");
  for (const auto& p : layout.params()) {
    const NpyArray ref = read_npy(dir + "/ref/out/final." + p.name + ".npy");
    EXPECT_LT(test::rel_err(ck.weights.data() + p.offset, ref.data.data(), p.numel), 1e-3) << p.name;
  }
  std::filesystem::remove_all(dir);
}

// `anelab train --preset qwen3.5-0.8b --shape {...}`: a run stopped after 3 steps and resumed from its checkpoint (the
// qwen35 config and weights read back) ends in the state of the run that never stopped, bit for bit; the loss falls.
TEST(TrainQwen35, PresetWithShapeResumesBitExact) {
  const auto dir = test::temp_dir("qwen35_resume").string();
  const std::string data = test::write_tokens(dir, 5000, 97, 3);
  auto run = [&](const std::string& sub) {
    train::TrainConfig c;
    c.preset = "qwen3.5-0.8b", c.data = data, c.run_dir = dir + "/" + sub, c.run = "q";
    c.shape = R"({"dim": 64, "hidden_dim": 96, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
                  "vocab_size": 97, "max_seq_len": 64, "linear_k_heads": 2, "linear_v_heads": 4, "linear_k_dim": 8,
                  "linear_v_dim": 12})";
    c.steps = 6, c.batch_size = 2, c.seq_len = 32, c.lr = 3e-3, c.warmup_steps = 1, c.eval_batches = 0;
    train::validate(c);
    return c;
  };
  train::run_training(run("straight"), {false, false});
  auto half = run("split");
  half.stop_after = 3;
  EXPECT_FALSE(train::run_training(half, {false, false}).finished);
  half.resume = true, half.stop_after = 0;
  EXPECT_TRUE(train::run_training(half, {false, false}).finished);
  test::expect_same_state(dir + "/straight", dir + "/split");
  const auto ck = train::read_checkpoint(dir + "/split/last.ckpt");
  EXPECT_TRUE(ck.model == qwen35_small_config());
  const auto l = test::losses(dir + "/straight");
  EXPECT_LT(l.back(), l.front());
  train::TrainConfig bad = run("bad");
  bad.preset.clear(), bad.init = dir + "/x.anelab";
  try {
    train::validate(bad);
    ADD_FAILURE() << "--shape without --preset accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[train] --shape {", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(": goes with --preset NAME"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// LoRA on Qwen3.5 (train/lora.h): adapters on the Gated DeltaNet's five projections (lin_qkv lin_z lin_b lin_a
// lin_out) next to those of the gated attention and the MLP, the base frozen, against the same float64 oracle
// (qwen35_reference.py --train DIR lora_grads: autograd through W + (alpha / r) B·A). Bounds as above: the adapter
// gradients are the same fp32 chains (an adapter's dB is dyᵀ (x Aᵀ) of its projection's dy, dA = Bᵀ dy x), so a
// relative L2 of 1e-4 per tensor and 1e-5 on the loss; B starts away from zero (U(±0.1)) so that every dA is.
void qwen35_check_lora_grads(const std::string& targets, const std::string& tag) {
  const models::ModelConfig cfg = qwen35_small_config();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = qwen35_train_init(layout, 36);
  train::LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.targets = train::parse_lora_targets(targets);
  const train::LoraLayout ll(cfg, lc);
  const auto [a, b] = test::lora_grad_case(ll, 2, 16, cfg.vocab_size);
  train::CpuModel model(layout);
  std::vector<float> ga(a.size(), 0.0f);
  const train::LoraStep st{&ll, a.data(), ga.data(), 0, 0, true};
  model.set_lora(&st);
  const double loss = model.forward_backward(w.data(), b, 1.0f, nullptr);  // no base gradient buffer at all
  const auto dir = test::temp_dir("qwen35_lora_" + tag).string();
  std::filesystem::create_directories(dir + "/lora");
  for (const auto& p : ll.params()) write_npy(dir + "/lora/" + p.name + ".npy", p.shape, a.data() + p.offset);
  const nlohmann::json optim = {{"lora", {{"rank", lc.rank}, {"alpha", lc.alpha}}}};
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir, layout, w, {b}, optim, "lora_grads", &log, kQwen35Oracle)) << log;
  const double ref_loss = read_npy(dir + "/out/loss.npy").data.at(0);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
  double worst = 0;
  int64_t lin = 0;
  for (const auto& p : ll.params()) {
    const NpyArray ref = read_npy(dir + "/out/grad." + p.name + ".npy");
    ASSERT_EQ(ref.numel(), p.numel) << p.name;
    const double e = test::rel_err(ga.data() + p.offset, ref.data.data(), p.numel);
    worst = std::max(worst, e);
    lin += p.name.find(".lin_") != std::string::npos;
    EXPECT_LT(e, 1e-4) << p.name;
  }
  std::printf(
      "[qwen35 lora %s] %zu adapter tensors (%lld on DeltaNet projections), loss %.6f vs float64 %.6f, worst "
      "relative L2 %.2e\n",
      tag.c_str(), ll.params().size(), static_cast<long long>(lin), loss, ref_loss, worst);
  std::filesystem::remove_all(dir);
}

// Every target (the default of --lora-targets): 3 DeltaNet layers x 5 + the attention layer's 4 + 4 MLPs x 3.
TEST(TrainQwen35, LoraGradientsMatchAutogradFloat64) {
  EXPECT_EQ(train::TrainConfig{}.lora_targets, train::kLoraAllTargets);
  qwen35_check_lora_grads(train::kLoraAllTargets, "all");
}

// The DeltaNet projections alone: the backward stops in layer 0's DeltaNet step (the lowest adapter), computing its
// adapters' gradients but no input gradient.
TEST(TrainQwen35, LoraDeltaNetGradientsMatchAutogradFloat64) {
  qwen35_check_lora_grads("lin_qkv,lin_z,lin_b,lin_a,lin_out", "deltanet");
}

// `anelab train --lora` (default targets) on the small Qwen3.5: 3 steps train the DeltaNet adapters too; `export
// --adapter` as PEFT and as GGUF reads back to the run's adapters bit for bit (GGUF: through the tiled value-head
// order), and either merged into the base at load equals the run's merged checkpoint (what `export --fuse` writes)
// tensor for tensor.
TEST(TrainQwen35, LoraRunExportsDeltaNetAdaptersThatMergeToTheFusedModel) {
  const models::ModelConfig cfg = qwen35_small_config();
  const auto dir = test::temp_dir("qwen35_lora_run").string();
  train::TrainConfig c;
  c.init = dir + "/init.anelab", c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5);
  models::write_random_model(cfg, c.init, 11);
  c.run_dir = dir + "/run", c.run = "lora", c.steps = 3, c.batch_size = 2, c.seq_len = 16, c.lr = 1e-2;
  c.warmup_steps = 1, c.batching = "sequential", c.eval_batches = 0, c.lora = true, c.lora_rank = 4;
  train::validate(c);
  train::run_training(c, {false, false});
  train::LoraConfig lc;
  lc.rank = 4, lc.alpha = c.lora_alpha, lc.targets = train::parse_lora_targets(c.lora_targets);
  const train::LoraLayout ll(cfg, lc);
  std::vector<float> aw, am, av;
  train::read_lora_state(c.run_dir + "/last.lora", ll, &aw, &am, &av);
  const models::LoraAdapter want = train::to_lora_adapter(ll, aw.data(), c.init);
  int64_t lin = 0;
  for (const auto& p : want.pairs)
    if (p.tensor.find(".ssm_") != std::string::npos)
      lin += std::any_of(p.b.begin(), p.b.end(), [](float v) { return v != 0.0f; });
  EXPECT_EQ(lin, 3 * 5);  // every DeltaNet adapter's B moved off its zero init
  train::export_run_adapter(c.run_dir, dir + "/peft");
  train::export_run_adapter(c.run_dir, dir + "/a.gguf");
  const models::Model fused = models::load_any_model(c.run_dir);
  for (const std::string f : {"/peft", "/a.gguf"}) {
    const models::LoraAdapter r = models::read_lora_adapter(dir + f, cfg);
    ASSERT_EQ(r.pairs.size(), want.pairs.size()) << f;
    for (size_t i = 0; i < r.pairs.size(); ++i) {
      const auto it = std::find_if(want.pairs.begin(), want.pairs.end(),
                                   [&](const models::LoraPair& p) { return p.tensor == r.pairs[i].tensor; });
      ASSERT_NE(it, want.pairs.end()) << f << " " << r.pairs[i].tensor;
      EXPECT_TRUE(it->a == r.pairs[i].a && it->b == r.pairs[i].b) << f << " " << it->tensor;
    }
    models::Model base = models::load_any_model(c.init);
    models::merge_lora(base, r, 1.0f);
    for (const auto& t : fused.tensors()) EXPECT_TRUE(t.to_f32() == base.tensor(t.name).to_f32()) << f << " " << t.name;
  }
  std::filesystem::remove_all(dir);
}

// Adapter dropout on the DeltaNet projections too (each adapted projection its own counter-based mask): a run of 6
// steps and one stopped after 3 and resumed end with the same adapters bit for bit and the same losses.
TEST(TrainQwen35, LoraWithDropoutResumesBitExact) {
  const models::ModelConfig cfg = qwen35_small_config();
  const auto dir = test::temp_dir("qwen35_lora_resume").string();
  train::TrainConfig c;
  c.init = dir + "/init.anelab", c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5);
  models::write_random_model(cfg, c.init, 11);
  c.run_dir = dir + "/run", c.run = "lora", c.steps = 6, c.batch_size = 2, c.seq_len = 16, c.lr = 1e-2;
  c.warmup_steps = 1, c.eval_batches = 0, c.lora = true, c.lora_rank = 4, c.lora_dropout = 0.1;
  test::expect_lora_resume_bit_exact(c, 3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

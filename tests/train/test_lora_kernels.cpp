// `train --lora --strategy static | dynamic` (train/kernel_engine.h, make_kernel_lora_engine) on the emulator backend:
// the base baked into the kernels (static) or staged into their weight bands (dynamic) once, the adapters A [r, in] /
// B [out, r] staged into input bands of every weight-bearing kernel (y = W x + s·B(A x) in MIL, Wᵀ + s·AᵀBᵀ in the
// backward kernels).
//
// Gradients of A and B against the CPU strategy's LoRA gradients (train/cpu_model.h with a LoraStep: itself checked
// against PyTorch in test_lora.cpp), same model, same batch, every target module. Tolerance: the NMSE bound 1e-4 of
// the full-training kernels (test_kernel_engine.cpp: every kernel output is fp16-rounded, k ~ 10..300 independent
// roundings on a path give NMSE ~k·u²/3 = 1e-6 .. 2.5e-5; a missing or wrong term gives >= 1e-2). The adapters'
// products add a few more roundings per path (A x, B(A x), s·...: fp16 in the kernel) — the same order. With adapter
// dropout (p = 0.1) the kernels read the CPU strategy's masks (lora_dropout_stream) as 0 / 1 bands (exact in fp16)
// and fold 1/(1-p) into the one scale constant s/(1-p), which fp16 rounds once (relative 2^-11 at most on the
// adapters' term: NMSE <= 2.5e-7 from it); masks other than the CPU's move the gradients by NMSE >= 1e-2 (checked).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/core/error.h"
#include "framework/kernels/train.h"
#include "framework/runtime/device_profile.h"
#include "models/formats/anelab_file.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/kernel_engine.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

train::LoraLayout lorak_layout(const models::ModelConfig& cfg, int64_t rank, double dropout = 0) {
  train::LoraConfig lc;
  lc.rank = rank, lc.alpha = 2.0 * double(rank), lc.dropout = dropout;
  lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
  return train::LoraLayout(cfg, lc);
}

// A model, its base weights, rank-4 adapters on every target (B away from its zero init, so dA and the adapters'
// forward are not zero) and one batch of B random sequences of T tokens.
struct LorakCase {
  train::ParamLayout layout;
  std::vector<float> w;  // [P] the base
  train::LoraLayout ll;
  std::vector<float> a;  // the adapters (LoraLayout's flat buffer)
  train::Batch b;
};
LorakCase lorak_case(const models::ModelConfig& cfg, int64_t B, int64_t T, double dropout = 0) {
  LorakCase c{train::ParamLayout(cfg), {}, lorak_layout(cfg, 4, dropout), {}, {}};
  c.w = test::init_with_norm_noise(c.layout, 7);
  test::LoraGradCase g = test::lora_grad_case(c.ll, B, T, cfg.vocab_size);
  c.a = std::move(g.a), c.b = std::move(g.b);
  return c;
}

constexpr float kLorakScale = 256.0f;  // the default static:256 loss scale, as the trainer calls the engines

// The dropout stream of the cases with dropout: LoraStep{kLorakSeed, kLorakMicro} (not 0: both reach the masks).
constexpr uint64_t kLorakSeed = 42, kLorakMicro = 5;

std::unique_ptr<train::StepEngine> lorak_engine(const std::string& strategy, const LorakCase& c) {
  train::KernelEngineOptions o;
  o.strategy = strategy, o.seq_len = c.b.T;
  return train::make_kernel_lora_engine(o, c.layout, c.w.data(), c.ll, kLorakSeed, [] { return kLorakMicro; });
}

// Multiplies every layer tensor of the base by 2 in place (the embedding, final norm and classifier, which the CPU
// head reads from the base at every call, stay).
void lorak_scribble_layers(LorakCase& c) {
  for (const auto& p : c.layout.params())
    if (p.name.rfind("layers.", 0) == 0)
      for (int64_t i = 0; i < p.numel; ++i) c.w[size_t(p.offset + i)] *= 2.0f;
}

void lorak_check_grads(const models::ModelConfig& cfg, int64_t B, int64_t T, const std::string& strategy,
                       const std::string& tag, double dropout = 0) {
  LorakCase c = lorak_case(cfg, B, T, dropout);
  train::CpuModel cpu(c.layout);
  std::vector<float> ref(c.a.size(), 0.0f);
  const train::LoraStep st{&c.ll, c.a.data(), ref.data(), kLorakSeed, kLorakMicro, true};
  cpu.set_lora(&st);
  const double ref_loss = cpu.forward_backward(c.w.data(), c.b, kLorakScale, nullptr);

  auto ker = lorak_engine(strategy, c);
  std::vector<float> got(c.a.size(), 0.0f);
  const double loss = ker->forward_backward(c.a.data(), c.b, kLorakScale, got.data(), nullptr);
  EXPECT_NEAR(loss, ref_loss, 1e-3 * ref_loss) << tag;
  double worst = 0;
  for (const auto& p : c.ll.params()) {
    const double r = test::rel_err(got.data() + p.offset, ref.data() + p.offset, p.numel);
    worst = std::max(worst, r * r);
    EXPECT_LT(r * r, 1e-4) << tag << " " << p.name;
  }
  std::printf("[lora %s %s] %zu adapter tensors, loss %.6f vs cpu %.6f, worst NMSE %.2e\n", strategy.c_str(),
              tag.c_str(), c.ll.params().size(), loss, ref_loss, worst);
  if (dropout > 0) {  // the CPU's gradients of other masks (the next micro-batch's) are far from the kernels'
    std::vector<float> other(c.a.size(), 0.0f);
    const train::LoraStep st2{&c.ll, c.a.data(), other.data(), kLorakSeed, kLorakMicro + 1, true};
    cpu.set_lora(&st2);
    cpu.forward_backward(c.w.data(), c.b, kLorakScale, nullptr);
    cpu.set_lora(&st);
    const double r = test::rel_err(got.data(), other.data(), int64_t(other.size()));
    std::printf("[lora %s %s] against the CPU's gradients of other masks: NMSE %.2e\n", strategy.c_str(), tag.c_str(),
                r * r);
    EXPECT_GT(r * r, 1e-2) << tag;
  }
  // A second call (new adapters: restaged, nothing recompiled) matches too. The base the kernels hold is the one of
  // the first call: weights_updated() neither recompiles (static) nor restages (dynamic) it, so scribbling over the
  // caller's layer tensors now changes nothing (the CPU reference keeps the first call's base).
  for (float& v : c.a) v *= 0.5f;
  std::fill(ref.begin(), ref.end(), 0.0f), std::fill(got.begin(), got.end(), 0.0f);
  cpu.forward_backward(c.w.data(), c.b, kLorakScale, nullptr);
  const int compiles = ker->compiles_total();
  ker->weights_updated();
  EXPECT_EQ(ker->compiles_needed(), 0) << tag;
  lorak_scribble_layers(c);
  ker->forward_backward(c.a.data(), c.b, kLorakScale, got.data(), nullptr);
  EXPECT_EQ(ker->compiles_total(), compiles) << tag;
  const double r = test::rel_err(got.data(), ref.data(), int64_t(ref.size()));
  EXPECT_LT(r * r, 1e-4) << tag << " after an update";
}

// GQA (4 query heads on 2 kv heads), Llama 3 RoPE scaling.
TEST(LoraKernels, GradientsMatchCpuLoraLlama3Gqa) {
  lorak_check_grads(test::llama3_test_config(), 2, 64, "static", "llama3");
}
// Qwen3: per-head q/k RMSNorm between the q/k adapters and the attention (dq_proj / dk_proj of qkv_bwd).
TEST(LoraKernels, GradientsMatchCpuLoraQwen3QkNorm) {
  lorak_check_grads(test::qwen3_test_config(), 2, 64, "static", "qwen3");
}
TEST(LoraKernels, DynamicGradientsMatchCpuLoraLlama3Gqa) {
  lorak_check_grads(test::llama3_test_config(), 2, 64, "dynamic", "llama3");
}
TEST(LoraKernels, DynamicGradientsMatchCpuLoraQwen3QkNorm) {
  lorak_check_grads(test::qwen3_test_config(), 2, 64, "dynamic", "qwen3");
}
// Adapter dropout p = 0.1: the kernels take the CPU strategy's masks of the same seed and micro-batch.
TEST(LoraKernels, DropoutGradientsMatchCpuLoraLlama3Gqa) {
  lorak_check_grads(test::llama3_test_config(), 2, 64, "static", "llama3 dropout", 0.1);
}
TEST(LoraKernels, DropoutGradientsMatchCpuLoraQwen3QkNorm) {
  lorak_check_grads(test::qwen3_test_config(), 2, 64, "static", "qwen3 dropout", 0.1);
}
TEST(LoraKernels, DynamicDropoutGradientsMatchCpuLoraLlama3Gqa) {
  lorak_check_grads(test::llama3_test_config(), 2, 64, "dynamic", "llama3 dropout", 0.1);
}
TEST(LoraKernels, DynamicDropoutGradientsMatchCpuLoraQwen3QkNorm) {
  lorak_check_grads(test::qwen3_test_config(), 2, 64, "dynamic", "qwen3 dropout", 0.1);
}

// Dynamic against static LoRA on the same case, bit for bit. The two kernels differ only in the base's products:
// static convolves x with the baked fp16 blob (nn.h linear: conv 1x1), dynamic multiplies x by the fp16 band of the
// input surface (linear_runtime: matmul). Both weights are the fp32 base rounded to fp16 once (round to nearest
// even), and the emulator runs conv 1x1 and matmul on the one GEMM of framework/emulator/gemm.cpp (fp32 sums over
// the input channels in the same order, the output rounded to fp16 once), so every product, and then every op
// after it (the same MIL), gives the same bits. (On the ANE the two ops may sum in other orders: then the bound is
// the fp16 kernel tolerance above, NMSE 1e-4, which test_kernel_engine.cpp checks against the CPU engine.)
// The run's wiring (as train::run_training sets it up): a LoraEngine whose steps run on the kernels draws, call after
// call, the masks the CPU LoraEngine draws (the run's seed, its micro-batch count: resumed runs start it past 0).
TEST(LoraKernels, LoraEngineOnKernelsDrawsTheCpuMasks) {
  const LorakCase c = lorak_case(test::llama3_test_config(), 2, 64, 0.1);
  constexpr uint64_t seed = 1234;
  train::LoraEngine cpu(c.layout, c.w, c.ll, seed);
  auto ker = std::make_unique<train::LoraEngine>(c.layout, c.w, c.ll, seed);
  train::KernelEngineOptions o;
  o.strategy = "dynamic", o.seq_len = c.b.T;
  ker->set_step_engine(train::make_kernel_lora_engine(o, c.layout, ker->base().dense_data(), c.ll, seed,
                                                      [le = ker.get()] { return le->micro_batches(); }));
  cpu.set_micro_batches(7), ker->set_micro_batches(7);
  for (int call = 0; call < 2; ++call) {
    std::vector<float> ref(c.a.size(), 0.0f), got(c.a.size(), 0.0f);
    cpu.forward_backward(c.a.data(), c.b, kLorakScale, ref.data(), nullptr);
    ker->forward_backward(c.a.data(), c.b, kLorakScale, got.data(), nullptr);
    const double r = test::rel_err(got.data(), ref.data(), int64_t(ref.size()));
    std::printf("[lora engine on the kernels, micro-batch %d] NMSE %.2e against the CPU LoraEngine\n", 7 + call, r * r);
    EXPECT_LT(r * r, 1e-4) << call;
  }
  EXPECT_EQ(ker->micro_batches(), 9u);
}

// With dropout (p = 0.1) too: the same mask bands in both.
TEST(LoraKernels, DynamicGradientsMatchStatic) {
  for (const auto& [cfg, tag, dropout] : {std::tuple{test::llama3_test_config(), "llama3", 0.0},
                                          {test::qwen3_test_config(), "qwen3", 0.0},
                                          {test::llama3_test_config(), "llama3 dropout", 0.1},
                                          {test::qwen3_test_config(), "qwen3 dropout", 0.1}}) {
    const LorakCase c = lorak_case(cfg, 2, 64, dropout);
    auto st = lorak_engine("static", c), dy = lorak_engine("dynamic", c);
    std::vector<float> gs(c.a.size(), 0.0f), gd(c.a.size(), 0.0f);
    const double ls = st->forward_backward(c.a.data(), c.b, kLorakScale, gs.data(), nullptr);
    const double ld = dy->forward_backward(c.a.data(), c.b, kLorakScale, gd.data(), nullptr);
    double worst = 0;
    int64_t differ = 0;
    for (size_t i = 0; i < gs.size(); ++i) differ += gs[i] != gd[i];
    for (const auto& p : c.ll.params()) {
      const double r = test::rel_err(gd.data() + p.offset, gs.data() + p.offset, p.numel);
      worst = std::max(worst, r * r);
    }
    std::printf("[lora dynamic vs static %s] loss %.9f vs %.9f, %lld of %zu values differ, worst NMSE %.2e\n", tag, ld,
                ls, (long long)differ, gs.size(), worst);
    EXPECT_EQ(ld, ls) << tag;
    EXPECT_EQ(differ, 0) << tag;
  }
}

// >= 200 steps of `train --lora --lora-dropout 0.1 --strategy S` on the emulator: ONE compile event, before the first
// step's event, with every kernel of the run (static: 2 shared + 7 per layer; dynamic: the 9 shared kernels); none
// after (new masks every step are inputs), no restart, and the loss falls. (Full static training of the same run
// compiles 7·L kernels after every update: 200 compile events.)
void lorak_run_200(const std::string& strategy, int kernels_per_layer, int shared) {
  const models::ModelConfig cfg = test::gqa_test_config();
  const auto dir = test::temp_dir("lora_" + strategy + "_200").string();
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  train::TrainConfig c;
  c.init = init, c.data = test::write_tokens(dir, 4000, cfg.vocab_size, 5), c.run_dir = dir + "/run", c.run = "l";
  c.strategy = strategy, c.steps = 200, c.batch_size = 1, c.seq_len = 64, c.lr = 1e-2, c.warmup_steps = 5;
  c.eval_batches = 0, c.batching = "sequential";
  c.lora = true, c.lora_rank = 4, c.lora_alpha = 8, c.lora_dropout = 0.1;
  train::validate(c);
  train::run_training(c, {false, false});
  const auto compiles = test::read_events(c.run_dir, "compile");
  const auto steps = test::read_events(c.run_dir, "step");
  const int all = shared + kernels_per_layer * int(cfg.n_layers);
  ASSERT_EQ(compiles.size(), 1u) << strategy;
  EXPECT_EQ(compiles[0]["kernels"].get<int>(), all) << strategy;
  EXPECT_EQ(compiles[0]["step"].get<int64_t>(), 0) << strategy;  // emitted before step 1's event: no step done yet
  EXPECT_EQ(steps.front()["step"].get<int64_t>(), 1) << strategy;
  EXPECT_EQ(compiles[0]["compiles_total"].get<int>(), all) << strategy;
  EXPECT_EQ(steps.back()["step"].get<int64_t>(), 200) << strategy;
  EXPECT_EQ(steps.size(), 200u) << strategy;
  EXPECT_TRUE(test::read_events(c.run_dir, "restart").empty()) << strategy;
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>()) << strategy;
  std::filesystem::remove_all(dir);
}
TEST(LoraKernels, StaticCompilesOnceOver200Steps) { lorak_run_200("static", 7, 2); }
TEST(LoraKernels, DynamicCompilesOnceOver200Steps) { lorak_run_200("dynamic", 0, 9); }

// A model whose static LoRA needs more compiles than the device profile's budget (2 + 7·L > budget, the emulator's
// default profile): static refuses before its first compile in one line naming what it needs and what dynamic
// needs; dynamic trains it (9 compiles, once) without a restart.
TEST(LoraKernels, OverBudgetModelTrainsOnDynamic) {
  models::ModelConfig cfg = test::gqa_test_config();
  const train::ParamLayout probe_layout(cfg);
  const int budget = train::make_kernel_engine(train::KernelEngineOptions{}, probe_layout)->budget();
  ASSERT_GT(budget, 9);
  cfg.n_layers = budget / 7 + 1;  // 2 + 7·L > budget
  const int need = 2 + 7 * int(cfg.n_layers);
  const auto dir = test::temp_dir("lora_over_budget").string();
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  train::TrainConfig c;
  c.init = init, c.data = test::write_tokens(dir, 2000, cfg.vocab_size, 5), c.run = "l";
  c.steps = 10, c.batch_size = 1, c.seq_len = 64, c.lr = 1e-2, c.eval_batches = 0, c.batching = "sequential";
  c.lora = true, c.lora_rank = 4, c.lora_alpha = 8;
  c.strategy = "static", c.run_dir = dir + "/static";
  train::validate(c);
  try {
    train::run_training(c, {false, false});
    ADD_FAILURE() << "static LoRA with " << need << " compiles over the budget " << budget << " ran";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("[lora over budget, L=%lld] %s\n", (long long)cfg.n_layers, m.c_str());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(cat("need ", need, " compiles")), std::string::npos) << m;
    EXPECT_NE(m.find("--strategy dynamic compiles 9 and fits"), std::string::npos) << m;
  }
  EXPECT_TRUE(test::read_events(c.run_dir, "compile").empty());  // refused before compiling anything
  c.strategy = "dynamic", c.run_dir = dir + "/dynamic";
  train::validate(c);
  train::run_training(c, {false, false});
  const auto compiles = test::read_events(c.run_dir, "compile");
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(compiles[0]["kernels"].get<int>(), 9);
  EXPECT_EQ(compiles[0]["budget"].get<int>(), budget);
  EXPECT_EQ(test::read_events(c.run_dir, "step").size(), 10u);
  EXPECT_TRUE(test::read_events(c.run_dir, "restart").empty());
  std::filesystem::remove_all(dir);
}

// The LoRA bands of the Qwen2.5-0.5B layer shape (D 896, H 4864, 14 / 2 heads of 64, r 8, every target) on the
// dynamic kernels: they leave the surface's channels as they are, and where a band's in / out rows fit them it is r
// columns wide: the backward kernels (whose surfaces are as high as every in / out they multiply) grow by 2r columns
// per adapted projection, rounded up to the device's row multiple. (Bands r rows high would widen ffn_bwd by
// 3·(896 + 4864) columns of 4864 channels: 168 MB per layer.)
TEST(LoraKernels, LoraBandsAreUprightWhereTheyFit) {
  kern::TrainShape s;
  s.dim = 896, s.hidden = 4864, s.n_heads = 14, s.n_kv_heads = 2, s.head_dim = 64, s.seq = 64, s.rope_theta = 1e6;
  kern::TrainShape l = s;
  l.lora_rank = 8, l.lora_scale = 2, l.lora_targets = {"wq", "wk", "wv", "wo", "w1", "w3", "w2"};
  const int64_t m = rt::dense_width_multiple(mil::DType::kFp16);
  for (const auto& [kind, n] : {std::pair{kern::KernelKind::kFfnBwd, 3},
                                {kern::KernelKind::kWoBwd, 1},
                                {kern::KernelKind::kQkvBwd, 3},
                                {kern::KernelKind::kAttnFwd, 4},
                                {kern::KernelKind::kFfnFwd, 3}}) {
    const kern::KernelSpec base = kern::build_kernel(kind, s, kern::Strategy::kDynamic);
    const kern::KernelSpec lora = kern::build_kernel(kind, l, kern::Strategy::kDynamic);
    EXPECT_EQ(lora.in.channels(), base.in.channels()) << lora.name;
    int64_t bands = 0;
    for (const kern::WeightSlot& ws : lora.weight_slots)
      if (!kern::lora_slot_weight(ws).empty()) ++bands;
    EXPECT_EQ(bands, 2 * n) << lora.name;
    if (kind == kern::KernelKind::kAttnFwd || kind == kern::KernelKind::kFfnFwd) continue;  // some bands r rows high
    EXPECT_LE(lora.in.spatial(), (base.in.spatial() + 2 * 8 * n + m - 1) / m * m) << lora.name;
    std::printf("[lora bands %s] surface [%lld, %lld] -> [%lld, %lld]\n", lora.name.c_str(),
                (long long)base.in.channels(), (long long)base.in.spatial(), (long long)lora.in.channels(),
                (long long)lora.in.spatial());
  }
}

// The dropout masks' bands of the same shape (p = 0.1, S = 256): one per adapted projection of a kernel, S columns wide
// where the projection's input fits the surface's channels, else S rows high (m01ᵀ, transposed back in MIL): the
// channels stay those of the surface without masks (an upright band of W2's input [H, S] would raise ffn_fwd's from
// 896 to 4864).
TEST(LoraKernels, DropoutMaskBandsKeepTheChannels) {
  kern::TrainShape s;
  s.dim = 896, s.hidden = 4864, s.n_heads = 14, s.n_kv_heads = 2, s.head_dim = 64, s.seq = 256, s.rope_theta = 1e6;
  s.lora_rank = 8, s.lora_scale = 2, s.lora_targets = {"wq", "wk", "wv", "wo", "w1", "w3", "w2"};
  kern::TrainShape d = s;
  d.lora_dropout = 0.1;
  int64_t mask_values = 0;  // per layer and sequence, each staged into a forward and a backward kernel
  for (const auto& [kind, n] : {std::pair{kern::KernelKind::kAttnFwd, 4},
                                {kern::KernelKind::kFfnFwd, 3},
                                {kern::KernelKind::kFfnBwd, 3},
                                {kern::KernelKind::kWoBwd, 1},
                                {kern::KernelKind::kQkvBwd, 3}}) {
    const kern::KernelSpec base = kern::build_kernel(kind, s, kern::Strategy::kDynamic);
    const kern::KernelSpec drop = kern::build_kernel(kind, d, kern::Strategy::kDynamic);
    EXPECT_TRUE(base.lora_masks.empty()) << base.name;
    ASSERT_EQ(drop.lora_masks.size(), size_t(n)) << drop.name;
    EXPECT_EQ(drop.in.channels(), base.in.channels()) << drop.name;
    int64_t values = 0;
    for (const kern::WeightSlot& ws : drop.lora_masks) {
      const mil::IOSlot& b = drop.in.slot(ws.slot);
      EXPECT_EQ(ws.transposed ? b.channels : b.spatial, s.seq) << drop.name << " " << ws.slot;
      EXPECT_EQ(ws.transposed ? b.spatial : b.channels, ws.weight == "w2" ? s.hidden : s.dim) << drop.name;
      values += b.channels * b.spatial;
    }
    mask_values += values;
    std::printf("[lora dropout bands %s] %zu masks, %lld values; surface [%lld, %lld] -> [%lld, %lld]\n",
                drop.name.c_str(), drop.lora_masks.size(), (long long)values, (long long)base.in.channels(),
                (long long)base.in.spatial(), (long long)drop.in.channels(), (long long)drop.in.spatial());
  }
  // q k v o gate up: D inputs, down: H; each mask in one forward and one backward kernel
  EXPECT_EQ(mask_values, 2 * (6 * s.dim + s.hidden) * s.seq);
}

// 6 steps == 3 + --resume + 3 on the kernels, bit for bit, with dropout (2 sequences per micro-batch, 2 micro-batches
// per step: the masks' stream continues at the resumed run's micro-batch).
TEST(LoraKernels, ResumeIsBitExactWithDropout) {
  for (const char* strategy : {"static", "dynamic"}) {
    const models::ModelConfig cfg = test::gqa_test_config();
    const auto dir = test::temp_dir(std::string("lora_resume_") + strategy).string();
    const std::string init = dir + "/init.anelab";
    models::write_random_model(cfg, init, 11);
    train::TrainConfig c;
    c.init = init, c.data = test::write_tokens(dir, 4000, cfg.vocab_size, 5), c.run_dir = dir + "/run", c.run = "l";
    c.strategy = strategy, c.steps = 6, c.batch_size = 2, c.accum_steps = 2, c.seq_len = 64, c.lr = 1e-2;
    c.warmup_steps = 1, c.eval_batches = 0, c.batching = "random";
    c.lora = true, c.lora_rank = 4, c.lora_alpha = 8, c.lora_dropout = 0.1;
    test::expect_lora_resume_bit_exact(c, 3);
    std::filesystem::remove_all(dir);
  }
}

// The kernel strategies take --lora with adapter dropout; a dropout outside [0, 1) is refused on every strategy.
TEST(LoraKernels, KernelStrategiesTakeLoraDropout) {
  for (const char* strategy : {"cpu", "static", "dynamic"}) {
    train::TrainConfig c;
    c.preset = "stories260k", c.data = "x.bin", c.lora = true, c.strategy = strategy;
    c.lora_dropout = 0.1;
    EXPECT_NO_THROW(train::validate(c)) << strategy;
    for (double bad : {1.0, -0.1}) {
      c.lora_dropout = bad;
      try {
        train::validate(c);
        ADD_FAILURE() << "no error for " << strategy << " --lora-dropout " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--lora-dropout"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace anelab

// `train --lora --strategy static` (train/kernel_engine.h, make_kernel_lora_engine) on the emulator backend: the
// base baked into the kernels once, the adapters A [r, in] / B [out, r] staged into input bands of every
// weight-bearing kernel (y = W x + s·B(A x) in MIL, Wᵀ + s·AᵀBᵀ in the backward kernels).
//
// Gradients of A and B against the CPU strategy's LoRA gradients (train/cpu_model.h with a LoraStep: itself checked
// against PyTorch in test_lora.cpp), same model, same batch, every target module. Tolerance: the NMSE bound 1e-4 of
// the full-training kernels (test_kernel_engine.cpp: every kernel output is fp16-rounded, k ~ 10..300 independent
// roundings on a path give NMSE ~k·u²/3 = 1e-6 .. 2.5e-5; a missing or wrong term gives >= 1e-2). The adapters'
// products add a few more roundings per path (A x, B(A x), s·...: fp16 in the kernel) — the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "framework/core/error.h"
#include "models/formats/anelab_file.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/kernel_engine.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

train::LoraLayout lorak_layout(const models::ModelConfig& cfg, int64_t rank) {
  train::LoraConfig lc;
  lc.rank = rank, lc.alpha = 2.0 * double(rank);
  lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
  return train::LoraLayout(cfg, lc);
}

void lorak_check_grads(const models::ModelConfig& cfg, int64_t B, int64_t T, const std::string& tag) {
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = test::init_with_norm_noise(layout, 7);
  const train::LoraLayout ll = lorak_layout(cfg, 4);
  std::vector<float> a = train::lora_init(ll, 3);
  train::Rng rng{17};
  for (const auto& s : ll.slots())  // B away from its zero init, so dA and the adapters' forward are not zero
    for (int64_t i = 0; i < s.out * ll.lora().rank; ++i)
      a[size_t(s.b + i)] = float((double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1) * 0.1);
  train::Batch b{B, T, std::vector<int32_t>(size_t(B * (T + 1)))};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(cfg.vocab_size));

  constexpr float kScale = 256.0f;  // the default static:256 loss scale, as the trainer calls the engines
  train::CpuModel cpu(layout);
  std::vector<float> ref(a.size(), 0.0f);
  const train::LoraStep st{&ll, a.data(), ref.data(), 0, 0, true};
  cpu.set_lora(&st);
  const double ref_loss = cpu.forward_backward(w.data(), b, kScale, nullptr);

  train::KernelEngineOptions o;
  o.strategy = "static", o.seq_len = T;
  auto ker = train::make_kernel_lora_engine(o, layout, w.data(), ll);
  std::vector<float> got(a.size(), 0.0f);
  const double loss = ker->forward_backward(a.data(), b, kScale, got.data(), nullptr);
  EXPECT_NEAR(loss, ref_loss, 1e-3 * ref_loss) << tag;
  double worst = 0;
  for (const auto& p : ll.params()) {
    const double r = test::rel_err(got.data() + p.offset, ref.data() + p.offset, p.numel);
    worst = std::max(worst, r * r);
    EXPECT_LT(r * r, 1e-4) << tag << " " << p.name;
  }
  std::printf("[lora static %s] %zu adapter tensors, loss %.6f vs cpu %.6f, worst NMSE %.2e\n", tag.c_str(),
              ll.params().size(), loss, ref_loss, worst);
  // A second call (new adapters: restaged, nothing recompiled) matches too.
  for (float& v : a) v *= 0.5f;
  std::fill(ref.begin(), ref.end(), 0.0f), std::fill(got.begin(), got.end(), 0.0f);
  const int compiles = ker->compiles_total();
  ker->weights_updated();
  EXPECT_EQ(ker->compiles_needed(), 0) << tag;
  cpu.forward_backward(w.data(), b, kScale, nullptr);
  ker->forward_backward(a.data(), b, kScale, got.data(), nullptr);
  EXPECT_EQ(ker->compiles_total(), compiles) << tag;
  const double r = test::rel_err(got.data(), ref.data(), int64_t(ref.size()));
  EXPECT_LT(r * r, 1e-4) << tag << " after an update";
}

// GQA (4 query heads on 2 kv heads), Llama 3 RoPE scaling.
TEST(LoraKernels, GradientsMatchCpuLoraLlama3Gqa) { lorak_check_grads(test::llama3_test_config(), 2, 64, "llama3"); }
// Qwen3: per-head q/k RMSNorm between the q/k adapters and the attention (dq_proj / dk_proj of qkv_bwd).
TEST(LoraKernels, GradientsMatchCpuLoraQwen3QkNorm) { lorak_check_grads(test::qwen3_test_config(), 2, 64, "qwen3"); }

// >= 200 steps of `train --lora --strategy static` on the emulator: ONE compile event, before the first step's
// event, with every kernel of the run (2 shared + 7 per layer); none after, no restart, and the loss falls. (Full
// static training of the same run compiles 7·L kernels after every update: 200 compile events.)
TEST(LoraKernels, StaticCompilesOnceOver200Steps) {
  const models::ModelConfig cfg = test::gqa_test_config();
  const auto dir = test::temp_dir("lora_static_200").string();
  const std::string init = dir + "/init.anelab";
  models::write_random_model(cfg, init, 11);
  train::TrainConfig c;
  c.init = init, c.data = test::write_tokens(dir, 4000, cfg.vocab_size, 5), c.run_dir = dir + "/run", c.run = "l";
  c.strategy = "static", c.steps = 200, c.batch_size = 1, c.seq_len = 64, c.lr = 1e-2, c.warmup_steps = 5;
  c.eval_batches = 0, c.batching = "sequential";
  c.lora = true, c.lora_rank = 4, c.lora_alpha = 8;
  train::validate(c);
  train::run_training(c, {false, false});
  const auto compiles = test::read_events(c.run_dir, "compile");
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(compiles[0]["kernels"].get<int>(), 2 + 7 * int(cfg.n_layers));
  EXPECT_EQ(compiles[0]["step"].get<int64_t>(), 0);  // emitted before step 1's event: no step done yet
  EXPECT_EQ(steps.front()["step"].get<int64_t>(), 1);
  EXPECT_EQ(compiles[0]["compiles_total"].get<int>(), 2 + 7 * int(cfg.n_layers));
  EXPECT_EQ(steps.back()["step"].get<int64_t>(), 200);
  EXPECT_EQ(steps.size(), 200u);
  EXPECT_TRUE(test::read_events(c.run_dir, "restart").empty());
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>());
  std::filesystem::remove_all(dir);
}

// --strategy static takes --lora (the dynamic refusal: test_lora.cpp), not adapter dropout.
TEST(LoraKernels, StaticTakesLoraWithoutDropout) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = "x.bin", c.lora = true, c.strategy = "static";
  EXPECT_NO_THROW(train::validate(c));
  c.lora_dropout = 0.1;
  try {
    train::validate(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lora-dropout"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anelab

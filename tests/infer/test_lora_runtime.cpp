// Runtime LoRA adapters of the CPU engine (Engine::add_lora, the server's per-request adapters): y = W x +
// c * (alpha / r) * B (A x) next to the base products, never merged. On stories260K (fp32):
//   - scale 0 (the default) gives the base's logits bit for bit;
//   - scale 1 gives the merged model's (models::merge_lora, what `export --fuse` writes) within fp32 rounding;
//   - two slots with different adapters in one batched decode step each give their single-sequence logits bit for bit;
//   - with the emulator prefill backend a slot with a nonzero scale prefills on the CPU (the MIL kernels hold the base
//     alone), one with every scale 0 on the MIL kernels;
//   - an adapter that does not fit the model, and a scale that is not finite, are refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/load.h"
#include "models/arch/tensors.h"
#include "models/io/adapter.h"
#include "tests/common/lora_adapter.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {

models::LoraAdapter lora_rt_adapter(const models::ModelConfig& c, int64_t rank, uint64_t seed) {
  return test::seeded_lora_adapter(c, rank, 2.0f * float(rank), seed, 0.2f);
}

// stories260K as loaded by `infer` (fp32), optionally with `merge` merged at scale 1; null when the data is absent.
std::unique_ptr<infer::Engine> lora_rt_engine(const models::LoraAdapter* merge, int64_t slots = 1,
                                              const std::string& backend = "cpu") {
  const std::string path = test::data_path("llama2c/stories260K.bin");
  if (!std::filesystem::exists(path)) return nullptr;
  infer::LoadOptions o;
  o.model = path, o.quiet = true;
  infer::LoadedModel l = infer::load_model(o, infer::TokenizerUse::kNone);
  if (merge) models::merge_lora(l.model, *merge, 1.0f);
  l.engine.quiet = true, l.engine.backend = backend, l.engine.slots = slots;
  l.engine.dtype = quant::WType::kF32;
  return std::make_unique<infer::Engine>(std::move(l.model), l.engine);
}

const std::vector<int32_t> kLoraRtPrompt = {1, 403, 407, 261, 378, 290, 500, 13};
const std::vector<int32_t> kLoraRtNext = {303, 262, 411, 290};

// The prefill's logits of every prompt position, then those of each decode step of kLoraRtNext.
std::vector<float> lora_rt_logits(infer::Engine& e) {
  std::vector<float> all;
  e.prefill(kLoraRtPrompt, 0, &all);
  const int64_t V = e.config().vocab_size;
  for (size_t i = 0; i < kLoraRtNext.size(); ++i) {
    const float* l = e.decode(kLoraRtNext[i], int64_t(kLoraRtPrompt.size() + i));
    all.insert(all.end(), l, l + V);
  }
  return all;
}

double lora_rt_rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]), n += double(ref[i]) * ref[i];
  return std::sqrt(d / n);
}

TEST(LoraRuntime, ScaleZeroIsTheBaseAndScaleOneTheMergedModel) {
  auto base = lora_rt_engine(nullptr);
  if (!base) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  const models::LoraAdapter a = lora_rt_adapter(base->config(), 4, 12345);
  const std::vector<float> want_base = lora_rt_logits(*base);
  auto merged = lora_rt_engine(&a);
  const std::vector<float> want_merged = lora_rt_logits(*merged);

  auto e = lora_rt_engine(nullptr);
  EXPECT_EQ(e->add_lora(a), 0);
  EXPECT_TRUE(lora_rt_logits(*e) == want_base) << "scale 0 (the default) must compute the base's bits";
  e->set_lora_scales(0, std::vector<float>{1.0f});
  const std::vector<float> got = lora_rt_logits(*e);
  // fp32 both ways: (W + k·B·A) x rounds W + k·B·A once per weight (2^-24 relative) and sums `in` products, W x +
  // k·B(A x) rounds two shorter sums; each dot of <= 172 terms carries ~sqrt(172)·2^-24 ≈ 8e-7 relative, through 5
  // layers and the head a few 1e-6. Bound 1e-5 (the adapter moves the logits by far more: see the last check).
  const double rel = lora_rt_rel_l2(got, want_merged);
  std::printf("[lora runtime] scale 1 vs merged: relative L2 %.2e over %zu logits\n", rel, got.size());
  EXPECT_LE(rel, 1e-5);
  e->set_lora_scales(0, std::vector<float>{0.99f});
  EXPECT_GT(lora_rt_rel_l2(lora_rt_logits(*e), want_merged), 1e-5) << "the bound would not see a 1 % scale error";
  e->set_lora_scales(0, std::vector<float>{0.0f});
  EXPECT_TRUE(lora_rt_logits(*e) == want_base);
}

TEST(LoraRuntime, TwoSlotsWithDifferentAdaptersInOneBatchEachEqualTheirSingleSequence) {
  auto single = lora_rt_engine(nullptr);
  if (!single) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  const models::ModelConfig& c = single->config();
  const models::LoraAdapter a = lora_rt_adapter(c, 4, 12345), b = lora_rt_adapter(c, 8, 777);
  single->add_lora(a), single->add_lora(b);
  const std::vector<float> mix[2] = {{1.0f, 0.0f}, {0.25f, -0.5f}};
  const std::vector<int32_t> prompts[2] = {kLoraRtPrompt, {1, 290, 262, 500, 403}};
  const int64_t V = c.vocab_size, steps = int64_t(kLoraRtNext.size());
  std::vector<float> alone[2];  // per slot: its decode steps' logits, one sequence at a time
  for (int s = 0; s < 2; ++s) {
    single->set_lora_scales(0, mix[s]);
    single->prefill(prompts[s], 0);
    for (int64_t i = 0; i < steps; ++i) {
      const float* l = single->decode(kLoraRtNext[size_t(i)], int64_t(prompts[s].size()) + i);
      alone[s].insert(alone[s].end(), l, l + V);
    }
  }
  EXPECT_FALSE(alone[0] == alone[1]);
  auto e = lora_rt_engine(nullptr, 2);
  e->add_lora(a), e->add_lora(b);
  for (int s = 0; s < 2; ++s) {
    e->set_lora_scales(s, mix[s]);
    e->use_slot(s);
    e->prefill(prompts[s], 0);
  }
  for (int64_t i = 0; i < steps; ++i) {
    const int32_t tok[2] = {kLoraRtNext[size_t(i)], kLoraRtNext[size_t(i)]};
    const int64_t pos[2] = {int64_t(prompts[0].size()) + i, int64_t(prompts[1].size()) + i}, slots[2] = {0, 1};
    const float* l = e->decode_batch(tok, pos, slots);
    for (int s = 0; s < 2; ++s)
      EXPECT_TRUE(std::equal(l + s * V, l + (s + 1) * V, alone[s].begin() + i * V))
          << "slot " << s << " step " << i << " differs from its single-sequence decode";
  }
}

TEST(LoraRuntime, TheMilPrefillServesOnlySlotsWithoutAdapters) {
  auto cpu = lora_rt_engine(nullptr);
  if (!cpu) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  const models::LoraAdapter a = lora_rt_adapter(cpu->config(), 4, 12345);
  cpu->add_lora(a);
  cpu->set_lora_scales(0, std::vector<float>{1.0f});
  std::vector<float> want;
  cpu->prefill(kLoraRtPrompt, 0, &want);
  auto emu = lora_rt_engine(nullptr, 1, "emulator");
  emu->add_lora(a);
  emu->prefill(kLoraRtPrompt, 0);
  EXPECT_EQ(emu->last_prefill().path, "emulator");  // scale 0: the base, on the kernels
  emu->set_lora_scales(0, std::vector<float>{1.0f});
  std::vector<float> got;
  emu->prefill(kLoraRtPrompt, 0, &got);
  EXPECT_EQ(emu->last_prefill().path, "cpu");
  EXPECT_TRUE(got == want) << "a slot with an adapter must prefill with it";
}

// Qwen3.5 (the tiny Hugging Face fixture, f32 engine) with runtime adapters on every projection, the Gated DeltaNet's
// five among them: scale 0 is the base bit for bit, scale 1 the merged model within fp32 rounding (the bound above:
// dots of <= 96 terms through 4 layers and the delta rule's per-token state updates, each a few 2^-24 relative), and
// the DeltaNet adapters alone move the logits by far more than that bound.
TEST(LoraRuntime, Qwen35DeltaNetAdaptersAtScaleOneAreTheMergedModel) {
  auto engine = [](const models::LoraAdapter* merge) {
    infer::LoadOptions o;
    o.model = test::source_path("tests/fixtures/hf/qwen35_bf16"), o.quiet = true;
    infer::LoadedModel l = infer::load_model(o, infer::TokenizerUse::kNone);
    if (merge) models::merge_lora(l.model, *merge, 1.0f);
    l.engine.quiet = true, l.engine.backend = "cpu", l.engine.dtype = quant::WType::kF32;
    return std::make_unique<infer::Engine>(std::move(l.model), l.engine);
  };
  auto base = engine(nullptr);
  const models::LoraAdapter a = lora_rt_adapter(base->config(), 4, 4242);
  const std::vector<float> want_base = lora_rt_logits(*base);
  const std::vector<float> want_merged = lora_rt_logits(*engine(&a));
  auto e = engine(nullptr);
  e->add_lora(a);
  EXPECT_TRUE(lora_rt_logits(*e) == want_base);
  e->set_lora_scales(0, std::vector<float>{1.0f});
  const double rel = lora_rt_rel_l2(lora_rt_logits(*e), want_merged);
  std::printf("[lora runtime qwen35] scale 1 vs merged: relative L2 %.2e\n", rel);
  EXPECT_LE(rel, 1e-5);
  models::LoraAdapter lin = a;
  std::erase_if(lin.pairs, [](const models::LoraPair& p) { return p.tensor.find(".ssm_") == std::string::npos; });
  ASSERT_EQ(lin.pairs.size(), 3u * 5u);
  auto d = engine(nullptr);
  d->add_lora(lin);
  d->set_lora_scales(0, std::vector<float>{1.0f});
  EXPECT_GT(lora_rt_rel_l2(lora_rt_logits(*d), want_base), 1e-3);
}

TEST(LoraRuntime, AdaptersThatDoNotFitAndScalesThatAreNotFiniteAreRefused) {
  auto e = lora_rt_engine(nullptr);
  if (!e) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  models::LoraAdapter a = lora_rt_adapter(e->config(), 4, 1);
  models::LoraAdapter wrong = a;
  wrong.pairs.resize(1);
  wrong.pairs[0].tensor = "layers.0.wk";  // wq's shape [64, 64] against wk's [32, 64]
  auto refused = [&](auto&& fn, const std::string& names) {
    try {
      fn();
      ADD_FAILURE() << "not refused: " << names;
    } catch (const Error& x) {
      EXPECT_NE(std::string(x.what()).find(names), std::string::npos) << x.what();
    }
  };
  refused([&] { e->add_lora(wrong); }, "layers.0.wk");
  wrong.pairs[0].tensor = "layers.9.wq";
  refused([&] { e->add_lora(wrong); }, "layers.9.wq");
  EXPECT_EQ(e->lora_count(), 0);
  e->add_lora(a);
  refused([&] { e->set_lora_scales(0, std::vector<float>{std::numeric_limits<float>::quiet_NaN()}); }, "not finite");
  refused([&] { e->set_lora_scales(0, std::vector<float>{1.0f, 1.0f}); }, "2 LoRA scales for 1 adapters");
}

}  // namespace
}  // namespace anelab

// Speculative decoding with prompt-lookup drafts (GenerateOptions::draft_max): the same tokens as plain decoding,
// greedy and sampled (each position is sampled once, in order, from its own logits), at fp32, fp16 and Q8_0, with
// drafts accepted on a repetitive text; and after a MIL prefill.
#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/io/load_any.h"
#include "models/quant/quant_mix.h"
#include "tests/common/test_data.h"

namespace anelab::infer {
namespace {

Engine stories_engine(const std::string& backend = "cpu", WType dtype = WType::kF32, bool q8_0 = false) {
  EngineOptions o;
  o.backend = backend;
  o.quiet = true;
  o.dtype = dtype;
  o.keep_quantized = q8_0;
  models::Model m = models::load_any_model(test::data_path("llama2c/stories260K.bin"));
  if (q8_0) {
    m = models::quantize_model(m, models::QuantMix::kQ8_0);
    m.private_memory = true;  // the engine's own bytes: its Q8_0 matrices become row tiles
  }
  return Engine(std::move(m), o);
}

// Greedy and sampled, fp32, fp16 and Q8_0 weights (row tiles): the drafts are verified by decode's kernels
// (Engine::decode_run), so every row is the logits plain decoding computes: the same tokens, and the same
// log-probabilities bit for bit (a verification through the prefill GEMM gives other bits at fp16 and Q8_0).
TEST(InferSpeculative, SameTokensAsPlainDecoding) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. Lily liked to play. Once upon a time, there was a "
      "little girl named Lily.";
  struct Case {
    const char* name;
    WType dtype;
    bool q8_0;
  };
  for (const Case& c :
       {Case{"fp32", WType::kF32, false}, Case{"fp16", WType::kF16, false}, Case{"q8_0", WType::kF32, true}}) {
    Engine e = stories_engine("cpu", c.dtype, c.q8_0);
    if (c.q8_0) {
      ASSERT_GT(e.tiled_bytes(), 0);
    }
    for (const float temp : {0.0f, 0.8f}) {
      GenerateOptions o;
      o.max_new_tokens = 200;
      o.sampling.temperature = temp;
      o.sampling.top_p = 0.9f;
      o.sampling.seed = 42;
      o.sampler = SamplerKind::kGeneral;
      o.logprobs = 2;  // the logits' bits: each token's log-probability and the two most likely alternatives
      const GenerateResult plain = generate(e, *tk, prompt, o, {});
      for (const int32_t draft : {1, 4, 16}) {
        o.draft_max = draft;
        const GenerateResult spec = generate(e, *tk, prompt, o, {});
        EXPECT_EQ(spec.new_tokens, plain.new_tokens) << c.name << ", temperature " << temp << ", draft " << draft;
        ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());
        for (size_t i = 0; i < plain.logprobs.size(); ++i) {
          ASSERT_EQ(spec.logprobs[i].logprob, plain.logprobs[i].logprob)
              << c.name << ", draft " << draft << ", token " << i;
          ASSERT_EQ(spec.logprobs[i].top, plain.logprobs[i].top) << c.name << ", draft " << draft << ", token " << i;
        }
        EXPECT_GT(spec.drafted, 0);
        EXPECT_GT(spec.accepted, 0) << "a repetitive text should reuse some drafts";
        EXPECT_LE(spec.accepted, spec.drafted);
      }
      o.draft_max = 0;
    }
  }
}

// The prompt prefilled by a MIL backend (the emulator here), the drafts verified by the CPU decode kernels: the tokens
// of plain decoding on that engine.
TEST(InferSpeculative, SameTokensAfterAMilPrefill) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  Engine e = stories_engine("emulator");
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  GenerateOptions o;
  o.max_new_tokens = 24;
  const GenerateResult plain = generate(e, *tk, "Once upon a time. Once upon a time.", o, {});
  o.draft_max = 4;
  const GenerateResult spec = generate(e, *tk, "Once upon a time. Once upon a time.", o, {});
  EXPECT_EQ(spec.new_tokens, plain.new_tokens);
  EXPECT_GT(spec.drafted, 0);
}

}  // namespace
}  // namespace anelab::infer

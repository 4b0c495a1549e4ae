// Speculative decoding with prompt-lookup drafts (GenerateOptions::draft_max): the same tokens as plain decoding,
// greedy and sampled (each position is sampled once, in order, from its own logits), with drafts accepted on a
// repetitive text; and refused in one line on a MIL prefill backend.
#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"

namespace anelab::infer {
namespace {

Engine stories_engine(const std::string& backend = "cpu") {
  EngineOptions o;
  o.backend = backend;
  o.quiet = true;
  return Engine(models::load_any_model(test::data_path("llama2c/stories260K.bin")), o);
}

TEST(InferSpeculative, SameTokensAsPlainDecoding) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  Engine e = stories_engine();
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. Lily liked to play. Once upon a time, there was a "
      "little girl named Lily.";
  for (const float temp : {0.0f, 0.8f}) {
    GenerateOptions o;
    o.max_new_tokens = 200;
    o.sampling.temperature = temp;
    o.sampling.top_p = 0.9f;
    o.sampling.seed = 42;
    o.sampler = SamplerKind::kGeneral;
    const GenerateResult plain = generate(e, *tk, prompt, o, {});
    for (const int32_t draft : {1, 4, 16}) {
      o.draft_max = draft;
      const GenerateResult spec = generate(e, *tk, prompt, o, {});
      EXPECT_EQ(spec.new_tokens, plain.new_tokens) << "temperature " << temp << ", draft " << draft;
      EXPECT_GT(spec.drafted, 0);
      EXPECT_GT(spec.accepted, 0) << "a repetitive text should reuse some drafts";
      EXPECT_LE(spec.accepted, spec.drafted);
    }
    o.draft_max = 0;
  }
}

TEST(InferSpeculative, RefusedOnAMilPrefillBackend) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  Engine e = stories_engine("emulator");
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.draft_max = 4;
  try {
    generate(e, *tk, "Once", o, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("needs the CPU prefill backend"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace anelab::infer

// generate(): the prompt echo for vocabularies without BOS (GPT-2, Qwen: the first prompt token is
// printed), the "auto" prefill backend, vocabulary mismatches, and which models get a chat template.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/runtime/backend.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/sampler.h"
#include "models/tokenizer/chat_template.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab::infer {
namespace {

Engine random_engine(int64_t vocab = 512, const std::string& backend = "cpu") {
  models::ModelConfig c = models::preset("stories260k");
  c.vocab_size = vocab;
  EngineOptions o;
  o.backend = backend;
  o.quiet = true;
  return Engine(models::random_model(c, 5), o);
}

// run.c skips position 0 of the echo because it is the BOS it added; a GPT-2/Qwen prompt has no BOS, so
// skipping it dropped the first word ("Hello, my name is" printed ", my name is").
// models::argmax (greedy sampling) is the first index of the largest value with NaN values skipped: the scan
// `if (x > best)` written here, on lengths around its vector width, with ties, NaN (first too), infinities and zeros
// of both signs.
TEST(InferGenerate, ArgmaxIsTheFirstLargestSkippingNaN) {
  const auto scan = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    return best;
  };
  uint32_t state = 12345;
  const auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float special[] = {nan, inf, -inf, 0.0f, -0.0f, 3.0f, 3.0f};
  for (size_t n : {1u, 2u, 15u, 16u, 17u, 33u, 100u, 1000u}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(next() % 7) - 3.0f;  // many ties
      for (int k = 0; k < trial % 4; ++k) v[next() % n] = special[next() % 7];
      if (trial % 9 == 0) v[0] = special[next() % 7];
      ASSERT_EQ(models::argmax(v), scan(v)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(InferGenerate, EchoKeepsTheFirstTokenWithoutBos) {
  Engine e = random_engine();
  const auto tk = tok::make_tokenizer(test::byte_vocab(512));
  GenerateOptions o;
  o.max_new_tokens = 0;
  for (const std::string prompt : {"Hello, my name is", "The capital of France is", "x"}) {
    const GenerateResult r = generate(e, *tk, prompt, o, {});
    EXPECT_EQ(r.text, prompt + "\n");
    EXPECT_EQ(r.prompt_tokens.size(), prompt.size());  // bytes, no BOS
  }
  // The server's echo goes through generate_tokens with the prompt's ids.
  const auto ids = tk->encode("Hello");
  o.final_newline = false;
  EXPECT_EQ(generate_tokens(e, *tk, ids, 0, o, {}).text, "Hello");
  // A start token (GPT-2's <|endoftext|> for an empty prompt) is not echoed.
  EXPECT_EQ(generate(e, *tk, "", o, {}).text, "");
}

// --ignore-eos as llama.cpp's: the end-of-text token never comes (its logit is -inf), so greedy runs the
// whole length; before the first place the model would have picked it, the tokens are the same.
TEST(InferGenerate, IgnoreEosMasksTheEndOfTextToken) {
  Engine e = random_engine();
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling.temperature = 0.0f;
  o.final_newline = false;
  tok::VocabData v = test::byte_vocab(512);
  const auto free_run = generate(e, *tok::make_tokenizer(v), "ab", o, {}).new_tokens;  // eos 256 not picked
  ASSERT_EQ(free_run.size(), 40u);
  v.eos_id = free_run[5];  // the token greedy picks 6th becomes the end of text
  const auto tk = tok::make_tokenizer(v);
  const size_t first = static_cast<size_t>(std::find(free_run.begin(), free_run.end(), v.eos_id) - free_run.begin());
  const GenerateResult stopped = generate(e, *tk, "ab", o, {});
  EXPECT_EQ(stopped.stop_reason, "eos");
  EXPECT_EQ(stopped.new_tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + first));
  o.ignore_eos = true;
  const GenerateResult r = generate(e, *tk, "ab", o, {});
  EXPECT_EQ(r.stop_reason, "length");
  ASSERT_EQ(r.new_tokens.size(), 40u);
  EXPECT_EQ(std::count(r.new_tokens.begin(), r.new_tokens.end(), v.eos_id), 0);
  EXPECT_EQ(std::vector<int32_t>(r.new_tokens.begin(), r.new_tokens.begin() + first),
            std::vector<int32_t>(free_run.begin(), free_run.begin() + first));
}

TEST(InferGenerate, AutoBackendIsTheCpuPathWithoutAnAne) {
  std::string why;
  bool ane = false;
  for (const auto& b : rt::backends())
    if (b.name == "ane") ane = b.available(&why);
  EXPECT_EQ(resolve_prefill_backend("auto"), ane ? "ane" : "cpu");
  if (!ane) {
    EXPECT_EQ(random_engine(512, "auto").options().backend, "cpu");
  }
  EXPECT_EQ(resolve_prefill_backend("emulator"), "emulator");
  try {
    resolve_prefill_backend("gpu");
    ADD_FAILURE() << "gpu accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, cpu, emulator, ane"), std::string::npos) << e.what();
  }
}

TEST(InferGenerate, VocabularyMismatchIsNamed) {
  const auto tk = tok::make_tokenizer(test::byte_vocab(512));
  EXPECT_NO_THROW(check_tokenizer_fits(*tk, "t", 512, "m"));
  EXPECT_NO_THROW(check_tokenizer_fits(*tk, "t", 512 + 271, "m"));  // padding, as Qwen2.5's embedding
  for (int64_t model_vocab : {int64_t{256}, int64_t{32000}}) {
    try {
      check_tokenizer_fits(*tk, "tok512", model_vocab, "model.bin");
      ADD_FAILURE() << model_vocab;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("vocabulary mismatch"), std::string::npos) << e.what();
    }
  }
  // A sampled id past the tokenizer (the model was given a smaller tokenizer) is named the same way.
  Engine e = random_engine(2048);
  GenerateOptions o;
  o.max_new_tokens = 200;
  o.sampling.temperature = 0;
  o.sampler = SamplerKind::kGeneral;
  try {
    generate(e, *tk, "a", o, {});  // 3/4 of the random model's ids are past the tokenizer
    ADD_FAILURE() << "200 greedy tokens of a 2048-token model all fell inside a 512-token tokenizer";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("vocabulary mismatch"), std::string::npos) << err.what();
  }
}

TEST(InferGenerate, ChatTemplateOnlyWhenTheModelHasOne) {
  const auto base = tok::make_tokenizer(test::byte_vocab(512));
  const auto chat = tok::make_tokenizer(test::byte_vocab(512, true));
  EXPECT_EQ(tok::chat_template_for(*base, "auto"), tok::ChatTemplate::kNone);
  EXPECT_EQ(tok::chat_template_for(*chat, "auto"), tok::ChatTemplate::kQwen25);
  EXPECT_EQ(tok::chat_template_for(*chat, "none"), tok::ChatTemplate::kNone);
  EXPECT_EQ(tok::chat_template_for(*chat, "chatml"), tok::ChatTemplate::kQwen25);
  EXPECT_THROW(tok::chat_template_for(*base, "qwen2.5"), Error);  // its tokens are not in the vocabulary
  EXPECT_THROW(tok::chat_template_for(*chat, "llama3"), Error);
}

}  // namespace
}  // namespace anelab::infer

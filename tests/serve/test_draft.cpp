// The server's draft model (--model-draft, ModelOptions::draft_model): stories260K drafting for itself in process,
// two workers generating at once (the target's and the draft's batchers step side by side without waiting on each
// other); greedy answers equal a server without a draft model, with the drafts counted. Skipped without the shared
// data.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "framework/core/error.h"
#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "tests/common/test_data.h"
#include "tests/serve/stories_pool.h"

namespace anelab::serve {
namespace {

std::unique_ptr<ModelPool> draft_test_pool(size_t workers, const std::string& draft) {
  const std::string model = anelab::test::data_path("llama2c/stories260K.bin"),
                    tok = anelab::test::data_path("llama2c/tok512.bin");
  if (!std::filesystem::exists(model) || !std::filesystem::exists(tok)) return nullptr;
  ModelOptions o;
  o.load.model = model;
  o.load.tokenizer = tok;
  o.load.backend = "cpu";
  o.warmup_tokens = 0;
  o.draft_model = draft == "self" ? model : draft;
  o.draft_max = draft.empty() ? 0 : 4;
  return std::make_unique<ModelPool>(o, workers);
}

GenOutcome draft_test_run(ModelPool& pool, size_t w, const std::string& prompt, double temperature) {
  const std::string body =
      nlohmann::json{{"prompt", prompt}, {"max_tokens", 48}, {"temperature", temperature}, {"seed", 5}}.dump();
  return test::run_completion(pool, body, w);
}

TEST(ServeDraft, TwoWorkersAnswerAsWithoutADraftModel) {
  auto plain = draft_test_pool(1, "");
  if (!plain) GTEST_SKIP() << "shared data absent: stories260K";
  auto spec = draft_test_pool(2, "self");
  const std::string prompts[2] = {"Once upon a time, there was a little girl", "The dog ran to the park"};
  GenOutcome want[2], got[2];
  for (int i = 0; i < 2; ++i) want[i] = draft_test_run(*plain, 0, prompts[i], 0.0);
  std::thread t([&] { got[1] = draft_test_run(*spec, 1, prompts[1], 0.0); });
  got[0] = draft_test_run(*spec, 0, prompts[0], 0.0);
  t.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].text, want[i].text) << "prompt " << i;
    EXPECT_GT(got[i].usage.drafted, 0);
    EXPECT_GT(got[i].usage.accepted, 0) << "the model's own weights should agree with it";
  }
  // Sampled: an answer of the asked length (its distribution is tested in test_infer: InferSpeculativeDraft).
  const GenOutcome s = draft_test_run(*spec, 0, prompts[0], 0.8);
  EXPECT_GT(s.usage.completion_tokens, 0);
  EXPECT_GT(s.usage.drafted, 0);
}

}  // namespace
}  // namespace anelab::serve

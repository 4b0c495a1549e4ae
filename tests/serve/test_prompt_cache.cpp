// The server's prompt cache (infer/server/engine_adapter.cpp): a request sharing a prefix with the previous one on
// the same worker prefills only the rest, reports how many prompt tokens came from the cache, and answers what a
// fresh prefill answers. stories260K in process, one worker; skipped without the shared data.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "tests/common/test_data.h"
#include "tests/serve/stories_pool.h"

namespace anelab::serve {
namespace {

GenOutcome run_request(ModelPool& pool, const std::string& body, size_t worker = 0) {
  return test::run_completion(pool, body, worker);
}

TEST(PromptCache, SharedPrefixIsNotPrefilledAgainAndAnswersTheSame) {
  const std::string text = anelab::test::data_path("tinystories/tinystories_valid_prefix.txt");
  auto made = test::stories_pool();
  if (!made || !std::filesystem::exists(text)) GTEST_SKIP() << "shared data absent: stories260K or " << text;
  ModelPool& pool = *made;
  std::ifstream f(text);
  std::string story((std::istreambuf_iterator<char>(f)), {});
  story = story.substr(0, 700);  // about 350 tokens of tok512 (context 512)
  auto body = [&](const std::string& tail, bool cache) {
    return nlohmann::json{{"prompt", story + tail}, {"max_tokens", 16}, {"temperature", 0}, {"cache_prompt", cache}}
        .dump();
  };
  const GenOutcome first = run_request(pool, body(" Then", true));
  EXPECT_EQ(first.usage.cached_tokens, 0);
  const GenOutcome second = run_request(pool, body(" One day", true));
  // The story's tokens are shared; the tails differ (tok512 may merge across the boundary: a token or two).
  EXPECT_GE(second.usage.cached_tokens, first.usage.prompt_tokens - 3);
  EXPECT_LT(second.usage.cached_tokens, second.usage.prompt_tokens);
  const GenOutcome fresh = run_request(pool, body(" One day", false));
  EXPECT_EQ(fresh.usage.cached_tokens, 0);
  EXPECT_EQ(second.text, fresh.text) << "the cached K/V answer differently from a fresh prefill";
  // The same prompt again: all but its last token come from the cache.
  const GenOutcome again = run_request(pool, body(" One day", true));
  EXPECT_EQ(again.usage.cached_tokens, again.usage.prompt_tokens - 1);
  EXPECT_EQ(again.text, fresh.text);
  std::printf("[prompt cache] %lld-token prompt: prefill %.2f ms fresh, %.2f ms with %lld cached tokens\n",
              static_cast<long long>(fresh.usage.prompt_tokens), fresh.usage.prefill_ms, second.usage.prefill_ms,
              static_cast<long long>(second.usage.cached_tokens));
}

// Slots of one engine (--parallel 3): a request on worker 2 takes the prefix worker 0 computed (its K/V copied across
// slots, Engine::copy_kv), and answers what a fresh prefill on worker 1 answers; a worker's own longer prefix is not
// replaced by another's shorter one.
TEST(PromptCache, PrefixOfAnotherSlotIsReused) {
  const std::string text = anelab::test::data_path("tinystories/tinystories_valid_prefix.txt");
  auto made = test::stories_pool(3);
  if (!made || !std::filesystem::exists(text)) GTEST_SKIP() << "shared data absent: stories260K or " << text;
  ModelPool& pool = *made;
  std::ifstream f(text);
  std::string story((std::istreambuf_iterator<char>(f)), {});
  story = story.substr(0, 700);
  auto body = [&](const std::string& tail, bool cache) {
    return nlohmann::json{{"prompt", story + tail}, {"max_tokens", 16}, {"temperature", 0}, {"cache_prompt", cache}}
        .dump();
  };
  const GenOutcome first = run_request(pool, body(" Then", true), 0);
  EXPECT_EQ(first.usage.cached_tokens, 0);
  const GenOutcome other = run_request(pool, body(" One day", true), 2);
  EXPECT_GE(other.usage.cached_tokens, first.usage.prompt_tokens - 3) << "the prefix of slot 0 is not reused on slot 2";
  const GenOutcome fresh = run_request(pool, body(" One day", false), 1);
  EXPECT_EQ(fresh.usage.cached_tokens, 0);
  EXPECT_EQ(other.text, fresh.text) << "the copied K/V answer differently from a fresh prefill";
  std::printf("[prompt cache] %lld-token prompt on another slot: prefill %.2f ms fresh, %.2f ms with %lld cached\n",
              static_cast<long long>(fresh.usage.prompt_tokens), fresh.usage.prefill_ms, other.usage.prefill_ms,
              static_cast<long long>(other.usage.cached_tokens));
}

}  // namespace
}  // namespace anelab::serve

// Randomised robustness of the request parser (the libFuzzer harness tests/fuzz/fuzz_server_request.cpp
// does the same open-ended under clang): random bytes, byte-level mutations of valid bodies, and random
// JSON documents built from the API's field names with values of random types. The parser must never
// throw; rejections are 4xx with well-formed error JSON; acceptances satisfy the limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "infer/server/api.h"

namespace anelab::serve {
namespace {

using nlohmann::json;

struct Counts {
  int accepted = 0, rejected = 0;
};

void check(Endpoint ep, const std::string& body, const Limits& lim, Counts& c) {
  CompletionRequest r;
  std::optional<ApiError> e;
  ASSERT_NO_THROW(e = parse_request(ep, body, lim, r)) << body;
  if (e) {
    ++c.rejected;
    ASSERT_GE(e->status, 400);
    ASSERT_LT(e->status, 500);
    json j;
    ASSERT_NO_THROW(j = json::parse(error_json(*e)));
    ASSERT_TRUE(j["error"]["message"].is_string());
    ASSERT_EQ(j["error"]["type"], "invalid_request_error");
    return;
  }
  ++c.accepted;
  ASSERT_GE(r.max_tokens, 1);
  ASSERT_LE(r.max_tokens, lim.max_tokens_cap);
  ASSERT_LE(r.stop.size(), lim.max_stop);
  ASSERT_TRUE(r.temperature >= 0 && r.temperature <= 2);
  ASSERT_TRUE(r.top_p >= 0 && r.top_p <= 1);
  if (ep == Endpoint::kChat) {
    ASSERT_FALSE(r.messages.empty());
  }
}

const std::vector<std::string> kValid = {
    R"({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0.8, "top_p": 0.9, "seed": 7})",
    R"({"prompt": [1, 2, 3], "stream": true, "stop": ["\n", "The"], "echo": true})",
    R"({"prompt": "hi", "system": "You are terse.", "stream_options": {"include_usage": true}})",
    R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "q"}]}], "max_completion_tokens": 5})",
    R"({"messages": [{"role": "user", "content": "caf\u00e9 \ud83d\ude00"}], "n": 1, "user": "x", "logprobs": false})",
};

std::string mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  const std::string alphabet = "{}[]\",:0123456789.-+eE truefalsnul\\u\xff\x80\n";
  for (int i = 0; i < edits; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 5) {
      case 0:
        if (!s.empty()) s[pos] = static_cast<char>(rng() & 0xFF);
        break;
      case 1:
        s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
        break;
      case 2:
        if (!s.empty()) s.erase(pos, 1 + rng() % 8);
        break;
      case 3:
        s.resize(pos);
        break;
      default:
        if (!s.empty()) s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 16));
        break;
    }
  }
  return s;
}

json random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 2 ? 7 : 9)) {
    case 0:
      return nullptr;
    case 1:
      return (rng() & 1) != 0;
    case 2:
      return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3:
      return std::uniform_real_distribution<double>(-3, 3)(rng);
    case 4:
      return std::string(rng() % 6, static_cast<char>('a' + rng() % 26));
    case 5:
      return static_cast<uint64_t>(rng()) << 32 | rng();
    case 6:
      return "user";
    case 7: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (const char* k : {"role", "content", "type", "text", "include_usage"})
        if (rng() % 3 == 0) o[k] = random_value(rng, depth + 1);
      return o;
    }
  }
}

json random_request(std::mt19937& rng) {
  static const std::vector<std::string> fields = {"prompt",
                                                  "messages",
                                                  "max_tokens",
                                                  "max_completion_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "seed",
                                                  "stop",
                                                  "stream",
                                                  "stream_options",
                                                  "n",
                                                  "echo",
                                                  "system",
                                                  "logprobs",
                                                  "user",
                                                  "model",
                                                  "presence_penalty",
                                                  "logit_bias",
                                                  "tools",
                                                  "response_format",
                                                  "best_of",
                                                  "suffix",
                                                  "bogus"};
  json o = json::object();
  for (const auto& f : fields)
    if (rng() % 8 == 0) o[f] = random_value(rng, 0);
  if (rng() % 2 == 0) o["prompt"] = "p";
  if (rng() % 2 == 0) o["messages"] = json::array({json{{"role", "user"}, {"content", "c"}}});
  return o;
}

TEST(ServeApiRandom, RandomBytes) {
  std::mt19937 rng(1);
  Limits lim;
  Counts c;
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng() & 0xFF);
    if (i % 2) s = "{" + s;
    check(i % 3 ? Endpoint::kCompletions : Endpoint::kChat, s, lim, c);
  }
  EXPECT_EQ(c.accepted, 0);  // random bytes are never a valid request
}

TEST(ServeApiRandom, MutatedValidBodies) {
  std::mt19937 rng(2);
  Limits lim;
  Counts c;
  for (const auto& v : kValid) {
    const Endpoint ep = v.find("messages") != std::string::npos ? Endpoint::kChat : Endpoint::kCompletions;
    Counts base;
    check(ep, v, lim, base);
    ASSERT_EQ(base.accepted, 1) << v;  // the seeds themselves are valid
    for (int i = 0; i < 1500; ++i) check(ep, mutate(v, rng), lim, c);
  }
  EXPECT_GT(c.rejected, 1000);
  EXPECT_GT(c.accepted, 10);  // some mutations stay valid (e.g. inside string values)
}

TEST(ServeApiRandom, RandomStructuredRequests) {
  std::mt19937 rng(3);
  Limits lim;
  lim.max_tokens_cap = 500;
  Counts comp, chat;
  for (int i = 0; i < 4000; ++i) {
    const std::string body = random_request(rng).dump();
    check(Endpoint::kCompletions, body, lim, comp);
    check(Endpoint::kChat, body, lim, chat);
  }
  EXPECT_GT(comp.rejected, 100);
  EXPECT_GT(comp.accepted + chat.accepted, 10);
}

}  // namespace
}  // namespace anelab::serve

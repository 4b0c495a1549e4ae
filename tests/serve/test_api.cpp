// Request parsing / validation and response formatting of `anelab serve` (infer/server/api.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/server/api.h"
#include "models/grammar/gbnf.h"
#include "models/sampler.h"

namespace anelab::serve {
namespace {

using nlohmann::json;

struct Parsed {
  std::optional<ApiError> err;
  CompletionRequest req;
};

Parsed parse(Endpoint ep, const std::string& body, Limits lim = {}) {
  Parsed p;
  p.err = parse_request(ep, body, lim, p.req);
  return p;
}
Parsed comp(const std::string& body, Limits lim = {}) { return parse(Endpoint::kCompletions, body, lim); }
Parsed chat(const std::string& body, Limits lim = {}) { return parse(Endpoint::kChat, body, lim); }

// Expects a 4xx with the given param (empty: don't care).
void expect_bad(const Parsed& p, const std::string& param = "", int status = 400) {
  ASSERT_TRUE(p.err.has_value());
  EXPECT_EQ(p.err->status, status);
  EXPECT_EQ(p.err->type, "invalid_request_error");
  if (!param.empty()) {
    EXPECT_EQ(p.err->param, param) << p.err->message;
  }
  EXPECT_FALSE(p.err->message.empty());
}

TEST(ServeApi, SimpleFormDefaults) {
  auto p = comp(R"({"prompt": "Once upon a time"})");
  ASSERT_FALSE(p.err) << p.err->message;
  EXPECT_EQ(p.req.prompt, "Once upon a time");
  EXPECT_EQ(p.req.max_tokens, 50);
  EXPECT_FALSE(p.req.max_tokens_set);
  EXPECT_FALSE(p.req.system.has_value());
  EXPECT_FALSE(p.req.stream);
  EXPECT_DOUBLE_EQ(p.req.temperature, 1.0);
  EXPECT_DOUBLE_EQ(p.req.top_p, 1.0);
  EXPECT_FALSE(p.req.seed.has_value());
}

TEST(ServeApi, SimpleFormWithSystemAndOpenAiFields) {
  auto p = comp(R"({"prompt": "hi", "max_tokens": 7, "system": "be brief", "temperature": 0.5, "top_p": 0.9,
                    "seed": 42, "stop": ["\n", "."], "stream": true, "stream_options": {"include_usage": true},
                    "echo": true, "n": 1, "user": "u1", "logprobs": null, "model": "whatever", "top_k": 40})");
  ASSERT_FALSE(p.err) << p.err->message;
  EXPECT_EQ(p.req.max_tokens, 7);
  EXPECT_TRUE(p.req.max_tokens_set);
  EXPECT_EQ(*p.req.system, "be brief");
  EXPECT_DOUBLE_EQ(p.req.temperature, 0.5);
  EXPECT_FLOAT_EQ(static_cast<float>(p.req.top_p), 0.9f);
  EXPECT_EQ(*p.req.seed, 42u);
  EXPECT_EQ(p.req.stop, (std::vector<std::string>{"\n", "."}));
  EXPECT_TRUE(p.req.stream && p.req.include_usage && p.req.echo);
  EXPECT_EQ(p.req.model, "whatever");
  EXPECT_EQ(p.req.top_k, 40);
}

TEST(ServeApi, PromptForms) {
  auto a = comp(R"({"prompt": ["one prompt"]})");
  ASSERT_FALSE(a.err);
  EXPECT_EQ(a.req.prompt, "one prompt");
  auto b = comp(R"({"prompt": [1, 403, 407]})");
  ASSERT_FALSE(b.err);
  EXPECT_TRUE(b.req.prompt_is_ids);
  EXPECT_EQ(b.req.prompt_ids, (std::vector<int64_t>{1, 403, 407}));
  expect_bad(comp(R"({"prompt": ["a", "b"]})"), "prompt");
  expect_bad(comp(R"({"prompt": []})"), "prompt");
  expect_bad(comp(R"({"prompt": [1, "x"]})"), "prompt");
  expect_bad(comp(R"({"prompt": 5})"), "prompt");
  expect_bad(comp(R"({"max_tokens": 5})"), "prompt");
  expect_bad(comp(R"({"prompt": null})"), "prompt");
}

TEST(ServeApi, MalformedBodies) {
  for (const char* body : {"", "{", "{\"prompt\": }", "not json", "{\"prompt\": \"a\",}", "{\"prompt\": \"a\"} x"}) {
    SCOPED_TRACE(body);
    expect_bad(comp(body));
  }
  auto p = comp("{\"prompt\": ");
  ASSERT_TRUE(p.err);
  EXPECT_EQ(p.err->code, "invalid_json");
  expect_bad(comp("[1, 2]"));
  expect_bad(comp("\"prompt\""));
  expect_bad(comp("{\"prompt\": \"\xff\xfe\"}"));  // invalid UTF-8 inside a string
}

TEST(ServeApi, WrongTypes) {
  expect_bad(comp(R"({"prompt": "a", "max_tokens": "10"})"), "max_tokens");
  expect_bad(comp(R"({"prompt": "a", "max_tokens": 10.5})"), "max_tokens");
  expect_bad(comp(R"({"prompt": "a", "temperature": "hot"})"), "temperature");
  expect_bad(comp(R"({"prompt": "a", "stream": 1})"), "stream");
  expect_bad(comp(R"({"prompt": "a", "echo": "yes"})"), "echo");
  expect_bad(comp(R"({"prompt": "a", "system": 3})"), "system");
  expect_bad(comp(R"({"prompt": "a", "seed": 1.5})"), "seed");
  expect_bad(comp(R"({"prompt": "a", "stop": 3})"), "stop");
  expect_bad(comp(R"({"prompt": "a", "stop": ["x", 3]})"), "stop");
  expect_bad(comp(R"({"prompt": "a", "model": 3})"), "model");
  expect_bad(comp(R"({"prompt": "a", "stream_options": 3})"), "stream_options");
  expect_bad(comp(R"({"prompt": "a", "stream_options": {"include_usage": "y"}})"), "include_usage");
}

TEST(ServeApi, Ranges) {
  Limits lim;
  lim.max_tokens_cap = 100;
  EXPECT_FALSE(comp(R"({"prompt": "a", "max_tokens": 100})", lim).err);
  auto over = comp(R"({"prompt": "a", "max_tokens": 101})", lim);
  expect_bad(over, "max_tokens");
  EXPECT_EQ(over.err->code, "max_tokens_out_of_range");
  expect_bad(comp(R"({"prompt": "a", "max_tokens": 0})", lim), "max_tokens");
  expect_bad(comp(R"({"prompt": "a", "max_tokens": -3})", lim), "max_tokens");
  expect_bad(comp(R"({"prompt": "a", "max_tokens": 18446744073709551615})", lim), "max_tokens");
  expect_bad(comp(R"({"prompt": "a", "temperature": 2.5})"), "temperature");
  expect_bad(comp(R"({"prompt": "a", "temperature": -0.1})"), "temperature");
  expect_bad(comp(R"({"prompt": "a", "top_p": 1.5})"), "top_p");
  expect_bad(comp(R"({"prompt": "a", "top_k": -1})"), "top_k");
  // The ranges of infer/params_check.h, which `anelab infer` checks too.
  expect_bad(comp(R"({"prompt": "a", "top_p": 0})"), "top_p");
  expect_bad(comp(R"({"prompt": "a", "min_p": -1})"), "min_p");
  expect_bad(comp(R"({"prompt": "a", "min_p": 1.5})"), "min_p");
  expect_bad(comp(R"({"prompt": "a", "repeat_penalty": 0})"), "repeat_penalty");
  expect_bad(comp(R"({"prompt": "a", "repeat_penalty": 11})"), "repeat_penalty");
  expect_bad(comp(R"({"prompt": "a", "top_k": 1073741825})"), "top_k");
  const auto msg = comp(R"({"prompt": "a", "top_p": 0})");
  EXPECT_EQ(msg.err->message, "'top_p' must be in (0, 1] (got 0)");
  EXPECT_FALSE(comp(R"({"prompt": "a", "top_p": 1, "min_p": 1, "repeat_penalty": 10, "temperature": 2})").err);
  expect_bad(comp(R"({"prompt": "a", "seed": -1})"), "seed");
  auto big = comp(R"({"prompt": "a", "seed": 18446744073709551615})");
  ASSERT_FALSE(big.err);
  EXPECT_EQ(*big.req.seed, 18446744073709551615ull);
  expect_bad(comp(R"({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})"), "stop");
  expect_bad(comp(R"({"prompt": "a", "stop": [""]})"), "stop");
  expect_bad(comp(R"({"prompt": "a", "stop": ")" + std::string(300, 'x') + "\"}"), "stop");
}

TEST(ServeApi, UnknownAndUnsupportedFields) {
  auto u = comp(R"({"prompt": "a", "frobnicate": true})");
  expect_bad(u, "frobnicate");
  EXPECT_EQ(u.err->code, "unknown_parameter");
  // accepted and ignored
  EXPECT_FALSE(comp(R"({"prompt": "a", "user": "x", "metadata": {"k": 1}, "store": false})").err);
  EXPECT_FALSE(comp(R"({"prompt": "a", "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}})").err);
  EXPECT_FALSE(comp(R"({"prompt": "a", "best_of": 1, "suffix": null})").err);
  expect_bad(comp(R"({"prompt": "a", "n": 2})"), "n");
  expect_bad(comp(R"({"prompt": "a", "best_of": 3})"), "best_of");
  expect_bad(comp(R"({"prompt": "a", "logprobs": 50})"), "logprobs");                   // OpenAI's range 0..20
  expect_bad(comp(R"({"prompt": "a", "presence_penalty": 2.5})"), "presence_penalty");  // OpenAI's range [-2, 2]
  EXPECT_FALSE(comp(R"({"prompt": "a", "presence_penalty": 1, "frequency_penalty": -0.5})").err);
  expect_bad(comp(R"({"prompt": "a", "logit_bias": {"5": 10}})"), "logit_bias");
  expect_bad(comp(R"({"prompt": "a", "suffix": "tail"})"), "suffix");
  // chat-only fields are unknown on completions and vice versa
  expect_bad(comp(R"({"prompt": "a", "messages": []})"), "messages");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "prompt": "a"})"), "prompt");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"), "echo");
}

TEST(ServeApi, ChatMessages) {
  auto p = chat(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "name": "bob", "content": "hi"},
                                 {"role": "assistant", "content": null}, {"role": "developer", "content": "d"},
                                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                    "max_completion_tokens": 9, "logprobs": false, "response_format": {"type": "text"}, "tools": []})");
  ASSERT_FALSE(p.err) << p.err->message;
  ASSERT_EQ(p.req.messages.size(), 5u);
  EXPECT_EQ(p.req.messages[1].content, "hi");
  EXPECT_EQ(p.req.messages[2].content, "");
  EXPECT_EQ(p.req.messages[3].role, "system");
  EXPECT_EQ(p.req.messages[4].content, "ab");
  EXPECT_EQ(p.req.max_tokens, 9);
  expect_bad(chat(R"({})"), "messages");
  expect_bad(chat(R"({"messages": []})"), "messages");
  expect_bad(chat(R"({"messages": {"role": "user"}})"), "messages");
  expect_bad(chat(R"({"messages": ["hi"]})"), "messages[0]");
  expect_bad(chat(R"({"messages": [{"role": "wizard", "content": "x"}]})"), "messages[0].role");
  expect_bad(chat(R"({"messages": [{"content": "x"}]})"), "messages[0].role");
  expect_bad(chat(R"({"messages": [{"role": "user"}]})"), "messages[0].content");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"), "messages[0].content");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x", "extra": 1}]})"), "messages[0].extra");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"})"), "logprobs");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})"), "tools[0]");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "required"})"),
             "tool_choice");
  expect_bad(chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})"),
             "response_format.type");
}

// The chat template's thinking switch: a top-level "enable_thinking" or chat_template_kwargs (vLLM's and
// llama.cpp's server's spelling); on by default; chat only.
TEST(ServeApi, EnableThinking) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_TRUE(chat("{" + msgs + "}").req.enable_thinking);
  EXPECT_FALSE(chat("{" + msgs + R"(, "enable_thinking": false})").req.enable_thinking);
  EXPECT_FALSE(chat("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": false}})").req.enable_thinking);
  EXPECT_TRUE(chat("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": true}})").req.enable_thinking);
  EXPECT_TRUE(chat("{" + msgs + R"(, "chat_template_kwargs": null})").req.enable_thinking);
  expect_bad(chat("{" + msgs + R"(, "enable_thinking": "no"})"), "enable_thinking");
  expect_bad(chat("{" + msgs + R"(, "chat_template_kwargs": []})"), "chat_template_kwargs");
  expect_bad(chat("{" + msgs + R"(, "chat_template_kwargs": {"tools": 1}})"), "chat_template_kwargs");
  expect_bad(chat("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": 0}})"),
             "chat_template_kwargs.enable_thinking");
  expect_bad(comp(R"({"prompt": "a", "enable_thinking": false})"), "enable_thinking");
}

TEST(ServeApi, DeepNestingIsRejectedBeforeParsing) {
  const std::string deep =
      "{\"prompt\": \"a\", \"metadata\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto p = comp(deep);
  expect_bad(p);
  EXPECT_NE(p.err->message.find("nested"), std::string::npos);
  EXPECT_EQ(json_depth("{\"a\": \"[[[[\"}", 10), 1);  // brackets inside strings don't count
  EXPECT_EQ(json_depth("[[{\"x\\\"[\": []}]]", 10), 4);
}

TEST(ServeApi, ErrorJsonShape) {
  const json j = json::parse(error_json(ApiError{400, "bad \"thing\"", "invalid_request_error", "max_tokens", ""}));
  EXPECT_EQ(j["error"]["message"], "bad \"thing\"");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(ServeApi, CompletionJson) {
  Usage u;
  u.prompt_tokens = 5;
  u.completion_tokens = 11;
  u.prefill_ms = 10;
  u.decode_ms = 20;
  ResponseMeta m{"cmpl-1", "stories", 123, Endpoint::kCompletions};
  const json c = completion_json(m, "text \xE2\x82", "length", u);  // truncated UTF-8 must not throw
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 16);
  EXPECT_EQ(c["gen_tokens"], 11);
  EXPECT_DOUBLE_EQ(c["prefill_tps"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(c["decode_tps"].get<double>(), 500.0);  // (11 - 1) tokens / 20 ms
  EXPECT_NO_THROW((void)dump(c));
  m.endpoint = Endpoint::kChat;
  const json h = completion_json(m, "hello", "stop", u);
  EXPECT_EQ(h["object"], "chat.completion");
  EXPECT_EQ(h["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h["choices"][0]["message"]["content"], "hello");
}

TEST(ServeApi, SseChunks) {
  ResponseMeta m{"chatcmpl-1", "stories", 1, Endpoint::kChat};
  const std::string d = sse_delta(m, "Hi");
  ASSERT_EQ(d.rfind("data: ", 0), 0u);
  ASSERT_EQ(d.substr(d.size() - 2), "\n\n");
  const json j = json::parse(d.substr(6));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  const std::string f = sse_final(m, "stop", Usage{3, 4}, true);
  const size_t second = f.find("data: ", 6);
  ASSERT_NE(second, std::string::npos);  // the include_usage chunk
  EXPECT_EQ(json::parse(f.substr(6, second - 6))["usage"]["total_tokens"], 7);
  EXPECT_TRUE(json::parse(f.substr(second + 6))["choices"].empty());
}

TEST(ServeApi, Utf8Holdback) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(utf8_complete_prefix("x\xC3"), 1u);
  EXPECT_EQ(utf8_complete_prefix("\x80\x80\x80\x80"), 4u);  // stray continuation bytes pass through
}

TEST(ServeApi, FinishReason) {
  EXPECT_EQ(finish_reason("length"), "length");
  EXPECT_EQ(finish_reason("context"), "length");
  EXPECT_EQ(finish_reason("eos"), "stop");
  EXPECT_EQ(finish_reason("stop_string"), "stop");
  EXPECT_EQ(finish_reason("stop_token"), "stop");
}

}  // namespace
}  // namespace anelab::serve

namespace anelab::models {
namespace {
// OpenAI's penalties as the server passes them to the sampler: logit -= count * frequency + presence over the
// window of the last penalty_last_n tokens (llama.cpp's), so a token seen twice drops by 2f + p.
TEST(SamplerPenalties, FrequencyAndPresenceSubtractPerCount) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.frequency_penalty = 0.5f;
  o.presence_penalty = 0.25f;
  o.penalty_last_n = 3;
  Sampler s(5, o);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> history = {4, 2, 2, 1};  // 4 is outside the window of 3
  EXPECT_EQ(s.sample(logits, history), 0);            // the first unpenalised id (ties go to the lowest)
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.75f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 1.25f);
  EXPECT_FLOAT_EQ(logits[4], 1.0f);
  o.frequency_penalty = -1.0f;  // negative: encourages repetition
  o.presence_penalty = 0.0f;
  Sampler t(5, o);
  std::vector<float> l2 = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(t.sample(l2, history), 2);
}
}  // namespace
}  // namespace anelab::models

namespace anelab::serve {
namespace {
TEST(ServeApi, LogprobsFields) {
  Limits lim;
  CompletionRequest r;
  EXPECT_FALSE(parse_request(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 5})", lim, r));
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_FALSE(parse_request(Endpoint::kCompletions, R"({"prompt": "a"})", lim, r));
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "q"}], "logprobs": true,
                                                 "top_logprobs": 4})",
                             lim, r));
  EXPECT_EQ(r.logprobs, 4);
  auto param = [&](Endpoint ep, const std::string& body) {
    auto e = parse_request(ep, body, lim, r);
    return e ? e->param : std::string("accepted");
  };
  EXPECT_EQ(param(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 21})"), "logprobs");
  EXPECT_EQ(param(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 1, "stream": true})"), "accepted");
  EXPECT_EQ(param(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "q"}], "top_logprobs": 2})"),
            "top_logprobs");
  // The JSON forms: completions' parallel arrays with byte offsets, chat's content list with bytes.
  const std::vector<TokenLogprobText> lps = {{"He", -0.5f, {{"He", -0.5f}, {"It", -1.5f}}}, {"llo", -0.25f, {}}};
  const auto c = logprobs_json(Endpoint::kCompletions, lps);
  EXPECT_EQ(c["text_offset"], nlohmann::json::parse("[0, 2]"));
  EXPECT_EQ(c["top_logprobs"][0]["It"], -1.5);
  const auto h = logprobs_json(Endpoint::kChat, lps);
  EXPECT_EQ(h["content"][1]["bytes"], nlohmann::json::parse("[108, 108, 111]"));
  EXPECT_EQ(h["content"][0]["top_logprobs"][1]["token"], "It");
}
}  // namespace
}  // namespace anelab::serve

namespace anelab::serve {
namespace {
// Tools: definitions printed as the templates' tojson prints them (Python's separators, the request's key order),
// an assistant's earlier calls re-printed the same way, and the answer's <tool_call> blocks parsed out.
TEST(ServeTools, DefinitionsAndCallsAreParsed) {
  Limits lim;
  CompletionRequest r;
  ASSERT_FALSE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather é",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})",
                             lim, r));
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0],
            R"({"type": "function", "function": {"name": "get_weather", "description": "Weather é", "parameters": )"
            R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  CompletionRequest none;
  ASSERT_FALSE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "f"}}]})",
                             lim, none));
  EXPECT_TRUE(none.tools.empty());

  // A forced call: tool_choice "required" (any tool) or a named function: a grammar over the calls.
  const std::string tools2 = R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}])";
  auto accepts = [](const CompletionRequest& q, const std::string& text) {
    grammar::Matcher m(*q.grammar);
    return m.accept_bytes(text) && m.can_end();
  };
  CompletionRequest req;
  ASSERT_FALSE(parse_request(
      Endpoint::kChat, R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "required", )" + tools2 + "}",
      lim, req));
  ASSERT_TRUE(req.grammar);
  EXPECT_TRUE(
      accepts(req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts(req, "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(accepts(req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city
  EXPECT_FALSE(accepts(req, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(req, "Sure!"));
  ASSERT_FALSE(parse_request(Endpoint::kChat,
                             R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": {"type": "function",
                                 "function": {"name": "now"}}, )" +
                                 tools2 + "}",
                             lim, req));
  EXPECT_FALSE(
      accepts(req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts(req, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  auto e = parse_request(Endpoint::kChat,
                         R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": {"type": "function",
                             "function": {"name": "missing"}}, )" +
                             tools2 + "}",
                         lim, req);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tool_choice");

  const ParsedToolCalls p = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.content, "Let me check.");
  const ParsedToolCalls bad = parse_tool_calls("<tool_call>not json</tool_call>");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>not json</tool_call>");
  EXPECT_EQ(tool_call_holdback("abc <tool"), 4u);
  EXPECT_EQ(tool_call_holdback("abc <tool_call>{"), 4u);
  EXPECT_EQ(tool_call_holdback("abc <b>"), 7u);
}

// The JSON form of Llama 3.1 and Gemma 3 (tok::ToolCallForm::kJson): the answer is one {"name", "parameters"} object;
// the forced grammar writes that object alone, with the tool's parameters schema.
TEST(ServeTools, JsonFormCallsAreParsedAndForced) {
  using tok::ToolCallForm;
  const ParsedToolCalls p =
      parse_tool_calls(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n", ToolCallForm::kJson);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(parse_tool_calls(R"({"name": "now", "arguments": {}})", ToolCallForm::kJson).calls.size(), 1u);
  EXPECT_EQ(parse_tool_calls(R"({"name": "now"})", ToolCallForm::kJson).calls.size(), 1u);
  for (const char* not_call : {R"({"name": "f", "parameters": 3})", R"({"name": "f", "x": 1})", R"({"city": "P"})",
                               "It is sunny.", R"({"name": "f"} and more)"}) {
    const ParsedToolCalls q = parse_tool_calls(not_call, ToolCallForm::kJson);
    EXPECT_TRUE(q.calls.empty()) << not_call;
    EXPECT_EQ(q.content, not_call);
  }
  // The tagged form's text is not a call in the JSON form, and the JSON form's not one in the tagged form.
  EXPECT_TRUE(parse_tool_calls("<tool_call>\n{\"name\": \"f\"}\n</tool_call>", ToolCallForm::kJson).calls.empty());
  EXPECT_TRUE(parse_tool_calls(R"({"name": "f", "parameters": {}})", ToolCallForm::kTagged).calls.empty());
  EXPECT_EQ(tool_call_holdback("  ", ToolCallForm::kJson), 0u);
  EXPECT_EQ(tool_call_holdback(" {\"na", ToolCallForm::kJson), 0u);
  EXPECT_EQ(tool_call_holdback("Sure {", ToolCallForm::kJson), 6u);

  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"({"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
          "now": {"type": "object"}})");
  auto accepts = [](const grammar::Grammar& g, const std::string& text) {
    grammar::Matcher m(g);
    return m.accept_bytes(text) && m.can_end();
  };
  const auto json_form = forced_tool_grammar(ToolCallForm::kJson, tools);
  EXPECT_TRUE(accepts(*json_form, R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));
  EXPECT_TRUE(accepts(*json_form, R"({"name":"now","parameters":{}})"));
  EXPECT_FALSE(accepts(*json_form, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  EXPECT_FALSE(accepts(*json_form, R"({"name": "get_weather", "parameters": {}})"));
  EXPECT_FALSE(accepts(*json_form, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  const auto tagged = forced_tool_grammar(ToolCallForm::kTagged, tools);
  EXPECT_TRUE(accepts(*tagged, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*tagged, R"({"name":"now","parameters":{}})"));
}
}  // namespace
}  // namespace anelab::serve

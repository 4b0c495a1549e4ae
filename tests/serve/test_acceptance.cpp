// Acceptance of `anelab serve` with stories260K + tok512: the real binary on a free loopback port,
// driven by curl and a standard-library Python client (tests/serve/client.py). Answers must equal
// `anelab infer generate` for the same seed / temperature / top-p / max tokens (run here for the
// expected text); malformed requests get 4xx JSON; a 64-client load test passes with only 200/503 and
// stable memory; SIGTERM exits 0. Continuous batching (ServeBatching, a random-weight model made with `convert
// --random`): concurrent greedy requests answer what each answers alone, in shared steps; a client that goes away
// frees its slot. Skips when the shared data is absent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/common/test_data.h"

namespace anelab::serve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kBin = std::string(ANELAB_BINARY_DIR) + "/bin/anelab";
const char* kModel = "llama2c/stories260K.bin";
const char* kTok = "llama2c/tok512.bin";

// Runs a shell command, returns stdout (exit status in *rc).
std::string capture(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  if (rc) *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

struct ServerProc {
  pid_t pid = -1;
  int port = 0;
  fs::path dir;
  std::string model = anelab::test::data_path(kModel);  // the model served
  // Starts `anelab serve` on a free port (--port 0, the port comes back through --port-file).
  bool start(const std::vector<std::string>& extra) {
    dir = anelab::test::temp_dir("serve");
    const std::string port_file = (dir / "port").string(), log = (dir / "server.log").string();
    std::vector<std::string> args = {
        kBin,     "serve", "--model",     model,     "--tokenizer", anelab::test::data_path(kTok),
        "--port", "0",     "--port-file", port_file, "--no-log"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      FILE* f = freopen(log.c_str(), "w", stderr);
      (void)f;
      FILE* g = freopen((dir / "stdout").c_str(), "w", stdout);
      (void)g;
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 600; ++i) {  // 60 s
      std::ifstream pf(port_file);
      if (pf >> port && port > 0) return true;
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  std::string log() const {
    std::ifstream f(dir / "server.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // SIGTERM; returns the exit status (-1 if it did not exit normally within 20 s).
  int stop() {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
  ~ServerProc() {
    if (pid > 0) stop();
  }
};

class ServeAcceptance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(anelab::test::data_path(kModel)) || !fs::exists(anelab::test::data_path(kTok))) return;
    srv_ = new ServerProc;
    if (!srv_->start({"--backend", "cpu", "--parallel", "2", "--queue", "8", "--max-body", "65536"})) {
      ADD_FAILURE() << "server did not start:\n" << srv_->log();
      delete srv_;
      srv_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  void SetUp() override {
    ANELAB_REQUIRE_DATA(kModel);
    ANELAB_REQUIRE_DATA(kTok);
    if (!srv_) GTEST_SKIP() << "no server";
  }
  static std::string url(const std::string& path) { return "http://127.0.0.1:" + std::to_string(srv_->port) + path; }

  // curl POST; returns {status, body}.
  static std::pair<int, std::string> curl(const std::string& method, const std::string& path, const std::string& body) {
    const fs::path f = srv_->dir / "body.json";
    std::ofstream(f, std::ios::binary) << body;
    std::string out = capture("curl -s -S -X " + method + " -H 'Content-Type: application/json' --data-binary @" +
                              f.string() + " -w '\\n%{http_code}' " + anelab::test::sh_quote(url(path)));
    const size_t nl = out.rfind('\n');
    if (nl == std::string::npos) return {0, out};
    return {std::atoi(out.c_str() + nl + 1), out.substr(0, nl)};
  }
  static json py(const std::string& method, const std::string& path, const std::string& body, int disconnect = 0) {
    const fs::path f = srv_->dir / "pybody.json";
    std::ofstream(f, std::ios::binary) << body;
    const std::string cmd = "/usr/bin/python3 " +
                            anelab::test::sh_quote(anelab::test::source_path("tests/serve/client.py")) + " --port " +
                            std::to_string(srv_->port) + " --method " + method + " --path " +
                            anelab::test::sh_quote(path) + (body.empty() ? "" : " --body-file " + f.string()) +
                            (disconnect ? " --disconnect-after " + std::to_string(disconnect) : "");
    return json::parse(capture(cmd), nullptr, false);
  }
  static std::string cli_generate(const std::string& prompt, int max_tokens, double t, double p, int seed) {
    int rc = 0;
    const std::string out =
        capture(kBin + " infer generate --backend cpu --model " + anelab::test::data_path(kModel) + " --tokenizer " +
                    anelab::test::data_path(kTok) + " --prompt " + anelab::test::sh_quote(prompt) + " --max-tokens " +
                    std::to_string(max_tokens) + " --temp " + std::to_string(t) + " --top-p " + std::to_string(p) +
                    " -s " + std::to_string(seed) + " 2>/dev/null",
                &rc);
    EXPECT_EQ(rc, 0);
    return out;
  }
  static inline ServerProc* srv_ = nullptr;
};

TEST_F(ServeAcceptance, HealthAndModels) {
  auto [s1, h] = curl("GET", "/health", "");
  ASSERT_EQ(s1, 200) << h;
  EXPECT_EQ(json::parse(h)["status"], "ok");
  auto [s2, m] = curl("GET", "/v1/models", "");
  ASSERT_EQ(s2, 200);
  const json j = json::parse(m);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "stories260K.bin");
  EXPECT_EQ(j["data"][0]["context_length"], 512);
}

TEST_F(ServeAcceptance, CurlCompletionEqualsCli) {
  struct Case {
    std::string prompt;
    int max_tokens;
    double t, p;
    int seed;
  };
  for (const Case& c : {Case{"Once upon a time", 40, 0.8, 0.9, 42}, Case{"Lily saw a", 60, 1.0, 0.95, 7},
                        Case{"The dog", 25, 0.0, 0.9, 1}}) {
    SCOPED_TRACE(c.prompt);
    const std::string expected = cli_generate(c.prompt, c.max_tokens, c.t, c.p, c.seed);
    ASSERT_FALSE(expected.empty());
    json req{
        {"prompt", c.prompt}, {"max_tokens", c.max_tokens}, {"temperature", c.t}, {"top_p", c.p}, {"seed", c.seed}};
    req["echo"] = true;  // run.c prints the prompt too
    auto [s1, b1] = curl("POST", "/v1/completions", req.dump());
    ASSERT_EQ(s1, 200) << b1;
    const json echo = json::parse(b1);
    EXPECT_EQ(echo["choices"][0]["text"].get<std::string>() + "\n", expected);
    req["echo"] = false;
    auto [s2, b2] = curl("POST", "/v1/completions", req.dump());
    ASSERT_EQ(s2, 200) << b2;
    const json r = json::parse(b2);
    const std::string text = r["choices"][0]["text"];
    ASSERT_GE(expected.size(), text.size() + 1);
    EXPECT_EQ(expected.substr(expected.size() - text.size() - 1), text + "\n");
    EXPECT_EQ(r["text"], text);  // the seeds' simple-form field
    const int64_t gen = r["usage"]["completion_tokens"];
    EXPECT_EQ(r["usage"]["total_tokens"].get<int64_t>(), r["usage"]["prompt_tokens"].get<int64_t>() + gen);
    EXPECT_EQ(r["gen_tokens"], gen);
    if (r["choices"][0]["finish_reason"] == "length") {
      EXPECT_EQ(gen, c.max_tokens);
    }
    EXPECT_GT(r["timings"]["prefill_tps"].get<double>(), 0.0);
    EXPECT_GE(r["decode_tps"].get<double>(), 0.0);
  }
}

TEST_F(ServeAcceptance, PythonStreamEqualsCli) {
  const std::string expected = cli_generate("Once upon a time", 50, 0.7, 0.9, 1234);
  json req{{"prompt", "Once upon a time"},
           {"max_tokens", 50},
           {"temperature", 0.7},
           {"top_p", 0.9},
           {"seed", 1234},
           {"stream", true},
           {"echo", true},
           {"stream_options", {{"include_usage", true}}}};
  const json s = py("POST", "/v1/completions", req.dump());
  ASSERT_EQ(s["status"], 200) << s.dump();
  EXPECT_TRUE(s["done"].get<bool>());
  EXPECT_EQ(s["text"].get<std::string>() + "\n", expected);
  const json& ev = s["events"];
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[ev.size() - 1]["usage"]["completion_tokens"], 50);  // include_usage chunk
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev[0]["object"], "text_completion");
}

// stories260K is a base model (its tok512 vocabulary has no chat tokens): chat requests, and the seeds'
// simple form with `system`, are refused with a hint instead of silently getting the Qwen2.5 template;
// /v1/models says it has no template.
TEST_F(ServeAcceptance, BaseModelRefusesChatWithHint) {
  json req{
      {"messages", {{{"role", "system"}, {"content", "You tell stories."}}, {{"role", "user"}, {"content", "A cat"}}}},
      {"max_tokens", 30},
      {"temperature", 0.9},
      {"seed", 99}};
  for (bool stream : {false, true}) {
    req["stream"] = stream;
    auto [st, sb] = curl("POST", "/v1/chat/completions", req.dump());
    EXPECT_EQ(st, 400) << sb;
    const json e = json::parse(sb, nullptr, false);
    ASSERT_TRUE(e.is_object()) << sb;
    EXPECT_EQ(e["error"]["code"], "no_chat_template") << sb;
    EXPECT_NE(e["error"]["message"].get<std::string>().find("/v1/completions"), std::string::npos) << sb;
  }
  json simple{{"prompt", "A cat"}, {"system", "You tell stories."}, {"max_tokens", 30}};
  auto [st, sb] = curl("POST", "/v1/completions", simple.dump());
  EXPECT_EQ(st, 400) << sb;
  auto [ms, mb] = curl("GET", "/v1/models", "");
  ASSERT_EQ(ms, 200);
  EXPECT_TRUE(json::parse(mb)["data"][0]["chat_template"].is_null()) << mb;
}

TEST_F(ServeAcceptance, MalformedRequestsGet4xxJson) {
  struct Case {
    std::string method, path, body;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/completions", "{\"prompt\": ", 400},
      {"POST", "/v1/completions", "[]", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": \"5\"}", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 100000}", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", \"whatever\": 1}", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", \"n\": 3}", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", \"logprobs\": 21}", 400},
      {"POST", "/v1/completions", "{\"prompt\": [1, 99999]}", 400},
      {"POST", "/v1/completions", "{\"prompt\": \"" + std::string(3000, 'a') + " b\"}", 400},  // over the context
      {"POST", "/v1/completions", "{\"prompt\": \"" + std::string(70000, 'a') + "\"}", 413},
      {"POST", "/v1/chat/completions", "{\"messages\": []}", 400},
      {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 400},
      {"GET", "/v1/chat/completions", "", 405},
      {"PUT", "/health", "", 405},
      {"GET", "/v1/nothing", "", 404},
      {"POST", "/", "{}", 404},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body.substr(0, 80));
    const json r = py(c.method, c.path, c.body);
    ASSERT_TRUE(r.is_object()) << "client failed";
    ASSERT_FALSE(r.contains("error")) << r["error"];
    EXPECT_EQ(r["status"], c.status);
    ASSERT_TRUE(r["body"].is_object()) << r.dump().substr(0, 300);
    EXPECT_TRUE(r["body"]["error"]["message"].is_string());
    EXPECT_TRUE(r["body"]["error"].contains("param"));
    EXPECT_TRUE(r["body"]["error"].contains("code"));
  }
  auto [hs, hb] = curl("GET", "/health", "");
  EXPECT_EQ(hs, 200) << "the server died after malformed requests";
}

// Structured output over HTTP: the story model answers a json_schema request with JSON of that schema, streamed
// or not (the same text for the same seed), and a bad schema is a 400 naming the field.
TEST_F(ServeAcceptance, JsonSchemaOverHttp) {
  const json schema = json::parse(R"({"type": "object", "properties": {"hero": {"type": "string", "maxLength": 12},
      "mood": {"enum": ["happy", "sad"]}, "steps": {"type": "integer"}}, "required": ["hero", "mood", "steps"]})");
  json req = {{"prompt", "Once upon a time"},
              {"max_tokens", 200},
              {"temperature", 0.8},
              {"seed", 5},
              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "story"}, {"schema", schema}}}}}};
  auto [st, body] = curl("POST", "/v1/completions", req.dump());
  ASSERT_EQ(st, 200) << body;
  const json r = json::parse(body);
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << text;
  const json v = json::parse(text, nullptr, false);
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_TRUE(v["hero"].is_string() && v["hero"].get<std::string>().size() <= 12) << text;
  EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad") << text;
  EXPECT_TRUE(v["steps"].is_number_integer()) << text;
  req["stream"] = true;
  const json s = py("POST", "/v1/completions", req.dump());
  ASSERT_TRUE(s.is_object()) << "client failed";
  EXPECT_EQ(s["text"], text);
  req.erase("stream");
  req["response_format"]["json_schema"]["schema"]["properties"]["hero"]["pattern"] = "^[A-Z]";
  auto [bs, bb] = curl("POST", "/v1/completions", req.dump());
  EXPECT_EQ(bs, 400) << bb;
  EXPECT_EQ(json::parse(bb)["error"]["param"], "response_format.json_schema.schema") << bb;
  EXPECT_NE(bb.find("'pattern' is not supported"), std::string::npos) << bb;
}

// logprobs: at temperature 0 each token is the likeliest of its alternatives, the pieces spell the text, and the
// values are run.c's log-softmax (runc_260K_greedy64_logits.json) within the server's fp16-weight error: InferRunc
// bounds a logit's error by 0.1 at fp16, so a log-probability (logit minus log-sum-exp) is within 0.2.
TEST_F(ServeAcceptance, LogprobsMatchRunc) {
  ANELAB_REQUIRE_DATA("reference/runc_260K_greedy64_logits.json");
  auto [st, body] = curl("POST", "/v1/completions",
                         R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3,
                             "cache_prompt": false})");
  ASSERT_EQ(st, 200) << body;
  const json r = json::parse(body);
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << body;
  ASSERT_EQ(lp["tokens"].size(), 12u);
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, r["choices"][0]["text"]);
  std::ifstream f(anelab::test::data_path("reference/runc_260K_greedy64_logits.json"));
  const json ref = json::parse(f);
  int compared = 0;
  for (size_t i = 0; i < 12; ++i) {
    const double got = lp["token_logprobs"][i].get<double>();
    EXPECT_LE(got, 0.0);
    ASSERT_LE(lp["top_logprobs"][i].size(), 3u);
    double best = -1e9;
    for (const auto& [piece, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_DOUBLE_EQ(best, got) << "greedy: the chosen token is the likeliest";
    const json* step = nullptr;
    for (const auto& s : ref["steps"])
      if (s["pos"] == static_cast<int>(4 + i) && s.contains("logits")) step = &s;
    if (!step) continue;
    const auto logits = (*step)["logits"].get<std::vector<double>>();
    const int next = (*step)["next"];
    double mx = -1e30, sum = 0;
    for (double v : logits) mx = std::max(mx, v);
    for (double v : logits) sum += std::exp(v - mx);
    EXPECT_NEAR(got, logits[static_cast<size_t>(next)] - mx - std::log(sum), 0.2) << "token " << i;
    ++compared;
  }
  EXPECT_GE(compared, 3);
  // Streamed: the chunks' entries, concatenated, are the non-streamed answer's. Both without the prompt cache: the
  // server's slots hold this prompt from earlier requests, and a reused prefix leaves the last prompt token to a
  // one-row pass, whose fp32 sums round differently from the five-row prefill's (docs/server.md, "a fresh prefill may
  // round differently").
  const json s = py("POST", "/v1/completions",
                    R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3, "stream": true,
                        "cache_prompt": false})");
  ASSERT_TRUE(s.is_object()) << "client failed";
  std::vector<double> streamed;
  for (const auto& e : s["events"])
    if (e.is_object() && e.contains("choices") && !e["choices"].empty() && e["choices"][0]["logprobs"].is_object())
      for (const auto& v : e["choices"][0]["logprobs"]["token_logprobs"]) streamed.push_back(v.get<double>());
  ASSERT_EQ(streamed.size(), 12u) << s.dump().substr(0, 2000);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(streamed[i], lp["token_logprobs"][i].get<double>()) << i;
}

// Speculative decoding in the server (--draft-max): the same answer as a server without it, with the drafts counted in
// timings and /metrics.
TEST_F(ServeAcceptance, SpeculativeServerAnswersTheSame) {
  ServerProc spec;
  ASSERT_TRUE(spec.start({"--backend", "cpu", "--draft-max", "8"})) << spec.log();
  const json req = {{"prompt",
                     "Once upon a time, there was a little girl named Lily. Lily liked to play. Once upon a "
                     "time, there was a little girl named Lily."},
                    {"max_tokens", 120},
                    {"temperature", 0.7},
                    {"seed", 11}};
  auto [s1, b1] = curl("POST", "/v1/completions", req.dump());
  ASSERT_EQ(s1, 200) << b1;
  const std::string port_url = "http://127.0.0.1:" + std::to_string(spec.port);
  const std::string f = (spec.dir / "req.json").string();
  std::ofstream(f) << req.dump();
  const std::string out = capture("curl -s -S -X POST -H 'Content-Type: application/json' --data-binary @" + f + " " +
                                  port_url + "/v1/completions");
  const json a = json::parse(b1), b = json::parse(out);
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_GT(b["timings"]["draft_n"].get<int>(), 0) << out;
  EXPECT_GT(b["timings"]["draft_n_accepted"].get<int>(), 0) << out;
  const std::string metrics = capture("curl -s " + port_url + "/metrics");
  EXPECT_NE(metrics.find("anelab_draft_tokens_accepted_total"), std::string::npos);
  EXPECT_EQ(spec.stop(), 0);
}

// max_tokens past what the prompt leaves of the context is clamped with a note (llama.cpp clamps too), not refused.
TEST_F(ServeAcceptance, MaxTokensPastTheContextIsClamped) {
  auto [st, body] = curl("POST", "/v1/completions", R"({"prompt": "Once", "max_tokens": 512, "temperature": 0})");
  ASSERT_EQ(st, 200) << body;
  const json r = json::parse(body);
  EXPECT_NE(r.value("note", "").find("max_tokens 512 was clamped to"), std::string::npos) << body;
  EXPECT_LE(r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>() - 1, 512);
}

// llama.cpp's native routes: /completion gives the /v1/completions text for the same request (streamed too, as
// {content, stop} events without [DONE]), /tokenize and /detokenize invert each other, /props and /slots answer.
TEST_F(ServeAcceptance, LlamaCppRoutes) {
  const std::string prompt = "Once upon a time";
  auto [s1, b1] = curl("POST", "/v1/completions",
                       json{{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0.8}, {"seed", 9}}.dump());
  ASSERT_EQ(s1, 200) << b1;
  const std::string want = json::parse(b1)["choices"][0]["text"];
  auto [s2, b2] = curl("POST", "/completion",
                       json{{"prompt", prompt},
                            {"n_predict", 24},
                            {"temperature", 0.8},
                            {"seed", 9},
                            {"cache_prompt", true},
                            {"n_probs", 0},
                            {"some_future_field", 1}}
                           .dump());
  ASSERT_EQ(s2, 200) << b2;
  const json l = json::parse(b2);
  EXPECT_EQ(l["content"], want);
  EXPECT_EQ(l["stop"], true);
  EXPECT_EQ(l["tokens_predicted"], 24);
  EXPECT_EQ(l["stop_type"], "limit");
  EXPECT_GT(l["timings"]["predicted_per_second"].get<double>(), 0.0);
  const json ls =
      py("POST", "/completion",
         json{{"prompt", prompt}, {"n_predict", 24}, {"temperature", 0.8}, {"seed", 9}, {"stream", true}}.dump());
  ASSERT_TRUE(ls.is_object()) << "client failed";
  std::string streamed;
  bool final_stop = false;
  for (const auto& e : ls["events"]) {
    if (!e.is_object()) continue;
    streamed += e.value("content", "");
    final_stop = e.value("stop", false);
  }
  EXPECT_EQ(streamed, want);
  EXPECT_TRUE(final_stop);
  EXPECT_FALSE(ls.value("done", false)) << "llama.cpp's stream has no [DONE]";
  auto [bs, bb] = curl("POST", "/completion", json{{"prompt", prompt}, {"mirostat", 2}}.dump());
  EXPECT_EQ(bs, 400) << bb;
  EXPECT_EQ(json::parse(bb)["error"]["param"], "mirostat");

  auto [ts, tb] = curl("POST", "/tokenize", json{{"content", prompt}, {"with_pieces", true}}.dump());
  ASSERT_EQ(ts, 200) << tb;
  json ids = json::array();
  std::string joined;
  const json tj = json::parse(tb);
  for (const auto& t : tj["tokens"]) {
    ids.push_back(t["id"]);
    joined += t["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, prompt);
  auto [ds, db] = curl("POST", "/detokenize", json{{"tokens", ids}}.dump());
  ASSERT_EQ(ds, 200) << db;
  EXPECT_EQ(json::parse(db)["content"], prompt);
  auto [bt, btb] = curl("POST", "/detokenize", R"({"tokens": [1, 99999]})");
  EXPECT_EQ(bt, 400) << btb;
  EXPECT_NE(btb.find("99999"), std::string::npos);
  auto [ps, pb] = curl("GET", "/props", "");
  ASSERT_EQ(ps, 200) << pb;
  EXPECT_EQ(json::parse(pb)["total_slots"], 2);
  EXPECT_EQ(json::parse(pb)["default_generation_settings"]["n_ctx"], 512);
  auto [ss, sb] = curl("GET", "/slots", "");
  ASSERT_EQ(ss, 200) << sb;
  EXPECT_EQ(json::parse(sb).size(), 2u);
}

TEST_F(ServeAcceptance, DisconnectedStreamIsCancelled) {
  const json before = json::parse(curl("GET", "/health", "").second);
  // 500 new tokens; the client leaves after 2 events. On this tiny model the whole generation may
  // finish before the server notices, so only "did not crash, still serving" is required here; the
  // cancel path itself is tested deterministically in test_http_fake.cpp.
  json req{{"prompt", "Once"}, {"max_tokens", 500}, {"stream", true}, {"seed", 5}};
  const json r = py("POST", "/v1/completions", req.dump(), 2);
  EXPECT_EQ(r["events"].size(), 2u);
  const json after = json::parse(curl("GET", "/health", "").second);
  EXPECT_GE(after["completed"].get<int64_t>() + after["cancelled"].get<int64_t>(),
            before["completed"].get<int64_t>() + before["cancelled"].get<int64_t>());
}

TEST_F(ServeAcceptance, LoadTest64Clients) {
  int rc = 0;
  const std::string out =
      capture("/usr/bin/python3 " + anelab::test::sh_quote(anelab::test::source_path("scripts/serve_load_test.py")) +
                  " --port " + std::to_string(srv_->port) + " --pid " + std::to_string(srv_->pid) +
                  " --clients 64 --requests 320 --max-tokens 48 --retries 2",
              &rc);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
  const json s = json::parse(out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << out;
  EXPECT_EQ(s["requests"], 320);
  EXPECT_GT(s["status"].value("200", 0), 0);
  auto [hs, hb] = curl("GET", "/health", "");
  EXPECT_EQ(hs, 200);
}

TEST(ServeAcceptanceLifecycle, SigtermDuringStreamExitsZero) {
  ANELAB_REQUIRE_DATA(kModel);
  ANELAB_REQUIRE_DATA(kTok);
  ServerProc p;
  ASSERT_TRUE(p.start({"--backend", "cpu", "--shutdown-grace", "5"})) << p.log();
  // a stream in flight while the signal arrives
  std::thread client([&] {
    capture("/usr/bin/python3 " + anelab::test::sh_quote(anelab::test::source_path("tests/serve/client.py")) +
            " --port " + std::to_string(p.port) +
            " --body '{\"prompt\": \"Once\", \"max_tokens\": 400, \"stream\": true}' >/dev/null");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(p.stop(), 0) << p.log();
  client.join();
  EXPECT_NE(p.log().find("SIGTERM received"), std::string::npos) << p.log();
}

TEST(ServeAcceptanceLifecycle, EmulatorBackendEqualsCli) {
  ANELAB_REQUIRE_DATA(kModel);
  ANELAB_REQUIRE_DATA(kTok);
  ServerProc p;
  ASSERT_TRUE(p.start({"--backend", "emulator", "--warmup", "32"})) << p.log();
  int rc = 0;
  const std::string expected =
      capture(kBin + " infer generate --backend emulator --model " + anelab::test::data_path(kModel) + " --tokenizer " +
                  anelab::test::data_path(kTok) +
                  " --prompt 'Once upon a time' --max-tokens 30 --temp 0.8 --top-p 0.9 -s 3 2>/dev/null",
              &rc);
  ASSERT_EQ(rc, 0);
  const std::string body =
      R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0.8, "top_p": 0.9, "seed": 3, "echo": true})";
  const std::string out = capture("curl -s -X POST --data-binary " + anelab::test::sh_quote(body) +
                                  " http://127.0.0.1:" + std::to_string(p.port) + "/v1/completions");
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>() + "\n", expected);
  EXPECT_EQ(p.stop(), 0);
}

}  // namespace
}  // namespace anelab::serve

namespace anelab::serve {
namespace {

// Continuous batching (one engine, --parallel slots, infer/batch.h) on a random-weight model slow enough that requests
// overlap (dim 512, 6 layers: a few ms per token here): concurrent greedy requests answer what each answers alone,
// the steps really batch them (/metrics), and a client that goes away frees its slot at the next step.
class ServeBatching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(anelab::test::data_path(kTok))) return;
    const fs::path dir = anelab::test::temp_dir("serve_batch");
    const std::string m = (dir / "random.gguf").string();
    int rc = 0;
    const std::string out = capture(
        kBin + " convert --random qwen2.5-0.5b " + m + " --dtype fp16 --shape " +
            anelab::test::sh_quote(R"({"dim": 512, "hidden_dim": 1536, "n_layers": 6, "n_heads": 8, "n_kv_heads": 2, )"
                                   R"("head_dim": 64, "vocab_size": 512, "max_seq_len": 1024})") +
            " 2>&1",
        &rc);
    if (rc != 0) {
      ADD_FAILURE() << "convert --random failed:\n" << out;
      return;
    }
    srv_ = new ServerProc;
    srv_->model = m;
    if (!srv_->start({"--backend", "cpu", "--parallel", "4", "--queue", "8", "--threads", "2"})) {
      ADD_FAILURE() << "server did not start:\n" << srv_->log();
      delete srv_;
      srv_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  void SetUp() override {
    ANELAB_REQUIRE_DATA(kTok);
    if (!srv_) GTEST_SKIP() << "no server";
  }
  static std::string batch_url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(srv_->port) + path;
  }
  static std::string get(const std::string& path) {
    return capture("curl -s -S " + anelab::test::sh_quote(batch_url(path)));
  }
  static json complete(const json& body, const std::string& tag) {
    const fs::path f = srv_->dir / ("batch_" + tag + ".json");
    std::ofstream(f, std::ios::binary) << body.dump();
    return json::parse(capture("curl -s -S -H 'Content-Type: application/json' --data-binary @" + f.string() + " " +
                               anelab::test::sh_quote(batch_url("/v1/completions"))),
                       nullptr, false);
  }
  // A counter or gauge of /metrics (the sum of its series whose labels contain `label`).
  static double metric(const std::string& name, const std::string& label = "") {
    const std::string text = get("/metrics");
    double sum = 0;
    for (size_t at = 0; (at = text.find(name, at)) != std::string::npos; at += name.size()) {
      if (at > 0 && text[at - 1] != '\n') continue;
      const size_t eol = text.find('\n', at);
      const std::string line = text.substr(at, eol - at);
      const size_t sp = line.rfind(' ');
      const std::string key = line.substr(0, sp);
      if (key != name && key.rfind(name + "{", 0) != 0) continue;
      if (!label.empty() && key.find(label) == std::string::npos) continue;
      sum += std::atof(line.c_str() + sp + 1);
    }
    return sum;
  }
  static bool all_slots_idle() {
    const json s = json::parse(get("/slots"), nullptr, false);
    if (!s.is_array()) return false;
    for (const auto& x : s)
      if (x.value("is_processing", true) || x.value("state", "") != "idle") return false;
    return true;
  }
  static inline ServerProc* srv_ = nullptr;
};

TEST_F(ServeBatching, ConcurrentGreedyRequestsAnswerWhatEachAnswersAlone) {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat sat", "Lily and Tom went", "A big red ball"};
  auto body = [&](size_t i) {
    return json{{"prompt", prompts[i]}, {"max_tokens", 96}, {"temperature", 0}, {"cache_prompt", false}};
  };
  std::vector<json> alone(prompts.size()), together(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) alone[i] = complete(body(i), "alone" + std::to_string(i));
  const double multi0 =
      metric("anelab_batch_steps_by_size_total") - metric("anelab_batch_steps_by_size_total", "size=\"1\"");
  std::vector<std::thread> ts;
  for (size_t i = 0; i < prompts.size(); ++i)
    ts.emplace_back([&, i] { together[i] = complete(body(i), "together" + std::to_string(i)); });
  for (auto& t : ts) t.join();
  const double multi1 =
      metric("anelab_batch_steps_by_size_total") - metric("anelab_batch_steps_by_size_total", "size=\"1\"");
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(alone[i].contains("choices")) << alone[i].dump();
    ASSERT_TRUE(together[i].contains("choices")) << together[i].dump();
    EXPECT_EQ(together[i]["choices"][0]["text"], alone[i]["choices"][0]["text"]) << prompts[i];
    EXPECT_EQ(together[i]["usage"]["completion_tokens"], alone[i]["usage"]["completion_tokens"]) << prompts[i];
  }
  // The concurrent requests shared steps of 2 or more tokens (one engine, batched), not one step per request.
  EXPECT_GT(multi1 - multi0, 10.0) << get("/metrics");
  EXPECT_GT(metric("anelab_batch_decode_tokens_total"), metric("anelab_batch_steps_total"));
  // The stepping thread's time: in the decode steps and the prompt chunks, both run here.
  EXPECT_GT(metric("anelab_batch_decode_seconds_total"), 0.0) << get("/metrics");
  EXPECT_GT(metric("anelab_batch_prefill_seconds_total"), 0.0) << get("/metrics");
}

TEST_F(ServeBatching, ClientThatGoesAwayFreesItsSlot) {
  // 500 tokens take seconds here; each client leaves early: a stream after 2 events, a plain request after 0.5 s.
  const double decoded0 = metric("anelab_batch_decode_tokens_total");
  const json req{{"prompt", "Once"}, {"max_tokens", 500}, {"temperature", 0}, {"stream", true}};
  const fs::path f = srv_->dir / "batch_cancel.json";
  std::ofstream(f, std::ios::binary) << req.dump();
  capture("/usr/bin/python3 " + anelab::test::sh_quote(anelab::test::source_path("tests/serve/client.py")) +
          " --port " + std::to_string(srv_->port) + " --method POST --path /v1/completions --body-file " + f.string() +
          " --disconnect-after 2");
  json plain = req;
  plain["stream"] = false;
  const fs::path g = srv_->dir / "batch_cancel_plain.json";
  std::ofstream(g, std::ios::binary) << plain.dump();
  capture("curl -s -m 0.5 -H 'Content-Type: application/json' --data-binary @" + g.string() + " " +
          anelab::test::sh_quote(batch_url("/v1/completions")) + " >/dev/null 2>&1");
  bool idle = false;
  for (int i = 0; i < 50 && !(idle = all_slots_idle()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(idle) << get("/slots");
  // Fewer than the 1000 tokens asked for were decoded: both generations stopped when their client left.
  EXPECT_LT(metric("anelab_batch_decode_tokens_total") - decoded0, 500.0);
  const json h = json::parse(get("/health"), nullptr, false);
  EXPECT_GE(h.value("cancelled", 0), 2) << h.dump();
  // and the slots serve again
  const json r = complete(json{{"prompt", "Once"}, {"max_tokens", 8}, {"temperature", 0}}, "after");
  EXPECT_GE(r["usage"].value("completion_tokens", 0), 1) << r.dump();
}

}  // namespace
}  // namespace anelab::serve

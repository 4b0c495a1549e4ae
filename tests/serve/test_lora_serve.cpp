// Per-request LoRA adapters in the server (llama.cpp's GET / POST /lora-adapters and the request's `lora` field
// [{"id", "scale"}], an adapter not listed at 0): the adapters are runtime products of the engine (Engine::add_lora),
// so requests with different adapters share the batch. stories260K in process, greedy; skipped without the data.
//   - a request whose adapters are all at scale 0 answers as the server without adapters;
//   - scale 1 answers as the server on the merged model (models::merge_lora: what `export --fuse` writes);
//   - two requests with different adapters running at once on two slots each answer what they answer alone;
//   - the prompt cache is not reused across adapter sets;
//   - GET / POST /lora-adapters over HTTP; a bad id or scale is a 400 naming the field.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "infer/server/http_server.h"
#include "models/arch/tensors.h"
#include "models/io/adapter.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/lora_adapter.h"
#include "tests/common/test_data.h"
#include "tests/serve/http_test_helpers.h"
#include "tests/serve/stories_pool.h"

namespace anelab::serve {
namespace {

// Strong enough to change greedy answers.
models::LoraAdapter lora_serve_adapter(const models::ModelConfig& c, uint64_t seed) {
  return anelab::test::seeded_lora_adapter(c, 4, 8.0f, seed, 0.3f);
}

struct LoraServeFiles {
  std::string dir, model, tok, a0, a1, merged0;  // adapters: a0 GGUF, a1 PEFT; merged0: the model with a0 merged
};

// Writes the adapters and the merged model; nullopt when the shared data is absent.
std::optional<LoraServeFiles> lora_serve_files() {
  LoraServeFiles f;
  f.model = anelab::test::data_path("llama2c/stories260K.bin");
  f.tok = anelab::test::data_path("llama2c/tok512.bin");
  if (!std::filesystem::exists(f.model) || !std::filesystem::exists(f.tok)) return std::nullopt;
  f.dir = anelab::test::temp_dir("lora_serve").string();
  models::Model m = models::load_any_model(f.model);
  const models::LoraAdapter a0 = lora_serve_adapter(m.config, 11), a1 = lora_serve_adapter(m.config, 29);
  f.a0 = f.dir + "/a0.gguf", f.a1 = f.dir + "/a1";
  models::write_gguf_adapter(a0, m.config, f.a0);
  models::write_peft_adapter(a1, m.config, f.a1);
  models::merge_lora(m, models::read_lora_adapter(f.a0, m.config), 1.0f);  // as the server reads it
  f.merged0 = f.dir + "/merged0.anelab";
  models::save_model(m, f.merged0);
  return f;
}

std::unique_ptr<ModelPool> lora_serve_pool(const std::string& model, const std::string& tok,
                                           std::vector<std::string> lora, size_t workers) {
  ModelOptions o;
  o.load.model = model, o.load.tokenizer = tok, o.load.backend = "cpu", o.load.dtype = "fp32";
  o.load.lora = std::move(lora);
  o.warmup_tokens = 0;
  return std::make_unique<ModelPool>(o, workers);
}

std::string lora_serve_body(const nlohmann::json& lora) {
  nlohmann::json b{{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  if (!lora.is_null()) b["lora"] = lora;
  return b.dump();
}

GenOutcome lora_serve_run(ModelPool& pool, const std::string& body, size_t worker = 0) {
  return test::run_completion(pool, body, worker);
}

TEST(LoraServe, PerRequestAdaptersAnswerAsTheBaseAndAsTheMergedModel) {
  auto f = lora_serve_files();
  if (!f) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  auto base = lora_serve_pool(f->model, f->tok, {}, 1);
  auto merged = lora_serve_pool(f->merged0, f->tok, {}, 1);
  auto pool = lora_serve_pool(f->model, f->tok, {f->a0, f->a1}, 1);
  const std::string want_base = lora_serve_run(*base, lora_serve_body(nullptr)).text;
  const std::string want_merged = lora_serve_run(*merged, lora_serve_body(nullptr)).text;
  ASSERT_NE(want_base, want_merged) << "the adapter must change the answer for the test to mean anything";
  // Scale 0 on both (an empty list: every adapter not listed is 0) is the base; adapter 0 at 1 is the merged model.
  EXPECT_EQ(lora_serve_run(*pool, lora_serve_body({{{"id", 0}, {"scale", 0}}, {{"id", 1}, {"scale", 0.0}}})).text,
            want_base);
  EXPECT_EQ(lora_serve_run(*pool, lora_serve_body(nlohmann::json::array())).text, want_base);
  const GenOutcome one = lora_serve_run(*pool, lora_serve_body({{{"id", 0}, {"scale", 1}}}));
  EXPECT_EQ(one.text, want_merged);
  EXPECT_EQ(one.usage.cached_tokens, 0) << "the prompt cache held K/V of other adapters";
  // Without the field a request takes the global scales: --lora-scale's default 1 on both adapters, then POST's.
  const nlohmann::json listed = pool->lora_adapters();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0], (nlohmann::json{{"id", 0}, {"path", f->a0}, {"scale", 1.0}}));
  EXPECT_EQ(listed[1]["path"], f->a1);
  EXPECT_FALSE(pool->set_lora({{0, 1.0}}));  // adapter 1 not listed: 0
  EXPECT_EQ(pool->lora_adapters()[1]["scale"], 0.0);
  EXPECT_EQ(lora_serve_run(*pool, lora_serve_body(nullptr)).text, want_merged);
  EXPECT_FALSE(pool->set_lora({}));
  EXPECT_EQ(lora_serve_run(*pool, lora_serve_body(nullptr)).text, want_base);
  std::filesystem::remove_all(f->dir);
}

TEST(LoraServe, ConcurrentRequestsWithDifferentAdaptersEachAnswerAsAlone) {
  auto f = lora_serve_files();
  if (!f) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  auto pool = lora_serve_pool(f->model, f->tok, {f->a0, f->a1}, 2);
  const std::string bodies[2] = {lora_serve_body({{{"id", 0}, {"scale", 1}}}),
                                 lora_serve_body({{{"id", 1}, {"scale", 0.75}}, {{"id", 0}, {"scale", -0.5}}})};
  std::string alone[2];
  for (int i = 0; i < 2; ++i) alone[i] = lora_serve_run(*pool, bodies[i], 0).text;
  ASSERT_NE(alone[0], alone[1]);
  for (int round = 0; round < 3; ++round) {  // both slots decode in the same batched steps
    GenOutcome got[2];
    std::thread t0([&] { got[0] = lora_serve_run(*pool, bodies[0], 0); });
    std::thread t1([&] { got[1] = lora_serve_run(*pool, bodies[1], 1); });
    t0.join(), t1.join();
    EXPECT_EQ(got[0].text, alone[0]) << "round " << round;
    EXPECT_EQ(got[1].text, alone[1]) << "round " << round;
  }
  EXPECT_GT(pool->batch().steps, 0u);
  std::filesystem::remove_all(f->dir);
}

// The cross-slot prompt cache copies a prefix only from a slot whose K/V were computed with the request's scales.
TEST(LoraServe, AnotherSlotsPrefixIsReusedOnlyWithTheSameScales) {
  auto f = lora_serve_files();
  if (!f) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  auto pool = lora_serve_pool(f->model, f->tok, {f->a0}, 2);
  const std::string base_body = lora_serve_body({{{"id", 0}, {"scale", 0}}});
  const GenOutcome first = lora_serve_run(*pool, base_body, 0);  // slot 0: the prompt at scale 0
  const GenOutcome other = lora_serve_run(*pool, lora_serve_body({{{"id", 0}, {"scale", 1}}}), 1);
  EXPECT_EQ(other.usage.cached_tokens, 0) << "slot 1 copied K/V of scale 0 for a request at scale 1";
  const GenOutcome again = lora_serve_run(*pool, base_body, 1);  // slot 1 holds scale 1; slot 0 scale 0
  EXPECT_GT(again.usage.cached_tokens, 0) << "slot 0's prefix of the same scales was not reused";
  EXPECT_EQ(again.text, first.text);
}

TEST(LoraServe, BadIdsAndScalesAreRefusedNamingTheField) {
  auto f = lora_serve_files();
  if (!f) GTEST_SKIP() << "shared data absent: llama2c/stories260K.bin";
  auto pool = lora_serve_pool(f->model, f->tok, {f->a0}, 1);
  auto parse_error = [](const std::string& body) {
    CompletionRequest r;
    auto e = parse_request(Endpoint::kChat, body, Limits{}, r);
    return e ? e->param + ": " + e->message : std::string("accepted");
  };
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "lora": )";
  EXPECT_EQ(parse_error(chat + R"([{"id": 0, "scale": "1"}]})"),
            "lora[0].scale: lora[0].scale must be a finite number (an fp32 value)");
  EXPECT_EQ(parse_error(chat + R"([{"id": 0, "scale": 1e39}]})"),
            "lora[0].scale: lora[0].scale must be a finite number (an fp32 value)");
  EXPECT_EQ(parse_error(chat + R"([{"id": 0}]})"),
            "lora[0].scale: lora[0].scale must be a finite number (an fp32 value)");
  EXPECT_EQ(parse_error(chat + R"([{"id": 0, "scale": 1}, {"id": -1, "scale": 1}]})"),
            "lora[1].id: lora[1].id must be an integer >= 0 (an id of GET /lora-adapters)");
  EXPECT_EQ(parse_error(chat + R"({"id": 0}})"),
            "lora: 'lora' must be an array of {\"id\": integer, \"scale\": number} (got an object)");
  // An id past the adapters: refused by the pool (it knows how many there are).
  CompletionRequest r;
  ASSERT_FALSE(parse_request(Endpoint::kLlama, R"({"prompt": "x", "lora": [{"id": 1, "scale": 1}]})", Limits{}, r));
  ASSERT_TRUE(r.lora.has_value());
  GenParams p;
  const auto e = pool->prepare(r, p);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "lora[0].id");
  EXPECT_EQ(e->message, "lora[0].id 1 is not an adapter (ids 0..0)");
  const auto se = pool->set_lora({{0, 1.0}, {3, 1.0}});
  ASSERT_TRUE(se);
  EXPECT_EQ(se->param, "[1].id");
  EXPECT_EQ(pool->lora_adapters()[0]["scale"], 1.0) << "a refused POST changed the scales";

  // Over HTTP: GET lists, POST sets, bad bodies are 400.
  ServerOptions so;
  so.port = 0, so.log_requests = false;
  HttpServer srv(*pool, so);
  const int port = srv.bind();
  std::thread th([&] { srv.run(); });
  while (!srv.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  using test::body_json, test::request, test::roundtrip, test::status_of;
  std::string resp = roundtrip(port, request("GET", "/lora-adapters", ""));
  EXPECT_EQ(status_of(resp), 200);
  EXPECT_EQ(body_json(resp), (nlohmann::json::array({{{"id", 0}, {"path", f->a0}, {"scale", 1.0}}})));
  resp = roundtrip(port, request("POST", "/lora-adapters", R"([{"id": 0, "scale": 0.5}])"));
  EXPECT_EQ(status_of(resp), 200);
  EXPECT_EQ(body_json(resp), (nlohmann::json{{"success", true}}));
  EXPECT_EQ(pool->lora_adapters()[0]["scale"], 0.5);
  resp = roundtrip(port, request("POST", "/lora-adapters", R"([{"id": 0, "scale": null}])"));
  EXPECT_EQ(status_of(resp), 400);
  EXPECT_EQ(body_json(resp)["error"]["param"], "[0].scale");
  resp = roundtrip(port, request("POST", "/lora-adapters", R"([{"id": 2, "scale": 1}])"));
  EXPECT_EQ(status_of(resp), 400);
  EXPECT_EQ(body_json(resp)["error"]["message"], "[0].id 2 is not an adapter (ids 0..0)");
  resp = roundtrip(
      port, request("POST", "/completion", R"({"prompt": "x", "n_predict": 2, "lora": [{"id": 5, "scale": 1}]})"));
  EXPECT_EQ(status_of(resp), 400);
  EXPECT_EQ(body_json(resp)["error"]["param"], "lora[0].id");
  EXPECT_EQ(status_of(roundtrip(port, request("DELETE", "/lora-adapters", ""))), 405);
  srv.stop();
  th.join();
  std::filesystem::remove_all(f->dir);
}

}  // namespace
}  // namespace anelab::serve

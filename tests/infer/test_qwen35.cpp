// Qwen3.5 (models/arch/qwen35.cpp) on the CPU engine: the tiny Hugging Face fixture tests/fixtures/hf/qwen35_bf16
// (3 Gated DeltaNet layers + 1 gated full-attention layer, scripts/make_hf_fixtures.py) against transformers' fp32
// logits (reference_qwen35_bf16.json) at every position, prefill and token-by-token decode; greedy continuations;
// the chunked prefill against the recurrent decode of the same prompt; the recurrent state's refusal to rewind;
// the state and KV bytes of a 4096 context; config.json in both styles and its malformed forms; the anelab config
// JSON round trip; the GGUF export (llama.cpp's qwen35 layout) run bit-identically at f32 and f16 storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <span>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/arch/arch.h"
#include "models/formats/model_config_json.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/sampler.h"
#include "tests/common/test_data.h"
#include "tests/infer/hf_reference.h"

namespace anelab::infer {
namespace {

const nlohmann::json& q35_reference() {
  return test::hf_reference("reference_qwen35_bf16.json")["models"]["qwen35_bf16"];
}

Engine q35_engine(int64_t prefill_chunk = 256, int64_t context = 0) {
  EngineOptions o;
  o.backend = "cpu";
  o.dtype = WType::kF32;
  o.quiet = true;
  o.prefill_chunk = prefill_chunk;
  o.context = context;
  return Engine(models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16")), o);
}

// The fp32 engine against transformers' fp32 logits (both from the same bf16 weights): what differs is the fp32
// summation order, as for the other fixtures (hf_reference.h: 1e-5 of the logit range).
TEST(Qwen35, CpuFp32PrefillLogitsMatchTransformers) {
  Engine e = q35_engine();
  const auto& m = q35_reference();
  const int64_t V = e.config().vocab_size;
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> all;
    e.prefill(prompt, 0, &all);
    for (size_t t = 0; t < prompt.size(); ++t)
      EXPECT_LT(test::hf_rel_err(all.data() + t * V, m["logits"][p][t].get<std::vector<float>>()),
                test::hf_fp32_tol("qwen35_bf16"))
          << "prompt " << p << " pos " << t;
  }
}

// The fixture through anelab's GGUF export (llama.cpp's qwen35 layout: value heads tiled, A = -exp(A_log), norms
// 1 + w) and back runs bit-identically: with f32 and with f16 matrices stored, against the fixture itself on an
// engine of that weight dtype (the same values reach the same arithmetic).
TEST(Qwen35, GgufExportRunsBitIdenticallyAtF32AndF16Storage) {
  const models::Model src = models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16"));
  const auto& ref = q35_reference();
  const std::filesystem::path dir = test::temp_dir("q35gguf");
  const struct {
    models::DType stored;
    WType engine;
  } cases[] = {{models::DType::kF32, WType::kF32}, {models::DType::kF16, WType::kF16}};
  for (const auto& k : cases) {
    const std::string path = (dir / (std::string(models::dtype_name(k.stored)) + ".gguf")).string();
    models::export_model(src, path, models::ExportFormat::kGguf, k.stored);
    EngineOptions o;
    o.backend = "cpu";
    o.dtype = k.engine;
    o.quiet = true;
    Engine a(models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16")), o);
    Engine b(models::load_any_model(path), o);
    ASSERT_EQ(b.config().arch, "qwen35");
    const int64_t V = a.config().vocab_size;
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
      const auto prompt = ref["prompts"][p].get<std::vector<int32_t>>();
      std::vector<float> la, lb;
      a.prefill(prompt, 0, &la);
      b.prefill(prompt, 0, &lb);
      ASSERT_EQ(la.size(), prompt.size() * static_cast<size_t>(V));
      ASSERT_EQ(lb.size(), la.size());
      EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << models::dtype_name(k.stored) << " prompt " << p;
      const float* da = a.decode(7, static_cast<int64_t>(prompt.size()));
      const std::vector<float> keep(da, da + V);
      const float* db = b.decode(7, static_cast<int64_t>(prompt.size()));
      EXPECT_EQ(std::memcmp(keep.data(), db, static_cast<size_t>(V) * 4), 0) << models::dtype_name(k.stored);
    }
  }
}

// The fixture exported as a Hugging Face directory: config.json holds the fixture's own keys and values (what
// transformers 5.x wrote for it), and the directory runs bit-identically to the fixture.
TEST(Qwen35, HfExportHasTransformersConfigAndRunsBitIdentically) {
  const std::string fix = test::source_path("tests/fixtures/hf/qwen35_bf16");
  const std::filesystem::path dir = test::temp_dir("q35hf");
  const std::string out = (dir / "q35").string();
  models::export_model(models::load_any_model(fix), out, models::ExportFormat::kSafetensors);
  const nlohmann::json want = nlohmann::json::parse(std::ifstream(fix + "/config.json"));
  const nlohmann::json got = nlohmann::json::parse(std::ifstream(out + "/config.json"));
  for (const auto& [k, v] : want.items()) {
    // (training-time and bookkeeping keys: dtype and the ids come from the weights and the vocab)
    if (k == "dtype" || k == "transformers_version" || k == "use_cache" || k == "attention_dropout" ||
        k == "initializer_range" || k == "pad_token_id" || k == "bos_token_id" || k == "eos_token_id")
      continue;
    ASSERT_TRUE(got.contains(k)) << k;
    EXPECT_EQ(got[k], v) << k;
  }
  EXPECT_FALSE(got.contains("rope_theta"));  // 5.x: inside rope_parameters
  EngineOptions o;
  o.backend = "cpu";
  o.dtype = WType::kF32;
  o.quiet = true;
  Engine a(models::load_any_model(fix), o), b(models::load_any_model(out), o);
  const auto& ref = q35_reference();
  const int64_t V = a.config().vocab_size;
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto prompt = ref["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> la, lb;
    a.prefill(prompt, 0, &la);
    b.prefill(prompt, 0, &lb);
    ASSERT_EQ(la.size(), prompt.size() * static_cast<size_t>(V));
    ASSERT_EQ(lb.size(), la.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << "prompt " << p;
  }
}

// fp16 weight matrices (the engine's f16 GEMV) against the same fp32 reference, prefill (chunked) and decode
// (recurrent), within the tolerance the other fixtures' fp16 runs use (hf_reference.h: per-weight rounding 2^-11,
// about 1e-3 of the logit range; 1e-2). (The fixture's bf16 weights are exact in fp16: what this measures is the
// f16 path itself, 4.2e-6 of the range when written.)
TEST(Qwen35, CpuFp16LogitsMatchTransformers) {
  EngineOptions o;
  o.backend = "cpu";
  o.dtype = WType::kF16;
  o.quiet = true;
  Engine e(models::load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16")), o);
  const auto& m = q35_reference();
  const int64_t V = e.config().vocab_size;
  double worst = 0;
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> all;
    e.prefill(prompt, 0, &all);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto ref = m["logits"][p][t].get<std::vector<float>>();
      const double err = test::hf_rel_err(all.data() + t * V, ref);
      worst = std::max(worst, err);
      EXPECT_LT(err, test::kHfFp16Tol) << "prefill prompt " << p << " pos " << t;
    }
    for (size_t t = 0; t < prompt.size(); ++t) {
      const float* lg = e.decode(prompt[t], static_cast<int64_t>(t));
      const double err = test::hf_rel_err(lg, m["logits"][p][t].get<std::vector<float>>());
      worst = std::max(worst, err);
      EXPECT_LT(err, test::kHfFp16Tol) << "decode prompt " << p << " pos " << t;
    }
  }
  std::printf("qwen35 fp16 weights: worst max|err| / max|ref| = %.3g\n", worst);
}

TEST(Qwen35, CpuFp32DecodeLogitsMatchTransformers) {
  Engine e = q35_engine();
  const auto& m = q35_reference();
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    for (size_t t = 0; t < prompt.size(); ++t) {
      const float* lg = e.decode(prompt[t], static_cast<int64_t>(t));
      EXPECT_LT(test::hf_rel_err(lg, m["logits"][p][t].get<std::vector<float>>()), test::hf_fp32_tol("qwen35_bf16"))
          << "prompt " << p << " pos " << t;
    }
  }
}

TEST(Qwen35, GreedyContinuationCpuFp32) {
  Engine e = q35_engine();
  const auto& m = q35_reference();
  const int64_t V = e.config().vocab_size;
  for (size_t p = 0; p < m["prompts"].size(); ++p) {
    const auto prompt = m["prompts"][p].get<std::vector<int32_t>>();
    const auto want = m["greedy"][p].get<std::vector<int32_t>>();
    const float* lg = e.prefill(prompt, 0);
    std::vector<int32_t> got;
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(models::argmax(std::span<const float>(lg, static_cast<size_t>(V))));
      if (i + 1 < want.size()) lg = e.decode(got.back(), pos++);
    }
    EXPECT_EQ(got, want) << "prompt " << p;
  }
}

// A 150-token prompt (chunks of the delta rule: 64, 64, 22) prefilled whole and in engine passes of 37 tokens (the
// state carried from pass to pass) against token-by-token decode (the recurrent step). The same real numbers in a
// different fp32 order: per layer dot products of at most max(dim, conv_dim, 64-token chunks) terms, unit roundoff
// 2^-24, over n_layers layers, relative to the logit range.
TEST(Qwen35, ChunkedPrefillEqualsRecurrentDecode) {
  std::mt19937 rng(36);
  std::vector<int32_t> prompt(150);
  Engine dec = q35_engine();
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(dec.config().vocab_size));
  const auto& c = dec.config();
  const double terms = static_cast<double>(std::max({c.dim, c.linear_conv_dim(), int64_t{64}}));
  const double tol = static_cast<double>(c.n_layers) * terms * std::ldexp(1.0, -24);
  const int64_t V = c.vocab_size;
  std::vector<float> ref;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* lg = dec.decode(prompt[t], static_cast<int64_t>(t));
    ref.insert(ref.end(), lg, lg + V);
  }
  for (int64_t chunk : {256, 37}) {
    Engine e = q35_engine(chunk);
    std::vector<float> all;
    e.prefill(prompt, 0, &all);
    ASSERT_EQ(all.size(), ref.size());
    for (size_t t = 0; t < prompt.size(); ++t) {
      const std::vector<float> want(ref.begin() + static_cast<int64_t>(t) * V,
                                    ref.begin() + static_cast<int64_t>(t + 1) * V);
      EXPECT_LT(test::hf_rel_err(all.data() + static_cast<int64_t>(t) * V, want), tol)
          << "engine pass " << chunk << " pos " << t;
    }
    EXPECT_EQ(e.state_pos(), static_cast<int64_t>(prompt.size()));
  }
}

TEST(Qwen35, RecurrentStateRefusesToRewind) {
  Engine e = q35_engine();
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  e.prefill(prompt, 0);
  try {
    e.decode(3, 3);
    FAIL() << "a decode at position 3 after 5 tokens was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cannot rewind"), std::string::npos) << err.what();
  }
  e.prefill(prompt, 0);  // from position 0 the state starts again
  EXPECT_EQ(e.state_pos(), 5);
}

// Engine::save_seq / restore_seq (the server's prompt store, --cache-ram, and slot files): the K/V rows of the
// attention layers and the recurrent states after a 40-token prefix, restored into another engine that held another
// sequence, continue bit for bit as the engine that took them (the same bytes through the same kernels), prefill and
// greedy decode, and within ChunkedPrefillEqualsRecurrentDecode's tolerance of a fresh prefill of the whole prompt. A
// snapshot off the state's position, or of another shape, is refused.
TEST(Qwen35, SavedSequenceRestoresIntoAnotherEngine) {
  std::mt19937 rng(38);
  Engine a = q35_engine();
  const auto& c = a.config();
  const int64_t V = c.vocab_size;
  std::vector<int32_t> prompt(60), other(25);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  for (int32_t& t : other) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  const std::span<const int32_t> prefix(prompt.data(), 40), suffix(prompt.data() + 40, 20);
  a.prefill(prefix, 0);
  EXPECT_THROW(a.save_seq(0, 39), Error) << "a recurrent state taken off its position";
  const Engine::SeqSnapshot snap = a.save_seq(0, 40);
  EXPECT_EQ(snap.bytes(), a.state_bytes() + 40 * a.kv_bytes_per_position());
  auto continue_greedy = [&](Engine& e) {  // the suffix's logits, then 8 greedy tokens
    const float* lg = e.prefill(suffix, 40);
    std::vector<float> out(lg, lg + V);
    int64_t pos = 60;
    for (int i = 0; i < 8; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(lg, lg + V) - lg);
      lg = e.decode(next, pos++);
      out.insert(out.end(), lg, lg + V);
    }
    return out;
  };
  const std::vector<float> want = continue_greedy(a);
  Engine b = q35_engine();
  b.prefill(other, 0);
  b.restore_seq(0, snap);
  EXPECT_EQ(b.state_pos(), 40);
  const std::vector<float> got = continue_greedy(b);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "the restored sequence continues differently from the engine that saved it";
  Engine fresh = q35_engine();
  const float* lg = fresh.prefill(prompt, 0);
  const double terms = static_cast<double>(std::max({c.dim, c.linear_conv_dim(), int64_t{64}}));
  EXPECT_LT(test::hf_rel_err(lg, std::vector<float>(want.begin(), want.begin() + V)),
            static_cast<double>(c.n_layers) * terms * std::ldexp(1.0, -24));
  Engine::SeqSnapshot bad = snap;
  bad.conv.pop_back();
  try {
    b.restore_seq(0, bad);
    FAIL() << "a snapshot of another state size was restored";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("delta/conv states"), std::string::npos) << err.what();
  }
}

// Continuing a conversation (chat, the server's prompt cache): a common prefix is reused only where the state
// stopped; a shorter one is prefilled again from 0, so the continuation equals a fresh run's. Speculative decoding,
// which rolls back rejected drafts, is refused in one line.
TEST(Qwen35, GenerationReusesOnlyTheStatesOwnPrefix) {
  const std::vector<int32_t> first = {11, 12, 13, 14, 15, 16}, second = {11, 12, 13, 14, 40, 41, 42};
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.sampling.temperature = 0.0f;
  auto quiet = [](std::string_view) {};
  Engine fresh = q35_engine();
  const GenerateResult want = generate_tokens(fresh, nullptr, second, 0, o, quiet);
  Engine e = q35_engine();
  generate_tokens(e, nullptr, first, 0, o, quiet);
  EXPECT_EQ(reusable_prefix(e, 4), 0);
  EXPECT_EQ(reusable_prefix(e, e.state_pos()), e.state_pos());
  EXPECT_EQ(generate_tokens(e, nullptr, second, 4, o, quiet).new_tokens, want.new_tokens);
  o.draft_max = 4;
  try {
    generate_tokens(e, nullptr, second, 0, o, quiet);
    FAIL() << "speculative decoding was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cannot roll back"), std::string::npos) << err.what();
  }
}

// What a 4096-token context holds: keys and values of the full-attention layers only, and per linear-attention
// layer the delta-rule state [Hv, dk, dv] and the conv state [K-1, conv_dim], fp32.
TEST(Qwen35, StateAndKvBytesOfA4096ContextAreWhatTheConfigImplies) {
  Engine e = q35_engine(256, 4096);
  const auto& c = e.config();
  ASSERT_EQ(e.context(), std::min<int64_t>(4096, c.max_seq_len));
  int64_t full = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) full += (l + 1) % c.full_attention_interval == 0;
  const int64_t linear = c.n_layers - full;
  EXPECT_EQ(e.kv_layers(), full);
  EXPECT_EQ(e.kv_bytes_per_position() * e.context(), 2 * full * c.n_kv_heads * c.head_dim * 4 * e.context());
  EXPECT_EQ(e.state_bytes(), linear *
                                 (c.linear_v_heads * c.linear_k_dim * c.linear_v_dim +
                                  (c.linear_conv_kernel - 1) *
                                      (2 * c.linear_k_heads * c.linear_k_dim + c.linear_v_heads * c.linear_v_dim)) *
                                 4);
}

nlohmann::json flat_config() {
  std::ifstream f(test::source_path("tests/fixtures/hf/qwen35_bf16/config.json"));
  return nlohmann::json::parse(f);
}

models::ModelConfig hf_config(const nlohmann::json& j) {
  return models::arch_for_hf(j, "config.json").hf_config(j, "config.json");
}

std::string hf_error(const nlohmann::json& j) {
  try {
    hf_config(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen35, ConfigFlatAndNestedAgree) {
  const nlohmann::json flat = flat_config();
  const models::ModelConfig c = hf_config(flat);
  EXPECT_EQ(c.arch, "qwen35");
  EXPECT_EQ(c.full_attention_interval, 4);
  EXPECT_EQ(c.linear_k_heads, 2);
  EXPECT_EQ(c.linear_v_heads, 4);
  EXPECT_EQ(c.linear_conv_kernel, 4);
  EXPECT_FLOAT_EQ(c.rope_fraction, 0.25f);
  EXPECT_TRUE(c.attn_output_gate);
  nlohmann::json text = flat;
  text.erase("architectures");
  text.erase("tie_word_embeddings");
  const nlohmann::json nested = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                                 {"model_type", "qwen3_5"},
                                 {"tie_word_embeddings", true},
                                 {"vision_config", {{"depth", 2}}},
                                 {"text_config", text}};
  EXPECT_EQ(hf_config(nested), c);
  // layer_types absent: full_attention_interval decides.
  nlohmann::json by_interval = flat;
  by_interval.erase("layer_types");
  by_interval["full_attention_interval"] = 4;
  EXPECT_EQ(hf_config(by_interval), c);
}

TEST(Qwen35, MalformedConfigIsRefusedNamingTheField) {
  nlohmann::json j = flat_config();
  j.erase("linear_key_head_dim");
  EXPECT_NE(hf_error(j).find("linear_key_head_dim"), std::string::npos) << hf_error(j);
  j = flat_config();
  j["layer_types"][2] = "full_attention";  // full at 3 and 4: no fixed interval
  EXPECT_NE(hf_error(j).find("layer_types[3]"), std::string::npos) << hf_error(j);
  j = flat_config();
  j["layer_types"][0] = "sliding_attention";
  EXPECT_NE(hf_error(j).find("layer_types[0] is \"sliding_attention\""), std::string::npos) << hf_error(j);
  j = flat_config();
  j["linear_num_value_heads"] = 3;  // not a multiple of the 2 key heads
  const std::string e = hf_error(j);
  EXPECT_EQ(e, "");  // hf_config reads it; validate_config names it
  EXPECT_THROW(models::validate_config(hf_config(j), "config.json"), Error);
  try {
    models::validate_config(hf_config(j), "config.json");
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("linear_v_heads 3"), std::string::npos) << err.what();
  }
}

TEST(Qwen35, AnelabConfigJsonRoundTripsAndOldFilesLoad) {
  const models::ModelConfig c = hf_config(flat_config());
  EXPECT_EQ(models::model_config_from_json(models::model_config_to_json(c), "t", "model", "config."), c);
  nlohmann::json old = models::model_config_to_json(models::preset("qwen3-0.6b"));
  for (const char* k : {"full_attention_interval", "linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
                        "linear_conv_kernel", "rope_fraction", "attn_output_gate"})
    old.erase(k);
  EXPECT_EQ(models::model_config_from_json(old, "t", "model", "config."), models::preset("qwen3-0.6b"));
}

}  // namespace
}  // namespace anelab::infer

// HF safetensors fixtures (tests/fixtures/hf, made by scripts/make_hf_fixtures.py): mapping, transposes,
// splits, dtypes, sharding, and convert -> anelab -> reload round trips. The source tensors are read here
// with an independent mini safetensors parser.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/formats/anelab_file.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;

struct Raw {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::string dtype;
};

std::map<std::string, Raw> read_st(const std::string& dir) {
  std::vector<std::string> files;
  if (std::filesystem::exists(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else {
    const json idx = json::parse(read_file_text(dir + "/model.safetensors.index.json"));
    std::set<std::string> s;
    for (auto& [k, v] : idx["weight_map"].items()) s.insert(v.get<std::string>());
    for (auto& f : s) files.push_back(dir + "/" + f);
  }
  std::map<std::string, Raw> out;
  for (const auto& f : files) {
    const auto b = read_file_bytes(f);
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    const json h = json::parse(b.begin() + 8, b.begin() + 8 + static_cast<long>(n));
    for (auto& [k, v] : h.items()) {
      if (k == "__metadata__") continue;
      const auto o = v["data_offsets"];
      const size_t s = 8 + n + o[0].get<size_t>(), e = 8 + n + o[1].get<size_t>();
      out[k] =
          Raw{v["shape"].get<std::vector<int64_t>>(), std::vector<uint8_t>(b.begin() + s, b.begin() + e), v["dtype"]};
    }
  }
  return out;
}

std::vector<uint8_t> transpose(const Raw& r) {
  const int64_t R = r.shape[0], C = r.shape[1], es = static_cast<int64_t>(r.bytes.size()) / (R * C);
  std::vector<uint8_t> o(r.bytes.size());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) std::memcpy(&o[(j * R + i) * es], &r.bytes[(i * C + j) * es], es);
  return o;
}

void expect_bytes(const Model& m, const std::string& name, const uint8_t* p, size_t n) {
  const Tensor& t = m.tensor(name);
  ASSERT_EQ(static_cast<size_t>(t.nbytes), n) << name;
  EXPECT_EQ(std::memcmp(t.data, p, n), 0) << name;
}

std::string fixture(const std::string& name) { return test::source_path("tests/fixtures/hf/" + name); }

Model round_trip(const Model& m, const std::string& tag) {
  const auto dir = test::temp_dir(tag);
  const std::string p = (dir / "m.anelab").string();
  save_model(m, p);
  return read_anelab_file(p);
}

void check_gpt2(const Model& m, const std::map<std::string, Raw>& st) {
  const int64_t d = m.config.dim;
  const auto& wte = st.at("transformer.wte.weight");
  expect_bytes(m, "tok_embeddings", wte.bytes.data(), wte.bytes.size());
  expect_bytes(m, "pos_embeddings", st.at("transformer.wpe.weight").bytes.data(),
               st.at("transformer.wpe.weight").bytes.size());
  for (int64_t i = 0; i < m.config.n_layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".", p = "layers." + std::to_string(i) + ".";
    const auto qkv = transpose(st.at(h + "attn.c_attn.weight"));  // [3d, d]
    const auto& bqkv = st.at(h + "attn.c_attn.bias").bytes;
    const char* w[3] = {"wq", "wk", "wv"};
    const char* b[3] = {"bq", "bk", "bv"};
    for (int k = 0; k < 3; ++k) {
      expect_bytes(m, p + w[k], qkv.data() + k * d * d * 4, d * d * 4);
      expect_bytes(m, p + b[k], bqkv.data() + k * d * 4, d * 4);
    }
    const auto wo = transpose(st.at(h + "attn.c_proj.weight"));
    expect_bytes(m, p + "wo", wo.data(), wo.size());
    const auto fc = transpose(st.at(h + "mlp.c_fc.weight"));
    expect_bytes(m, p + "fc", fc.data(), fc.size());
    const auto pr = transpose(st.at(h + "mlp.c_proj.weight"));
    expect_bytes(m, p + "proj", pr.data(), pr.size());
    for (auto [src, dst] : std::vector<std::pair<std::string, std::string>>{{"attn.c_proj.bias", "bo"},
                                                                            {"mlp.c_fc.bias", "fc_bias"},
                                                                            {"mlp.c_proj.bias", "proj_bias"},
                                                                            {"ln_1.weight", "attn_norm"},
                                                                            {"ln_1.bias", "attn_norm_bias"},
                                                                            {"ln_2.weight", "ffn_norm"},
                                                                            {"ln_2.bias", "ffn_norm_bias"}})
      expect_bytes(m, p + dst, st.at(h + src).bytes.data(), st.at(h + src).bytes.size());
  }
  expect_bytes(m, "norm", st.at("transformer.ln_f.weight").bytes.data(), d * 4);
  expect_bytes(m, "norm_bias", st.at("transformer.ln_f.bias").bytes.data(), d * 4);
}

TEST(Safetensors, Gpt2FixtureMapsAndRoundTrips) {
  const std::string dir = fixture("gpt2");
  const auto st = read_st(dir);
  const json cfg = json::parse(read_file_text(dir + "/config.json"));
  const Model m = load_any_model(dir);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_EQ(c.dim, cfg["n_embd"].get<int64_t>());
  EXPECT_EQ(c.n_layers, cfg["n_layer"].get<int64_t>());
  EXPECT_EQ(c.n_heads, cfg["n_head"].get<int64_t>());
  EXPECT_EQ(c.hidden_dim, 4 * c.dim);
  EXPECT_EQ(c.vocab_size, cfg["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.max_seq_len, cfg["n_positions"].get<int64_t>());
  EXPECT_FLOAT_EQ(c.norm_eps, cfg["layer_norm_epsilon"].get<float>());
  EXPECT_EQ(c.norm, NormType::kLayer);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_TRUE(c.learned_pos && c.tied_embeddings && c.qkv_bias && c.attn_out_bias && c.mlp_bias);
  check_gpt2(m, st);
  const Model b = round_trip(m, "stg");
  EXPECT_EQ(b.config, c);
  check_gpt2(b, st);
}

void check_llama_like(const Model& m, const std::map<std::string, Raw>& st, bool biases) {
  std::map<std::string, std::string> names = {{"model.embed_tokens.weight", "tok_embeddings"},
                                              {"model.norm.weight", "norm"}};
  if (!m.config.tied_embeddings) names["lm_head.weight"] = "output";
  for (int i = 0; i < m.config.n_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", p = "layers." + std::to_string(i) + ".";
    for (auto [s, d] : std::vector<std::pair<std::string, std::string>>{{"input_layernorm.weight", "attn_norm"},
                                                                        {"post_attention_layernorm.weight", "ffn_norm"},
                                                                        {"self_attn.q_proj.weight", "wq"},
                                                                        {"self_attn.k_proj.weight", "wk"},
                                                                        {"self_attn.v_proj.weight", "wv"},
                                                                        {"self_attn.o_proj.weight", "wo"},
                                                                        {"mlp.gate_proj.weight", "w1"},
                                                                        {"mlp.down_proj.weight", "w2"},
                                                                        {"mlp.up_proj.weight", "w3"}})
      names[h + s] = p + d;
    if (biases)
      for (auto [s, d] : std::vector<std::pair<std::string, std::string>>{
               {"self_attn.q_proj.bias", "bq"}, {"self_attn.k_proj.bias", "bk"}, {"self_attn.v_proj.bias", "bv"}})
        names[h + s] = p + d;
  }
  EXPECT_EQ(names.size(), m.tensors().size());
  for (const auto& [s, d] : names) {
    const Raw& r = st.at(s);
    EXPECT_EQ(m.tensor(d).shape, r.shape) << d;
    expect_bytes(m, d, r.bytes.data(), r.bytes.size());
  }
}

TEST(Safetensors, Qwen2FixturesFp32AndBf16) {
  for (const char* name : {"qwen2", "qwen2_bf16"}) {
    const std::string dir = fixture(name);
    const auto st = read_st(dir);
    const json cfg = json::parse(read_file_text(dir + "/config.json"));
    const Model m = load_any_model(dir + "/model.safetensors");
    const ModelConfig& c = m.config;
    EXPECT_EQ(c.arch, "qwen2");
    EXPECT_EQ(c.dim, cfg["hidden_size"].get<int64_t>());
    EXPECT_EQ(c.hidden_dim, cfg["intermediate_size"].get<int64_t>());
    EXPECT_EQ(c.n_kv_heads, cfg["num_key_value_heads"].get<int64_t>());
    EXPECT_EQ(c.head_dim, c.dim / c.n_heads);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
    EXPECT_FLOAT_EQ(c.norm_eps, cfg["rms_norm_eps"].get<float>());
    EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalf);
    EXPECT_TRUE(c.tied_embeddings && c.qkv_bias && !c.attn_out_bias);
    EXPECT_EQ(m.tensor("layers.1.wk").dtype, std::string(name) == "qwen2" ? DType::kF32 : DType::kBF16);
    check_llama_like(m, st, true);
    const Model b = round_trip(m, name);
    EXPECT_EQ(b.config, c);
    check_llama_like(b, st, true);
  }
}

TEST(Safetensors, ShardedLlamaFp16Untied) {
  const std::string dir = fixture("llama_fp16");
  const auto st = read_st(dir);
  const Model m = load_any_model(dir + "/model.safetensors.index.json");
  EXPECT_EQ(m.config.arch, "llama");
  EXPECT_FALSE(m.config.tied_embeddings);
  EXPECT_FALSE(m.config.qkv_bias);
  EXPECT_EQ(m.config.hidden_dim, 160);
  EXPECT_EQ(m.tensor("output").dtype, DType::kF16);
  check_llama_like(m, st, false);
  check_llama_like(round_trip(m, "stl"), st, false);
}

TEST(Safetensors, ReferenceJsonCoversFixtures) {
  const json r = json::parse(read_file_text(fixture("reference.json")));
  for (const char* n : {"gpt2", "qwen2", "qwen2_bf16", "llama_fp16"}) {
    const auto& e = r["models"][n];
    ASSERT_EQ(e["logits"].size(), e["prompts"].size()) << n;
    for (size_t i = 0; i < e["prompts"].size(); ++i) {
      EXPECT_EQ(e["logits"][i].size(), e["prompts"][i].size());
      EXPECT_EQ(e["logits"][i][0].size(), 512u);
      EXPECT_EQ(e["greedy"][i].size(), 32u);
    }
  }
}

// Llama 3 RoPE scaling from config.json in both styles (transformers 5.x rope_parameters, as the fixture was
// saved; 4.x rope_theta + rope_scaling with "rope_type" or the older "type"), kept by the anelab file and by
// the HF export; a missing parameter is named.
TEST(Safetensors, Llama3RopeScalingBothConfigStyles) {
  const std::string dir = fixture("llama3_bf16");
  const json cfg = json::parse(read_file_text(dir + "/config.json"));
  const Model m = load_any_model(dir + "/model.safetensors");
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling, (RopeScaling{RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 32}));
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(round_trip(m, "llama3").config, c);

  const Arch& arch = arch_for_hf(cfg, "c");
  json v4 = cfg;
  json scaling = v4["rope_parameters"];
  v4.erase("rope_parameters");
  v4["rope_theta"] = scaling["rope_theta"];
  scaling.erase("rope_theta");
  v4["rope_scaling"] = scaling;
  EXPECT_EQ(arch.hf_config(v4, "c"), c);
  v4["rope_scaling"].erase("rope_type");
  v4["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(arch.hf_config(v4, "c"), c);

  EXPECT_EQ(arch.hf_config(arch.hf_export_config(c), "exported"), c);

  json bad = cfg;
  bad["rope_parameters"].erase("factor");
  try {
    arch.hf_config(bad, "cfg.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[model] cfg.json: config.json rope_parameters.factor must be a number for rope_type llama3");
  }
  bad = cfg;
  bad["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THROW(arch.hf_config(bad, "cfg.json"), Error);  // other scalings are refused, not ignored
}

}  // namespace
}  // namespace anelab::models

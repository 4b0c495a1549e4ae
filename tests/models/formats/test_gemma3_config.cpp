// Gemma 3's Hugging Face config.json in both transformers styles (models/arch/gemma3.cpp): the 5.x
// fixture (layer_types, rope_parameters per layer type), a 4.x config (sliding_window_pattern,
// rope_local_base_freq, linear rope_scaling), the embedding scale in the checkpoint's dtype, and the
// layouts anelab cannot run refused in one line naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;

ModelConfig from_hf(const json& j) { return arch_for_hf(j, "config.json").hf_config(j, "config.json"); }

// Gemma 3's parameters (ModelConfig::params, its table in models/arch/gemma3.cpp), by name.
float g3cfg_param(const ModelConfig& c, const char* name) { return static_cast<float>(param_named(c, name)); }
// Whether layer l slides: its description's attention has a window.
bool g3cfg_slides(const ModelConfig& c, int64_t l) {
  return describe_model(c).layers[static_cast<size_t>(l)].steps[0].attn.window > 0;
}

json fixture_config() {
  return json::parse(read_file_text(test::source_path("tests/fixtures/hf/gemma3_bf16/config.json")));
}

TEST(Gemma3Config, TransformersFiveFixture) {
  const ModelConfig c = from_hf(fixture_config());
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.activation, Activation::kGeluTanhGated);
  EXPECT_TRUE(c.tied_embeddings);
  const ModelDesc d = describe_model(c);  // the architecture implies q/k norms and sandwich norms
  EXPECT_TRUE(d.layers[0].steps[0].attn.q_norm && d.layers[0].steps[0].attn.k_norm);
  EXPECT_TRUE(d.layers[0].steps[0].post_norm && d.layers[0].steps[1].post_norm);
  EXPECT_EQ(g3cfg_param(c, "norm_offset"), 1.0f);
  EXPECT_EQ(g3cfg_param(c, "embed_scale"), 8.0f);
  EXPECT_EQ(g3cfg_param(c, "attn_scale"), static_cast<float>(std::pow(24.0, -0.5)));
  EXPECT_EQ(g3cfg_param(c, "logit_softcap"), 4.0f);
  EXPECT_EQ(g3cfg_param(c, "sliding_window"), 4);
  EXPECT_EQ(g3cfg_param(c, "sliding_pattern"), 3);  // sliding, sliding, full
  EXPECT_TRUE(g3cfg_slides(c, 0) && g3cfg_slides(c, 1) && !g3cfg_slides(c, 2));
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(g3cfg_param(c, "rope_local_theta"), 1e4f);
  EXPECT_EQ(g3cfg_param(c, "rope_linear_factor"), 1.0f);
}

TEST(Gemma3Config, TransformersFourStyleWithLinearScaling) {
  json j = fixture_config();
  j.erase("layer_types");
  j.erase("rope_parameters");
  j["num_hidden_layers"] = 12;
  j["sliding_window_pattern"] = 6;
  j["rope_theta"] = 1e6;
  j["rope_local_base_freq"] = 1e4;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j["hidden_size"] = 1152;
  j["torch_dtype"] = "bfloat16";
  j.erase("dtype");
  const ModelConfig c = from_hf(j);
  EXPECT_EQ(g3cfg_param(c, "sliding_pattern"), 6);
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(g3cfg_slides(c, l), l != 5 && l != 11) << l;
  EXPECT_EQ(g3cfg_param(c, "rope_linear_factor"), 8.0f);
  EXPECT_EQ(g3cfg_param(c, "rope_local_theta"), 1e4f);
  EXPECT_EQ(g3cfg_param(c, "embed_scale"), 34.0f);  // sqrt(1152) = 33.94 in bf16, as HF casts it to the weights' dtype
}

TEST(Gemma3Config, UnsupportedLayoutsAreNamedInOneLine) {
  const struct {
    const char* key;
    json value;
    const char* want;
  } cases[] = {
      {"layer_types", json::array({"full_attention", "sliding_attention", "full_attention"}), "breaks the pattern"},
      {"layer_types", json::array({"sliding_attention", "chunked_attention", "full_attention"}), "layer_types[1]"},
      {"attn_logit_softcapping", 50.0, "attn_logit_softcapping"},
      {"hidden_activation", "gelu", "hidden_activation gelu"},
      {"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}, {"factor", 2.0}}}}, "\"yarn\" is not supported"},
  };
  for (const auto& k : cases) {
    json j = fixture_config();
    j[k.key] = k.value;
    try {
      from_hf(j);
      ADD_FAILURE() << k.key << " accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(k.want), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace anelab::models

// The layer description (framework/core/model_desc.h) of every architecture the repository has a fixture for, checked
// against what the fixture is, not against the config flags the builder reads: the steps of each layer, the norms
// (LayerNorm with biases for GPT-2, post-norms exactly for Gemma 3), the q/k norms (Qwen3, Gemma 3), Gemma 3's
// sliding/global layers from its config.json layer_types and their RoPE bases, learned positions (GPT-2), the
// head; and that the weights it names are exactly the model's tensors. The CPU engine walks this description
// (infer/engine.cpp); an executor's refusal names the layer, the step and the executor.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "framework/core/error.h"
#include "framework/core/model_desc.h"
#include "infer/engine.h"
#include "models/arch/arch.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

struct DescFixture {
  std::string name;  // tests/fixtures/hf/<name>, or "stories260K" (the llama2.c data file)
  std::string arch;
  bool qk_norm, post_norms, layer_norm, learned_pos;
};

const DescFixture kDescFixtures[] = {
    {"stories260K", "llama", false, false, false, false}, {"llama_fp16", "llama", false, false, false, false},
    {"llama3_bf16", "llama", false, false, false, false}, {"qwen2", "qwen2", false, false, false, false},
    {"qwen3_bf16", "qwen3", true, false, false, false},   {"gemma3_bf16", "gemma3", true, true, false, false},
    {"gpt2", "gpt2", false, false, true, true},
};

Model load_desc_fixture(const std::string& name) {
  if (name == "stories260K") return load_any_model(test::data_path("llama2c/stories260K.bin"));
  return load_any_model(test::source_path("tests/fixtures/hf/" + name));
}

// Every weight name the description holds ("" skipped).
std::multiset<std::string> desc_weight_names(const ModelDesc& d) {
  std::multiset<std::string> s;
  auto add = [&](const std::string& n) {
    if (!n.empty()) s.insert(n);
  };
  auto add_norm = [&](const std::optional<NormDesc>& n) {
    if (n) {
      add(n->weight);
      add(n->bias);
    }
  };
  add(d.embed.tokens);
  add(d.embed.positions);
  for (const LayerDesc& l : d.layers)
    for (const Step& s : l.steps) {
      add_norm(s.pre_norm);
      add_norm(s.post_norm);
      switch (s.kind) {
        case StepKind::kAttention:
          for (const std::string* n :
               {&s.attn.wq, &s.attn.wk, &s.attn.wv, &s.attn.wo, &s.attn.bq, &s.attn.bk, &s.attn.bv, &s.attn.bo})
            add(*n);
          add_norm(s.attn.q_norm);
          add_norm(s.attn.k_norm);
          break;
        case StepKind::kFfn:
          for (const std::string* n : {&s.ffn.w_in, &s.ffn.w_up, &s.ffn.w_out, &s.ffn.b_in, &s.ffn.b_out}) add(*n);
          break;
        case StepKind::kLinearAttention: {
          const DeltaNetDesc& g = s.deltanet;
          for (const std::string* n : {&g.w_qkv, &g.w_z, &g.w_b, &g.w_a, &g.conv, &g.a_log, &g.dt_bias, &g.w_out})
            add(*n);
          add_norm(g.norm);
          break;
        }
      }
    }
  add_norm(d.head.norm);
  if (!d.head.tied) add(d.head.weight);
  return s;
}

class LayerDescTest : public ::testing::TestWithParam<DescFixture> {};

TEST_P(LayerDescTest, StepsNormsAndWeightsMatchTheFixture) {
  const DescFixture& f = GetParam();
  if (f.name == "stories260K") ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const Model m = load_desc_fixture(f.name);
  const ModelDesc d = describe_model(m.config);
  EXPECT_EQ(d.arch, f.arch);
  ASSERT_EQ(static_cast<int64_t>(d.layers.size()), m.config.n_layers);
  ASSERT_GT(d.layers.size(), 0u);
  const NormType norm = f.layer_norm ? NormType::kLayer : NormType::kRms;
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const auto& steps = d.layers[l].steps;
    ASSERT_EQ(steps.size(), 2u) << f.name << " layer " << l;
    EXPECT_EQ(steps[0].kind, StepKind::kAttention) << f.name << " layer " << l;
    EXPECT_EQ(steps[1].kind, StepKind::kFfn) << f.name << " layer " << l;
    for (const Step& s : steps) {
      ASSERT_TRUE(s.pre_norm.has_value()) << f.name << " layer " << l << " " << step_kind_name(s.kind);
      EXPECT_EQ(s.pre_norm->kind, norm) << f.name;
      EXPECT_EQ(s.pre_norm->bias.empty(), !f.layer_norm) << f.name;
      EXPECT_EQ(s.post_norm.has_value(), f.post_norms) << f.name << " layer " << l << " " << step_kind_name(s.kind);
      EXPECT_EQ(s.residual_scale, 1.0f);
    }
    const AttnDesc& a = steps[0].attn;
    EXPECT_EQ(a.q_norm.has_value(), f.qk_norm) << f.name << " layer " << l;
    EXPECT_EQ(a.k_norm.has_value(), f.qk_norm) << f.name << " layer " << l;
    EXPECT_EQ(a.rope.style == RopeStyle::kNone, f.learned_pos) << f.name;
    EXPECT_EQ(a.score_softcap, 0.0f);
    EXPECT_EQ(steps[1].ffn.w_up.empty(), f.learned_pos) << f.name << ": only GPT-2's MLP has no up projection";
  }
  EXPECT_EQ(d.embed.positions.empty(), !f.learned_pos) << f.name;
  EXPECT_EQ(d.head.norm.bias.empty(), !f.layer_norm) << f.name;

  // The weights it names are the model's tensors, each once.
  std::multiset<std::string> have;
  for (const Tensor& t : m.tensors()) have.insert(t.name);
  EXPECT_EQ(desc_weight_names(d), have) << f.name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LayerDescTest, ::testing::ValuesIn(kDescFixtures),
                         [](const ::testing::TestParamInfo<DescFixture>& info) { return info.param.name; });

// Qwen3.5: its config.json layer_types decide which layers are Gated DeltaNets (the gated norm scales by w, every
// other norm by 1 + w) and which gated, partially rotated full attention; the weights named are the model's tensors.
TEST(LayerDesc, Qwen35LinearAndFullLayersFollowLayerTypes) {
  const std::string dir = test::source_path("tests/fixtures/hf/qwen35_bf16");
  std::ifstream in(dir + "/config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const Model m = load_any_model(dir);
  const ModelDesc d = describe_model(m.config);
  EXPECT_EQ(d.arch, "qwen35");
  const auto& types = j["layer_types"];
  ASSERT_EQ(d.layers.size(), types.size());
  for (size_t l = 0; l < types.size(); ++l) {
    const auto& steps = d.layers[l].steps;
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[1].kind, StepKind::kFfn);
    ASSERT_TRUE(steps[0].pre_norm.has_value());
    EXPECT_EQ(steps[0].pre_norm->offset, 1.0f) << "layer " << l;
    if (types[l] == "linear_attention") {
      ASSERT_EQ(steps[0].kind, StepKind::kLinearAttention) << "layer " << l;
      const DeltaNetDesc& g = steps[0].deltanet;
      EXPECT_EQ(g.n_k_heads, j["linear_num_key_heads"].get<int64_t>());
      EXPECT_EQ(g.n_v_heads, j["linear_num_value_heads"].get<int64_t>());
      EXPECT_EQ(g.k_dim, j["linear_key_head_dim"].get<int64_t>());
      EXPECT_EQ(g.v_dim, j["linear_value_head_dim"].get<int64_t>());
      EXPECT_EQ(g.conv_kernel, j["linear_conv_kernel_dim"].get<int64_t>());
      EXPECT_EQ(g.norm.offset, 0.0f);
    } else {
      ASSERT_EQ(steps[0].kind, StepKind::kAttention) << "layer " << l;
      const AttnDesc& a = steps[0].attn;
      EXPECT_TRUE(a.output_gate);
      EXPECT_EQ(a.rope.dims,
                static_cast<int64_t>(j["head_dim"].get<double>() * j["partial_rotary_factor"].get<double>()));
      EXPECT_EQ(a.rope.theta, j["rope_parameters"]["rope_theta"].get<float>());
      ASSERT_TRUE(a.q_norm.has_value());
      EXPECT_EQ(a.q_norm->offset, 1.0f);
    }
  }
  std::multiset<std::string> have;
  for (const Tensor& t : m.tensors()) have.insert(t.name);
  EXPECT_EQ(desc_weight_names(d), have);
}

// Gemma 3: its config.json layer_types decide which layers slide (window sliding_window, RoPE base
// rope_parameters.sliding_attention) and which are global (no window, full_attention's base); the head soft-caps
// by final_logit_softcapping and the score scale is query_pre_attn_scalar^-0.5.
TEST(LayerDesc, Gemma3SlidingAndGlobalLayersFollowLayerTypes) {
  const std::string dir = test::source_path("tests/fixtures/hf/gemma3_bf16");
  std::ifstream in(dir + "/config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const ModelDesc d = describe_model(load_any_model(dir).config);
  const auto& types = j["layer_types"];
  ASSERT_EQ(d.layers.size(), types.size());
  int sliding = 0, global = 0;
  for (size_t l = 0; l < types.size(); ++l) {
    const AttnDesc& a = d.layers[l].steps[0].attn;
    const bool slides = types[l] == "sliding_attention";
    (slides ? sliding : global) += 1;
    EXPECT_EQ(a.window, slides ? j["sliding_window"].get<int64_t>() : 0) << "layer " << l;
    const char* base = slides ? "sliding_attention" : "full_attention";
    EXPECT_EQ(a.rope.theta, j["rope_parameters"][base]["rope_theta"].get<float>()) << "layer " << l;
    EXPECT_FLOAT_EQ(a.score_scale, 1.0f / std::sqrt(j["query_pre_attn_scalar"].get<float>()));
    EXPECT_EQ(d.layers[l].steps[0].pre_norm->offset, 1.0f) << "Gemma's norms multiply by (1 + w)";
  }
  EXPECT_GT(sliding, 0);
  EXPECT_GT(global, 0);
  EXPECT_EQ(d.head.softcap, j["final_logit_softcapping"].get<float>());
  EXPECT_TRUE(d.head.tied);
}

TEST(LayerDesc, RefusalNamesTheLayerStepAndExecutor) {
  try {
    unsupported("infer", "the CPU inference engine", 3, StepKind::kAttention, "score soft-capping (cap 50)");
    FAIL() << "unsupported() returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[infer] layer 3 attention: score soft-capping (cap 50) is not supported by the CPU inference engine");
  }
}

}  // namespace
}  // namespace anelab::models

namespace anelab::infer {
namespace {
// The CPU engine refuses, in one line naming the layer, the step and itself, what its step implementations lack:
// descriptions edited here the way a future architecture would write them.
TEST(EngineRefusal, UnsupportedStepsAreNamed) {
  const models::ModelConfig c = models::preset("stories260k");
  const models::ModelDesc base = models::describe_model(c);
  EXPECT_NO_THROW(check_engine_supports(base, c));
  auto message = [&](const std::function<void(models::ModelDesc&)>& edit) {
    models::ModelDesc d = base;
    edit(d);
    try {
      check_engine_supports(d, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string softcap = message([](models::ModelDesc& d) { d.layers[1].steps[0].attn.score_softcap = 50.0f; });
  EXPECT_NE(softcap.find("layer 1"), std::string::npos) << softcap;
  EXPECT_NE(softcap.find("attention"), std::string::npos) << softcap;
  EXPECT_NE(softcap.find("score soft-capping"), std::string::npos) << softcap;
  EXPECT_NE(softcap.find("the CPU inference engine"), std::string::npos) << softcap;
  const std::string twice =
      message([](models::ModelDesc& d) { d.layers[0].steps.push_back(d.layers[0].steps.back()); });
  EXPECT_NE(twice.find("a second step of this kind"), std::string::npos) << twice;
  const std::string norm = message([](models::ModelDesc& d) {
    models::NormDesc n;
    n.kind = models::NormType::kLayer;
    d.layers[2].steps[0].attn.q_norm = n;
  });
  EXPECT_NE(norm.find("a q/k norm other than RMSNorm"), std::string::npos) << norm;
}
}  // namespace
}  // namespace anelab::infer

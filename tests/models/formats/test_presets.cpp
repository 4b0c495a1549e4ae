// Presets: parameter counts against independent references (tinyllamas file sizes from
// PROVENANCE.md, published GPT-2 / Qwen2.5 parameter counts), registry errors, seeded random init.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "framework/core/error.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/presets.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

// llama2.c legacy size = 28 + 4 * (params + seq_len * head_size), so params follow from the file size.
int64_t params_from_llama2c_size(int64_t bytes, const ModelConfig& c) {
  return (bytes - 28) / 4 - c.max_seq_len * c.head_dim;
}

TEST(Presets, ParameterCountsMatchReferences) {
  EXPECT_EQ(parameter_count(preset("stories260k")), 260032);
  EXPECT_EQ(parameter_count(preset("stories15m")), params_from_llama2c_size(60816028, preset("stories15m")));
  EXPECT_EQ(parameter_count(preset("stories42m")), params_from_llama2c_size(167020572, preset("stories42m")));
  EXPECT_EQ(parameter_count(preset("stories110m")), params_from_llama2c_size(438381596, preset("stories110m")));
  EXPECT_EQ(parameter_count(preset("gpt2-124m")), 124439808);     // HF GPT2LMHeadModel, tied
  EXPECT_EQ(parameter_count(preset("qwen2.5-0.5b")), 494032768);  // HF Qwen2.5-0.5B, tied
  // HF Llama-3.2-1B, tied: 128256 x 2048 embedding + 16 layers of 60821504 + the final norm
  EXPECT_EQ(parameter_count(preset("llama3.2-1b")), 1235814400);
  EXPECT_EQ(preset("llama3.2-1b").rope_scaling, (RopeScaling{RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192}));
  const ModelConfig& q3 = preset("qwen3-0.6b-shape");
  EXPECT_EQ(q3.q_dim(), 2048);
  EXPECT_EQ(q3.kv_dim(), 1024);
  EXPECT_FALSE(q3.qkv_bias);
}

TEST(Presets, UnknownNameListsKnown) {
  try {
    preset("gpt5");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gpt5"), std::string::npos);
    EXPECT_NE(m.find("qwen2.5-0.5b"), std::string::npos);
  }
}

TEST(Presets, RandomInitStatisticsAndDeterminism) {
  const Model a = random_model(preset("stories260k"), 42), b = random_model(preset("stories260k"), 42);
  const Model c = random_model(preset("stories260k"), 43);
  const auto x = a.tensor("tok_embeddings").to_f32();
  EXPECT_EQ(x, b.tensor("tok_embeddings").to_f32());
  EXPECT_NE(x, c.tensor("tok_embeddings").to_f32());
  EXPECT_NE(x, a.tensor("layers.0.wq").to_f32());  // tensors get different streams
  double s = 0, s2 = 0;
  for (float v : x) s += v, s2 += double(v) * v;
  const double mean = s / x.size(), sd = std::sqrt(s2 / x.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.0005);
  for (float v : a.tensor("layers.3.attn_norm").to_f32()) EXPECT_EQ(v, 1.0f);
  const Model g = random_model(preset("gpt2-124m").n_layers ? [] {
    ModelConfig t = preset("gpt2-124m");
    t.dim = 64; t.hidden_dim = 256; t.n_layers = 1; t.n_heads = t.n_kv_heads = 4; t.head_dim = 16; t.vocab_size = 100;
    t.max_seq_len = 16;
    return t;
  }() : ModelConfig{}, 1);
  for (float v : g.tensor("layers.0.bq").to_f32()) EXPECT_EQ(v, 0.0f);
  for (float v : g.tensor("layers.0.attn_norm_bias").to_f32()) EXPECT_EQ(v, 0.0f);
}

TEST(Presets, StreamedRandomFileEqualsInMemory) {
  const auto dir = test::temp_dir("pr");
  const std::string p = (dir / "r.anelab").string();
  write_random_model(preset("stories260k"), p, 5);
  const Model f = read_anelab_file(p), m = random_model(preset("stories260k"), 5);
  for (const Tensor& t : m.tensors()) EXPECT_EQ(f.tensor(t.name).to_f32(), t.to_f32()) << t.name;
  write_random_model(preset("stories260k"), p, 5, DType::kQ8_0);
  EXPECT_EQ(read_anelab_file(p).tensor("layers.0.w2").dtype, DType::kF16);  // 172 columns: not q8_0-able
  EXPECT_EQ(read_anelab_file(p).tensor("layers.0.w1").dtype, DType::kQ8_0);
}

}  // namespace
}  // namespace anelab::models

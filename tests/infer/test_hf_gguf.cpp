// The newer architectures' Hugging Face fixtures (tests/fixtures/hf/{qwen3,llama3,gemma3}_bf16) exported to
// GGUF the way llama.cpp reads them (gemma3: norms stored as 1 + w, its sliding-window, soft-capping and
// RoPE keys; llama3: q/k rows permuted to adjacent pairs and the RoPE scaling as rope_freqs) and loaded
// back: the CPU fp32 logits equal the Hugging Face path's and transformers' reference.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "infer/engine.h"
#include "models/formats/gguf.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"
#include "tests/infer/hf_reference.h"

namespace anelab::infer {
namespace {

Engine cpu_fp32(models::Model m) {
  EngineOptions o;
  o.backend = "cpu";
  o.dtype = WType::kF32;
  o.quiet = true;
  return Engine(std::move(m), o);
}

class HfThroughGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(HfThroughGguf, CpuFp32LogitsEqualTheHfPathAndTransformers) {
  const std::string name = GetParam();
  const models::Model hf = models::load_any_model(test::source_path("tests/fixtures/hf/" + name));
  const std::string gguf = (test::temp_dir("hf_gguf") / (name + ".gguf")).string();
  models::export_model(hf, gguf, models::ExportFormat::kGguf);
  const models::Model g = models::load_any_model(gguf);
  models::ModelConfig want = hf.config;
  want.rope_style = g.config.rope_style;  // llama: adjacent pairs in GGUF (checked through the logits)
  EXPECT_EQ(g.config, want) << name;
  // Same fp32 arithmetic where GGUF keeps the q/k row order (qwen3, gemma3: rotate half as in HF; the
  // gemma3 norms come back as w exactly, since 1 + w of a bf16 w is exact in fp32); llama's rows are
  // permuted to adjacent pairs, which changes the order of the q.k sums: fp32 roundoff.
  const bool same_rows = g.config.rope_style == hf.config.rope_style;
  Engine a = cpu_fp32(hf), b = cpu_fp32(g);
  const auto& ref = test::hf_reference("reference_" + name + ".json")["models"][name];
  const int64_t V = hf.config.vocab_size;
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto prompt = ref["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> la, lb;
    a.prefill(prompt, 0, &la);
    b.prefill(prompt, 0, &lb);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const std::vector<float> row(la.begin() + static_cast<int64_t>(t) * V,
                                   la.begin() + static_cast<int64_t>(t + 1) * V);
      const double vs_hf = test::hf_rel_err(lb.data() + t * V, row);
      if (same_rows)
        EXPECT_EQ(vs_hf, 0.0) << name << " prompt " << p << " pos " << t;
      else
        EXPECT_LT(vs_hf, test::hf_fp32_tol(name)) << name << " prompt " << p << " pos " << t;
      EXPECT_LT(test::hf_rel_err(lb.data() + t * V, ref["logits"][p][t].get<std::vector<float>>()),
                test::hf_fp32_tol(name))
          << name << " prompt " << p << " pos " << t;
    }
  }
  std::filesystem::remove_all(std::filesystem::path(gguf).parent_path());
}

INSTANTIATE_TEST_SUITE_P(NewArchitectures, HfThroughGguf,
                         ::testing::Values("qwen3_bf16", "llama3_bf16", "gemma3_bf16"));

// What llama.cpp reads of the Gemma 3 fixture's GGUF (its converter's conventions): norms as F32 1 + w, the
// sandwich norms' names, the keys of the window, its pattern, both RoPE bases and the soft-cap, and (no
// tokenizer) the vocabulary "none".
TEST(HfThroughGguf, Gemma3FileHasLlamaCppsConventions) {
  const models::Model hf = models::load_any_model(test::source_path("tests/fixtures/hf/gemma3_bf16"));
  const auto img = std::make_shared<std::vector<uint8_t>>(models::model_to_gguf(hf));
  const models::GgufFile g = models::parse_gguf(img->data(), img->size(), img, "gemma3.gguf");
  EXPECT_EQ(g.get_int("gemma3.attention.sliding_window", "t"), 4);
  EXPECT_EQ(g.get_int("gemma3.attention.sliding_window_pattern", "t"), 3);  // layer_types: every 3rd global
  EXPECT_EQ(g.get_num("gemma3.final_logit_softcapping", 0), 4.0);
  EXPECT_EQ(g.get_num("gemma3.rope.freq_base", 0), 1e6);
  EXPECT_EQ(g.get_num("gemma3.rope.freq_base_swa", 0), 1e4);
  EXPECT_EQ(g.get_int("gemma3.attention.key_length", "t"), 32);
  EXPECT_EQ(g.get_num("gemma3.attention.scale", 0), models::param_named(hf.config, "attn_scale"));  // 24^-0.5
  // The fixture has no tokenizer: llama.cpp's "no vocabulary" model of vocab_size dummy tokens.
  EXPECT_EQ(g.get_str("tokenizer.ggml.model", "t"), "none");
  EXPECT_EQ(g.get_int("gemma3.vocab_size", "t"), 512);
  std::map<std::string, const models::GgufTensorInfo*> ts;
  for (const auto& t : g.tensors) ts[t.name] = &t;
  for (const auto& [gguf, canonical] :
       std::map<std::string, std::string>{{"output_norm.weight", "norm"},
                                          {"blk.1.attn_norm.weight", "layers.1.attn_norm"},
                                          {"blk.1.post_attention_norm.weight", "layers.1.attn_post_norm"},
                                          {"blk.1.ffn_norm.weight", "layers.1.ffn_norm"},
                                          {"blk.1.post_ffw_norm.weight", "layers.1.ffn_post_norm"},
                                          {"blk.1.attn_q_norm.weight", "layers.1.q_norm"},
                                          {"blk.1.attn_k_norm.weight", "layers.1.k_norm"}}) {
    ASSERT_TRUE(ts.count(gguf)) << gguf;
    ASSERT_EQ(ts[gguf]->ggml_type, models::kGgmlF32) << gguf;
    const std::vector<float> w = hf.tensor(canonical).to_f32();
    ASSERT_EQ(ts[gguf]->nbytes, static_cast<int64_t>(4 * w.size())) << gguf;
    std::vector<float> stored(w.size());
    std::memcpy(stored.data(), ts[gguf]->data, 4 * w.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(stored[i], 1.0f + w[i]) << gguf << "[" << i << "]";
  }
}

}  // namespace
}  // namespace anelab::infer

// `infer --lora` (infer::LoadOptions::lora): a PEFT directory or a GGUF LoRA adapter merged at load gives the
// logits of the model with the same adapter merged and saved (what `export --fuse` writes), bit for bit: the merge
// is one fp32 computation (models::merge_lora) and the engine then runs the same fp32 weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "infer/engine.h"
#include "infer/load.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/safetensors.h"
#include "models/io/adapter.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/lora_adapter.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {

models::LoraAdapter lora_load_test_adapter(const models::ModelConfig& c) {
  return test::seeded_lora_adapter(c, 4, 8.0f, 12345, 0.2f);
}

std::vector<float> lora_load_test_logits(const infer::LoadOptions& o) {
  infer::LoadedModel l = infer::load_model(o, infer::TokenizerUse::kNone);
  l.engine.quiet = true, l.engine.backend = "cpu";
  infer::Engine e(std::move(l.model), l.engine);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 290, 500, 13};
  std::vector<float> all;
  e.prefill(ids, 0, &all);
  return all;
}

TEST(LoraLoad, MergedAtLoadEqualsTheFusedModel) {
  const auto dir = test::temp_dir("lora_load").string();
  const std::string base = test::data_path("llama2c/stories260K.bin");
  models::Model fused = models::load_any_model(base);
  const models::LoraAdapter a = lora_load_test_adapter(fused.config);
  models::write_peft_adapter(a, fused.config, dir + "/peft");
  models::write_gguf_adapter(a, fused.config, dir + "/a.gguf");
  models::merge_lora(fused, a, 0.5f);
  models::save_model(fused, dir + "/fused.anelab");
  infer::LoadOptions o;
  o.model = base, o.quiet = true;
  const std::vector<float> plain = lora_load_test_logits(o);
  o.lora = {dir + "/peft"}, o.lora_scale = {0.5f};
  const std::vector<float> peft = lora_load_test_logits(o);
  o.lora = {dir + "/a.gguf"};
  const std::vector<float> gguf = lora_load_test_logits(o);
  infer::LoadOptions f;
  f.model = dir + "/fused.anelab", f.quiet = true;
  const std::vector<float> fused_logits = lora_load_test_logits(f);
  ASSERT_EQ(peft.size(), fused_logits.size());
  EXPECT_TRUE(peft == fused_logits);
  EXPECT_TRUE(gguf == fused_logits);
  EXPECT_FALSE(plain == fused_logits);  // the adapter changes the model
  o.lora_scale = {0.5f, 1.0f};
  EXPECT_THROW(lora_load_test_logits(o), Error);  // more scales than adapters
  std::filesystem::remove_all(dir);
}

// Qwen3.5 (the tiny Hugging Face fixture: 3 Gated DeltaNet layers with 2 key and 4 value heads, then a gated attention
// layer) with adapters on every projection, the DeltaNet's five among them:
//   - the PEFT directory holds transformers' names (linear_attn.in_proj_qkv ... out_proj) and target_modules; the GGUF
//     adapter llama.cpp's qwen35 names (attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out) with B's rows / A's columns
//     in the GGUF's tiled value-head order (stored value head j * Hk + g is HF's g * Hv/Hk + j);
//     (the order is checked against that fact directly: anelab reads its own order back, so the logits below cannot
//     see it; llama.cpp applies the stored B'·A' to the stored, tiled tensor);
//   - both read back to the adapter, bit for bit;
//   - merged at load, the PEFT directory on the Hugging Face base and the GGUF adapter on the base exported as f32
//     GGUF both give the logits of the fused model, bit for bit (f32 engines; the GGUF base runs bit-identically to
//     the fixture: Qwen35.GgufExportRunsBitIdenticallyAtF32AndF16Storage);
//   - the DeltaNet adapters alone change the logits.
std::vector<float> lora_load_q35_logits(const infer::LoadOptions& o) {
  infer::LoadedModel l = infer::load_model(o, infer::TokenizerUse::kNone);
  l.engine.quiet = true, l.engine.backend = "cpu", l.engine.dtype = quant::WType::kF32;
  infer::Engine e(std::move(l.model), l.engine);
  std::vector<float> all;
  e.prefill(std::vector<int32_t>{1, 403, 407, 261, 378, 290, 500, 13, 77, 5}, 0, &all);
  return all;
}

TEST(LoraLoad, Qwen35DeltaNetAdaptersInPeftAndGgufFiles) {
  const auto dir = test::temp_dir("lora_load_q35").string();
  const std::string fix = test::source_path("tests/fixtures/hf/qwen35_bf16");
  const models::Model src = models::load_any_model(fix);
  const models::ModelConfig& c = src.config;
  ASSERT_LT(c.linear_k_heads, c.linear_v_heads);  // the value-head order of the GGUF differs from HF's
  const models::LoraAdapter a = test::seeded_lora_adapter(c, 4, 8.0f, 2024, 0.2f);
  const std::string peft = dir + "/peft", gguf = dir + "/a.gguf";
  models::write_peft_adapter(a, c, peft);
  models::write_gguf_adapter(a, c, gguf);

  // PEFT: transformers' module names under linear_attn, target_modules with them.
  const auto cfg = nlohmann::json::parse(read_file_text(peft + "/adapter_config.json"));
  for (const char* m : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "q_proj", "down_proj"})
    EXPECT_NE(std::find(cfg["target_modules"].begin(), cfg["target_modules"].end(), m), cfg["target_modules"].end())
        << m;
  auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(peft + "/adapter_model.safetensors"));
  const models::StTensorMap st = models::parse_safetensors(bytes->data(), bytes->size(), bytes, "peft");
  const int64_t V = c.linear_v_heads * c.linear_v_dim, Hv = c.linear_v_heads, hk = c.linear_k_heads;
  const std::string k0 = "base_model.model.model.layers.0.linear_attn.";
  ASSERT_TRUE(st.count(k0 + "in_proj_qkv.lora_A.weight"));
  EXPECT_EQ(st.at(k0 + "in_proj_qkv.lora_B.weight").shape, (std::vector<int64_t>{c.linear_conv_dim(), 4}));
  EXPECT_EQ(st.at(k0 + "in_proj_z.lora_B.weight").shape, (std::vector<int64_t>{V, 4}));
  EXPECT_EQ(st.at(k0 + "in_proj_b.lora_B.weight").shape, (std::vector<int64_t>{Hv, 4}));
  EXPECT_EQ(st.at(k0 + "in_proj_a.lora_A.weight").shape, (std::vector<int64_t>{4, c.dim}));
  EXPECT_EQ(st.at(k0 + "out_proj.lora_A.weight").shape, (std::vector<int64_t>{4, V}));
  EXPECT_EQ(st.count("base_model.model.model.layers.3.linear_attn.in_proj_qkv.lora_A.weight"), 0u);  // (full layer)

  // GGUF: llama.cpp's names, ne [in, r] / [r, out]; value heads tiled in B's rows (attn_gate) and A's columns
  // (ssm_out).
  const models::GgufFile g = models::read_gguf_file(gguf);
  auto find = [&](const std::string& name) -> const models::GgufTensorInfo& {
    for (const auto& t : g.tensors)
      if (t.name == name) return t;
    throw Error("no tensor " + name);
  };
  EXPECT_EQ(find("blk.0.attn_qkv.weight.lora_a").ne, (std::vector<int64_t>{c.dim, 4}));
  EXPECT_EQ(find("blk.0.ssm_beta.weight.lora_b").ne, (std::vector<int64_t>{4, Hv}));
  EXPECT_EQ(find("blk.0.ssm_alpha.weight.lora_b").ne, (std::vector<int64_t>{4, Hv}));
  EXPECT_EQ(find("blk.0.ssm_out.weight.lora_a").ne, (std::vector<int64_t>{V, 4}));
  const models::LoraPair* z = nullptr;
  const models::LoraPair* out = nullptr;
  for (const auto& p : a.pairs) {
    if (p.tensor == "layers.0.ssm_z") z = &p;
    if (p.tensor == "layers.0.ssm_out") out = &p;
  }
  ASSERT_TRUE(z && out);
  const auto* gz = reinterpret_cast<const float*>(find("blk.0.attn_gate.weight.lora_b").data);
  const auto* go = reinterpret_cast<const float*>(find("blk.0.ssm_out.weight.lora_a").data);
  const int64_t rep = Hv / hk, dv = c.linear_v_dim;
  bool tiled = true;
  for (int64_t gk = 0; gk < hk; ++gk)
    for (int64_t j = 0; j < rep; ++j)
      for (int64_t u = 0; u < dv; ++u) {
        const int64_t stored = (j * hk + gk) * dv + u, hf = (gk * rep + j) * dv + u;
        for (int64_t q = 0; q < 4; ++q)
          tiled = tiled && gz[stored * 4 + q] == z->b[size_t(hf * 4 + q)] &&
                  go[q * V + stored] == out->a[size_t(q * V + hf)];
      }
  EXPECT_TRUE(tiled);

  for (const std::string& f : {peft, gguf}) {  // read back: the adapter itself
    const models::LoraAdapter r = models::read_lora_adapter(f, c);
    ASSERT_EQ(r.pairs.size(), a.pairs.size()) << f;
    for (const auto& p : a.pairs) {
      const auto it = std::find_if(r.pairs.begin(), r.pairs.end(), [&](const auto& q) { return q.tensor == p.tensor; });
      ASSERT_NE(it, r.pairs.end()) << f << " " << p.tensor;
      EXPECT_TRUE(it->a == p.a && it->b == p.b) << f << " " << p.tensor;
    }
  }

  models::Model fused = models::load_any_model(fix);
  models::merge_lora(fused, a, 0.5f);
  models::save_model(fused, dir + "/fused.anelab");
  models::export_model(src, dir + "/base.gguf", models::ExportFormat::kGguf, models::DType::kF32);
  infer::LoadOptions o;
  o.model = fix, o.quiet = true;
  const std::vector<float> plain = lora_load_q35_logits(o);
  o.lora = {peft}, o.lora_scale = {0.5f};
  const std::vector<float> with_peft = lora_load_q35_logits(o);
  o.model = dir + "/base.gguf", o.lora = {gguf};
  const std::vector<float> with_gguf = lora_load_q35_logits(o);
  infer::LoadOptions f;
  f.model = dir + "/fused.anelab", f.quiet = true;
  const std::vector<float> fused_logits = lora_load_q35_logits(f);
  ASSERT_EQ(with_peft.size(), fused_logits.size());
  EXPECT_TRUE(with_peft == fused_logits);
  EXPECT_TRUE(with_gguf == fused_logits);
  EXPECT_FALSE(plain == fused_logits);
  models::LoraAdapter lin = a;  // the DeltaNet pairs alone
  std::erase_if(lin.pairs, [](const models::LoraPair& p) { return p.tensor.find(".ssm_") == std::string::npos; });
  ASSERT_EQ(lin.pairs.size(), 3u * 5u);
  models::write_peft_adapter(lin, c, dir + "/lin");
  o.model = fix, o.lora = {dir + "/lin"};
  EXPECT_FALSE(lora_load_q35_logits(o) == plain);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

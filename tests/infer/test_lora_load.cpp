// `infer --lora` (infer::LoadOptions::lora): a PEFT directory or a GGUF LoRA adapter merged at load gives the
// logits of the model with the same adapter merged and saved (what `export --fuse` writes), bit for bit: the merge
// is one fp32 computation (models::merge_lora) and the engine then runs the same fp32 weights.
#include <gtest/gtest.h>

#include <filesystem>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/load.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/io/adapter.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {

// A rank-4 adapter on every projection of every layer of `c`, seeded values (B non-zero so it changes the model).
models::LoraAdapter lora_load_test_adapter(const models::ModelConfig& c) {
  models::LoraAdapter a;
  a.rank = 4, a.alpha = 8;
  uint64_t s = 12345;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(s >> 11) * 0x1.0p-53 - 0.5) * 0.2f;
  };
  for (const models::TensorSpec& t : models::canonical_tensors(c)) {
    const std::string leaf = t.name.substr(t.name.rfind('.') + 1);
    if (!t.name.starts_with("layers.") || t.shape.size() != 2 ||
        !(leaf == "wq" || leaf == "wk" || leaf == "wv" || leaf == "wo" || leaf == "w1" || leaf == "w2" || leaf == "w3"))
      continue;
    models::LoraPair p{t.name, t.shape[1], t.shape[0], {}, {}};
    for (int64_t i = 0; i < a.rank * p.in; ++i) p.a.push_back(next());
    for (int64_t i = 0; i < p.out * a.rank; ++i) p.b.push_back(next());
    a.pairs.push_back(std::move(p));
  }
  return a;
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

}  // namespace
}  // namespace anelab

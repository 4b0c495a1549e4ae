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

}  // namespace
}  // namespace anelab

// The architecture table (models/arch/arch.h): names and presets are consistent, config.json picks the
// architecture by model_type, unknown names are refused naming the known ones, and every architecture's
// GGUF and Hugging Face mappings take a model there and back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/formats/gguf.h"
#include "models/formats/safetensors.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/io/hf_model.h"
#include "models/presets.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

Model gguf_round_trip(const Model& m) {
  auto owner = std::make_shared<std::vector<uint8_t>>(model_to_gguf(m));
  return gguf_to_model(parse_gguf(owner->data(), owner->size(), owner, "t.gguf"), "t.gguf");
}

// The architecture's first preset, shrunk to a few thousand parameters (its flags and GQA kept).
ModelConfig tiny(const Arch& a) {
  ModelConfig c = a.presets.at(0).second;
  const bool gqa = c.n_kv_heads < c.n_heads;
  c.dim = 32, c.hidden_dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = gqa ? 2 : 4, c.head_dim = 8;
  c.vocab_size = 40, c.max_seq_len = 16;
  if (c.params.contains("embed_scale")) set_param_named(&c, "embed_scale", std::sqrt(32.0f));  // Gemma: sqrt(dim)
  if (c.params.contains("sliding_window")) set_param_named(&c, "sliding_window", 4);
  return c;
}

TEST(ArchTable, NamesAreUniqueAndPresetsBelongToTheirArchitecture) {
  std::set<std::string> names;
  for (const Arch* a : architectures()) {
    EXPECT_TRUE(names.insert(a->name).second) << a->name;
    EXPECT_EQ(find_arch(a->name), a);
    ASSERT_FALSE(a->presets.empty()) << a->name;
    for (const auto& [name, c] : a->presets) {
      EXPECT_EQ(c.arch, a->name) << name;
      EXPECT_EQ(&preset(name), &preset(name));
      EXPECT_EQ(preset(name), c) << name;
      EXPECT_NO_THROW(validate_config(c, name));
    }
  }
}

TEST(ArchTable, HfModelTypeAndClassSelectTheArchitecture) {
  for (const Arch* a : architectures()) {
    for (const auto& t : a->hf_model_types) EXPECT_EQ(&arch_for_hf({{"model_type", t}}, "c"), a) << t;
    for (const auto& p : a->hf_class_prefixes)
      EXPECT_EQ(&arch_for_hf({{"architectures", {p + "ForCausalLM"}}}, "c"), a) << p;
  }
  EXPECT_THROW(arch_for_hf({{"model_type", "mamba"}}, "c"), Error);
}

TEST(ArchTable, UnknownArchitectureNamesTheKnownOnes) {
  ModelConfig c = preset("stories260k");
  c.arch = "mamba";
  try {
    validate_config(c, "m.anelab");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[model] m.anelab: architecture 'mamba' is not supported (use " + arch_names() + ")");
  }
}

TEST(ArchTable, EveryArchitectureRoundTripsThroughGguf) {
  for (const Arch* a : architectures()) {
    if (!a->gguf_config) continue;  // no GGUF mapping: export refuses it
    const Model m = random_model(tiny(*a), 3);
    const Model b = gguf_round_trip(m);
    ModelConfig want = m.config;
    if (a->gguf_explicit_output) want.tied_embeddings = false;  // the head is written as output.weight
    EXPECT_EQ(b.config, want) << a->name;
    for (const Tensor& t : m.tensors()) {
      const Tensor& u = b.tensor(t.name);
      ASSERT_EQ(u.nbytes, t.nbytes) << a->name << " " << t.name;
      if (t.name.ends_with("ssm_a_log")) {  // stored as A = -exp(A_log) (qwen35): A comes back, not A_log's bits
        const std::vector<float> x = t.to_f32(), y = u.to_f32();
        for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(-std::exp(y[i]), -std::exp(x[i])) << t.name << " " << i;
        continue;
      }
      EXPECT_EQ(std::memcmp(u.data, t.data, size_t(t.nbytes)), 0) << a->name << " " << t.name;
    }
  }
}

TEST(ArchTable, EveryExportableArchitectureRoundTripsThroughHuggingFace) {
  const auto dir = test::temp_dir("arch_hf");
  int exported = 0;
  for (const Arch* a : architectures()) {
    if (!a->hf_export_config) continue;
    const Model m = random_model(tiny(*a), 5);
    const std::string out = (dir / a->name).string();
    export_model(m, out, ExportFormat::kSafetensors);
    ModelConfig want = m.config;
    want.rope_style = RopeStyle::kRotateHalf;  // HF order (the export permutes q/k rows)
    EXPECT_EQ(read_hf_safetensors(out).config, want) << a->name;
    // transformers 5.x writes the RoPE base inside rope_parameters
    const std::string cfg = out + "/config.json";
    nlohmann::json j = nlohmann::json::parse(read_file_text(cfg));
    if (j.contains("rope_parameters") && j["rope_parameters"].contains("full_attention")) {
      // written in the 5.x style (gemma3, per layer type): the 4.x keys too
      j["rope_theta"] = j["rope_parameters"]["full_attention"]["rope_theta"];
      j["rope_local_base_freq"] = j["rope_parameters"]["sliding_attention"]["rope_theta"];
      j.erase("rope_parameters");
      j.erase("layer_types");
    } else if (j.contains("rope_parameters")) {  // 5.x, one RoPE (qwen35): the 4.x key
      j["rope_theta"] = j["rope_parameters"]["rope_theta"];
      j.erase("rope_parameters");
    } else {
      j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", j.at("rope_theta")}};
      j.erase("rope_theta");
    }
    write_file_atomic(cfg, j.dump());
    EXPECT_EQ(read_hf_safetensors(out).config, want) << a->name << " (the other transformers config style)";
    ++exported;
  }
  EXPECT_GE(exported, 3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab::models

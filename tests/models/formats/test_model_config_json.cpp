// The one JSON form of ModelConfig (models/formats/model_config_json.h): every field survives the JSON,
// the anelab model file and the training-checkpoint header; a dropped field is noticed; checkpoints
// written before the flags were stored still read, with the Llama defaults.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/checkpoint_header.h"
#include "models/formats/model_config_json.h"
#include "models/presets.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;

// Every field differs from its ModelConfig default, so a field that is not written or not read comes
// back as the default and the comparison (operator==, all fields) fails.
ModelConfig every_field_set() {
  ModelConfig c;
  c.arch = "gpt2";
  c.dim = 48;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 40;
  c.max_seq_len = 24;
  c.norm_eps = 1e-3f;
  c.rope_theta = 500.0f;
  c.rope_style = RopeStyle::kNone;
  c.rope_scaling = {RopeScalingType::kLlama3, 32.0f, 2.0f, 8.0f, 4096};  // every field off its default
  c.tied_embeddings = false;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  c.norm = NormType::kLayer;
  c.activation = Activation::kGeluTanh;
  c.learned_pos = true;
  c.full_attention_interval = 2;
  c.linear_k_heads = 2;
  c.linear_v_heads = 4;
  c.linear_k_dim = 8;
  c.linear_v_dim = 6;
  c.linear_conv_kernel = 3;
  c.rope_fraction = 0.5f;
  c.attn_output_gate = true;
  return c;
}

// Qwen3.5's fields: optional in every file (absent reads as the default, which leaves other models
// as they were). The architecture parameters (ModelConfig::params) are tested below.
bool optional_key(const std::string& k) {
  for (const char* o : {"full_attention_interval", "linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
                        "linear_conv_kernel", "rope_fraction", "attn_output_gate"})
    if (k == o) return true;
  return false;
}

TEST(ModelConfigJson, EveryFieldDiffersFromTheDefault) {
  const json set = model_config_to_json(every_field_set()), def = model_config_to_json(ModelConfig{});
  ASSERT_EQ(set.size(), def.size());
  for (const auto& [k, v] : set.items())
    EXPECT_NE(v, def.at(k)) << k << " is at its default: the test cannot see it dropped";
}

TEST(ModelConfigJson, EveryFieldRoundTrips) {
  const ModelConfig c = every_field_set();
  EXPECT_EQ(model_config_from_json(model_config_to_json(c), "t", "model", "config."), c);
  EXPECT_EQ(model_config_from_json(model_config_to_json(c), "t", "checkpoint", "model.", ConfigKeys::kCheckpoint), c);
}

TEST(ModelConfigJson, EveryKeyIsWrittenAndRead) {
  const ModelConfig c = every_field_set();
  const json j = model_config_to_json(c);
  EXPECT_EQ(j.size(), 28u) << "a ModelConfig field was added or removed: update model_config_json and this test";
  for (const auto& [k, v] : j.items()) {
    json cut = j;
    cut.erase(k);
    if (k.starts_with("linear_")) {  // optional, but a model with linear-attention layers needs every one of them
      try {
        model_config_from_json(cut, "m.anelab", "model", "config.");
        ADD_FAILURE() << k << " absent with full_attention_interval set was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(k), std::string::npos) << e.what();
      }
      continue;
    }
    if (k == "qk_norm" || optional_key(k)) {  // optional everywhere (older files lack it): absent reads as the default
      EXPECT_NE(model_config_from_json(cut, "m.anelab", "model", "config."), c);
      continue;
    }
    if (k == "rope_scaling") {  // files from before the key read as unscaled (OlderFilesWithoutRopeScaling...)
      EXPECT_EQ(model_config_from_json(cut, "m.anelab", "model", "config.").rope_scaling, RopeScaling{});
      continue;
    }
    try {  // a model file must have every key
      model_config_from_json(cut, "m.anelab", "model", "config.");
      ADD_FAILURE() << k << " removed was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("config." + k), std::string::npos) << e.what();
    }
    try {  // a checkpoint may lack the flags, which then read as defaults: not as the written value
      EXPECT_NE(model_config_from_json(cut, "c.ckpt", "checkpoint", "model.", ConfigKeys::kCheckpoint), c) << k;
    } catch (const Error&) {
    }
  }
}

TEST(ModelConfigJson, AnelabFileKeepsEveryField) {
  const ModelConfig c = every_field_set();
  const auto dir = test::temp_dir("config_json");
  const std::string path = (dir / "m.anelab").string();
  write_random_model(c, path, 7);
  EXPECT_EQ(read_anelab_file(path).config, c);
  std::filesystem::remove_all(dir);
}

TEST(ModelConfigJson, CheckpointHeaderKeepsEveryField) {
  CheckpointHeader h;
  h.model = every_field_set();
  const int64_t n = parameter_count(h.model);
  const std::vector<uint8_t> data(size_t(n) * 12, 0);
  std::vector<uint8_t> file =
      encode_checkpoint_header(h, canonical_tensors(h.model), fnv1a64(kFnvOffset, data.data(), data.size()));
  file.insert(file.end(), data.begin(), data.end());
  EXPECT_EQ(parse_checkpoint(file.data(), file.size(), "t.ckpt", canonical_tensors).header.model, h.model);
}

TEST(ModelConfigJson, OlderCheckpointModelObjectsReadAsLlama) {
  const ModelConfig c = preset("stories260k");
  json old = model_config_to_json(c);
  for (const char* k : {"norm", "activation", "qkv_bias", "attn_out_bias", "mlp_bias", "learned_pos"}) old.erase(k);
  EXPECT_EQ(model_config_from_json(old, "old.ckpt", "checkpoint", "model.", ConfigKeys::kCheckpoint), c);
}

TEST(ModelConfigJson, RopeScalingRoundTripsAndOlderFilesWithoutItReadUnscaled) {
  const ModelConfig c = preset("llama3.2-1b");
  json j = model_config_to_json(c);
  EXPECT_EQ(j["rope_scaling"], json::parse(R"({"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_pos": 8192})"));
  EXPECT_EQ(model_config_from_json(j, "m.anelab", "model", "config."), c);
  EXPECT_EQ(model_config_to_json(preset("stories260k"))["rope_scaling"], json::parse(R"({"type": "none"})"));
  j.erase("rope_scaling");
  ModelConfig unscaled = c;
  unscaled.rope_scaling = {};
  EXPECT_EQ(model_config_from_json(j, "old.anelab", "model", "config."), unscaled);
}

TEST(ModelConfigJson, BadRopeScalingIsOneLineNamingTheField) {
  const struct {
    const char* patch;
    std::string want;
  } cases[] = {
      {R"({"type": "yarn"})", "header field config.rope_scaling.type = \"yarn\" is not one of none, llama3"},
      {R"({"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0})",
       "header field config.rope_scaling.original_max_pos is missing"},
      {R"({"type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_pos": 8192})",
       "rope_scaling low_freq_factor 4 and high_freq_factor 1 must satisfy 0 < low < high"},
      {R"({"type": "llama3", "factor": 0.5, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_pos": 8192})",
       "rope_scaling factor 0.5 must be in [1, 1024]"},
      {R"("llama3")", "header field config.rope_scaling is not an object"},
  };
  for (const auto& k : cases) {
    json j = model_config_to_json(preset("llama3.2-1b"));
    j["rope_scaling"] = json::parse(k.patch);
    try {
      model_config_from_json(j, "m.anelab", "model", "config.");
      ADD_FAILURE() << k.patch << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.want), std::string::npos) << e.what();
    }
  }
}

TEST(ModelConfigJson, BadValuesAreOneLineNamingTheField) {
  json j = model_config_to_json(every_field_set());
  j["norm"] = "batch";
  try {
    model_config_from_json(j, "m.anelab", "model", "config.");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[model] m.anelab: header field config.norm = \"batch\" is not one of rms, layer");
  }
  j = model_config_to_json(every_field_set());
  j["dim"] = 1.5;
  EXPECT_THROW(model_config_from_json(j, "m.anelab", "model", "config."), Error);
  // The architecture's name and rules are the architecture table's (above the file formats): the JSON reader
  // takes any name, validate_config refuses an unknown one in one line.
  j = model_config_to_json(every_field_set());
  j["arch"] = "nope";
  const ModelConfig nope = model_config_from_json(j, "m.anelab", "model", "config.");
  try {
    validate_config(nope, "m.anelab");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[model] m.anelab: architecture 'nope' is not supported (use " + arch_names() + ")");
  }
}

// A Gemma 3 config small enough to write: every one of its parameters set off its table default.
ModelConfig gemma3_params_set() {
  ModelConfig c = preset("gemma3-270m");
  c.dim = 32, c.hidden_dim = 64, c.n_layers = 3, c.n_heads = 2, c.head_dim = 16, c.vocab_size = 40;
  c.max_seq_len = 24;
  set_param_named(&c, "embed_scale", 6.0);
  set_param_named(&c, "attn_scale", 0.25);
  set_param_named(&c, "logit_softcap", 30.0);
  set_param_named(&c, "sliding_window", 8);
  set_param_named(&c, "sliding_pattern", 2);
  set_param_named(&c, "rope_local_theta", 100.0);
  set_param_named(&c, "rope_linear_factor", 4.0);
  return c;
}

// The architecture's parameters are top-level keys, written and read by iterating ModelConfig::params: integers
// as JSON integers, numbers as JSON numbers; a round trip gives the same config and the same JSON.
TEST(ModelConfigJson, ArchParamsAreTopLevelKeysAndRoundTrip) {
  const ModelConfig c = gemma3_params_set();
  const json j = model_config_to_json(c);
  EXPECT_EQ(j.size(), 28u + 8u);
  EXPECT_TRUE(j.at("sliding_window").is_number_integer());
  EXPECT_EQ(j.at("sliding_window"), 8);
  EXPECT_TRUE(j.at("logit_softcap").is_number_float());
  EXPECT_EQ(j.at("logit_softcap"), 30.0);
  EXPECT_EQ(j.at("norm_offset"), 1.0);
  const ModelConfig back = model_config_from_json(j, "m.anelab", "model", "config.");
  EXPECT_EQ(back, c);
  EXPECT_EQ(model_config_to_json(back), j);
  validate_config(back, "m.anelab");
  const auto dir = test::temp_dir("config_params");
  const std::string path = (dir / "m.anelab").string();
  write_random_model(c, path, 7);
  EXPECT_EQ(read_anelab_file(path).config, c);
  std::filesystem::remove_all(dir);
}

// The config JSON of files written before the parameter tables: every architecture's file carried "qk_norm",
// "post_norms" and Gemma 3's fields, at their no-op values where the architecture has none.
json pre_table_json(const std::string& arch) {
  json j = model_config_to_json(arch == "gemma3" ? gemma3_params_set() : preset("stories260k"));
  j["qk_norm"] = j["post_norms"] = arch == "gemma3";  // the flags of the norms the architecture now implies
  if (arch == "gemma3") return j;                     // every key, as before
  for (auto [k, v] : std::initializer_list<std::pair<const char*, json>>{{"norm_offset", 0.0},
                                                                         {"embed_scale", 1.0},
                                                                         {"attn_scale", 0.0},
                                                                         {"logit_softcap", 0.0},
                                                                         {"sliding_window", 0},
                                                                         {"sliding_pattern", 0},
                                                                         {"rope_local_theta", 0.0},
                                                                         {"rope_linear_factor", 1.0}})
    j[k] = v;
  return j;
}

TEST(ModelConfigJson, FilesWrittenBeforeTheParameterTablesLoad) {
  const json old = pre_table_json("llama");
  EXPECT_TRUE(old.at("qk_norm") == false && old.at("post_norms") == false);
  ModelConfig c = model_config_from_json(old, "old.anelab", "model", "config.");
  validate_config(c, "old.anelab");  // the no-op keys of another architecture's parameters are accepted
  drop_legacy_params(&c);            // and dropped by the loaders (load_any_model, read_checkpoint)
  EXPECT_EQ(c, preset("stories260k"));
  json written = old;  // written again: the same JSON without the legacy keys
  for (const char* k : {"qk_norm", "post_norms", "norm_offset", "embed_scale", "attn_scale", "logit_softcap",
                        "sliding_window", "sliding_pattern", "rope_local_theta", "rope_linear_factor"})
    written.erase(k);
  EXPECT_EQ(model_config_to_json(c), written);
  const json old_gemma = pre_table_json("gemma3");
  ModelConfig g = model_config_from_json(old_gemma, "old.anelab", "model", "config.");
  validate_config(g, "old.anelab");  // its flags agree with what gemma3 implies
  drop_legacy_params(&g);
  EXPECT_EQ(g, gemma3_params_set());
  EXPECT_EQ(param_named(g, "logit_softcap"), 30.0);
}

// A legacy flag that contradicts what the architecture implies (q/k norms on a Llama, a Gemma 3 without its
// sandwich norms) is refused in one line naming it; a flag of no architecture is an unknown parameter.
// One key set on a file of architecture `arch` that validate_config must refuse with the line `want`.
struct ConfigKeyCase {
  std::string arch, key;
  json value;
  std::string want;
};

void expect_config_key_refused(const ConfigKeyCase& k) {
  json j = pre_table_json(k.arch);
  j[k.key] = k.value;
  const ModelConfig c = model_config_from_json(j, "m.anelab", "model", "config.");
  try {
    validate_config(c, "m.anelab");
    ADD_FAILURE() << k.arch << ": " << k.key << " = " << k.value << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), k.want);
  }
}

TEST(ModelConfigJson, LegacyNormFlagsMustAgreeWithTheArchitecture) {
  const ConfigKeyCase cases[] = {
      {"llama", "qk_norm", true,
       "[model] m.anelab: config field qk_norm = 1 contradicts architecture llama, which does not have it (the file "
       "is corrupt or edited)"},
      {"gemma3", "post_norms", false,
       "[model] m.anelab: config field post_norms = 0 contradicts architecture gemma3, which implies it (the file is "
       "corrupt or edited)"},
      {"llama", "bias_norms", false,
       "[model] m.anelab: config parameter bias_norms is not a parameter of architecture llama (it has none)"},
  };
  for (const auto& k : cases) expect_config_key_refused(k);
}

// A parameter the architecture does not have, or outside its table's range, is refused in one line naming it.
TEST(ModelConfigJson, UnknownOrOutOfRangeParameterIsOneLineNamingIt) {
  const ConfigKeyCase cases[] = {
      {"gemma3", "window_size", 8,
       "[model] m.anelab: config parameter window_size is not a parameter of architecture gemma3 (it has "
       "norm_offset, embed_scale, attn_scale, logit_softcap, sliding_window, sliding_pattern, rope_local_theta, "
       "rope_linear_factor)"},
      {"llama", "logit_softcap", 30.0,
       "[model] m.anelab: config parameter logit_softcap is not a parameter of architecture llama (it has none)"},
      {"gemma3", "sliding_window", -1, "[model] m.anelab: config field sliding_window = -1 is outside [0, 4194304]"},
      {"gemma3", "sliding_pattern", 2.5, "[model] m.anelab: config field sliding_pattern = 2.5 is not an integer"},
      {"gemma3", "logit_softcap", -2.0, "[model] m.anelab: config field logit_softcap = -2 is outside [0, 1e+06]"},
      {"gemma3", "rope_local_theta", 0.5,
       "[model] m.anelab: config field rope_local_theta = 0.5 is outside [1, 1e+12] (or 0)"},
  };
  for (const auto& k : cases) expect_config_key_refused(k);
  json j = pre_table_json("gemma3");
  j["logit_softcap"] = "30";
  try {
    model_config_from_json(j, "m.anelab", "model", "config.");
    ADD_FAILURE() << "a string parameter accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[model] m.anelab: header field config.logit_softcap = \"30\" is not a number or boolean (an "
              "architecture parameter)");
  }
}

// `anelab info` lists the architecture's parameters from its table (describe_params), one line each with the
// config's value or the default, and the norms of layer 0 from the description; describe_config (models/formats)
// names none.
TEST(ModelConfigJson, DescribeParamsListsTheTable) {
  ModelConfig c = gemma3_params_set();
  c.params.erase("logit_softcap");  // not set: the table's default
  const std::string text = describe_params(c);
  EXPECT_NE(text.find("\n  sliding_window  8 ("), std::string::npos) << text;
  EXPECT_NE(text.find("\n  logit_softcap   0 ("), std::string::npos) << text;
  EXPECT_NE(text.find("\n  rope_linear_factor 4 ("), std::string::npos) << text;
  EXPECT_NE(text.find("\n  layer norms     attn_norm, attn_post_norm, q_norm, k_norm, ffn_norm, ffn_post_norm "
                      "(layer 0)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 9) << text;
  EXPECT_EQ(describe_config(c).find("sliding"), std::string::npos);
  EXPECT_EQ(describe_params(preset("stories260k")), "  layer norms     attn_norm, ffn_norm (layer 0)\n");
}

}  // namespace
}  // namespace anelab::models

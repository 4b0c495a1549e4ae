// The one JSON form of a ModelConfig, used by the anelab model file (header "config"), the training
// checkpoint (header "model") and the trainer's run_start event ("model"):
//
//   {"arch": string (a name in models/arch/arch.h), "dim", "hidden_dim", "n_layers", "n_heads",
//    "n_kv_heads", "head_dim", "vocab_size", "max_seq_len" (integers), "norm_eps", "rope_theta" (numbers),
//    "rope_style": "none"|"adjacent_pairs"|"rotate_half",
//    "rope_scaling": {"type": "none"} | {"type": "llama3", "factor", "low_freq_factor", "high_freq_factor"
//                    (numbers), "original_max_pos" (integer)}, "norm": "rms"|"layer",
//    "activation": "silu"|"gelu_tanh", "tied_embeddings", "qkv_bias", "attn_out_bias", "mlp_bias",
//    "learned_pos" (booleans)}
//
// Every field is written. Reading checks each field's JSON type exactly (no bool -> int, no float -> int)
// and then the config's generic fields (validate_config_fields). Checkpoints written before they stored the
// norm, activation, bias and learned-position flags lack those keys: with ConfigKeys::kCheckpoint an
// absent flag reads as the ModelConfig default (the Llama layout those checkpoints held).
// Files written before "rope_scaling" existed lack it: absent reads as no scaling (what they computed).
// The Qwen3.5 fields ("full_attention_interval", "linear_k_heads", "linear_v_heads",
// "linear_k_dim", "linear_v_dim", "linear_conv_kernel" (integers), "rope_fraction" (number), "attn_output_gate"
// (boolean)) are optional likewise: absent reads as the default.
//
// The architecture's parameters (ModelConfig::params: each architecture's table, Arch::params in
// models/arch/arch.h) are top-level keys of their own names, an integer parameter a JSON integer, a number a JSON
// number. This code names none of them: it writes every entry of the map and reads every key that is not one of
// the fields above into it (a boolean as the integer 0 / 1, anything else but a number refused naming the key);
// validate_config checks them against the architecture's table (unknown name or out of range: one line naming it).
// Files written before the tables carried Gemma 3's parameters for every architecture, at their no-op values, and
// the boolean flags for the optional norms the architectures imply today (Arch::implied_flags): they read, and
// validate_config accepts those that agree with the architecture (drop_legacy_params removes them).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "models/formats/model.h"

namespace anelab::models {

nlohmann::json model_config_to_json(const ModelConfig& c);

enum class ConfigKeys {
  kAll,         // every key is required (anelab model files)
  kCheckpoint,  // the norm / activation / bias / learned_pos keys may be absent (older checkpoints)
};
// Errors are one line: "[COMPONENT] WHERE: header field PREFIXKEY ..." (e.g. "[model] m.anelab: header
// field config.dim is missing"), or validate_config_fields' "[model] WHERE: ..." for a field out of range.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where, const char* component,
                                   const std::string& prefix, ConfigKeys keys = ConfigKeys::kAll);

}  // namespace anelab::models

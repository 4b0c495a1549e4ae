// Helpers the architecture files share (not used outside models/arch/): typed reads of a Hugging Face
// config.json, the Hugging Face decoder layout of the Llama family (config keys, tensor names) that
// several architectures reuse with their own additions, and adding HF tensors to a Model.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "models/arch/arch.h"

namespace anelab::models::hf {

using json = nlohmann::json;

// config.json values; a missing or null key gives `def` (hf_int without def throws naming the key).
int64_t hf_int(const json& j, const char* key, const std::string& w, std::optional<int64_t> def = {});
double hf_num(const json& j, const char* key, const std::string& w, double def);
std::string hf_str(const json& j, const char* key, const std::string& w, const std::string& def);
bool hf_bool(const json& j, const char* key, const std::string& w, bool def);

// The RoPE base: transformers 4.x "rope_theta", or 5.x "rope_parameters": {"rope_theta", "rope_type"}.
// Refuses a rope_type other than "default" in rope_scaling (4.x) or rope_parameters (5.x).
double hf_rope_theta(const json& j, const std::string& w, double def);

// The decoder config keys of the Llama family (hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, vocab_size, max_position_embeddings, rms_norm_eps,
// RoPE as above, hidden_act silu, tie_word_embeddings): RMSNorm, SwiGLU, rotate-half RoPE, no biases.
ModelConfig hf_decoder_config(const json& j, const std::string& arch, const std::string& w);
// The inverse, for export: config.json with those keys (architectures/model_type added by the caller).
json hf_decoder_export_config(const ModelConfig& c);

// HF per-layer tensor name -> canonical leaf ("self_attn.q_proj.weight" -> "wq") of the Llama family;
// architectures copy it and add their own entries.
std::map<std::string, std::string> hf_decoder_layer_names();
// Maps "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight" and "model.layers.N.<leaf>"
// through per_layer; any other tensor is refused naming it.
void map_hf_decoder(Model& m, const StTensorMap& ts, const std::map<std::string, std::string>& per_layer,
                    const std::string& w);
// The inverse: the HF name of a canonical tensor ("layers.3.wq" -> "model.layers.3.self_attn.q_proj.weight").
std::string hf_decoder_name(const std::string& canonical, const std::map<std::string, std::string>& per_layer);
// The same through hf_decoder_layer_names(): the HF names of the Llama family unchanged (llama, qwen2).
std::string hf_decoder_name_default(const std::string& canonical);

void add_st(Model& m, const std::string& name, const StTensor& t);

}  // namespace anelab::models::hf

namespace anelab::models {

// The layer description of the decoder family every architecture of the table belongs to (Llama, Qwen 2/3,
// GPT-2, Gemma 3): per layer an attention step and an FFN step, each pre-normed, with what the config sets —
// norm kind/eps/offset (kNormOffset, arch.h), LayerNorm biases, q/k/v/o and MLP biases, RoPE (style, theta, Llama 3
// scaling) or learned positions, score scale 1 / sqrt(head_dim), tied head. An architecture with more (q/k norms,
// Gemma 3's sandwich norms, windows and scales) adds it in its describe().
ModelDesc decoder_desc(const ModelConfig& c);
// A norm of the config's epsilon and offset over weight `weight` (with its "<weight>_bias" for a LayerNorm when
// with_bias).
NormDesc norm_desc(const ModelConfig& c, NormType kind, const std::string& weight, bool with_bias);
// Per-head RMSNorms of q and k before RoPE (weights layers.N.q_norm / k_norm [head_dim]) on every attention step
// (Qwen3, Qwen3.5, Gemma 3); qk_norm_decoder_desc is decoder_desc with them.
void add_qk_norms(ModelDesc* d, const ModelConfig& c);
ModelDesc qk_norm_decoder_desc(const ModelConfig& c);

}  // namespace anelab::models

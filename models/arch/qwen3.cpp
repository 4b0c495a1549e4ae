// Qwen3 dense models (HF Qwen3ForCausalLM; GGUF "qwen3"): the Llama decoder with a per-head RMSNorm of
// q and k before RoPE (self_attn.q_norm / k_norm, weight [head_dim], eps rms_norm_eps; GGUF
// blk.N.attn_q_norm / attn_k_norm), an explicit head_dim (128 for 0.6B with dim 1024 and 16 heads), GQA,
// no q/k/v bias (attention_bias adds q/k/v and o biases, as in Llama), tied or untied head; RoPE in
// rotate-half order (llama.cpp's NEOX rope on unpermuted weights), theta 1e6, RMS eps 1e-6.
//
// Presets:
//   qwen3-0.6b  1024/3072, 28 layers, 16 heads, 8 kv, head_dim 128, vocab 151936, ctx 40960, tied
#include "framework/core/error.h"
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_qwen3 {
namespace {
using hf::json;

ModelConfig qwen3_06b() {
  ModelConfig c;
  c.arch = "qwen3";
  c.dim = 1024;
  c.hidden_dim = 3072;
  c.n_layers = 28;
  c.n_heads = 16;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.max_seq_len = 40960;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1e6f;
  c.rope_style = RopeStyle::kRotateHalf;
  return c;
}

std::map<std::string, std::string> layer_names() {
  auto names = hf::hf_decoder_layer_names();
  names["self_attn.q_norm.weight"] = "q_norm";
  names["self_attn.k_norm.weight"] = "k_norm";
  return names;
}

ModelConfig from_hf(const json& j, const std::string& w) {
  ModelConfig c = hf::hf_decoder_config(j, "qwen3", w);
  c.qkv_bias = c.attn_out_bias = hf::hf_bool(j, "attention_bias", w, false);
  return c;
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) { hf::map_hf_decoder(m, ts, layer_names(), w); }

json to_hf(const ModelConfig& c) {
  json j = hf::hf_decoder_export_config(c);
  j["architectures"] = json::array({"Qwen3ForCausalLM"});
  j["model_type"] = "qwen3";
  j["attention_bias"] = c.qkv_bias;
  j["use_sliding_window"] = false;
  return j;
}

std::string hf_name(const std::string& canonical) {
  static const auto names = layer_names();
  return hf::hf_decoder_name(canonical, names);
}

void from_gguf(const GgufFile& g, ModelConfig* c, const std::string&) {
  c->norm_eps = static_cast<float>(g.get_num(c->arch + ".attention.layer_norm_rms_epsilon", 1e-6));
  c->rope_style = RopeStyle::kRotateHalf;
}

void validate(const ModelConfig& c, const std::string& where) {
  if (c.norm != NormType::kRms || c.activation != Activation::kSilu || c.learned_pos)
    fail("model", where, ": a qwen3 model has RMSNorm, a SwiGLU MLP and RoPE (this config has ", norm_type_name(c.norm),
         ", ", activation_name(c.activation), ", rope_style ", rope_style_name(c.rope_style), ")");
}
}  // namespace
}  // namespace arch_qwen3

const Arch& qwen3_arch() {
  using namespace arch_qwen3;
  static const Arch a = [] {
    Arch r;
    r.name = "qwen3";
    r.hf_model_types = {"qwen3"};
    r.hf_class_prefixes = {"Qwen3ForCausalLM"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.hf_export_config = to_hf;
    r.hf_tensor_name = hf_name;
    r.gguf_config = from_gguf;
    r.gguf_rope = RopeStyle::kRotateHalf;
    r.describe = qk_norm_decoder_desc;  // per-head q/k norms on every layer
    r.implied_flags = {"qk_norm"};
    r.presets = {{"qwen3-0.6b", qwen3_06b()}};
    r.validate = validate;
    return r;
  }();
  return a;
}

}  // namespace anelab::models

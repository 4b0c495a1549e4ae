// Qwen3.5 dense text models (HF Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration, model_type qwen3_5_text or
// qwen3_5): the hybrid of Gated DeltaNet "linear_attention" layers and gated "full_attention" layers, every
// full_attention_interval-th layer full (layer_types in config.json, which must follow that pattern). Definitions
// from Hugging Face transformers src/transformers/models/qwen3_5/modeling_qwen3_5.py (Qwen3_5GatedDeltaNet,
// Qwen3_5Attention, Qwen3_5RMSNorm, Qwen3_5RMSNormGated) and configuration_qwen3_5.py (Qwen3_5TextConfig); the fp64
// oracle is scripts/qwen35_reference.py.
//   - every RMSNorm but the DeltaNet's gated one scales by (1 + w) (norm_offset 1); SwiGLU MLP; tied or untied head;
//   - full attention: q_proj rows per head [q | gate] (attn_output_gate), per-head q/k norms, RoPE (rotate-half) on
//     the first partial_rotary_factor * head_dim dims, attention output * sigmoid(gate) before o_proj;
//   - linear attention: in_proj_qkv, the short causal conv1d + SiLU, L2-normalised q/k, beta = sigmoid(in_proj_b x),
//     g = -exp(A_log) softplus(in_proj_a x + dt_bias), the delta rule, the gated RMSNorm with silu(in_proj_z x),
//     out_proj (models/arch/layer_desc.h DeltaNetDesc).
// config.json: flat (Qwen3_5ForCausalLM) or nested under "text_config" (Qwen3_5ForConditionalGeneration, whose
// vision tower "model.visual.*" and multi-token-prediction head "mtp.*" are not loaded; its language model's
// tensors are "model.language_model.*"). No GGUF mapping and no Hugging Face export yet.
//
// Presets (Qwen/Qwen3.5-0.8B's config.json text_config):
//   qwen3.5-0.8b  1024/3584, 24 layers (18 linear + 6 full), 8 heads, 2 kv, head_dim 256, linear 16 key heads and
//                 16 value heads of 128, conv 4, vocab 248320, ctx 262144, rope_theta 1e7 on 64 of 256 dims, tied
#include <cmath>

#include "framework/core/error.h"
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_qwen35 {
namespace {
using hf::json;

ModelConfig qwen35_08b() {
  ModelConfig c;
  c.arch = "qwen35";
  c.dim = 1024;
  c.hidden_dim = 3584;
  c.n_layers = 24;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 256;
  c.vocab_size = 248320;
  c.max_seq_len = 262144;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1e7f;
  c.rope_style = RopeStyle::kRotateHalf;
  c.qk_norm = true;
  set_param(&c, kNormOffset, 1.0);
  c.full_attention_interval = 4;
  c.linear_k_heads = 16;
  c.linear_v_heads = 16;
  c.linear_k_dim = 128;
  c.linear_v_dim = 128;
  c.linear_conv_kernel = 4;
  c.rope_fraction = 0.25f;
  c.attn_output_gate = true;
  return c;
}

// The linear-attention layer's HF leaves -> canonical leaves (conv1d.weight is reshaped [C, 1, K] -> [C, K]).
const std::map<std::string, std::string>& linear_names() {
  static const std::map<std::string, std::string> names = {
      {"linear_attn.in_proj_qkv.weight", "ssm_qkv"}, {"linear_attn.in_proj_z.weight", "ssm_z"},
      {"linear_attn.in_proj_b.weight", "ssm_b"},     {"linear_attn.in_proj_a.weight", "ssm_a"},
      {"linear_attn.conv1d.weight", "ssm_conv"},     {"linear_attn.A_log", "ssm_a_log"},
      {"linear_attn.dt_bias", "ssm_dt_bias"},        {"linear_attn.norm.weight", "ssm_norm"},
      {"linear_attn.out_proj.weight", "ssm_out"}};
  return names;
}

std::map<std::string, std::string> layer_names() {
  auto names = hf::hf_decoder_layer_names();
  names["self_attn.q_norm.weight"] = "q_norm";
  names["self_attn.k_norm.weight"] = "k_norm";
  for (const auto& [h, canon] : linear_names()) names[h] = canon;
  return names;
}

// The layer pattern: layer_types (each "linear_attention" or "full_attention", full exactly every N-th layer) or
// full_attention_interval; returns N.
int64_t full_interval(const json& t, int64_t n_layers, const std::string& w) {
  if (!t.contains("layer_types") || t["layer_types"].is_null()) {
    const int64_t every = hf::hf_int(t, "full_attention_interval", w, 4);
    if (every <= 0) fail("model", w, ": config.json full_attention_interval must be positive, got ", every);
    return every;
  }
  const json& lt = t["layer_types"];
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n_layers)
    fail("model", w, ": config.json layer_types must be an array of num_hidden_layers (", n_layers, ") names");
  int64_t every = 0;
  for (int64_t l = 0; l < n_layers && every == 0; ++l)
    if (lt[static_cast<size_t>(l)] == "full_attention") every = l + 1;
  if (every == 0) every = n_layers + 1;  // no full layer at all
  for (int64_t l = 0; l < n_layers; ++l) {
    const json& v = lt[static_cast<size_t>(l)];
    const char* want = (l + 1) % every == 0 ? "full_attention" : "linear_attention";
    if (v != want)
      fail("model", w, ": config.json layer_types[", l, "] is ", v.dump(), ", expected \"", want,
           "\" (anelab takes a full-attention layer every ", every, " layers)");
  }
  return every;
}

ModelConfig from_hf(const json& j, const std::string& w) {
  const bool nested = j.contains("text_config") && j["text_config"].is_object();
  const json& t = nested ? j["text_config"] : j;
  ModelConfig c = hf::hf_decoder_config(t, "qwen35", w);
  if (nested) c.tied_embeddings = hf::hf_bool(j, "tie_word_embeddings", w, c.tied_embeddings);
  if (hf::hf_bool(t, "attention_bias", w, false))
    fail("model", w, ": config.json attention_bias true is not supported");
  c.qk_norm = true;
  set_param(&c, kNormOffset, 1.0);
  c.attn_output_gate = hf::hf_bool(t, "attn_output_gate", w, true);
  double frac = hf::hf_num(t, "partial_rotary_factor", w, 0.25);
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object())
    frac = hf::hf_num(t["rope_parameters"], "partial_rotary_factor", w, frac);
  c.rope_fraction = static_cast<float>(frac);
  c.full_attention_interval = full_interval(t, c.n_layers, w);
  c.linear_k_heads = hf::hf_int(t, "linear_num_key_heads", w);
  c.linear_v_heads = hf::hf_int(t, "linear_num_value_heads", w);
  c.linear_k_dim = hf::hf_int(t, "linear_key_head_dim", w);
  c.linear_v_dim = hf::hf_int(t, "linear_value_head_dim", w);
  c.linear_conv_kernel = hf::hf_int(t, "linear_conv_kernel_dim", w);
  return c;
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) {
  StTensorMap text;  // the language model's tensors under the names of Qwen3_5ForCausalLM
  for (const auto& [name, t] : ts) {
    if (name.starts_with("model.visual.") || name.starts_with("mtp.")) continue;
    std::string n = name;
    if (n.starts_with("model.language_model.")) n = "model." + n.substr(21);
    text.emplace(n, t);
  }
  Model staged;
  staged.config = m.config;
  hf::map_hf_decoder(staged, text, layer_names(), w);
  for (const Tensor& t : staged.tensors()) {
    if (t.name.ends_with(".ssm_conv") && t.shape.size() == 3 && t.shape[1] == 1)
      m.add_view(t.name, t.dtype, {t.shape[0], t.shape[2]}, t.data, t.nbytes, t.owner);
    else
      m.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
  }
}

// decoder_desc's layers with the gated, partially rotated attention, and the linear-attention layers' first step
// a Gated DeltaNet.
ModelDesc describe(const ModelConfig& c) {
  ModelDesc d = decoder_desc(c);
  const auto rot = static_cast<int64_t>(std::lround(c.rope_fraction * static_cast<float>(c.head_dim)));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Step& s = d.layers[static_cast<size_t>(l)].steps[0];
    s.attn.output_gate = c.attn_output_gate;
    s.attn.rope.dims = rot;
    if (!c.linear_layer(l)) continue;
    const std::string p = "layers." + std::to_string(l) + ".";
    Step lin;
    lin.kind = StepKind::kLinearAttention;
    lin.pre_norm = s.pre_norm;
    DeltaNetDesc& n = lin.deltanet;
    n.n_k_heads = c.linear_k_heads;
    n.n_v_heads = c.linear_v_heads;
    n.k_dim = c.linear_k_dim;
    n.v_dim = c.linear_v_dim;
    n.conv_kernel = c.linear_conv_kernel;
    n.norm = NormDesc{NormType::kRms, c.norm_eps, 0.0f, p + "ssm_norm", ""};  // scales by w itself
    n.w_qkv = p + "ssm_qkv";
    n.w_z = p + "ssm_z";
    n.w_b = p + "ssm_b";
    n.w_a = p + "ssm_a";
    n.conv = p + "ssm_conv";
    n.a_log = p + "ssm_a_log";
    n.dt_bias = p + "ssm_dt_bias";
    n.w_out = p + "ssm_out";
    s = lin;
  }
  return d;
}

void validate(const ModelConfig& c, const std::string& where) {
  if (c.full_attention_interval <= 0 || !c.qk_norm || c.norm != NormType::kRms || c.activation != Activation::kSilu ||
      c.learned_pos)
    fail("model", where,
         ": a qwen35 model has linear-attention layers (full_attention_interval > 0), RMSNorm, q/k norms, a SwiGLU "
         "MLP and RoPE (this config has full_attention_interval ",
         c.full_attention_interval, ", ", norm_type_name(c.norm), ", qk_norm ", c.qk_norm ? "true" : "false", ", ",
         activation_name(c.activation), ")");
}
}  // namespace
}  // namespace arch_qwen35

const Arch& qwen35_arch() {
  using namespace arch_qwen35;
  static const Arch a = [] {
    Arch r;
    r.name = "qwen35";
    r.hf_model_types = {"qwen3_5_text", "qwen3_5"};
    r.hf_class_prefixes = {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.describe = describe;
    r.params = {&kNormOffset};
    r.presets = {{"qwen3.5-0.8b", qwen35_08b()}};
    r.validate = validate;
    return r;
  }();
  return a;
}

}  // namespace anelab::models

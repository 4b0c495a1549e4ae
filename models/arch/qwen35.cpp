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
//     out_proj (framework/core/model_desc.h DeltaNetDesc).
// config.json: flat (Qwen3_5ForCausalLM) or nested under "text_config" (Qwen3_5ForConditionalGeneration, whose
// vision tower "model.visual.*" and multi-token-prediction head "mtp.*" are not loaded; its language model's
// tensors are "model.language_model.*"). Hugging Face export: the flat Qwen3_5ForCausalLM config.json (transformers
// 5.x keys: rope_parameters, layer_types) and its tensor names, conv1d written [C, 1, K].
//
// GGUF ("qwen35", llama.cpp's layout; facts from llama.cpp (2026-08 mainline) src/llama-arch.cpp (key and tensor
// names), src/models/qwen35.cpp (load_arch_hparams, load_arch_tensors, the graph), conversion/qwen.py
// (Qwen3NextModel.set_gguf_parameters / modify_tensors, _LinearAttentionVReorderBase, _Qwen35MRopeMixin) and
// gguf-py/gguf/constants.py (MODEL_ARCH.QWEN35's tensor list)):
//   keys: the generic sizes (key_length = value_length = head_dim), attention.layer_norm_rms_epsilon,
//     rope.freq_base, rope.dimension_count (the rotated dims, head_dim * partial_rotary_factor),
//     rope.dimension_sections (4 x i32, interleaved M-RoPE: for text every position component is the token's, so
//     the rotation is rotate-half on the first dimension_count dims; written as llama.cpp's converter default
//     [11, 11, 10, 0], or for a head_dim under 32 (ggml needs the sum <= head_dim) the rotated pairs p split as
//     ceil(p/3), ceil((p - t)/2), the rest, 0; refused on read when a rotated pair would take the 4th component),
//     full_attention_interval (absent: 4), ssm.conv_kernel, ssm.state_size (linear key head dim), ssm.group_count
//     (linear key heads),
//     ssm.time_step_rank (linear value heads), ssm.inner_size (value heads * value head dim: llama.cpp's graph takes
//     the value head dim from it, its loader from state_size, so it runs only key dim = value dim);
//   tensors: attention layers as the generic table (attn_q holds q_proj's per-head [q | gate] rows as they are,
//     attn_q_norm / attn_k_norm), post_attention_layernorm -> blk.N.post_attention_norm (the MLP's input norm);
//     linear layers: in_proj_qkv -> attn_qkv, in_proj_z -> attn_gate, in_proj_b -> ssm_beta, in_proj_a ->
//     ssm_alpha, conv1d [C, 1, K] -> ssm_conv1d ggml {K, C}, A_log -> ssm_a F32 = -exp(A_log), dt_bias ->
//     ssm_dt.bias, norm -> ssm_norm, out_proj -> ssm_out;
//   norms: every one but ssm_norm stored as F32 1 + w (the converter's "+ 1"; llama.cpp multiplies by the stored
//     weight); ssm_norm, ssm_dt, ssm_a and ssm_conv1d F32 as the converter stores them (1-D tensors, conv kernels);
//   value heads: with fewer key heads than value heads, llama.cpp stores the value heads tiled by key head
//     (v head j of key head g at j * Hk + g) where HF groups them (at g * Hv/Hk + j): the rows of attn_qkv's v
//     part, attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt, ssm_conv1d's v channels and the columns of ssm_out are
//     permuted on export and back on read (a column permutation needs whole quant blocks per head).
//   Reading ssm_a back: A_log = log(-A) in fp32 (a stored A >= 0 is refused); the engine's -exp(A_log) then gives A
//     back (glibc's expf and logf: no mismatch over every 7th float with |A_log| in [2^-30, 16)); A_log itself
//     is not always recovered (near 0, exp loses its low bits), only the A the engine computes from it.
//
// Presets (Qwen/Qwen3.5-0.8B's config.json text_config):
//   qwen3.5-0.8b  1024/3584, 24 layers (18 linear + 6 full), 8 heads, 2 kv, head_dim 256, linear 16 key heads and
//                 16 value heads of 128, conv 4, vocab 248320, ctx 262144, rope_theta 1e7 on 64 of 256 dims, tied
//   qwen3.5-27b   5120/17408, 64 layers (48 linear + 16 full), 24 heads, 4 kv, vocab 248320 (llama.cpp
//                 tests/snapshots/qwen3.6-27b.schema, "# Model: Qwen3.5-27B"); head_dim 256, 64 of 256 dims rotated,
//                 rope_theta 1e7, eps 1e-6, untied (THUDM/slime scripts/models/qwen3.5-27B.sh); ctx 262144
//                 (paiml/aprender contracts/model-families/qwen3_5.yaml, 27b); linear 16 key heads and 48 value heads
//                 of 128, conv 4 (Modular MAX's Qwen3_5Config defaults, docs.modular.com
//                 max/api/python/pipelines.architectures.qwen3_5)
// (qwen3.5-2b, -4b, -9b: from public re-implementations that list their config.json, see qwen35_2b below.)
#include <cmath>
#include <cstring>

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

ModelConfig qwen35_27b() {
  ModelConfig c = qwen35_08b();
  c.dim = 5120;
  c.hidden_dim = 17408;
  c.n_layers = 64;
  c.n_heads = 24;
  c.n_kv_heads = 4;
  c.linear_v_heads = 48;
  c.tied_embeddings = false;
  return c;
}

// The dense 2B / 4B / 9B text models. Sizes from public re-implementations that list Qwen/Qwen3.5-*'s config.json
// text_config: a JAX port's spec table (hidden / layers / heads / KV heads / intermediate / linear value heads /
// tied head per size, the rest transformers' Qwen3_5TextConfig defaults: head_dim 256, linear key heads 16 of
// 128, value heads of 128, conv kernel 4), a Lean port's Qwen3.5-9B defaults (4096 / 12288 / 32 layers / 16 heads /
// 4 KV / 16 key and 32 value linear heads, untied) and a Rust test's whole Qwen3.5-2B text_config (rope_theta 1e7,
// partial_rotary_factor 0.25, tied). rope_theta 1e7 for 4B and 9B as for 0.8B, 2B and 27B (not seen in their own
// config.json).
ModelConfig qwen35_2b() {
  ModelConfig c = qwen35_08b();
  c.dim = 2048;
  c.hidden_dim = 6144;
  return c;
}

ModelConfig qwen35_4b() {
  ModelConfig c = qwen35_08b();
  c.dim = 2560;
  c.hidden_dim = 9216;
  c.n_layers = 32;
  c.n_heads = 16;
  c.n_kv_heads = 4;
  c.linear_v_heads = 32;
  return c;
}

ModelConfig qwen35_9b() {
  ModelConfig c = qwen35_4b();
  c.dim = 4096;
  c.hidden_dim = 12288;
  c.tied_embeddings = false;
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
  if (every == 0) every = hf::hf_int(t, "full_attention_interval", w, n_layers + 1);  // no full layer at all
  if (every <= 0) fail("model", w, ": config.json full_attention_interval must be positive, got ", every);
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

// config.json as transformers 5.x writes a Qwen3_5ForCausalLM's (flat, model_type qwen3_5_text, RoPE in
// rope_parameters, the layer pattern as layer_types).
json to_hf(const ModelConfig& c) {
  json j = hf::hf_decoder_export_config(c);
  const json theta = j["rope_theta"];
  j.erase("rope_theta");
  j["architectures"] = json::array({"Qwen3_5ForCausalLM"});
  j["model_type"] = "qwen3_5_text";
  j["attention_bias"] = false;
  j["attn_output_gate"] = c.attn_output_gate;
  j["full_attention_interval"] = c.full_attention_interval;
  json types = json::array();
  for (int64_t l = 0; l < c.n_layers; ++l) types.push_back(c.linear_layer(l) ? "linear_attention" : "full_attention");
  j["layer_types"] = types;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel;
  j["linear_key_head_dim"] = c.linear_k_dim;
  j["linear_num_key_heads"] = c.linear_k_heads;
  j["linear_num_value_heads"] = c.linear_v_heads;
  j["linear_value_head_dim"] = c.linear_v_dim;
  j["partial_rotary_factor"] = c.rope_fraction;
  j["rope_parameters"] = {{"partial_rotary_factor", c.rope_fraction}, {"rope_theta", theta}, {"rope_type", "default"}};
  return j;
}

std::string hf_name(const std::string& canonical) {
  static const auto names = layer_names();
  return hf::hf_decoder_name(canonical, names);
}

std::vector<int64_t> hf_shape(const std::string& canonical, const std::vector<int64_t>& shape) {
  if (canonical.ends_with(".ssm_conv") && shape.size() == 2) return {shape[0], 1, shape[1]};
  return shape;
}

// decoder_desc's layers with the gated, partially rotated attention, and the linear-attention layers' first step
// a Gated DeltaNet.
ModelDesc describe(const ModelConfig& c) {
  ModelDesc d = qk_norm_decoder_desc(c);
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

// ---- GGUF ----

// llama.cpp's keys -> the fields only qwen35 has (the generic sizes are read already).
void from_gguf(const GgufFile& g, ModelConfig* c, const std::string& w) {
  const std::string a = c->arch + ".";
  const auto num = [&](const std::string& key) {
    if (!g.find(key)) fail("model", w, ": GGUF metadata ", key, " is missing");
    return g.get_num(key, 0.0);
  };
  c->norm_eps = static_cast<float>(num(a + "attention.layer_norm_rms_epsilon"));
  c->rope_style = RopeStyle::kRotateHalf;
  set_param(c, kNormOffset, 1.0);
  c->attn_output_gate = true;
  c->full_attention_interval = g.get_int(a + "full_attention_interval", int64_t{4});
  if (g.find(a + "attention.recurrent_layers"))
    fail("model", w, ": ", a, "attention.recurrent_layers is not supported (anelab takes ", a,
         "full_attention_interval)");
  c->linear_conv_kernel = g.get_int(a + "ssm.conv_kernel", w);
  c->linear_k_dim = g.get_int(a + "ssm.state_size", w);
  c->linear_k_heads = g.get_int(a + "ssm.group_count", w);
  c->linear_v_heads = g.get_int(a + "ssm.time_step_rank", w);
  const int64_t inner = g.get_int(a + "ssm.inner_size", w);
  if (c->linear_v_heads <= 0 || inner <= 0 || inner % c->linear_v_heads != 0)
    fail("model", w, ": ", a, "ssm.inner_size (", inner, ") must be a positive multiple of ", a, "ssm.time_step_rank (",
         c->linear_v_heads, ")");
  c->linear_v_dim = inner / c->linear_v_heads;
  const int64_t rot = g.get_int(a + "rope.dimension_count", c->head_dim);
  if (rot <= 0 || rot > c->head_dim || rot % 2 != 0)
    fail("model", w, ": ", a, "rope.dimension_count ", rot, " must be even and in (0, key_length ", c->head_dim, "]");
  c->rope_fraction = static_cast<float>(rot) / static_cast<float>(c->head_dim);
  // Interleaved M-RoPE: rotated pair i takes section (i % S) % 3's position when below 3x that section's size, else
  // the 4th ("e", 0 for text). Text runs rotate every pair by the token's position only when no pair falls to "e".
  const GgufValue* sv = g.find(a + "rope.dimension_sections");
  if (!sv || sv->type != GgufType::kArray || sv->nums.size() != 4)
    fail("model", w, ": GGUF metadata ", a, "rope.dimension_sections is missing or not 4 integers");
  int64_t sec[4], total = 0;
  for (int k = 0; k < 4; ++k) total += sec[k] = static_cast<int64_t>(sv->nums[static_cast<size_t>(k)]);
  if (total <= 0 || total > c->head_dim)  // (ggml_rope_multi asserts the sum <= the head's width)
    fail("model", w, ": ", a, "rope.dimension_sections sum ", total, " is not in (0, key_length ", c->head_dim, "]");
  for (int64_t i = 0; i < rot / 2; ++i) {
    const int64_t sector = i % total, part = sector % 3;
    if (sector >= 3 * sec[part])
      fail("model", w, ": ", a, "rope.dimension_sections leaves rotated pair ", i,
           " to the 4th position component; anelab runs text positions only");
  }
}

// llama.cpp's converter default [11, 11, 10, 0] where ggml can take it (sum <= head_dim), else the rotated pairs
// split the same way.
std::vector<int32_t> rope_sections(const ModelConfig& c) {
  if (c.head_dim >= 32) return {11, 11, 10, 0};
  const auto pairs = static_cast<int32_t>(std::lround(c.rope_fraction * static_cast<float>(c.head_dim)) / 2);
  const int32_t t = (pairs + 2) / 3, h = (pairs - t + 1) / 2;
  return {t, h, pairs - t - h, 0};
}

void to_gguf(GgufWriter& g, const ModelConfig& c, std::vector<std::string>* notes) {
  const std::string a = c.arch + ".";
  g.add_u32(a + "rope.dimension_count",
            static_cast<uint32_t>(std::lround(c.rope_fraction * static_cast<float>(c.head_dim))));
  g.add_i32_array(a + "rope.dimension_sections", rope_sections(c));
  g.add_u32(a + "full_attention_interval", static_cast<uint32_t>(c.full_attention_interval));
  g.add_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(c.linear_conv_kernel));
  g.add_u32(a + "ssm.state_size", static_cast<uint32_t>(c.linear_k_dim));
  g.add_u32(a + "ssm.group_count", static_cast<uint32_t>(c.linear_k_heads));
  g.add_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(c.linear_v_heads));
  g.add_u32(a + "ssm.inner_size", static_cast<uint32_t>(c.linear_value_dim()));
  if (c.linear_k_dim != c.linear_v_dim)
    notes->push_back(cat("qwen35: llama.cpp's loader takes the linear value head dim from ssm.state_size (",
                         c.linear_k_dim, "), this model's is ", c.linear_v_dim, ": llama.cpp will refuse its tensors"));
  if (!c.attn_output_gate)
    notes->push_back("qwen35: llama.cpp's graph always gates attention (q_proj [q | gate]); this model has no gate");
}

// The value-head permutation between HF's grouped order and llama.cpp's tiled one, over `count` units of `unit`
// elements starting at element `first` along rows (columns = false) or within every row (columns = true).
std::vector<uint8_t> permute_v_heads(const ModelConfig& c, const Tensor& t, int64_t first, int64_t unit, bool columns,
                                     bool to_tiled, const std::string& w) {
  const int64_t hk = c.linear_k_heads, hv = c.linear_v_heads, r = hv / hk;
  const int64_t rows = t.rows(), cols = t.cols(), row_bytes = t.nbytes / rows;
  const int64_t span = columns ? cols : rows;  // elements along the permuted axis
  const int64_t elem_num = columns ? row_bytes : t.nbytes, unit_bytes = elem_num * unit / span;
  if ((elem_num * unit) % span != 0 || (columns && unit % dtype_block(t.dtype) != 0) || first + hv * unit > span)
    fail("model", w, ": qwen35 GGUF: ", t.name, " ", t.shape_str(), " ", dtype_name(t.dtype),
         " cannot have its value heads reordered (llama.cpp's tiled order; needs whole quant blocks per head)");
  std::vector<uint8_t> out(t.data, t.data + t.nbytes);
  const int64_t first_bytes = elem_num * first / span;
  for (int64_t i = 0; i < (columns ? rows : 1); ++i) {
    const int64_t base = i * row_bytes + first_bytes;
    for (int64_t g = 0; g < hk; ++g)
      for (int64_t j = 0; j < r; ++j) {
        const int64_t grouped = g * r + j, tiled = j * hk + g;
        const int64_t src = to_tiled ? grouped : tiled, dst = to_tiled ? tiled : grouped;
        std::memcpy(out.data() + base + dst * unit_bytes, t.data + base + src * unit_bytes,
                    static_cast<size_t>(unit_bytes));
      }
  }
  return out;
}

// A_log <-> llama.cpp's A = -exp(A_log), F32.
std::vector<uint8_t> f32_bytes(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// The value-head layout of one linear-layer tensor: (first element, unit, columns), or nullopt when it has none.
struct VHeadLayout {
  int64_t first, unit;
  bool columns;
};
std::optional<VHeadLayout> v_head_layout(const ModelConfig& c, const std::string& leaf) {
  if (c.linear_k_heads == c.linear_v_heads) return std::nullopt;
  if (leaf == "ssm_qkv" || leaf == "ssm_conv") return VHeadLayout{2 * c.linear_qk_dim(), c.linear_v_dim, false};
  if (leaf == "ssm_z") return VHeadLayout{0, c.linear_v_dim, false};
  if (leaf == "ssm_a" || leaf == "ssm_b" || leaf == "ssm_a_log" || leaf == "ssm_dt_bias")
    return VHeadLayout{0, 1, false};
  if (leaf == "ssm_out") return VHeadLayout{0, c.linear_v_dim, true};
  return std::nullopt;
}

std::optional<GgufTensorBytes> export_tensor(const ModelConfig& c, const Tensor& t) {
  const std::string leaf = t.name.substr(t.name.rfind('.') + 1);
  Tensor cur = t;
  std::optional<GgufTensorBytes> out;
  // F32 as llama.cpp's converter stores them (1-D tensors, ssm_conv1d); ssm_a as -exp(A_log).
  if (leaf == "ssm_a_log" ||
      ((leaf == "ssm_conv" || leaf == "ssm_dt_bias" || leaf == "ssm_norm") && t.dtype != DType::kF32)) {
    std::vector<float> f = t.to_f32();
    if (leaf == "ssm_a_log")
      for (float& x : f) x = -std::exp(x);
    out = GgufTensorBytes{DType::kF32, f32_bytes(f)};
    cur.dtype = DType::kF32, cur.data = out->bytes.data(), cur.nbytes = static_cast<int64_t>(out->bytes.size());
  }
  if (const auto v = v_head_layout(c, leaf)) {
    std::vector<uint8_t> b = permute_v_heads(c, cur, v->first, v->unit, v->columns, true, "GGUF export");
    out = GgufTensorBytes{cur.dtype, std::move(b)};
  }
  return out;
}

// export_tensor's value-head reorder of a linear-layer matrix as index maps (the rows of ssm_qkv's v part, ssm_z,
// ssm_b, ssm_a; the columns of ssm_out): stored index tiled = j * Hk + g holds HF's grouped = g * Hv/Hk + j.
GgufMatrixOrder matrix_order(const ModelConfig& c, const std::string& canonical, int64_t rows, int64_t cols) {
  const auto v = v_head_layout(c, canonical.substr(canonical.rfind('.') + 1));
  if (!v) return {};
  std::vector<int64_t> map(static_cast<size_t>(v->columns ? cols : rows));
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int64_t>(i);
  const int64_t hk = c.linear_k_heads, r = c.linear_v_heads / hk;
  if (v->first + c.linear_v_heads * v->unit > static_cast<int64_t>(map.size()))
    fail("model", "qwen35 GGUF: ", canonical, " [", rows, ", ", cols, "] has no value heads to reorder");
  for (int64_t g = 0; g < hk; ++g)
    for (int64_t j = 0; j < r; ++j)
      for (int64_t u = 0; u < v->unit; ++u)
        map[static_cast<size_t>(v->first + (j * hk + g) * v->unit + u)] = v->first + (g * r + j) * v->unit + u;
  GgufMatrixOrder o;
  (v->columns ? o.cols : o.rows) = std::move(map);
  return o;
}

std::optional<GgufTensorBytes> import_tensor(const ModelConfig& c, const Tensor& stored, const std::string& w) {
  const std::string leaf = stored.name.substr(stored.name.rfind('.') + 1);
  std::optional<GgufTensorBytes> out;
  if (const auto v = v_head_layout(c, leaf))
    out = GgufTensorBytes{stored.dtype, permute_v_heads(c, stored, v->first, v->unit, v->columns, false, w)};
  if (leaf == "ssm_a_log") {
    Tensor cur = stored;
    if (out) cur.data = out->bytes.data();
    std::vector<float> f = cur.to_f32();
    for (float& x : f) {
      if (!(x < 0.0f))
        fail("model", w, ": GGUF tensor ", stored.name.substr(0, stored.name.rfind('.')), " ssm_a holds ", x,
             "; llama.cpp's A = -exp(A_log) is negative");
      x = std::log(-x);
    }
    out = GgufTensorBytes{DType::kF32, f32_bytes(f)};
  }
  return out;
}

void validate(const ModelConfig& c, const std::string& where) {
  if (c.full_attention_interval <= 0 || c.norm != NormType::kRms || c.activation != Activation::kSilu || c.learned_pos)
    fail("model", where,
         ": a qwen35 model has linear-attention layers (full_attention_interval > 0), RMSNorm, a SwiGLU MLP and RoPE "
         "(this config has full_attention_interval ",
         c.full_attention_interval, ", ", norm_type_name(c.norm), ", ", activation_name(c.activation), ")");
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
    r.hf_export_config = to_hf;
    r.hf_tensor_name = hf_name;
    r.hf_tensor_shape = hf_shape;
    r.gguf_config = from_gguf;
    r.gguf_write = to_gguf;
    r.gguf_rope = RopeStyle::kRotateHalf;
    r.gguf_layer_names = {{"ffn_norm", "post_attention_norm.weight"},
                          {"ssm_qkv", "attn_qkv.weight"},
                          {"ssm_z", "attn_gate.weight"},
                          {"ssm_b", "ssm_beta.weight"},
                          {"ssm_a", "ssm_alpha.weight"},
                          {"ssm_conv", "ssm_conv1d.weight"},
                          {"ssm_a_log", "ssm_a"},
                          {"ssm_dt_bias", "ssm_dt.bias"},
                          {"ssm_norm", "ssm_norm.weight"},
                          {"ssm_out", "ssm_out.weight"}};
    r.gguf_export_tensor = export_tensor;
    r.gguf_import_tensor = import_tensor;
    r.gguf_matrix_order = matrix_order;
    r.describe = describe;
    r.implied_flags = {"qk_norm"};
    r.params = {&kNormOffset};
    r.presets = {{"qwen3.5-0.8b", qwen35_08b()},
                 {"qwen3.5-2b", qwen35_2b()},
                 {"qwen3.5-4b", qwen35_4b()},
                 {"qwen3.5-9b", qwen35_9b()},
                 {"qwen3.5-27b", qwen35_27b()}};
    r.validate = validate;
    return r;
  }();
  return a;
}

}  // namespace anelab::models

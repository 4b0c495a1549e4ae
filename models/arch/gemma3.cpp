// Gemma 3 text models (HF Gemma3ForCausalLM, config model_type "gemma3_text"): a decoder with
//   - RMSNorm multiplying by (1 + weight) (norm_offset 1, added in fp32), on the layer input
//     (input_layernorm -> attn_norm), the attention output (post_attention_layernorm -> attn_post_norm),
//     the MLP input (pre_feedforward_layernorm -> ffn_norm), the MLP output (post_feedforward_layernorm
//     -> ffn_post_norm) and the final hidden state; per-head q_norm / k_norm (also 1 + w) before RoPE;
//   - a GeGLU MLP down(gelu_tanh(gate(x)) * up(x)) (activation gelu_tanh_gated, w1/w3/w2);
//   - token embeddings times sqrt(hidden_size) in the checkpoint's dtype (HF casts the scale to the
//     weights' dtype: sqrt(1152) = 33.94 is 34 in bf16), attention scores times query_pre_attn_scalar^-0.5;
//   - sliding-window layers (a query at i sees keys j with i - j < sliding_window) interleaved with global
//     layers: transformers 5.x "layer_types", 4.x "sliding_window_pattern" (every Nth layer global),
//     stored as sliding_pattern; sliding layers use RoPE base rope_local_base_freq (4.x) /
//     rope_parameters.sliding_attention (5.x), global layers rope_theta / rope_parameters.full_attention,
//     with optional linear scaling (rope_scaling / full_attention rope_type "linear", factor);
//   - optional final logit soft-capping (final_logit_softcapping); attention soft-capping is refused;
//   - tied embeddings; RoPE in rotate-half order.
//
// GGUF ("gemma3", llama.cpp's keys and names: its converter conversion/gemma.py, its graph
// src/models/gemma3.cpp): norms stored as F32 1 + w (gguf.h); the generic sizes, rope.freq_base (global
// layers), attention.layer_norm_rms_epsilon, and
//   attention.sliding_window (absent or 0: no sliding layer), attention.sliding_window_pattern (u32, every
//   Nth layer global; absent: llama.cpp's 6), rope.freq_base_swa (sliding layers; absent: 10000),
//   rope.scaling.type "linear" + rope.scaling.factor (global layers), final_logit_softcapping (absent: none);
//   embedding_scale and attention.scale hold anelab's exact embedding and score scales. llama.cpp's gemma3
//   graph ignores those two and derives sqrt(dim) in fp32 and 1 / sqrt(key_length) (1 / sqrt(dim / heads)
//   for the 62-layer 27B): absent, they read as llama.cpp's values, and export notes where a model differs
//   (a bf16 checkpoint's rounded sqrt(dim), a query_pre_attn_scalar other than head_dim).
//
// Presets (google/gemma-3-270m and gemma-3-1b-pt config.json; vocab 262144, head_dim 256, 1 kv head,
// window 512, every 6th layer global, RoPE 1e6 global / 1e4 local, ctx 32768, tied):
//   gemma3-270m  640/2048,  18 layers, 4 heads
//   gemma3-1b    1152/6912, 26 layers, 4 heads
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_gemma3 {
namespace {
using hf::json;

// Gemma 3's parameters (ModelConfig::params; Arch::params below), with kNormOffset (common.h, 1 here). The
// defaults are the values that change nothing (files written before the table carried them for every
// architecture); the ranges are what validate_config accepts.
constexpr ParamSpec kEmbedScale{
    "embed_scale", false, 1.0, 1e-6, 1e6, false, "token embeddings times this (sqrt(dim) in the weights' dtype)"};
constexpr ParamSpec kAttnScale{"attn_scale",
                               false,
                               0.0,
                               0.0,
                               1e3,
                               false,
                               "scores = q.k * attn_scale (0: 1 / sqrt(head_dim)); query_pre_attn_scalar^-0.5"};
constexpr ParamSpec kLogitSoftcap{"logit_softcap",
                                  false,
                                  0.0,
                                  0.0,
                                  1e6,
                                  false,
                                  "logits = cap * tanh(logits / cap) when > 0 (final_logit_softcapping)"};
constexpr ParamSpec kSlidingWindow{"sliding_window",
                                   true,
                                   0.0,
                                   0.0,
                                   double(1 << 22),
                                   false,
                                   "> 0: a sliding layer's query at i sees keys j with i - j < window"};
constexpr ParamSpec kSlidingPattern{"sliding_pattern",
                                    true,
                                    0.0,
                                    0.0,
                                    1024.0,
                                    false,
                                    "with a window: layer l is global iff (l + 1) % pattern == 0 (0: none is)"};
constexpr ParamSpec kRopeLocalTheta{
    "rope_local_theta", false, 0.0, 1.0, 1e12, true, "sliding layers' RoPE base (0: rope_theta)"};
constexpr ParamSpec kRopeLinearFactor{"rope_linear_factor",
                                      false,
                                      1.0,
                                      1e-3,
                                      1e6,
                                      false,
                                      "global layers' RoPE positions divided by this (linear scaling)"};

// Whether layer l is a sliding-window layer.
bool sliding_layer(const ModelConfig& c, int64_t l) {
  const int64_t pattern = param_int(c, kSlidingPattern);
  return param_int(c, kSlidingWindow) > 0 && !(pattern > 0 && (l + 1) % pattern == 0);
}

// x rounded to the checkpoint's dtype ("bfloat16" / "float16"; anything else keeps fp32), as HF casts
// the embedding scale to the weights' dtype.
float in_dtype(float x, const std::string& dtype) {
  if (dtype == "bfloat16") {
    uint16_t b;
    f32_to_bf16(&x, &b, 1);
    float r;
    bf16_to_f32(&b, &r, 1);
    return r;
  }
  if (dtype == "float16") return round_fp16(x);
  return x;
}

ModelConfig preset(int64_t dim, int64_t hidden, int64_t layers) {
  ModelConfig c;
  c.arch = "gemma3";
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_dim = 256;
  c.vocab_size = 262144;
  c.max_seq_len = 32768;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1e6f;
  c.rope_style = RopeStyle::kRotateHalf;
  c.activation = Activation::kGeluTanhGated;
  set_param(&c, kNormOffset, 1.0);
  set_param(&c, kEmbedScale, in_dtype(std::sqrt(static_cast<float>(dim)), "bfloat16"));
  set_param(&c, kAttnScale, 1.0f / 16.0f);  // query_pre_attn_scalar 256
  set_param(&c, kLogitSoftcap, 0.0);
  set_param(&c, kSlidingWindow, 512);
  set_param(&c, kSlidingPattern, 6);
  set_param(&c, kRopeLocalTheta, 1e4f);
  set_param(&c, kRopeLinearFactor, 1.0);
  return c;
}

// One rope_type entry: "default" (factor 1) or "linear" (its factor); others are refused naming `key`.
float linear_factor(const json& r, const std::string& key, const std::string& w) {
  if (!r.is_object()) fail("model", w, ": config.json ", key, " must be an object, got ", r.dump());
  const std::string type =
      r.contains("rope_type") ? hf::hf_str(r, "rope_type", w, "default") : hf::hf_str(r, "type", w, "default");
  if (type == "default") return 1.0f;
  if (type != "linear")
    fail("model", w, ": config.json ", key, " rope_type \"", type, "\" is not supported (default, linear)");
  const double f = hf::hf_num(r, "factor", w, 0.0);
  if (!(f > 0)) fail("model", w, ": config.json ", key, " factor must be positive, got ", f);
  return static_cast<float>(f);
}

// RoPE of both layer kinds: transformers 5.x rope_parameters {full_attention, sliding_attention}, or 4.x
// rope_theta / rope_local_base_freq / rope_scaling (global layers only).
void read_rope(const json& j, const std::string& w, ModelConfig* c) {
  c->rope_theta = static_cast<float>(hf::hf_num(j, "rope_theta", w, 1e6));
  set_param(c, kRopeLocalTheta, static_cast<float>(hf::hf_num(j, "rope_local_base_freq", w, 1e4)));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    set_param(c, kRopeLinearFactor, linear_factor(j["rope_scaling"], "rope_scaling", w));
  if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) return;
  const json& rp = j["rope_parameters"];
  const bool per_type = rp.is_object() && rp.contains("full_attention");
  const json& full = per_type ? rp["full_attention"] : rp;
  c->rope_theta = static_cast<float>(hf::hf_num(full, "rope_theta", w, c->rope_theta));
  set_param(c, kRopeLinearFactor, linear_factor(full, "rope_parameters.full_attention", w));
  if (per_type && rp.contains("sliding_attention")) {
    const json& loc = rp["sliding_attention"];
    set_param(c, kRopeLocalTheta, static_cast<float>(hf::hf_num(loc, "rope_theta", w, param(*c, kRopeLocalTheta))));
    if (linear_factor(loc, "rope_parameters.sliding_attention", w) != 1.0f)
      fail("model", w, ": config.json rope_parameters.sliding_attention: only rope_type default is supported");
  }
}

// Which layers slide: 5.x layer_types (must repeat with one period: every Nth layer global) or 4.x
// sliding_window_pattern.
void read_layer_types(const json& j, const std::string& w, ModelConfig* c) {
  set_param(c, kSlidingWindow, static_cast<double>(hf::hf_int(j, "sliding_window", w, 4096)));
  if (!j.contains("layer_types") || j["layer_types"].is_null()) {
    set_param(c, kSlidingPattern, static_cast<double>(hf::hf_int(j, "sliding_window_pattern", w, 6)));
    return;
  }
  const json& lt = j["layer_types"];
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c->n_layers)
    fail("model", w, ": config.json layer_types must list ", c->n_layers, " layers, got ", lt.dump().substr(0, 80));
  // No global layer listed: the 4.x key if present (a pattern longer than the model), else none.
  set_param(c, kSlidingPattern, static_cast<double>(hf::hf_int(j, "sliding_window_pattern", w, 0)));
  for (size_t i = 0; i < lt.size(); ++i)
    if (lt[i] == "full_attention") {
      set_param(c, kSlidingPattern, static_cast<double>(i) + 1);
      break;
    }
  for (size_t i = 0; i < lt.size(); ++i) {
    if (lt[i] != "full_attention" && lt[i] != "sliding_attention")
      fail("model", w, ": config.json layer_types[", i, "] = ", lt[i].dump(),
           " is not sliding_attention or full_attention");
    if ((lt[i] == "sliding_attention") != sliding_layer(*c, static_cast<int64_t>(i)))
      fail("model", w, ": config.json layer_types: layer ", i, " breaks the pattern of one global layer every ",
           param_int(*c, kSlidingPattern), " (other layouts are not supported)");
  }
}

ModelConfig from_hf(const json& j, const std::string& w) {
  ModelConfig c = preset(0, 0, 0);
  c.dim = hf::hf_int(j, "hidden_size", w);
  c.hidden_dim = hf::hf_int(j, "intermediate_size", w);
  c.n_layers = hf::hf_int(j, "num_hidden_layers", w);
  c.n_heads = hf::hf_int(j, "num_attention_heads", w);
  c.n_kv_heads = hf::hf_int(j, "num_key_value_heads", w, c.n_heads);
  c.head_dim = hf::hf_int(j, "head_dim", w, 256);
  c.vocab_size = hf::hf_int(j, "vocab_size", w);
  c.max_seq_len = hf::hf_int(j, "max_position_embeddings", w, 131072);
  c.norm_eps = static_cast<float>(hf::hf_num(j, "rms_norm_eps", w, 1e-6));
  c.tied_embeddings = hf::hf_bool(j, "tie_word_embeddings", w, true);
  const std::string act = hf::hf_str(j, "hidden_activation", w, hf::hf_str(j, "hidden_act", w, "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh")
    fail("model", w, ": config.json hidden_activation ", act, " is not supported (gelu_pytorch_tanh)");
  if (hf::hf_bool(j, "attention_bias", w, false))
    fail("model", w, ": config.json attention_bias true is not supported for gemma3");
  if (hf::hf_bool(j, "use_bidirectional_attention", w, false))
    fail("model", w, ": config.json use_bidirectional_attention true is not supported (causal decoders only)");
  if (hf::hf_num(j, "attn_logit_softcapping", w, 0.0) != 0.0)
    fail("model", w, ": config.json attn_logit_softcapping is not supported (Gemma 3 has none)");
  set_param(&c, kLogitSoftcap, hf::hf_num(j, "final_logit_softcapping", w, 0.0));
  const double qpas = hf::hf_num(j, "query_pre_attn_scalar", w, 256.0);
  if (!(qpas > 0)) fail("model", w, ": config.json query_pre_attn_scalar must be positive, got ", qpas);
  set_param(&c, kAttnScale, std::pow(qpas, -0.5));
  const std::string dtype = hf::hf_str(j, "dtype", w, hf::hf_str(j, "torch_dtype", w, "float32"));
  set_param(&c, kEmbedScale, in_dtype(std::sqrt(static_cast<float>(c.dim)), dtype));
  read_rope(j, w, &c);
  read_layer_types(j, w, &c);
  return c;
}

std::map<std::string, std::string> layer_names() {
  return {{"input_layernorm.weight", "attn_norm"},
          {"post_attention_layernorm.weight", "attn_post_norm"},
          {"pre_feedforward_layernorm.weight", "ffn_norm"},
          {"post_feedforward_layernorm.weight", "ffn_post_norm"},
          {"self_attn.q_proj.weight", "wq"},
          {"self_attn.k_proj.weight", "wk"},
          {"self_attn.v_proj.weight", "wv"},
          {"self_attn.o_proj.weight", "wo"},
          {"self_attn.q_norm.weight", "q_norm"},
          {"self_attn.k_norm.weight", "k_norm"},
          {"mlp.gate_proj.weight", "w1"},
          {"mlp.down_proj.weight", "w2"},
          {"mlp.up_proj.weight", "w3"}};
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) { hf::map_hf_decoder(m, ts, layer_names(), w); }

json to_hf(const ModelConfig& c) {
  json j = hf::hf_decoder_export_config(c);
  j.erase("hidden_act");
  j.erase("rope_theta");
  j["architectures"] = json::array({"Gemma3ForCausalLM"});
  j["model_type"] = "gemma3_text";
  // HF derives the embedding scale from hidden_size and the dtype: name the dtype that gives this one.
  const float root = std::sqrt(static_cast<float>(c.dim));
  std::string dtype;
  for (const char* d : {"bfloat16", "float16", "float32"})
    if (dtype.empty() && in_dtype(root, d) == param(c, kEmbedScale)) dtype = d;
  if (dtype.empty())
    fail("export", "gemma3: embed_scale ", param(c, kEmbedScale), " is not sqrt(hidden_size) = ", root,
         " in bf16, fp16 or fp32; Hugging Face cannot express it");
  j["dtype"] = dtype;
  j["hidden_activation"] = "gelu_pytorch_tanh";
  const float attn_scale = param(c, kAttnScale), softcap = param(c, kLogitSoftcap);
  j["query_pre_attn_scalar"] = 1.0 / (double(attn_scale) * attn_scale);
  j["final_logit_softcapping"] = softcap > 0 ? json(softcap) : json(nullptr);
  j["attn_logit_softcapping"] = nullptr;
  j["sliding_window"] = param_int(c, kSlidingWindow);
  json types = json::array();
  for (int64_t l = 0; l < c.n_layers; ++l)
    types.push_back(sliding_layer(c, l) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["sliding_window_pattern"] = param_int(c, kSlidingPattern);  // 4.x; 5.x reads layer_types
  const float linear = param(c, kRopeLinearFactor);
  json full = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (linear != 1.0f) full = {{"rope_type", "linear"}, {"rope_theta", c.rope_theta}, {"factor", linear}};
  j["rope_parameters"] = {{"full_attention", full},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", param(c, kRopeLocalTheta)}}}};
  return j;
}

std::string hf_name(const std::string& canonical) {
  static const auto names = layer_names();
  return hf::hf_decoder_name(canonical, names);
}

// The scales llama.cpp's gemma3 graph derives from the sizes.
float llama_cpp_embed_scale(const ModelConfig& c) { return std::sqrt(static_cast<float>(c.dim)); }
float llama_cpp_attn_scale(const ModelConfig& c) {
  const int64_t d = c.n_layers == 62 ? c.dim / c.n_heads : c.head_dim;  // 27B: query_pre_attn_scalar dim / heads
  return 1.0f / std::sqrt(static_cast<float>(d));
}

void from_gguf(const GgufFile& g, ModelConfig* c, const std::string& w) {
  const std::string a = c->arch + ".";
  c->norm_eps = static_cast<float>(g.get_num(a + "attention.layer_norm_rms_epsilon", 1e-6));
  c->rope_style = RopeStyle::kRotateHalf;
  c->activation = Activation::kGeluTanhGated;
  set_param(c, kNormOffset, 1.0);
  const int64_t window = g.get_int(a + "attention.sliding_window", int64_t{0});
  set_param(c, kSlidingWindow, static_cast<double>(window));
  if (const GgufValue* p = g.find(a + "attention.sliding_window_pattern"); p && !p->is_int())
    fail("model", w, ": ", a,
         "attention.sliding_window_pattern must be an integer (every Nth layer global); "
         "per-layer arrays are not supported");
  set_param(c, kSlidingPattern,
            window > 0 ? static_cast<double>(g.get_int(a + "attention.sliding_window_pattern", int64_t{6})) : 0.0);
  set_param(c, kRopeLocalTheta, g.get_num(a + "rope.freq_base_swa", 10000.0));
  // llama.cpp: rope.scaling.type defaults to linear; the factor is rope.scaling.factor (or the older
  // rope.scale_linear), 0 or absent meaning none.
  std::string type = "linear";
  if (g.find(a + "rope.scaling.type")) type = g.get_str(a + "rope.scaling.type", w);
  const double factor = g.get_num(a + "rope.scaling.factor", g.get_num(a + "rope.scale_linear", 0.0));
  if (type != "linear" && type != "none")
    fail("model", w, ": ", a, "rope.scaling.type '", type, "' is not supported for gemma3 (none, linear)");
  if (factor < 0) fail("model", w, ": ", a, "rope.scaling.factor must be positive, got ", factor);
  set_param(c, kRopeLinearFactor, type == "linear" && factor > 0 ? factor : 1.0);
  set_param(c, kLogitSoftcap, g.get_num(a + "final_logit_softcapping", 0.0));
  set_param(c, kEmbedScale, g.get_num(a + "embedding_scale", llama_cpp_embed_scale(*c)));
  set_param(c, kAttnScale, g.get_num(a + "attention.scale", llama_cpp_attn_scale(*c)));
}

void to_gguf(GgufWriter& g, const ModelConfig& c, std::vector<std::string>* notes) {
  const std::string a = c.arch + ".";
  if (param_int(c, kSlidingWindow) > 0) {
    g.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(param_int(c, kSlidingWindow)));
    g.add_u32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(param_int(c, kSlidingPattern)));
  }
  const float local_theta = param(c, kRopeLocalTheta), linear = param(c, kRopeLinearFactor);
  const float softcap = param(c, kLogitSoftcap), embed_scale = param(c, kEmbedScale);
  g.add_f32(a + "rope.freq_base_swa", local_theta > 0 ? local_theta : c.rope_theta);
  if (linear != 1.0f) {
    g.add_str(a + "rope.scaling.type", "linear");
    g.add_f32(a + "rope.scaling.factor", linear);
  }
  if (softcap > 0) g.add_f32(a + "final_logit_softcapping", softcap);
  const float attn = param(c, kAttnScale) > 0 ? param(c, kAttnScale) : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  g.add_f32(a + "embedding_scale", embed_scale);
  g.add_f32(a + "attention.scale", attn);
  if (embed_scale != llama_cpp_embed_scale(c))
    notes->push_back(cat("gemma3: llama.cpp scales the embeddings by sqrt(dim) = ", llama_cpp_embed_scale(c),
                         ", this model by ", embed_scale,
                         " (anelab reads gemma3.embedding_scale; llama.cpp's "
                         "logits will differ slightly)"));
  if (attn != llama_cpp_attn_scale(c))
    notes->push_back(cat("gemma3: llama.cpp scales attention scores by ", llama_cpp_attn_scale(c), ", this model by ",
                         attn, " (anelab reads gemma3.attention.scale; llama.cpp will compute another model)"));
}

// decoder_desc's layers with Gemma 3's parameters: the embedding and score scales, the final soft-cap, and per
// layer the sliding window with the sliding layers' own RoPE base (no scaling) or the global layers' linear
// RoPE scaling.
ModelDesc describe(const ModelConfig& c) {
  ModelDesc d = qk_norm_decoder_desc(c);
  d.embed.scale = param(c, kEmbedScale);
  d.head.softcap = param(c, kLogitSoftcap);
  const float attn_scale = param(c, kAttnScale), local_theta = param(c, kRopeLocalTheta);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto& steps = d.layers[static_cast<size_t>(l)].steps;  // [attention, ffn], each with its sandwich norm
    const std::string p = "layers." + std::to_string(l) + ".";
    steps[0].post_norm = norm_desc(c, c.norm, p + "attn_post_norm", false);
    steps[1].post_norm = norm_desc(c, c.norm, p + "ffn_post_norm", false);
    AttnDesc& a = steps[0].attn;
    if (attn_scale > 0.0f) a.score_scale = attn_scale;
    if (sliding_layer(c, l)) {
      a.window = param_int(c, kSlidingWindow);
      if (c.rope_style != RopeStyle::kNone)
        a.rope = RopeDesc{c.rope_style, local_theta > 0.0f ? local_theta : c.rope_theta, {}, 1.0f};
    } else if (c.rope_style != RopeStyle::kNone) {
      a.rope.linear_factor = param(c, kRopeLinearFactor);
    }
  }
  return d;
}

void validate(const ModelConfig& c, const std::string& where) {
  if (c.norm != NormType::kRms || c.activation != Activation::kGeluTanhGated || c.rope_style == RopeStyle::kNone ||
      c.qkv_bias || c.attn_out_bias || c.mlp_bias)
    fail("model", where,
         ": a gemma3 model has RMSNorm, a GeGLU MLP (gelu_tanh_gated), RoPE and no biases (this config has ",
         norm_type_name(c.norm), ", ", activation_name(c.activation), ", rope_style ", rope_style_name(c.rope_style),
         c.qkv_bias || c.attn_out_bias || c.mlp_bias ? ", biases" : "", ")");
}
}  // namespace
}  // namespace arch_gemma3

const Arch& gemma3_arch() {
  using namespace arch_gemma3;
  static const Arch a = [] {
    Arch r;
    r.name = "gemma3";
    r.hf_model_types = {"gemma3_text"};
    r.hf_class_prefixes = {"Gemma3ForCausalLM"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.hf_export_config = to_hf;
    r.hf_tensor_name = hf_name;
    r.gguf_config = from_gguf;
    r.gguf_write = to_gguf;
    r.gguf_rope = RopeStyle::kRotateHalf;
    r.gguf_layer_names = {{"attn_post_norm", "post_attention_norm.weight"}, {"ffn_post_norm", "post_ffw_norm.weight"}};
    r.describe = describe;
    r.implied_flags = {"qk_norm", "post_norms"};
    r.params = {&kNormOffset,    &kEmbedScale,     &kAttnScale,      &kLogitSoftcap,
                &kSlidingWindow, &kSlidingPattern, &kRopeLocalTheta, &kRopeLinearFactor};
    r.presets = {{"gemma3-270m", preset(640, 2048, 18)}, {"gemma3-1b", preset(1152, 6912, 26)}};
    r.validate = validate;
    return r;
  }();
  return a;
}

}  // namespace anelab::models

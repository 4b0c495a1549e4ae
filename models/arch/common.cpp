#include "models/arch/common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "framework/core/error.h"

namespace anelab::models::hf {

int64_t hf_int(const json& j, const char* key, const std::string& w, std::optional<int64_t> def) {
  if (!j.contains(key) || j[key].is_null()) {
    if (def) return *def;
    fail("model", w, ": config.json lacks ", key, "; it is needed to size the model");
  }
  if (!j[key].is_number_integer()) fail("model", w, ": config.json ", key, " must be an integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

double hf_num(const json& j, const char* key, const std::string& w, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) fail("model", w, ": config.json ", key, " must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

std::string hf_str(const json& j, const char* key, const std::string& w, const std::string& def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string()) fail("model", w, ": config.json ", key, " must be a string, got ", j[key].dump());
  return j[key].get<std::string>();
}

bool hf_bool(const json& j, const char* key, const std::string& w, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail("model", w, ": config.json ", key, " must be true/false, got ", j[key].dump());
  return j[key].get<bool>();
}

double hf_rope_theta(const json& j, const std::string& w, double def) {
  double theta = hf_num(j, "rope_theta", w, def);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())  // transformers >= 5
    theta = hf_num(j["rope_parameters"], "rope_theta", w, theta);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(key) && j[key].is_object() && j[key].contains("rope_type") && j[key]["rope_type"] != "default")
      fail("model", w, ": ", key, " rope_type ", j[key]["rope_type"].dump(), " is not supported (plain RoPE only)");
  }
  return theta;
}

ModelConfig hf_decoder_config(const json& j, const std::string& arch, const std::string& w) {
  ModelConfig c;
  c.arch = arch;
  c.dim = hf_int(j, "hidden_size", w);
  c.hidden_dim = hf_int(j, "intermediate_size", w);
  c.n_layers = hf_int(j, "num_hidden_layers", w);
  c.n_heads = hf_int(j, "num_attention_heads", w);
  c.n_kv_heads = hf_int(j, "num_key_value_heads", w, c.n_heads);
  if (c.n_heads <= 0) fail("model", w, ": num_attention_heads must be positive");
  c.head_dim = hf_int(j, "head_dim", w, c.dim / c.n_heads);
  c.vocab_size = hf_int(j, "vocab_size", w);
  c.max_seq_len = hf_int(j, "max_position_embeddings", w, 2048);
  c.norm_eps = static_cast<float>(hf_num(j, "rms_norm_eps", w, 1e-6));
  c.rope_theta = static_cast<float>(hf_rope_theta(j, w, 10000.0));
  c.rope_style = RopeStyle::kRotateHalf;
  const std::string act = hf_str(j, "hidden_act", w, "silu");
  if (act != "silu") fail("model", w, ": hidden_act ", act, " is not supported (silu)");
  c.tied_embeddings = hf_bool(j, "tie_word_embeddings", w, false);
  return c;
}

namespace {
// The shortest decimal that reads back as this float (1e-05, not 9.999999747378752e-06).
double shortest(float f) {
  char buf[32];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}
}  // namespace

json hf_decoder_export_config(const ModelConfig& c) {
  return {{"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", shortest(c.norm_eps)},
          {"rope_theta", shortest(c.rope_theta)},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", c.tied_embeddings}};
}

std::map<std::string, std::string> hf_decoder_layer_names() {
  return {{"input_layernorm.weight", "attn_norm"},
          {"post_attention_layernorm.weight", "ffn_norm"},
          {"self_attn.q_proj.weight", "wq"},
          {"self_attn.k_proj.weight", "wk"},
          {"self_attn.v_proj.weight", "wv"},
          {"self_attn.o_proj.weight", "wo"},
          {"self_attn.q_proj.bias", "bq"},
          {"self_attn.k_proj.bias", "bk"},
          {"self_attn.v_proj.bias", "bv"},
          {"self_attn.o_proj.bias", "bo"},
          {"mlp.gate_proj.weight", "w1"},
          {"mlp.down_proj.weight", "w2"},
          {"mlp.up_proj.weight", "w3"}};
}

void add_st(Model& m, const std::string& name, const StTensor& t) {
  m.add_view(name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
}

void map_hf_decoder(Model& m, const StTensorMap& ts, const std::map<std::string, std::string>& per_layer,
                    const std::string& w) {
  static const std::regex layer_re(R"(layers\.(\d+)\.(.+))");
  for (const auto& [full, t] : ts) {
    const std::string n = full.starts_with("model.") ? full.substr(6) : full;
    std::smatch mt;
    if (n == "embed_tokens.weight")
      add_st(m, "tok_embeddings", t);
    else if (n == "norm.weight")
      add_st(m, "norm", t);
    else if (n == "lm_head.weight") {
      if (!m.config.tied_embeddings) add_st(m, "output", t);
    } else if (std::regex_match(n, mt, layer_re)) {
      const std::string rest = mt[2].str();
      if (rest == "self_attn.rotary_emb.inv_freq") continue;
      auto it = per_layer.find(rest);
      if (it == per_layer.end()) fail("model", w, ": unexpected ", m.config.arch, " tensor ", full);
      add_st(m, "layers." + mt[1].str() + "." + it->second, t);
    } else
      fail("model", w, ": unexpected ", m.config.arch, " tensor ", full);
  }
}

std::string hf_decoder_name(const std::string& name, const std::map<std::string, std::string>& per_layer) {
  if (name == "tok_embeddings") return "model.embed_tokens.weight";
  if (name == "norm") return "model.norm.weight";
  if (name == "output") return "lm_head.weight";
  const size_t dot = name.find('.', 7);
  if (name.starts_with("layers.") && dot != std::string::npos) {
    const std::string leaf = name.substr(dot + 1);
    for (const auto& [hf, canon] : per_layer)
      if (canon == leaf) return "model." + name.substr(0, dot + 1) + hf;
  }
  fail("model", "tensor ", name, " has no Hugging Face name");
}

std::string hf_decoder_name_default(const std::string& canonical) {
  static const auto names = hf_decoder_layer_names();
  return hf_decoder_name(canonical, names);
}

}  // namespace anelab::models::hf

namespace anelab::models {

NormDesc norm_desc(const ModelConfig& c, NormType kind, const std::string& weight, bool with_bias) {
  const bool bias = with_bias && kind == NormType::kLayer;
  return NormDesc{kind, c.norm_eps, param(c, kNormOffset), weight, bias ? weight + "_bias" : ""};
}

namespace {

RopeDesc rope_desc(const ModelConfig& c) {
  if (c.rope_style == RopeStyle::kNone) return {};
  return RopeDesc{c.rope_style, c.rope_theta, c.rope_scaling, 1.0f};
}

Step attention_step(const ModelConfig& c, const std::string& p) {
  Step s;
  s.kind = StepKind::kAttention;
  s.pre_norm = norm_desc(c, c.norm, p + "attn_norm", true);
  AttnDesc& a = s.attn;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.score_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.rope = rope_desc(c);
  a.wq = p + "wq";
  a.wk = p + "wk";
  a.wv = p + "wv";
  a.wo = p + "wo";
  if (c.qkv_bias) {
    a.bq = p + "bq";
    a.bk = p + "bk";
    a.bv = p + "bv";
  }
  if (c.attn_out_bias) a.bo = p + "bo";
  return s;
}

Step ffn_step(const ModelConfig& c, const std::string& p) {
  Step s;
  s.kind = StepKind::kFfn;
  s.pre_norm = norm_desc(c, c.norm, p + "ffn_norm", true);
  FfnDesc& f = s.ffn;
  f.activation = c.activation;
  f.hidden = c.hidden_dim;
  if (gated_mlp(c.activation)) {
    f.w_in = p + "w1";
    f.w_up = p + "w3";
    f.w_out = p + "w2";
  } else {
    f.w_in = p + "fc";
    f.w_out = p + "proj";
    if (c.mlp_bias) {
      f.b_in = p + "fc_bias";
      f.b_out = p + "proj_bias";
    }
  }
  return s;
}
}  // namespace

ModelDesc decoder_desc(const ModelConfig& c) {
  ModelDesc d;
  d.arch = c.arch;
  d.dim = c.dim;
  d.vocab_size = c.vocab_size;
  d.embed.positions = c.learned_pos ? "pos_embeddings" : "";
  d.embed.n_positions = c.learned_pos ? c.max_seq_len : 0;
  d.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    d.layers[static_cast<size_t>(l)].steps = {attention_step(c, p), ffn_step(c, p)};
  }
  d.head.norm = norm_desc(c, c.norm, "norm", true);
  d.head.tied = c.tied_embeddings;
  d.head.weight = c.tied_embeddings ? d.embed.tokens : "output";
  return d;
}

void add_qk_norms(ModelDesc* d, const ModelConfig& c) {
  for (size_t l = 0; l < d->layers.size(); ++l)
    for (Step& s : d->layers[l].steps) {
      if (s.kind != StepKind::kAttention) continue;
      const std::string p = "layers." + std::to_string(l) + ".";
      s.attn.q_norm = norm_desc(c, NormType::kRms, p + "q_norm", false);
      s.attn.k_norm = norm_desc(c, NormType::kRms, p + "k_norm", false);
    }
}

ModelDesc qk_norm_decoder_desc(const ModelConfig& c) {
  ModelDesc d = decoder_desc(c);
  add_qk_norms(&d, c);
  return d;
}

}  // namespace anelab::models

// config.json + HF tensor names -> canonical ModelConfig and tensor names (see safetensors.h).
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "framework/core/error.h"
#include "models/formats/safetensors.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;

int64_t cfg_int(const json& j, const char* key, const std::string& w, std::optional<int64_t> def = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (def) return *def;
    fail("model", w, ": config.json lacks ", key, "; it is needed to size the model");
  }
  if (!j[key].is_number_integer()) fail("model", w, ": config.json ", key, " must be an integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}
double cfg_num(const json& j, const char* key, const std::string& w, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) fail("model", w, ": config.json ", key, " must be a number, got ", j[key].dump());
  return j[key].get<double>();
}
std::string cfg_str(const json& j, const char* key, const std::string& w, const std::string& def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string()) fail("model", w, ": config.json ", key, " must be a string, got ", j[key].dump());
  return j[key].get<std::string>();
}
bool cfg_bool(const json& j, const char* key, const std::string& w, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail("model", w, ": config.json ", key, " must be true/false, got ", j[key].dump());
  return j[key].get<bool>();
}

std::string model_type(const json& j, const std::string& w) {
  if (j.contains("model_type") && j["model_type"].is_string()) return j["model_type"].get<std::string>();
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string a = j["architectures"][0].get<std::string>();
    if (a.starts_with("GPT2")) return "gpt2";
    if (a.starts_with("Qwen2")) return "qwen2";
    if (a.starts_with("Llama")) return "llama";
  }
  fail("model", w, ": config.json names no model_type/architectures; cannot tell the architecture");
}

ModelConfig gpt2_config(const json& j, const std::string& w) {
  ModelConfig c;
  c.arch = "gpt2";
  c.dim = cfg_int(j, "n_embd", w);
  c.n_layers = cfg_int(j, "n_layer", w);
  c.n_heads = c.n_kv_heads = cfg_int(j, "n_head", w);
  // n_inner defaults to 4 * n_embd (0 when that would overflow: validation then names it).
  c.hidden_dim = cfg_int(j, "n_inner", w, c.dim > 0 && c.dim <= INT64_MAX / 4 ? 4 * c.dim : 0);
  c.vocab_size = cfg_int(j, "vocab_size", w);
  c.max_seq_len = cfg_int(j, "n_positions", w, cfg_int(j, "n_ctx", w, 1024));
  if (c.n_heads <= 0 || c.dim % c.n_heads) fail("model", w, ": n_embd ", c.dim, " not divisible by n_head ", c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.norm_eps = static_cast<float>(cfg_num(j, "layer_norm_epsilon", w, 1e-5));
  const std::string act = cfg_str(j, "activation_function", w, "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail("model", w, ": GPT-2 activation_function ", act, " is not supported (gelu_new / gelu_pytorch_tanh)");
  c.activation = Activation::kGeluTanh;
  c.norm = NormType::kLayer;
  c.rope_style = RopeStyle::kNone;
  c.learned_pos = true;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  c.tied_embeddings = cfg_bool(j, "tie_word_embeddings", w, true);
  return c;
}

ModelConfig llama_qwen_config(const json& j, const std::string& type, const std::string& w) {
  ModelConfig c;
  c.arch = type;
  c.dim = cfg_int(j, "hidden_size", w);
  c.hidden_dim = cfg_int(j, "intermediate_size", w);
  c.n_layers = cfg_int(j, "num_hidden_layers", w);
  c.n_heads = cfg_int(j, "num_attention_heads", w);
  c.n_kv_heads = cfg_int(j, "num_key_value_heads", w, c.n_heads);
  if (c.n_heads <= 0) fail("model", w, ": num_attention_heads must be positive");
  c.head_dim = cfg_int(j, "head_dim", w, c.dim / c.n_heads);
  c.vocab_size = cfg_int(j, "vocab_size", w);
  c.max_seq_len = cfg_int(j, "max_position_embeddings", w, 2048);
  c.norm_eps = static_cast<float>(cfg_num(j, "rms_norm_eps", w, 1e-6));
  double theta = cfg_num(j, "rope_theta", w, 10000.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())  // transformers >= 5
    theta = cfg_num(j["rope_parameters"], "rope_theta", w, theta);
  c.rope_theta = static_cast<float>(theta);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(key) && j[key].is_object() && j[key].contains("rope_type") &&
        j[key]["rope_type"] != "default")
      fail("model", w, ": ", key, " rope_type ", j[key]["rope_type"].dump(), " is not supported (plain RoPE only)");
  }
  c.rope_style = RopeStyle::kRotateHalf;
  const std::string act = cfg_str(j, "hidden_act", w, "silu");
  if (act != "silu") fail("model", w, ": hidden_act ", act, " is not supported (silu)");
  c.tied_embeddings = cfg_bool(j, "tie_word_embeddings", w, false);
  if (type == "qwen2") {
    c.qkv_bias = true;
  } else {
    c.qkv_bias = c.attn_out_bias = cfg_bool(j, "attention_bias", w, false);
    if (cfg_bool(j, "mlp_bias", w, false)) fail("model", w, ": mlp_bias true is not supported for llama");
  }
  return c;
}

// Conv1D weight [in, out] -> [out, in] (any 2- or 4-byte dtype), as a heap buffer.
std::shared_ptr<std::vector<uint8_t>> transposed(const StTensor& t, const std::string& name, const std::string& w) {
  if (t.shape.size() != 2) fail("model", w, ": tensor ", name, " should be 2-D, has shape ", shape_string(t.shape));
  const int64_t r = t.shape[0], c = t.shape[1];
  if (r <= 0 || c <= 0) fail("model", w, ": tensor ", name, " has an empty shape ", shape_string(t.shape));
  const int64_t es = t.nbytes / (r * c);
  auto out = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(t.nbytes));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) std::memcpy(out->data() + (j * r + i) * es, t.data + (i * c + j) * es, es);
  return out;
}

void add_st(Model& m, const std::string& name, const StTensor& t) {
  m.add_view(name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
}

void map_gpt2(Model& m, const StTensorMap& ts, const std::string& w) {
  static const std::regex layer_re(R"(h\.(\d+)\.(.+))");
  const int64_t d = m.config.dim;
  for (const auto& [full, t] : ts) {
    const std::string n = full.starts_with("transformer.") ? full.substr(12) : full;
    std::smatch mt;
    if (n == "wte.weight") add_st(m, "tok_embeddings", t);
    else if (n == "wpe.weight") add_st(m, "pos_embeddings", t);
    else if (n == "ln_f.weight") add_st(m, "norm", t);
    else if (n == "ln_f.bias") add_st(m, "norm_bias", t);
    else if (n == "lm_head.weight") {
      if (!m.config.tied_embeddings) add_st(m, "output", t);
    } else if (std::regex_match(n, mt, layer_re)) {
      const std::string p = "layers." + mt[1].str() + ".", rest = mt[2].str();
      if (rest == "attn.bias" || rest == "attn.masked_bias") continue;  // causal-mask buffers
      if (rest == "ln_1.weight") add_st(m, p + "attn_norm", t);
      else if (rest == "ln_1.bias") add_st(m, p + "attn_norm_bias", t);
      else if (rest == "ln_2.weight") add_st(m, p + "ffn_norm", t);
      else if (rest == "ln_2.bias") add_st(m, p + "ffn_norm_bias", t);
      else if (rest == "attn.c_attn.weight" || rest == "attn.c_attn.bias") {
        const bool wgt = rest.ends_with("weight");
        if ((wgt && t.shape != std::vector<int64_t>{d, 3 * d}) || (!wgt && t.shape != std::vector<int64_t>{3 * d}))
          fail("model", w, ": ", full, " has shape ", shape_string(t.shape), ", expected ",
               wgt ? shape_string({d, 3 * d}) : shape_string({3 * d}));
        auto buf = wgt ? transposed(t, full, w) : nullptr;
        const uint8_t* base = wgt ? buf->data() : t.data;
        std::shared_ptr<const void> owner = wgt ? std::shared_ptr<const void>(buf) : t.owner;
        const int64_t part = t.nbytes / 3;
        const char* names[3] = {wgt ? "wq" : "bq", wgt ? "wk" : "bk", wgt ? "wv" : "bv"};
        for (int k = 0; k < 3; ++k)
          m.add_view(p + names[k], t.dtype, wgt ? std::vector<int64_t>{d, d} : std::vector<int64_t>{d},
                     base + k * part, part, owner);
      } else if (rest == "attn.c_proj.bias") add_st(m, p + "bo", t);
      else if (rest == "mlp.c_fc.bias") add_st(m, p + "fc_bias", t);
      else if (rest == "mlp.c_proj.bias") add_st(m, p + "proj_bias", t);
      else if (rest == "attn.c_proj.weight" || rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight") {
        auto buf = transposed(t, full, w);
        const std::string cn = rest == "attn.c_proj.weight" ? "wo" : rest == "mlp.c_fc.weight" ? "fc" : "proj";
        m.add_view(p + cn, t.dtype, {t.shape[1], t.shape[0]}, buf->data(), t.nbytes, buf);
      } else fail("model", w, ": unexpected GPT-2 tensor ", full);
    } else fail("model", w, ": unexpected GPT-2 tensor ", full);
  }
}

// HF Llama/Qwen2 per-layer tensor name -> canonical leaf name (the one table for reading and writing).
const std::map<std::string, std::string>& llama_qwen_layer_names() {
  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm"}, {"post_attention_layernorm.weight", "ffn_norm"},
      {"self_attn.q_proj.weight", "wq"},       {"self_attn.k_proj.weight", "wk"},
      {"self_attn.v_proj.weight", "wv"},       {"self_attn.o_proj.weight", "wo"},
      {"self_attn.q_proj.bias", "bq"},         {"self_attn.k_proj.bias", "bk"},
      {"self_attn.v_proj.bias", "bv"},         {"self_attn.o_proj.bias", "bo"},
      {"mlp.gate_proj.weight", "w1"},          {"mlp.down_proj.weight", "w2"},
      {"mlp.up_proj.weight", "w3"}};
  return per_layer;
}

void map_llama_qwen(Model& m, const StTensorMap& ts, const std::string& w) {
  static const std::regex layer_re(R"(layers\.(\d+)\.(.+))");
  const auto& per_layer = llama_qwen_layer_names();
  for (const auto& [full, t] : ts) {
    const std::string n = full.starts_with("model.") ? full.substr(6) : full;
    std::smatch mt;
    if (n == "embed_tokens.weight") add_st(m, "tok_embeddings", t);
    else if (n == "norm.weight") add_st(m, "norm", t);
    else if (n == "lm_head.weight") {
      if (!m.config.tied_embeddings) add_st(m, "output", t);
    } else if (std::regex_match(n, mt, layer_re)) {
      const std::string rest = mt[2].str();
      if (rest == "self_attn.rotary_emb.inv_freq") continue;
      auto it = per_layer.find(rest);
      if (it == per_layer.end()) fail("model", w, ": unexpected ", m.config.arch, " tensor ", full);
      add_st(m, "layers." + mt[1].str() + "." + it->second, t);
    } else fail("model", w, ": unexpected ", m.config.arch, " tensor ", full);
  }
}
}  // namespace

std::string hf_llama_qwen_name(const std::string& name) {
  if (name == "tok_embeddings") return "model.embed_tokens.weight";
  if (name == "norm") return "model.norm.weight";
  if (name == "output") return "lm_head.weight";
  const size_t dot = name.find('.', 7);
  if (name.starts_with("layers.") && dot != std::string::npos) {
    const std::string leaf = name.substr(dot + 1);
    for (const auto& [hf, canon] : llama_qwen_layer_names())
      if (canon == leaf) return "model." + name.substr(0, dot + 1) + hf;
  }
  fail("model", "tensor ", name, " has no Hugging Face Llama/Qwen2 name");
}

Model hf_to_model(const std::string& config_json, const StTensorMap& ts, const std::string& w) {
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::exception& e) {
    fail("model", w, ": config.json is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail("model", w, ": config.json is not a JSON object");
  const std::string type = model_type(j, w);
  Model m;
  if (type == "gpt2") m.config = gpt2_config(j, w);
  else if (type == "qwen2" || type == "llama") m.config = llama_qwen_config(j, type, w);
  else fail("model", w, ": model_type ", type, " is not supported (gpt2, qwen2, llama)");
  checked_parameter_count(m.config, w);
  // A config may claim an untied head that the checkpoint lacks (or the reverse): trust the tensors.
  const bool has_head = ts.count("lm_head.weight") > 0;
  if (!has_head) m.config.tied_embeddings = true;
  if (type == "gpt2") map_gpt2(m, ts, w);
  else map_llama_qwen(m, ts, w);
  m.source_format = "safetensors";
  m.source_path = w;
  m.check_complete(w);
  return m;
}

}  // namespace anelab::models

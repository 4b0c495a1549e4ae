#include "models/formats/model_config_json.h"

#include "framework/core/error.h"

namespace anelab::models {
using json = nlohmann::json;

namespace {
json rope_scaling_to_json(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return {{"type", rope_scaling_name(s.type)}};
  return {{"type", rope_scaling_name(s.type)},
          {"factor", s.factor},
          {"low_freq_factor", s.low_freq_factor},
          {"high_freq_factor", s.high_freq_factor},
          {"original_max_pos", s.original_max_pos}};
}
}  // namespace

json model_config_to_json(const ModelConfig& c) {
  json j = {{"arch", c.arch},
            {"dim", c.dim},
            {"hidden_dim", c.hidden_dim},
            {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"n_kv_heads", c.n_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_seq_len", c.max_seq_len},
            {"norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_style", rope_style_name(c.rope_style)},
            {"rope_scaling", rope_scaling_to_json(c.rope_scaling)},
            {"norm", norm_type_name(c.norm)},
            {"activation", activation_name(c.activation)},
            {"tied_embeddings", c.tied_embeddings},
            {"qkv_bias", c.qkv_bias},
            {"attn_out_bias", c.attn_out_bias},
            {"mlp_bias", c.mlp_bias},
            {"learned_pos", c.learned_pos},
            {"full_attention_interval", c.full_attention_interval},
            {"linear_k_heads", c.linear_k_heads},
            {"linear_v_heads", c.linear_v_heads},
            {"linear_k_dim", c.linear_k_dim},
            {"linear_v_dim", c.linear_v_dim},
            {"linear_conv_kernel", c.linear_conv_kernel},
            {"rope_fraction", c.rope_fraction},
            {"attn_output_gate", c.attn_output_gate}};
  // The architecture's parameters: top-level keys of their own (the layout files had before the table).
  for (const auto& [name, v] : c.params) {
    if (j.contains(name)) fail("model", "config parameter ", name, " collides with the config field of that name");
    j[name] = v.integer ? json(v.i) : json(v.f);
  }
  return j;
}

namespace {

// Typed reads of one object's fields; errors name component, where and prefix+key.
class Fields {
 public:
  Fields(const json& j, const std::string& where, const char* component, const std::string& prefix)
      : j_(j), where_(where), component_(component), prefix_(prefix) {
    if (!j_.is_object())
      fail(component_, where_, ": header field ", prefix_.substr(0, prefix_.size() - 1), " is not an object");
  }
  // The value of key, or nullptr when it is absent and `optional`.
  const json* get(const char* key, bool optional) const {
    auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    if (optional) return nullptr;
    fail(component_, where_, ": header field ", prefix_, key,
         " is missing; the file was not written by anelab or is corrupt");
  }
  int64_t integer(const char* key) const {
    const json& v = *get(key, false);
    if (!v.is_number_integer()) bad(key, v, "is not an integer");
    return v.get<int64_t>();
  }
  float number(const char* key, bool optional = false, float def = 0.0f) const {
    const json* v = get(key, optional);
    if (!v) return def;
    if (!v->is_number()) bad(key, *v, "is not a number");
    return static_cast<float>(v->get<double>());
  }
  int64_t integer(const char* key, bool optional, int64_t def) const { return get(key, optional) ? integer(key) : def; }
  std::string string(const char* key, bool optional, const std::string& def) const {
    const json* v = get(key, optional);
    if (!v) return def;
    if (!v->is_string()) bad(key, *v, "is not a string");
    return v->get<std::string>();
  }
  void boolean(const char* key, bool optional, bool* out) const {
    const json* v = get(key, optional);
    if (!v) return;
    if (!v->is_boolean()) bad(key, *v, "is not true or false");
    *out = v->get<bool>();
  }
  template <typename E>
  E name(const char* key, bool optional, E def, std::optional<E> (*parse)(std::string_view), const char* known) const {
    const std::string s = string(key, optional, "");
    if (s.empty() && !get(key, true)) return def;
    if (auto e = parse(s)) return *e;
    bad(key, json(s), std::string("is not one of ") + known);
  }
  [[noreturn]] void bad(const char* key, const json& v, const std::string& why) const {
    std::string shown = v.is_structured() ? (v.is_object() ? "an object" : "an array") : v.dump();
    if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
    fail(component_, where_, ": header field ", prefix_, key, " = ", shown, " ", why);
  }

 private:
  const json& j_;
  const std::string& where_;
  const char* component_;
  const std::string& prefix_;
};

// "rope_scaling": {"type": "none"} or {"type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
// "original_max_pos"}.
RopeScaling rope_scaling_from_json(const json& j, const std::string& where, const char* component,
                                   const std::string& prefix) {
  const std::string p = prefix + "rope_scaling.";
  const Fields f(j, where, component, p);
  RopeScaling s;
  s.type = f.name("type", false, s.type, parse_rope_scaling, "none, llama3");
  if (s.type == RopeScalingType::kNone) return s;
  s.factor = f.number("factor");
  s.low_freq_factor = f.number("low_freq_factor");
  s.high_freq_factor = f.number("high_freq_factor");
  s.original_max_pos = f.integer("original_max_pos");
  return s;
}

}  // namespace

ModelConfig model_config_from_json(const json& j, const std::string& where, const char* component,
                                   const std::string& prefix, ConfigKeys keys) {
  const Fields f(j, where, component, prefix);
  const bool flags_optional = keys == ConfigKeys::kCheckpoint;
  ModelConfig c;
  c.arch = f.string("arch", false, "");
  c.dim = f.integer("dim");
  c.hidden_dim = f.integer("hidden_dim");
  c.n_layers = f.integer("n_layers");
  c.n_heads = f.integer("n_heads");
  c.n_kv_heads = f.integer("n_kv_heads");
  c.head_dim = f.integer("head_dim");
  c.vocab_size = f.integer("vocab_size");
  c.max_seq_len = f.integer("max_seq_len");
  c.norm_eps = f.number("norm_eps");
  c.rope_theta = f.number("rope_theta");
  c.rope_style = f.name("rope_style", false, c.rope_style, parse_rope_style, "none, adjacent_pairs, rotate_half");
  if (const json* s = f.get("rope_scaling", true))
    c.rope_scaling = rope_scaling_from_json(*s, where, component, prefix);
  c.norm = f.name("norm", flags_optional, c.norm, parse_norm_type, "rms, layer");
  c.activation = f.name("activation", flags_optional, c.activation, parse_activation, "silu, gelu_tanh");
  f.boolean("tied_embeddings", false, &c.tied_embeddings);
  f.boolean("qkv_bias", flags_optional, &c.qkv_bias);
  f.boolean("attn_out_bias", flags_optional, &c.attn_out_bias);
  f.boolean("mlp_bias", flags_optional, &c.mlp_bias);
  f.boolean("learned_pos", flags_optional, &c.learned_pos);
  // Qwen3.5's fields, absent in files written before they existed (no linear-attention layers, full RoPE).
  c.full_attention_interval = f.integer("full_attention_interval", true, c.full_attention_interval);
  c.linear_k_heads = f.integer("linear_k_heads", true, c.linear_k_heads);
  c.linear_v_heads = f.integer("linear_v_heads", true, c.linear_v_heads);
  c.linear_k_dim = f.integer("linear_k_dim", true, c.linear_k_dim);
  c.linear_v_dim = f.integer("linear_v_dim", true, c.linear_v_dim);
  c.linear_conv_kernel = f.integer("linear_conv_kernel", true, c.linear_conv_kernel);
  c.rope_fraction = f.number("rope_fraction", true, c.rope_fraction);
  f.boolean("attn_output_gate", true, &c.attn_output_gate);
  // Every other key is an architecture parameter (ModelConfig::params): a number, which the architecture's
  // table checks by name and range (validate_config, models/arch/arch.h). A boolean is kept as the integer 0 / 1:
  // files written before the architectures implied their optional tensors carried such flags, which the
  // architecture table checks against what it implies (Arch::implied_flags).
  const json fields = model_config_to_json(ModelConfig{});
  for (const auto& [key, v] : j.items()) {
    if (fields.contains(key)) continue;
    if (v.is_number_integer())
      c.params[key] = ParamValue{true, v.get<int64_t>(), 0.0f};
    else if (v.is_number())
      c.params[key] = ParamValue{false, 0, static_cast<float>(v.get<double>())};
    else if (v.is_boolean())
      c.params[key] = ParamValue{true, v.get<bool>() ? 1 : 0, 0.0f};
    else
      f.bad(key.c_str(), v, "is not a number or boolean (an architecture parameter)");
  }
  validate_config_fields(c, where);
  return c;
}

}  // namespace anelab::models

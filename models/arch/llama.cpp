// Llama (llama2.c, Meta Llama 1/2, TinyLlama, HF LlamaForCausalLM; GGUF "llama"): RMSNorm, SwiGLU MLP,
// RoPE, GQA, no biases unless HF attention_bias (then q/k/v and o). llama.cpp's converter permutes q/k rows
// so that its LLM_ARCH_LLAMA graph uses adjacent-pairs RoPE; HF keeps rotate-half order. Llama 3.1+ scale the
// RoPE frequencies (rope_type "llama3": ModelConfig::rope_scaling, applied in framework/kernels/cpu_ops.cpp).
//
// Presets (llama2.c TinyStories models; adjacent-pairs RoPE, theta 10000, RMS eps 1e-5, tied, as run.c):
//   stories260k   64/172,   5 layers,  8 heads, 4 kv,  vocab 512,   ctx 512
//   stories15m    288/768,  6 layers,  6 heads, 6 kv,  vocab 32000, ctx 256
//   stories42m    512/1376, 8 layers,  8 heads, 8 kv,  vocab 32000, ctx 1024
//   stories110m   768/2048, 12 layers, 12 heads, 12 kv, vocab 32000, ctx 1024
// plus stories3m, no llama2.c model: the tok512 vocabulary at rows of whole 256-blocks (so Q4_K and Q6_K
// apply to every matrix), trained from scratch by scripts/train_quality_model.sh for docs/quantization.md:
//   stories3m     256/768,  4 layers,  8 heads, 8 kv,  vocab 512,   ctx 256
// and Meta's Llama 3.2 1B (HF rotate-half RoPE, theta 500000, llama3 scaling factor 32, low 1, high 4,
// original context 8192, RMS eps 1e-5, tied):
//   llama3.2-1b   2048/8192, 16 layers, 32 heads, 8 kv, head_dim 64, vocab 128256, ctx 131072
#include <cmath>

#include "framework/core/error.h"
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_llama {
namespace {
using hf::json;

ModelConfig stories(int64_t dim, int64_t hidden, int64_t layers, int64_t heads, int64_t kv, int64_t vocab,
                    int64_t seq) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = dim / heads;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kAdjacentPairs;
  return c;
}

ModelConfig llama32_1b() {
  ModelConfig c = stories(2048, 8192, 16, 32, 8, 128256, 131072);
  c.rope_theta = 500000.0f;
  c.rope_style = RopeStyle::kRotateHalf;
  c.rope_scaling = {RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  return c;
}

// The llama3 RoPE scaling of config.json: transformers 4.x "rope_scaling": {"rope_type" (or "type"): "llama3",
// "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} next to "rope_theta",
// or 5.x "rope_parameters" with the same keys and "rope_theta". The block's type is rewritten to "default" in
// `plain`, so that the shared decoder reader (which refuses scaled RoPE) reads everything else.
RopeScaling llama3_scaling(const json& j, const std::string& w, json* plain) {
  RopeScaling s;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || !j[key].is_object()) continue;
    const json& r = j[key];
    const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
    if (hf::hf_str(r, type_key, w, "default") != "llama3") continue;
    const auto num = [&](const char* k) {
      const json& src = r.contains(k) ? r : j;  // original_max_position_embeddings may sit at the top level
      if (!src.contains(k) || !src[k].is_number())
        fail("model", w, ": config.json ", key, ".", k, " must be a number for rope_type llama3");
      return src[k].get<double>();
    };
    s.type = RopeScalingType::kLlama3;
    s.factor = static_cast<float>(num("factor"));
    s.low_freq_factor = static_cast<float>(num("low_freq_factor"));
    s.high_freq_factor = static_cast<float>(num("high_freq_factor"));
    const double orig = num("original_max_position_embeddings");
    if (orig != std::floor(orig))
      fail("model", w, ": config.json ", key, ".original_max_position_embeddings ", orig, " is not an integer");
    s.original_max_pos = static_cast<int64_t>(orig);
    (*plain)[key].erase("type");
    (*plain)[key]["rope_type"] = "default";
  }
  return s;
}

ModelConfig from_hf(const json& j, const std::string& w) {
  json plain = j;
  const RopeScaling scaling = llama3_scaling(j, w, &plain);
  ModelConfig c = hf::hf_decoder_config(plain, "llama", w);
  c.rope_scaling = scaling;
  c.qkv_bias = c.attn_out_bias = hf::hf_bool(j, "attention_bias", w, false);
  if (hf::hf_bool(j, "mlp_bias", w, false)) fail("model", w, ": mlp_bias true is not supported for llama");
  return c;
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) {
  hf::map_hf_decoder(m, ts, hf::hf_decoder_layer_names(), w);
}

json to_hf(const ModelConfig& c) {
  if (c.qkv_bias != c.attn_out_bias)
    fail("export", "a llama model with q/k/v biases but no output bias has no Hugging Face config (attention_bias)");
  json j = hf::hf_decoder_export_config(c);
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  j["attention_bias"] = c.qkv_bias;
  j["mlp_bias"] = false;
  if (const RopeScaling& s = c.rope_scaling; s.type == RopeScalingType::kLlama3)  // 4.x style, read by 5.x too
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_pos}};
  return j;
}

void from_gguf(const GgufFile& g, ModelConfig* c, const std::string&) {
  c->norm_eps = static_cast<float>(g.get_num(c->arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c->rope_style = RopeStyle::kAdjacentPairs;
}
}  // namespace
}  // namespace arch_llama

const Arch& llama_arch() {
  using namespace arch_llama;
  static const Arch a = [] {
    Arch r;
    r.name = "llama";
    r.hf_model_types = {"llama"};
    r.hf_class_prefixes = {"Llama"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.hf_export_config = to_hf;
    r.hf_tensor_name = hf::hf_decoder_name_default;
    r.gguf_config = from_gguf;
    r.gguf_rope = RopeStyle::kAdjacentPairs;
    r.describe = decoder_desc;
    r.presets = {{"stories260k", stories(64, 172, 5, 8, 4, 512, 512)},
                 {"stories15m", stories(288, 768, 6, 6, 6, 32000, 256)},
                 {"stories42m", stories(512, 1376, 8, 8, 8, 32000, 1024)},
                 {"stories110m", stories(768, 2048, 12, 12, 12, 32000, 1024)},
                 {"stories3m", stories(256, 768, 4, 8, 8, 512, 256)},
                 {"llama3.2-1b", llama32_1b()}};
    return r;
  }();
  return a;
}

}  // namespace anelab::models

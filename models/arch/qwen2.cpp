// Qwen2 / Qwen2.5 (HF Qwen2ForCausalLM; GGUF "qwen2"): the Llama decoder with q/k/v biases (no o bias),
// GQA, RMSNorm eps 1e-6, RoPE theta 1e6 in rotate-half order (llama.cpp's NEOX rope, unpermuted weights).
//
// Presets:
//   qwen2.5-0.5b      896/4864,  24 layers, 14 heads, 2 kv, head_dim 64,  vocab 151936, ctx 32768, q/k/v bias, tied
//   qwen3-0.6b-shape  1024/3072, 28 layers, 16 heads, 8 kv, head_dim 128, vocab 151936, ctx 40960, no bias, tied:
//                     Qwen3-0.6B's shape as a Qwen2 model (no per-head q/k RMSNorm; the real one is qwen3-0.6b).
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_qwen2 {
namespace {
using hf::json;

ModelConfig preset(int64_t dim, int64_t hidden, int64_t layers, int64_t heads, int64_t kv, int64_t head_dim,
                   int64_t ctx, bool bias) {
  ModelConfig c;
  c.arch = "qwen2";
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = head_dim;
  c.vocab_size = 151936;
  c.max_seq_len = ctx;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1e6f;
  c.rope_style = RopeStyle::kRotateHalf;
  c.qkv_bias = bias;
  return c;
}

ModelConfig from_hf(const json& j, const std::string& w) {
  ModelConfig c = hf::hf_decoder_config(j, "qwen2", w);
  c.qkv_bias = true;
  return c;
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) {
  hf::map_hf_decoder(m, ts, hf::hf_decoder_layer_names(), w);
}

json to_hf(const ModelConfig& c) {
  json j = hf::hf_decoder_export_config(c);
  j["architectures"] = json::array({"Qwen2ForCausalLM"});
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = false;
  return j;
}

void from_gguf(const GgufFile& g, ModelConfig* c, const std::string&) {
  c->norm_eps = static_cast<float>(g.get_num(c->arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c->rope_style = RopeStyle::kRotateHalf;
}
}  // namespace
}  // namespace arch_qwen2

const Arch& qwen2_arch() {
  using namespace arch_qwen2;
  static const Arch a = [] {
    Arch r;
    r.name = "qwen2";
    r.hf_model_types = {"qwen2"};
    r.hf_class_prefixes = {"Qwen2"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.hf_export_config = to_hf;
    r.hf_tensor_name = hf::hf_decoder_name_default;
    r.gguf_config = from_gguf;
    r.describe = decoder_desc;
    r.presets = {{"qwen2.5-0.5b", preset(896, 4864, 24, 14, 2, 64, 32768, true)},
                 {"qwen3-0.6b-shape", preset(1024, 3072, 28, 16, 8, 128, 40960, false)}};
    return r;
  }();
  return a;
}

}  // namespace anelab::models

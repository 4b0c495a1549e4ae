// GPT-2 (HF GPT2LMHeadModel; GGUF "gpt2"): LayerNorm with biases, learned position embeddings, a GELU
// (tanh) MLP with biases, biases on q/k/v and the attention output, tied head. HF stores Conv1D weights
// [in, out] (transposed here to [out, in]) and fuses q/k/v into attn.c_attn; GGUF fuses them into
// blk.N.attn_qkv, and llama.cpp's gpt2 graph wants output.weight even when the head is tied.
// No Hugging Face export.
//
// Presets:
//   gpt2-124m  768/3072, 12 layers, 12 heads, vocab 50257, ctx 1024, LayerNorm 1e-5, tied
#include <cstring>
#include <regex>

#include "framework/core/error.h"
#include "models/arch/arch_list.h"
#include "models/arch/common.h"

namespace anelab::models {
// The file-local hooks in a namespace of their own: the architecture files share a unity batch.
namespace arch_gpt2 {
namespace {
using hf::json;

// The positional, norm, MLP and bias facts every GPT-2 config has.
void gpt2_facts(ModelConfig& c) {
  c.arch = "gpt2";
  c.norm = NormType::kLayer;
  c.activation = Activation::kGeluTanh;
  c.rope_style = RopeStyle::kNone;
  c.learned_pos = true;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
}

ModelConfig gpt2_124m() {
  ModelConfig c;
  gpt2_facts(c);
  c.dim = 768;
  c.hidden_dim = 3072;
  c.n_layers = 12;
  c.n_heads = c.n_kv_heads = 12;
  c.head_dim = 64;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  c.norm_eps = 1e-5f;
  return c;
}

ModelConfig from_hf(const json& j, const std::string& w) {
  ModelConfig c;
  gpt2_facts(c);
  c.dim = hf::hf_int(j, "n_embd", w);
  c.n_layers = hf::hf_int(j, "n_layer", w);
  c.n_heads = c.n_kv_heads = hf::hf_int(j, "n_head", w);
  // n_inner defaults to 4 * n_embd (0 when that would overflow: validation then names it).
  c.hidden_dim = hf::hf_int(j, "n_inner", w, c.dim > 0 && c.dim <= INT64_MAX / 4 ? 4 * c.dim : 0);
  c.vocab_size = hf::hf_int(j, "vocab_size", w);
  c.max_seq_len = hf::hf_int(j, "n_positions", w, hf::hf_int(j, "n_ctx", w, 1024));
  if (c.n_heads <= 0 || c.dim % c.n_heads) fail("model", w, ": n_embd ", c.dim, " not divisible by n_head ", c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.norm_eps = static_cast<float>(hf::hf_num(j, "layer_norm_epsilon", w, 1e-5));
  const std::string act = hf::hf_str(j, "activation_function", w, "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail("model", w, ": GPT-2 activation_function ", act, " is not supported (gelu_new / gelu_pytorch_tanh)");
  c.tied_embeddings = hf::hf_bool(j, "tie_word_embeddings", w, true);
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

// attn.c_attn.weight [d, 3d] (Conv1D) or .bias [3d] -> wq/wk/wv [d, d] or bq/bk/bv [d].
void split_c_attn(Model& m, const std::string& p, const std::string& full, const std::string& rest, const StTensor& t,
                  const std::string& w) {
  const int64_t d = m.config.dim;
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
    m.add_view(p + names[k], t.dtype, wgt ? std::vector<int64_t>{d, d} : std::vector<int64_t>{d}, base + k * part, part,
               owner);
}

void map_layer_tensor(Model& m, const std::string& p, const std::string& full, const std::string& rest,
                      const StTensor& t, const std::string& w) {
  static const std::map<std::string, std::string> direct = {
      {"ln_1.weight", "attn_norm"},    {"ln_1.bias", "attn_norm_bias"}, {"ln_2.weight", "ffn_norm"},
      {"ln_2.bias", "ffn_norm_bias"},  {"attn.c_proj.bias", "bo"},      {"mlp.c_fc.bias", "fc_bias"},
      {"mlp.c_proj.bias", "proj_bias"}};
  static const std::map<std::string, std::string> conv1d = {
      {"attn.c_proj.weight", "wo"}, {"mlp.c_fc.weight", "fc"}, {"mlp.c_proj.weight", "proj"}};
  if (rest == "attn.bias" || rest == "attn.masked_bias") return;  // causal-mask buffers
  if (auto it = direct.find(rest); it != direct.end()) return hf::add_st(m, p + it->second, t);
  if (rest == "attn.c_attn.weight" || rest == "attn.c_attn.bias") return split_c_attn(m, p, full, rest, t, w);
  auto it = conv1d.find(rest);
  if (it == conv1d.end()) fail("model", w, ": unexpected GPT-2 tensor ", full);
  auto buf = transposed(t, full, w);
  m.add_view(p + it->second, t.dtype, {t.shape[1], t.shape[0]}, buf->data(), t.nbytes, buf);
}

void hf_tensors(Model& m, const StTensorMap& ts, const std::string& w) {
  static const std::regex layer_re(R"(h\.(\d+)\.(.+))");
  static const std::map<std::string, std::string> top = {{"wte.weight", "tok_embeddings"},
                                                         {"wpe.weight", "pos_embeddings"},
                                                         {"ln_f.weight", "norm"},
                                                         {"ln_f.bias", "norm_bias"}};
  for (const auto& [full, t] : ts) {
    const std::string n = full.starts_with("transformer.") ? full.substr(12) : full;
    std::smatch mt;
    if (auto it = top.find(n); it != top.end())
      hf::add_st(m, it->second, t);
    else if (n == "lm_head.weight") {
      if (!m.config.tied_embeddings) hf::add_st(m, "output", t);
    } else if (std::regex_match(n, mt, layer_re)) {
      map_layer_tensor(m, "layers." + mt[1].str() + ".", full, mt[2].str(), t, w);
    } else
      fail("model", w, ": unexpected GPT-2 tensor ", full);
  }
}

void from_gguf(const GgufFile& g, ModelConfig* c, const std::string&) {
  gpt2_facts(*c);
  c->norm_eps = static_cast<float>(g.get_num(c->arch + ".attention.layer_norm_epsilon", 1e-5));
}

void validate(const ModelConfig& c, const std::string& where) {
  if (c.norm != NormType::kLayer || c.activation != Activation::kGeluTanh || !c.learned_pos)
    fail("model", where, ": a gpt2 model has LayerNorm, a gelu_tanh MLP and learned positions (this config has ",
         norm_type_name(c.norm), ", ", activation_name(c.activation), ", rope_style ", rope_style_name(c.rope_style),
         ")");
}
}  // namespace
}  // namespace arch_gpt2

const Arch& gpt2_arch() {
  using namespace arch_gpt2;
  static const Arch a = [] {
    Arch r;
    r.name = "gpt2";
    r.hf_model_types = {"gpt2"};
    r.hf_class_prefixes = {"GPT2"};
    r.hf_config = from_hf;
    r.hf_tensors = hf_tensors;
    r.gguf_config = from_gguf;
    r.gguf_fused_qkv = true;
    r.gguf_explicit_output = true;
    r.describe = decoder_desc;
    r.presets = {{"gpt2-124m", gpt2_124m()}};
    r.validate = validate;
    return r;
  }();
  return a;
}

}  // namespace anelab::models

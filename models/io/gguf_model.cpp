// GGUF <-> canonical Model and VocabData (names and rules in gguf_model.h).
#include "models/io/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <regex>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/tokenizer/pretokenize.h"

namespace anelab::models {
namespace {

DType dtype_of(uint32_t ggml, const std::string& name, const std::string& w) {
  const std::optional<DType> d = dtype_of_ggml(ggml);
  if (!d) fail("model", w, ": tensor ", name, " has unsupported ggml type ", ggml);
  return *d;
}
uint32_t ggml_of(DType t) { return ggml_type_of(t); }

ModelConfig gguf_config(const GgufFile& g, const std::string& w) {
  ModelConfig c;
  c.arch = g.get_str("general.architecture", w);
  const Arch* arch = find_arch(c.arch);
  if (!arch || !arch->gguf_config)
    fail("model", w, ": GGUF architecture ", c.arch, " is not supported (", arch_names(), ")");
  const std::string a = c.arch + ".";
  c.dim = g.get_int(a + "embedding_length", w);
  c.n_layers = g.get_int(a + "block_count", w);
  c.hidden_dim = g.get_int(a + "feed_forward_length", w);
  c.n_heads = g.get_int(a + "attention.head_count", w);
  c.n_kv_heads = g.get_int(a + "attention.head_count_kv", c.n_heads);
  if (c.n_heads <= 0) fail("model", w, ": ", a, "attention.head_count must be positive");
  c.head_dim = g.get_int(a + "attention.key_length", c.dim / c.n_heads);
  c.max_seq_len = g.get_int(a + "context_length", w);
  c.rope_theta = static_cast<float>(g.get_num(a + "rope.freq_base", 10000.0));
  arch->gguf_config(g, &c, w);
  return c;
}

// GGUF tensor name -> canonical name ("" = ignore); ffn_up/ffn_down are fc/proj in a GELU MLP. A fused
// attn_qkv is handled by the caller.
std::string canonical_name(const std::string& n, const ModelConfig& c, const std::string& w) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "tok_embeddings"},
                                                         {"position_embd.weight", "pos_embeddings"},
                                                         {"output_norm.weight", "norm"},
                                                         {"output_norm.bias", "norm_bias"},
                                                         {"output.weight", "output"},
                                                         {"rope_freqs.weight", ""}};
  if (auto it = top.find(n); it != top.end()) return it->second;
  static const std::regex re(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(n, m, re)) fail("model", w, ": unexpected GGUF tensor ", n);
  const std::string p = "layers." + m[1].str() + ".", what = m[2].str();
  const bool bias = m[3].str() == "bias";
  static const std::map<std::string, std::pair<std::string, std::string>> blk = {
      {"attn_norm", {"attn_norm", "attn_norm_bias"}},
      {"ffn_norm", {"ffn_norm", "ffn_norm_bias"}},
      {"attn_q", {"wq", "bq"}},
      {"attn_k", {"wk", "bk"}},
      {"attn_v", {"wv", "bv"}},
      {"attn_output", {"wo", "bo"}},
      {"ffn_gate", {"w1", ""}},
      {"attn_q_norm", {"q_norm", ""}},
      {"attn_k_norm", {"k_norm", ""}}};
  if (auto it = blk.find(what); it != blk.end() && !(bias && it->second.second.empty()))
    return p + (bias ? it->second.second : it->second.first);
  if (what == "ffn_down" || what == "ffn_up") {
    if (c.activation == Activation::kGeluTanh) return p + (what == "ffn_up" ? "fc" : "proj") + (bias ? "_bias" : "");
    if (!bias) return p + (what == "ffn_down" ? "w2" : "w3");
  }
  fail("model", w, ": unexpected GGUF tensor ", n, " for architecture ", c.arch);
}

// A norm's scale (not its bias): attn_norm, ffn_norm, q_norm, k_norm, any other layer "*_norm", norm.
bool is_norm_weight(const std::string& canonical) {
  const std::string leaf = canonical.substr(canonical.rfind('.') + 1);
  // (the Gated DeltaNet's gated norm ssm_norm scales by w itself, whatever the model's other norms do)
  return leaf == "norm" || (leaf.ends_with("_norm") && leaf != "ssm_norm");
}

// A layer tensor the architecture names its own way (Arch::gguf_layer_names): the canonical name of GGUF `n`, or
// the GGUF name of canonical `n`; "" when the generic table names it.
std::string own_canonical_name(const Arch& arch, const std::string& n) {
  static const std::regex re(R"(blk\.(\d+)\.(.+))");
  std::smatch m;
  if (arch.gguf_layer_names.empty() || !std::regex_match(n, m, re)) return "";
  for (const auto& [canon, gguf] : arch.gguf_layer_names)
    if (gguf == m[2].str()) return "layers." + m[1].str() + "." + canon;
  return "";
}
std::string own_gguf_name(const Arch& arch, const std::string& n) {
  static const std::regex re(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (arch.gguf_layer_names.empty() || !std::regex_match(n, m, re)) return "";
  for (const auto& [canon, gguf] : arch.gguf_layer_names)
    if (canon == m[2].str()) return "blk." + m[1].str() + "." + gguf;
  return "";
}

// llama.cpp multiplies by a norm weight as stored; a model whose norms multiply by (norm_offset + w)
// (Gemma) is stored as F32 w + norm_offset, as llama.cpp's converter does, and read back as w.
std::vector<uint8_t> shifted_f32(const Tensor& t, float shift) {
  std::vector<float> f = t.to_f32();
  for (float& x : f) x += shift;
  std::vector<uint8_t> bytes(f.size() * 4);
  std::memcpy(bytes.data(), f.data(), bytes.size());
  return bytes;
}
}  // namespace

bool gguf_has_vocab(const GgufFile& g) { return g.find("tokenizer.ggml.tokens") != nullptr; }

tok::VocabData gguf_vocab(const GgufFile& g, const std::string& w) {
  tok::VocabData v;
  const std::string model = g.get_str("tokenizer.ggml.model", w);
  const auto kind = tok::parse_gguf_tokenizer_model(model);
  if (!kind)
    fail("model", w, ": tokenizer.ggml.model '", model, "' is not supported (",
         tok::gguf_tokenizer_model(tok::TokenizerKind::kSentencePiece), " = SentencePiece, ",
         tok::gguf_tokenizer_model(tok::TokenizerKind::kByteBpe), " = BPE)");
  v.kind = *kind;
  const GgufValue* toks = g.find("tokenizer.ggml.tokens");
  if (!toks || toks->type != GgufType::kArray || toks->elem_type != GgufType::kString || toks->strs.empty())
    fail("model", w, ": tokenizer.ggml.tokens is missing or not a string array");
  v.tokens = toks->strs;
  const size_t n = v.tokens.size();
  if (const GgufValue* s = g.find("tokenizer.ggml.scores")) {
    if (s->type != GgufType::kArray || s->nums.size() != n)
      fail("model", w, ": tokenizer.ggml.scores must be a numeric array of ", n, " entries");
    v.scores.assign(s->nums.begin(), s->nums.end());
  }
  if (const GgufValue* t = g.find("tokenizer.ggml.token_type")) {
    if (t->type != GgufType::kArray || t->nums.size() != n)
      fail("model", w, ": tokenizer.ggml.token_type must be an integer array of ", n, " entries");
    for (double x : t->nums) {
      if (x < 1 || x > 6) fail("model", w, ": tokenizer.ggml.token_type value ", x, " is not 1-6");
      v.types.push_back(static_cast<tok::TokenType>(static_cast<int32_t>(x)));
    }
  }
  if (const GgufValue* m = g.find("tokenizer.ggml.merges")) {
    if (m->type != GgufType::kArray || (m->elem_type != GgufType::kString && !m->strs.empty()))
      fail("model", w, ": tokenizer.ggml.merges must be a string array");
    v.merges = m->strs;
  }
  if (v.kind == tok::TokenizerKind::kByteBpe && v.merges.empty())
    fail("model", w, ": a byte-level BPE tokenizer needs tokenizer.ggml.merges");
  if (const GgufValue* p = g.find("tokenizer.ggml.pre"); p && p->type == GgufType::kString) v.pre = p->str;
  auto id = [&](const char* key) -> int32_t {
    const int64_t x = g.get_int(key, int64_t{-1});
    if (x < -1 || x >= static_cast<int64_t>(n))
      fail("model", w, ": ", key, " = ", x, " is outside the vocabulary of ", n);
    return static_cast<int32_t>(x);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  const bool spm = v.kind == tok::TokenizerKind::kSentencePiece;
  auto flag = [&](const char* key, bool def) {
    const GgufValue* f = g.find(key);
    if (!f) return def;
    if (f->type != GgufType::kBool) fail("model", w, ": ", key, " must be a bool");
    return f->num != 0;
  };
  v.add_bos = flag("tokenizer.ggml.add_bos_token", spm);
  v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", spm);
  return v;
}

namespace {
// llama.cpp stores Llama 3.1+ RoPE scaling as per-frequency divisors (rope_freqs.weight F32 [HD/2]); anelab
// keeps the llama3 parameters (ModelConfig::rope_scaling), fitted back here. The parameters are defined up to a
// common scale of (original_max_pos, low_freq_factor, high_freq_factor), so low_freq_factor is taken as 1;
// factor is the slowest frequency's divisor, and the blended divisors 1 / ((1 - s) / factor + s) give
// s = original / wavelength / (high - 1) - 1 / (high - 1), a line in 1 / wavelength through its first and last
// blended point. anelab's own exports also hold the parameters (anelab.rope_scaling.*: exact, and the only way
// back when fewer than 2 frequencies blend, as with a small head_dim); llama.cpp ignores those keys. Either
// is accepted only when it reproduces every divisor (1e-5 relative); all ones is no scaling. Anything else
// is refused, never run unscaled.
std::optional<RopeScaling> anelab_rope_scaling_keys(const GgufFile& g, const std::string& w) {
  if (!g.find("anelab.rope_scaling.factor")) return std::nullopt;
  return RopeScaling{RopeScalingType::kLlama3, static_cast<float>(g.get_num("anelab.rope_scaling.factor", 0)),
                     static_cast<float>(g.get_num("anelab.rope_scaling.low_freq_factor", 0)),
                     static_cast<float>(g.get_num("anelab.rope_scaling.high_freq_factor", 0)),
                     g.get_int("anelab.rope_scaling.original_max_pos", w)};
}

RopeScaling rope_scaling_from_divisors(const GgufFile& g, const GgufTensorInfo& t, DType dt, const ModelConfig& c,
                                       const std::string& w) {
  const int64_t half = c.head_dim / 2;
  if (dt != DType::kF32 || t.nbytes != half * 4)
    fail("model", w, ": rope_freqs.weight must be F32 [", half, "] (head_dim / 2)");
  std::vector<double> d(static_cast<size_t>(half)), x(d.size());  // divisor, 1 / wavelength
  for (int64_t i = 0; i < half; ++i) {
    float f;
    std::memcpy(&f, t.data + 4 * i, 4);
    d[size_t(i)] = f;
    x[size_t(i)] = std::pow(double(c.rope_theta), -2.0 * double(i) / double(c.head_dim)) / (2 * std::numbers::pi);
  }
  RopeScaling s;
  if (std::all_of(d.begin(), d.end(), [](double v) { return v == 1.0; })) return s;
  const auto unfit = [&] {
    fail("model", w,
         ": rope_freqs.weight is not llama3 RoPE scaling anelab can recover (needs 2+ blended "
         "frequencies); load the Hugging Face model (config.json rope_scaling llama3) instead");
  };
  const auto check = [&](const RopeScaling& r) {
    for (size_t i = 0; i < d.size(); ++i) {
      const double inv = x[i] * 2 * std::numbers::pi;
      if (std::abs(inv / llama3_scaled_inv_freq(inv, r) - d[i]) > 1e-5 * d[i]) unfit();
    }
    return r;
  };
  if (const auto keys = anelab_rope_scaling_keys(g, w)) return check(*keys);
  const double factor = d.back();
  std::vector<size_t> blended;
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] != 1.0 && d[i] != factor) blended.push_back(i);
  if (!(factor > 1.0) || blended.size() < 2) unfit();
  const auto smooth = [&](size_t i) { return (1 / d[i] - 1 / factor) / (1 - 1 / factor); };
  const size_t a = blended.front(), b = blended.back();
  const double slope = (smooth(b) - smooth(a)) / (x[b] - x[a]), icpt = smooth(a) - slope * x[a];
  if (!(icpt < 0)) unfit();
  s = {RopeScalingType::kLlama3, static_cast<float>(factor), 1.0f,
       static_cast<float>(std::round((1 - 1 / icpt) * 4096) / 4096), 0};
  const double orig = std::round(slope * (double(s.high_freq_factor) - 1));
  if (!(orig >= 1 && orig <= (1 << 22) && s.factor <= 1024)) unfit();  // validate_config's ranges
  s.original_max_pos = static_cast<int64_t>(orig);
  return check(s);
}
}  // namespace

Model gguf_to_model(const GgufFile& g, const std::string& w) {
  if (g.tensors.empty())
    fail("model", w, ": this GGUF has no tensors (a vocab-only file?); it holds a tokenizer, not a model");
  Model m;
  m.config = gguf_config(g, w);
  const Arch& arch = arch_of(m.config.arch, w);
  const int64_t d = m.config.dim;
  for (const auto& t : g.tensors) {
    const DType dt = dtype_of(t.ggml_type, t.name, w);
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    Tensor stored;
    stored.name = own_canonical_name(arch, t.name);
    stored.dtype = dt, stored.shape = shape, stored.data = t.data, stored.nbytes = t.nbytes;
    if (!stored.name.empty()) {
      if (arch.gguf_import_tensor)
        if (auto b = arch.gguf_import_tensor(m.config, stored, w)) {
          m.add_owned(stored.name, b->dtype, shape, std::move(b->bytes));
          continue;
        }
      if (param(m.config, kNormOffset) != 0.0f && is_norm_weight(stored.name))
        m.add_owned(stored.name, DType::kF32, shape, shifted_f32(stored, -param(m.config, kNormOffset)));
      else
        m.add_view(stored.name, dt, shape, t.data, t.nbytes, g.owner);
      continue;
    }
    static const std::regex qkv(R"(blk\.(\d+)\.attn_qkv\.(weight|bias))");
    std::smatch mt;
    if (std::regex_match(t.name, mt, qkv)) {  // fused [3*d, d]: q, k, v row blocks
      const bool wgt = mt[2].str() == "weight";
      if (shape[0] != 3 * d || (wgt && (shape.size() != 2 || shape[1] != d)) || (!wgt && shape.size() != 1))
        fail("model", w, ": tensor ", t.name, " has shape ", shape_string(shape), ", expected [", 3 * d,
             wgt ? ", " : "", wgt ? std::to_string(d) : "", "]");
      const std::string p = "layers." + mt[1].str() + ".";
      const char* names[3] = {wgt ? "wq" : "bq", wgt ? "wk" : "bk", wgt ? "wv" : "bv"};
      shape[0] = d;
      for (int k = 0; k < 3; ++k)
        m.add_view(p + names[k], dt, shape, t.data + k * (t.nbytes / 3), t.nbytes / 3, g.owner);
      continue;
    }
    if (t.name == "rope_freqs.weight") {
      m.config.rope_scaling = rope_scaling_from_divisors(g, t, dt, m.config, w);
      continue;
    }
    const std::string name = canonical_name(t.name, m.config, w);
    if (name.empty()) continue;
    if (const float offset = param(m.config, kNormOffset); offset != 0.0f && is_norm_weight(name)) {
      Tensor stored;
      stored.dtype = dt, stored.shape = shape, stored.data = t.data, stored.nbytes = t.nbytes;
      m.add_owned(name, DType::kF32, shape, shifted_f32(stored, -offset));
      continue;
    }
    m.add_view(name, dt, shape, t.data, t.nbytes, g.owner);
  }
  // Which optional tensors the file has decides the flags (check_complete then checks every layer against what the
  // architecture's description names).
  m.config.tied_embeddings = !m.has("output");
  m.config.qkv_bias = m.has("layers.0.bq");
  m.config.attn_out_bias = m.has("layers.0.bo");
  m.config.mlp_bias = m.has("layers.0.fc_bias");
  const Tensor* emb = m.find("tok_embeddings");
  if (!emb) fail("model", w, ": GGUF has no token_embd.weight");
  m.config.vocab_size = emb->shape[0];
  if (gguf_has_vocab(g)) m.vocab = gguf_vocab(g, w);
  if (g.find("tokenizer.chat_template")) m.chat_template = g.get_str("tokenizer.chat_template", w);
  m.source_format = "gguf";
  m.source_path = w;
  check_complete(m, w);
  return m;
}

Model read_gguf(const std::string& path, FileAccess access) {
  return gguf_to_model(read_gguf_file(path, access), path);
}

namespace {

void add_vocab(GgufWriter& w, const tok::VocabData& src, int64_t vocab_size) {
  tok::VocabData v = src;
  // (A larger token list is kept as is: our reader accepts it, llama.cpp would not load such a model.)
  if (static_cast<int64_t>(v.tokens.size()) < vocab_size) {  // llama.cpp wants one token per embedding row
    if (v.types.empty()) v.types.assign(v.tokens.size(), tok::TokenType::kNormal);
    if (!v.scores.empty()) v.scores.resize(static_cast<size_t>(vocab_size), 0.0f);
    for (auto id = static_cast<int64_t>(v.tokens.size()); id < vocab_size; ++id) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.types.push_back(tok::TokenType::kUnused);
    }
  }
  const bool spm = v.kind == tok::TokenizerKind::kSentencePiece;
  if (spm)  // GGUF (like tokenizer.model) spells SentencePiece spaces U+2581; llama2.c's tokenizer.bin has ' '
    for (std::string& t : v.tokens)
      for (size_t p; (p = t.find(' ')) != std::string::npos;) t.replace(p, 1, "\xE2\x96\x81");
  w.add_str("tokenizer.ggml.model", tok::gguf_tokenizer_model(v.kind));
  if (!spm)
    w.add_str("tokenizer.ggml.pre", tok::llama_cpp_pre_name(tok::select_pretokenizer(v.pre, v.pre_regex)));
  else if (!v.pre.empty())
    w.add_str("tokenizer.ggml.pre", v.pre);
  w.add_str_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  if (!v.types.empty()) {
    std::vector<int32_t> t;
    for (auto x : v.types) t.push_back(static_cast<int32_t>(x));
    w.add_i32_array("tokenizer.ggml.token_type", t);
  }
  if (!v.merges.empty()) w.add_str_array("tokenizer.ggml.merges", v.merges);
  if (v.bos_id >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos_id));
  if (v.eos_id >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  if (v.unk_id >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk_id));
  if (v.pad_id >= 0) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad_id));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  if (spm) w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

std::string gguf_name(const std::string& name) {
  static const std::map<std::string, std::string> rev = {{"wq", "attn_q.weight"},
                                                         {"wk", "attn_k.weight"},
                                                         {"wv", "attn_v.weight"},
                                                         {"wo", "attn_output.weight"},
                                                         {"bq", "attn_q.bias"},
                                                         {"bk", "attn_k.bias"},
                                                         {"bv", "attn_v.bias"},
                                                         {"bo", "attn_output.bias"},
                                                         {"attn_norm", "attn_norm.weight"},
                                                         {"attn_norm_bias", "attn_norm.bias"},
                                                         {"ffn_norm", "ffn_norm.weight"},
                                                         {"ffn_norm_bias", "ffn_norm.bias"},
                                                         {"w1", "ffn_gate.weight"},
                                                         {"w2", "ffn_down.weight"},
                                                         {"w3", "ffn_up.weight"},
                                                         {"fc", "ffn_up.weight"},
                                                         {"fc_bias", "ffn_up.bias"},
                                                         {"proj", "ffn_down.weight"},
                                                         {"proj_bias", "ffn_down.bias"},
                                                         {"q_norm", "attn_q_norm.weight"},
                                                         {"k_norm", "attn_k_norm.weight"},
                                                         {"tok_embeddings", "token_embd.weight"},
                                                         {"pos_embeddings", "position_embd.weight"},
                                                         {"norm", "output_norm.weight"},
                                                         {"norm_bias", "output_norm.bias"},
                                                         {"output", "output.weight"}};
  auto find = [&](const std::string& k) {
    auto it = rev.find(k);
    if (it == rev.end()) fail("model", "tensor ", name, " has no GGUF name");
    return it->second;
  };
  if (!name.starts_with("layers.")) return find(name);
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos) fail("model", "tensor ", name, " has no GGUF name");
  return "blk." + name.substr(7, dot - 7) + "." + find(name.substr(dot + 1));
}

// llama.cpp's llama_ftype of the matrices' dtypes: a K-quant mix by its base type (Q4_K: 15 q4_k_m; else Q5_K: 17
// q5_k_m when a layer matrix is Q6_K, 16 q5_k_s when none is; their row fallbacks Q5_0 / Q5_1 / Q8_0 do not count),
// else the dtype holding the most bytes (0 all f32, 1 mostly f16, 7 q8_0, 32 bf16, 2 q4_0, 8 q5_0, 9 q5_1, 18 q6_k).
uint32_t file_type(const Model& m) {
  std::map<DType, int64_t> bytes;
  bool q6k_layer = false;
  for (const Tensor& t : m.tensors())
    if (t.shape.size() == 2) {
      bytes[t.dtype] += t.nbytes;
      q6k_layer |= t.dtype == DType::kQ6_K && t.name.starts_with("layers.");
    }
  if (bytes.count(DType::kQ4_K)) return 15;  // q4_k_m's Q5_K (a fused attn_qkv) and Q6_K are its upgrades
  if (bytes.count(DType::kQ5_K)) return q6k_layer ? 17 : 16;
  DType top = DType::kF32;
  for (const auto& [d, n] : bytes)
    if (n > bytes[top]) top = d;
  switch (top) {
    case DType::kF16:
      return 1;
    case DType::kQ8_0:
      return 7;
    case DType::kBF16:
      return 32;
    case DType::kQ4_0:
      return 2;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ6_K:
      return 18;
    case DType::kQ4_K:  // (returned above)
      return 15;
    case DType::kQ5_K:  // (returned above, 16 or 17)
      return 16;
    case DType::kF32:
      return 0;
  }
  return 0;
}

std::vector<int64_t> ggml_ne(const std::vector<int64_t>& shape) { return {shape.rbegin(), shape.rend()}; }

// Fused q/k/v: blk.N.attn_qkv.{weight,bias} = q, k, v row blocks (same dtype required).
void add_fused_qkv(GgufWriter& w, const Model& m, int64_t layer, bool bias) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  const char* names[3] = {bias ? "bq" : "wq", bias ? "bk" : "wk", bias ? "bv" : "wv"};
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  DType dt = DType::kF32;
  for (int k = 0; k < 3; ++k) {
    const Tensor& t = m.tensor(p + names[k]);
    if (k == 0)
      shape = t.shape, dt = t.dtype;
    else if (t.dtype != dt || t.shape != m.tensor(p + names[0]).shape)
      fail("model", "GGUF ", m.config.arch, " fuses q/k/v: ", p, names[k], " must have the dtype and shape of ", p,
           names[0]);
    else
      shape[0] += t.shape[0];
    bytes.insert(bytes.end(), t.data, t.data + t.nbytes);
  }
  w.add_tensor("blk." + std::to_string(layer) + (bias ? ".attn_qkv.bias" : ".attn_qkv.weight"), ggml_of(dt),
               ggml_ne(shape), std::move(bytes));
}
}  // namespace

namespace {
// llama.cpp's form of llama3 RoPE scaling (its converter's rope_freqs.weight, F32 [HD/2]): per frequency the
// divisor plain / scaled, which ggml_rope_ext applies as theta_i / divisor_i; the parameters themselves in
// anelab.rope_scaling.* (exact on read; llama.cpp ignores them).
void add_rope_freqs(GgufWriter& w, const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  w.add_f32("anelab.rope_scaling.factor", s.factor);
  w.add_f32("anelab.rope_scaling.low_freq_factor", s.low_freq_factor);
  w.add_f32("anelab.rope_scaling.high_freq_factor", s.high_freq_factor);
  w.add_u32("anelab.rope_scaling.original_max_pos", static_cast<uint32_t>(s.original_max_pos));
  std::vector<float> div(static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < div.size(); ++i) {
    const double plain = std::pow(double(c.rope_theta), -2.0 * double(i) / double(c.head_dim));
    div[i] = static_cast<float>(plain / llama3_scaled_inv_freq(plain, c.rope_scaling));
  }
  std::vector<uint8_t> bytes(div.size() * 4);
  std::memcpy(bytes.data(), div.data(), bytes.size());
  w.add_tensor("rope_freqs.weight", kGgmlF32, {static_cast<int64_t>(div.size())}, std::move(bytes));
}
}  // namespace

GgufWriter gguf_writer_for(const Model& m, std::vector<std::string>* notes) {
  const ModelConfig& c = m.config;
  const Arch& arch = arch_of(c.arch, "GGUF export");
  if (!arch.gguf_config) fail("model", "GGUF export: anelab has no GGUF mapping for ", c.arch, " models yet");
  if (arch.gguf_rope && c.rope_style != *arch.gguf_rope)
    fail("model", "GGUF ", c.arch, " expects ", rope_style_name(*arch.gguf_rope),
         " RoPE order of q/k; this model uses ", rope_style_name(c.rope_style), " (export_model permutes it)");
  GgufWriter w;
  const std::string a = c.arch + ".";
  w.add_str("general.architecture", c.arch);
  w.add_u32(a + "context_length", static_cast<uint32_t>(c.max_seq_len));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(c.dim));
  w.add_u32(a + "block_count", static_cast<uint32_t>(c.n_layers));
  w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.add_f32(a + (c.norm == NormType::kLayer ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"),
            c.norm_eps);
  if (c.rope_style != RopeStyle::kNone) w.add_f32(a + "rope.freq_base", c.rope_theta);
  if (arch.gguf_write) {
    std::vector<std::string> own;
    arch.gguf_write(w, c, notes ? notes : &own);
  }
  w.add_u32("general.file_type", file_type(m));
  if (m.vocab) {
    add_vocab(w, *m.vocab, c.vocab_size);
  } else {  // llama.cpp's "no vocabulary" model of vocab_size dummy tokens: llama-bench runs it
    w.add_str("tokenizer.ggml.model", "none");
    w.add_u32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  }
  if (!m.chat_template.empty()) w.add_str("tokenizer.chat_template", m.chat_template);
  for (const Tensor& t : m.tensors()) {
    if (arch.gguf_fused_qkv && t.name.starts_with("layers.")) {
      const std::string leaf = t.name.substr(t.name.find('.', 7) + 1);
      if (leaf == "wq" || leaf == "bq") add_fused_qkv(w, m, std::stoll(t.name.substr(7)), leaf == "bq");
      if (leaf == "wq" || leaf == "wk" || leaf == "wv" || leaf == "bq" || leaf == "bk" || leaf == "bv") continue;
    }
    const std::string own = own_gguf_name(arch, t.name), name = own.empty() ? gguf_name(t.name) : own;
    if (arch.gguf_export_tensor)
      if (auto b = arch.gguf_export_tensor(c, t)) {
        w.add_tensor(name, ggml_of(b->dtype), ggml_ne(t.shape), std::move(b->bytes));
        continue;
      }
    if (param(c, kNormOffset) != 0.0f && is_norm_weight(t.name))
      w.add_tensor(name, kGgmlF32, ggml_ne(t.shape), shifted_f32(t, param(c, kNormOffset)));
    else
      w.add_tensor_view(name, ggml_of(t.dtype), ggml_ne(t.shape), t.data, t.nbytes);
  }
  if (c.rope_scaling.type == RopeScalingType::kLlama3) add_rope_freqs(w, c);
  if (arch.gguf_explicit_output && !m.has("output")) {  // llama.cpp's graph for this arch requires output.weight
    const Tensor& e = m.tensor("tok_embeddings");
    w.add_tensor_view("output.weight", ggml_of(e.dtype), ggml_ne(e.shape), e.data, e.nbytes);
  }
  return w;
}

std::vector<uint8_t> model_to_gguf(const Model& m) { return gguf_writer_for(m).build(); }
int64_t write_gguf_model(const Model& m, const std::string& path, std::vector<std::string>* notes) {
  return gguf_writer_for(m, notes).write(path);
}

int fuzz_read_gguf(const uint8_t* data, size_t size) {
  try {
    const GgufFile g = parse_gguf(data, size, nullptr, "<fuzz>");
    if (gguf_has_vocab(g)) gguf_vocab(g, "<fuzz>");
    if (!g.tensors.empty()) gguf_to_model(g, "<fuzz>");
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace anelab::models

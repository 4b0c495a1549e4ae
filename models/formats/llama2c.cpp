#include "models/formats/llama2c.h"

#include <cstring>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/byte_reader.h"

namespace anelab::models {
namespace {

struct Header {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
};

Header read_header(ByteReader& r) {
  Header h;
  h.dim = r.get<int32_t>("header dim");
  h.hidden = r.get<int32_t>("header hidden_dim");
  h.layers = r.get<int32_t>("header n_layers");
  h.heads = r.get<int32_t>("header n_heads");
  h.kv_heads = r.get<int32_t>("header n_kv_heads");
  h.vocab = r.get<int32_t>("header vocab_size");
  h.seq = r.get<int32_t>("header seq_len");
  return h;
}

ModelConfig to_config(const Header& h, bool tied, const std::string& w) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = h.dim;
  c.hidden_dim = h.hidden;
  c.n_layers = h.layers;
  c.n_heads = h.heads;
  c.n_kv_heads = h.kv_heads;
  c.vocab_size = h.vocab < 0 ? -static_cast<int64_t>(h.vocab) : h.vocab;
  c.max_seq_len = h.seq;
  if (h.heads <= 0 || h.dim <= 0 || h.dim % h.heads)
    fail("model", w, ": llama2.c header dim ", h.dim, " is not a positive multiple of n_heads ", h.heads);
  c.head_dim = h.dim / h.heads;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kAdjacentPairs;
  c.tied_embeddings = tied;
  validate_config_fields(c, w);
  return c;
}

// The tensors of the format (a Llama layout, fp32): their element count, checked (checked_numel), is the file's
// weight count.
int64_t llama2c_weights(const ModelConfig& c, const std::string& w) {
  const int64_t L = c.n_layers;
  std::vector<TensorSpec> t = {{"tok_embeddings", {c.vocab_size, c.dim}},   {"attn_norm, ffn_norm", {L, 2, c.dim}},
                               {"wq, wo", {L, 2, c.q_dim(), c.dim}},        {"wk, wv", {L, 2, c.kv_dim(), c.dim}},
                               {"w1, w2, w3", {L, 3, c.hidden_dim, c.dim}}, {"norm", {c.dim}}};
  if (!c.tied_embeddings) t.push_back({"output", {c.vocab_size, c.dim}});
  return checked_numel(t, w);
}

// Adds one fp32 tensor (or L stacked per-layer tensors when `layered`) at the reader's position.
void take(ByteReader& r, Model& m, const std::shared_ptr<const void>& owner, const std::string& name,
          std::vector<int64_t> shape, bool layered) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const int64_t count = layered ? m.config.n_layers : 1;
  for (int64_t i = 0; i < count; ++i) {
    const std::string full = layered ? "layers." + std::to_string(i) + "." + name : name;
    const uint8_t* p = r.take(static_cast<size_t>(n * 4), full.c_str());
    m.add_view(full, DType::kF32, shape, p, n * 4, owner);
  }
}

int64_t expected_size(const ModelConfig& c, int64_t header_bytes, bool freq_tables) {
  int64_t n = llama2c_weights(c, "llama2.c header");
  if (freq_tables) n += c.max_seq_len * c.head_dim;  // real + imag, each seq_len * head_size / 2
  return header_bytes + n * 4;
}

void check_size(const ModelConfig& c, size_t size, int64_t header_bytes, bool freq, const std::string& w) {
  const int64_t want = expected_size(c, header_bytes, freq);
  if (want != static_cast<int64_t>(size))
    fail("model", w, ": llama2.c file is ", size, " bytes but its header (dim ", c.dim, ", hidden ", c.hidden_dim,
         ", layers ", c.n_layers, ", heads ", c.n_heads, "/", c.n_kv_heads, ", vocab ", c.vocab_size, ", seq ",
         c.max_seq_len, ", ", c.tied_embeddings ? "shared" : "separate", " classifier) implies ", want,
         " bytes; the file is truncated, corrupt or not a llama2.c checkpoint");
}

void read_layer_matrices(ByteReader& r, Model& m, const std::shared_ptr<const void>& o) {
  const ModelConfig& c = m.config;
  take(r, m, o, "wq", {c.q_dim(), c.dim}, true);
  take(r, m, o, "wk", {c.kv_dim(), c.dim}, true);
  take(r, m, o, "wv", {c.kv_dim(), c.dim}, true);
  take(r, m, o, "wo", {c.dim, c.q_dim()}, true);
}

void read_ffn(ByteReader& r, Model& m, const std::shared_ptr<const void>& o) {
  const ModelConfig& c = m.config;
  take(r, m, o, "w1", {c.hidden_dim, c.dim}, true);
  take(r, m, o, "w2", {c.dim, c.hidden_dim}, true);
  take(r, m, o, "w3", {c.hidden_dim, c.dim}, true);
}

Model parse_legacy(ByteReader& r, std::shared_ptr<const void> owner, size_t size) {
  const std::string& w = r.where();
  const Header h = read_header(r);
  Model m;
  m.config = to_config(h, h.vocab > 0, w);
  check_size(m.config, size, 28, true, w);
  const ModelConfig& c = m.config;
  take(r, m, owner, "tok_embeddings", {c.vocab_size, c.dim}, false);
  take(r, m, owner, "attn_norm", {c.dim}, true);
  read_layer_matrices(r, m, owner);
  take(r, m, owner, "ffn_norm", {c.dim}, true);
  read_ffn(r, m, owner);
  take(r, m, owner, "norm", {c.dim}, false);
  r.take(static_cast<size_t>(c.max_seq_len * c.head_dim * 4), "freq_cis tables");
  if (!c.tied_embeddings) take(r, m, owner, "output", {c.vocab_size, c.dim}, false);
  return m;
}

Model parse_v1(ByteReader& r, std::shared_ptr<const void> owner, size_t size) {
  const std::string& w = r.where();
  r.get<uint32_t>("magic");
  const int32_t version = r.get<int32_t>("version");
  if (version != 1)
    fail("model", w, ": llama2.c export version ", version,
         " is not supported (only version 1 fp32 and the legacy format); re-export with export.py --version 1");
  const Header h = read_header(r);
  const uint8_t shared = r.get<uint8_t>("shared_classifier");
  if (shared > 1) fail("model", w, ": shared_classifier byte is ", int(shared), ", expected 0 or 1");
  r.need(256 - r.pos(), "header padding");
  r.seek(256, "header padding");
  if (h.vocab <= 0) fail("model", w, ": header vocab_size ", h.vocab, " must be positive in export version 1");
  Model m;
  m.config = to_config(h, shared == 1, w);
  check_size(m.config, size, 256, false, w);
  const ModelConfig& c = m.config;
  take(r, m, owner, "attn_norm", {c.dim}, true);
  take(r, m, owner, "ffn_norm", {c.dim}, true);
  take(r, m, owner, "norm", {c.dim}, false);
  take(r, m, owner, "tok_embeddings", {c.vocab_size, c.dim}, false);
  read_layer_matrices(r, m, owner);
  read_ffn(r, m, owner);
  if (!c.tied_embeddings) take(r, m, owner, "output", {c.vocab_size, c.dim}, false);
  return m;
}
}  // namespace

bool looks_like_llama2c(const uint8_t* data, size_t size) {
  if (size >= 8) {
    uint32_t magic;
    std::memcpy(&magic, data, 4);
    if (magic == kLlama2cMagic) return true;
  }
  if (size < 28) return false;
  try {
    ByteReader r(data, size, "probe");
    const Header h = read_header(r);
    const ModelConfig c = to_config(h, h.vocab > 0, "probe");
    return expected_size(c, 28, true) == static_cast<int64_t>(size);
  } catch (const Error&) {
    return false;
  }
}

Model parse_llama2c(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& where) {
  ByteReader r(data, size, where);
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  Model m = magic == kLlama2cMagic ? parse_v1(r, owner, size) : parse_legacy(r, owner, size);
  if (r.remaining() != 0) fail("model", where, ": ", r.remaining(), " unexplained bytes at the end of the file");
  m.source_format = "llama2c";
  m.source_path = where;
  return m;
}

Model read_llama2c(const std::string& path, FileAccess access) {
  auto mf = std::make_shared<MappedFile>(path, access);
  return parse_llama2c(mf->data(), mf->size(), mf, path);
}

int fuzz_read_llama2c(const uint8_t* data, size_t size) {
  try {
    parse_llama2c(data, size, nullptr, "<fuzz>");
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace anelab::models

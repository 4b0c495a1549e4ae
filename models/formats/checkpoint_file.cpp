#include "models/formats/checkpoint_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/anelab_file.h"

namespace anelab::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

bool looks_like_checkpoint(const uint8_t* data, size_t size) {
  return size >= 8 && std::memcmp(data, kCheckpointMagic, 8) == 0;
}

bool is_run_dir(const std::string& path) {
  if (!fs::is_directory(path)) return false;
  for (const char* f : {"best.ckpt", "last.ckpt", "events.jsonl"})
    if (fs::exists(fs::path(path) / f)) return true;
  return false;
}

std::string checkpoint_path(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  for (const char* f : {"best.ckpt", "last.ckpt"})
    if (fs::exists(fs::path(path) / f)) return (fs::path(path) / f).string();
  if (fs::exists(fs::path(path) / "events.jsonl"))
    fail("model", path, ": this run has no checkpoint yet (best.ckpt is written at each --eval-every evaluation, "
         "last.ckpt at --checkpoint-every steps and at the end)");
  fail("model", path, ": a directory without best.ckpt or last.ckpt is not a run directory");
}

uint64_t fnv1a64(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

json checkpoint_config_to_json(const ModelConfig& c) {
  return {{"arch", c.arch}, {"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
          {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim},
          {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}, {"norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta}, {"rope_style", rope_style_name(c.rope_style)},
          {"tied_embeddings", c.tied_embeddings}};
}

ModelConfig checkpoint_config_from_json(const json& j, const std::string& where) {
  ModelConfig c;
  try {
    c.arch = j.at("arch").get<std::string>();
    c.dim = j.at("dim").get<int64_t>();
    c.hidden_dim = j.at("hidden_dim").get<int64_t>();
    c.n_layers = j.at("n_layers").get<int64_t>();
    c.n_heads = j.at("n_heads").get<int64_t>();
    c.n_kv_heads = j.at("n_kv_heads").get<int64_t>();
    c.head_dim = j.at("head_dim").get<int64_t>();
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.max_seq_len = j.at("max_seq_len").get<int64_t>();
    c.norm_eps = j.at("norm_eps").get<float>();
    c.rope_theta = j.at("rope_theta").get<float>();
    const auto rs = j.at("rope_style").get<std::string>();
    if (rs == "adjacent_pairs") c.rope_style = RopeStyle::kAdjacentPairs;
    else if (rs == "rotate_half") c.rope_style = RopeStyle::kRotateHalf;
    else fail("checkpoint", where, ": model.rope_style '", rs, "' is not adjacent_pairs or rotate_half");
    c.tied_embeddings = j.at("tied_embeddings").get<bool>();
  } catch (const json::exception& e) {
    fail("checkpoint", where, ": bad model config: ", e.what());
  }
  validate_config(c, where);
  return c;
}

json checkpoint_tensors_json(const ModelConfig& c) {
  json t = json::array();
  int64_t off = 0;
  for (const TensorSpec& s : canonical_tensors(c)) {
    t.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", off}});
    off += s.numel();
  }
  return t;
}

void check_checkpoint_tensors(const json& tensors, const ModelConfig& c, const std::string& where) {
  const json want = checkpoint_tensors_json(c);
  if (!tensors.is_array() || tensors.size() != want.size())
    fail("checkpoint", where, ": header tensors lists ", tensors.is_array() ? tensors.size() : 0, " entries, the model has ",
         want.size(), " tensors");
  for (size_t i = 0; i < want.size(); ++i)
    if (tensors[i] != want[i])
      fail("checkpoint", where, ": header tensors[", i, "] is ", tensors[i].dump(), ", expected ", want[i].dump());
}

Model read_checkpoint_model(const std::string& path) {
  const std::string file = checkpoint_path(path);
  auto mf = std::make_shared<MappedFile>(file);
  const uint8_t* d = mf->data();
  const size_t n = mf->size();
  if (n < 24 || !looks_like_checkpoint(d, n))
    fail("checkpoint", file, ": not an anelab checkpoint (magic 'ANELABCK' missing, ", n, " bytes)");
  uint32_t ver;
  uint64_t hl;
  std::memcpy(&ver, d + 8, 4);
  std::memcpy(&hl, d + 16, 8);
  if (ver < 1 || ver > kCheckpointVersion)
    fail("checkpoint", file, ": version ", ver, " is not supported (this build reads 1..", kCheckpointVersion, ")");
  if (hl == 0 || hl > (16u << 20) || 24 + hl > n)
    fail("checkpoint", file, ": header_len ", hl, " is out of range for a ", n, "-byte file");
  json h;
  try {
    h = json::parse(d + 24, d + 24 + hl);
  } catch (const std::exception& e) {
    fail("checkpoint", file, ": header is not valid JSON: ", e.what());
  }
  Model m;
  try {
    m.config = checkpoint_config_from_json(h.at("model"), file);
    const uint64_t P = h.at("n_params").get<uint64_t>();
    const uint64_t off = (24 + hl + 63) / 64 * 64;
    if (static_cast<int64_t>(P) != parameter_count(m.config) || off + P * 12 != n)
      fail("checkpoint", file, ": n_params ", P, " does not match the model (", parameter_count(m.config),
           ") or the file size ", n, " (truncated or corrupt)");
    if (ver >= 2) check_checkpoint_tensors(h.at("tensors"), m.config, file);
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a64(kFnvOffset, d + off, P * 12)));
    if (h.at("checksum").get<std::string>() != sum)
      fail("checkpoint", file, ": checksum mismatch (corrupt file); use the run's other checkpoint");
    const uint8_t* w = d + off;
    for (const TensorSpec& s : canonical_tensors(m.config)) {
      m.add_view(s.name, DType::kF32, s.shape, w, s.numel() * 4, mf);
      w += s.numel() * 4;
    }
  } catch (const json::exception& e) {
    fail("checkpoint", file, ": header field missing or mistyped: ", e.what());
  }
  m.source_format = "checkpoint";
  m.source_path = file;
  const fs::path tok = fs::path(file).parent_path() / kRunTokenizerFile;
  if (fs::exists(tok)) {
    m.vocab = read_run_tokenizer(tok.string());
    m.tokenizer_path = tok.string();
  }
  m.check_complete(file);
  return m;
}

void save_run_tokenizer(const tok::VocabData& v, const std::string& path) {
  const std::vector<uint8_t> b = serialize_vocab(v);
  write_file_atomic(path, b.data(), b.size());
}

tok::VocabData read_run_tokenizer(const std::string& path) {
  const MappedFile f(path);
  return deserialize_vocab(f.data(), f.size(), path);
}

bool looks_like_anetok(const uint8_t* data, size_t size) { return size >= 8 && std::memcmp(data, "ANETOK01", 8) == 0; }

}  // namespace anelab::models

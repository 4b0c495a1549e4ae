#include "models/io/hf_model.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

Model hf_to_model(const std::string& config_json, const StTensorMap& ts, const std::string& w) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail("model", w, ": config.json is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail("model", w, ": config.json is not a JSON object");
  const Arch& arch = arch_for_hf(j, w);
  Model m;
  m.config = arch.hf_config(j, w);
  checked_parameter_count(m.config, w);
  // A config may claim an untied head that the checkpoint lacks (or the reverse): trust the tensors.
  if (!ts.count("lm_head.weight")) m.config.tied_embeddings = true;
  arch.hf_tensors(m, ts, w);
  m.source_format = "safetensors";
  m.source_path = w;
  check_complete(m, w);
  return m;
}

namespace {
// The tokenizer files of a model directory (tokenizer.json, or encoder.json + vocab.bpe) and the chat
// template of tokenizer_config.json. A tokenizer this build cannot read is left to fail where it is used
// (tokenizer_path names it), so the weights still load.
void read_hf_tokenizer(const fs::path& dir, Model& m) {
  if (!fs::exists(dir / "tokenizer.json") && !fs::exists(dir / "encoder.json")) return;
  m.tokenizer_path = dir.string();
  try {
    m.vocab = tok::load_vocab_file(dir.string());
  } catch (const Error&) {
    m.vocab.reset();
  }
  const fs::path tc = dir / "tokenizer_config.json";
  if (!fs::exists(tc)) return;
  const std::string text = read_file_text(tc.string());
  const json j = json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
    m.chat_template = j["chat_template"].get<std::string>();
}
}  // namespace

Model read_hf_safetensors(const std::string& path, FileAccess access) {
  fs::path p(path), dir = fs::is_directory(p) ? p : p.parent_path();
  if (dir.empty()) dir = ".";
  std::vector<fs::path> files;
  fs::path index;
  if (fs::is_directory(p)) {
    if (fs::exists(p / "model.safetensors"))
      files.push_back(p / "model.safetensors");
    else if (fs::exists(p / "model.safetensors.index.json"))
      index = p / "model.safetensors.index.json";
    else
      fail("model", path, ": directory has neither model.safetensors nor model.safetensors.index.json");
  } else if (p.filename().string().ends_with(".index.json")) {
    index = p;
  } else {
    files.push_back(p);
  }
  std::map<std::string, std::string> weight_map;
  if (!index.empty()) {
    weight_map = parse_safetensors_index(read_file_text(index.string()), index.string());
    std::set<std::string> shards;
    for (const auto& [name, file] : weight_map) shards.insert(file);
    for (const auto& s : shards) files.push_back(dir / s);
  }
  StTensorMap all;
  for (const auto& f : files) {
    auto mf = std::make_shared<MappedFile>(f.string(), access);
    auto part = parse_safetensors(mf->data(), mf->size(), mf, f.string());
    for (auto& [name, t] : part) {
      if (!weight_map.empty() && weight_map.count(name) && weight_map[name] != f.filename().string()) continue;
      if (!all.emplace(name, std::move(t)).second) fail("model", f.string(), ": tensor ", name, " appears twice");
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!all.count(name)) fail("model", path, ": index lists tensor ", name, " in ", file, " but it is not there");
  const fs::path cfg = dir / "config.json";
  if (!fs::exists(cfg))
    fail("model", path, ": config.json not found next to the safetensors (", cfg.string(),
         "); it is needed for the architecture and hyperparameters");
  Model m = hf_to_model(read_file_text(cfg.string()), all, path);
  m.source_path = path;
  read_hf_tokenizer(dir, m);
  return m;
}

// A tiny config.json of every architecture that has a Hugging Face config writer (fuzz_read_safetensors).
const std::vector<std::string>& tiny_hf_configs() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const Arch* a : architectures()) {
      if (!a->hf_export_config) continue;
      ModelConfig c;
      c.arch = a->name;
      c.dim = 8, c.hidden_dim = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4;
      c.vocab_size = 16, c.max_seq_len = 32, c.rope_style = RopeStyle::kRotateHalf;
      out.push_back(a->hf_export_config(c).dump());
    }
    return out;
  }();
  return v;
}

int fuzz_read_safetensors(const uint8_t* data, size_t size) {
  try {
    const auto t = parse_safetensors(data, size, nullptr, "<fuzz>");
    for (const std::string& cfg : tiny_hf_configs()) {  // also the architecture mappings
      try {
        hf_to_model(cfg, t, "<fuzz>");
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace anelab::models

#include "models/formats/checkpoint_file.h"

#include <cstring>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/anelab_file.h"

namespace anelab::models {
namespace fs = std::filesystem;

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
    fail("model", path,
         ": this run has no checkpoint yet (best.ckpt is written at each --eval-every evaluation, "
         "last.ckpt at --checkpoint-every steps and at the end)");
  fail("model", path, ": a directory without best.ckpt or last.ckpt is not a run directory");
}

Model read_checkpoint_model(const std::string& path, TensorsOf tensors_of) {
  const std::string file = checkpoint_path(path);
  auto mf = std::make_shared<MappedFile>(file);
  const CheckpointView v = parse_checkpoint(mf->data(), mf->size(), file, tensors_of);
  Model m;
  m.config = v.header.model;
  const uint8_t* w = v.weights;
  for (const TensorSpec& s : v.tensors) {
    m.add_view(s.name, DType::kF32, s.shape, w, s.numel() * 4, mf);
    w += s.numel() * 4;
  }
  m.source_format = "checkpoint";
  m.source_path = file;
  const fs::path tok = fs::path(file).parent_path() / kRunTokenizerFile;
  if (fs::exists(tok)) {
    m.vocab = read_run_tokenizer(tok.string());
    m.tokenizer_path = tok.string();
  }
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

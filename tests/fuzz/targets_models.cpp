// Fuzz targets over the model files: anelab, llama2.c, safetensors (+ config.json, index.json), GGUF and
// training checkpoints. A model's embedded tokenizer is built too (tokenizer_roundtrip).
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/gguf.h"
#include "models/formats/llama2c.h"
#include "models/formats/safetensors.h"
#include "models/io/gguf_model.h"
#include "models/io/hf_model.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/targets.h"
#include "train/checkpoint.h"

namespace anelab::fuzz {
namespace fs = std::filesystem;

void tokenizer_roundtrip(const tok::VocabData& v);  // targets_tokenizers.cpp

namespace {

std::string_view text_of(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// The tiny Qwen2 config the safetensors target maps tensors with (matches test_corrupt.cpp's tiny_qwen).
constexpr const char* kTinyQwenConfig =
    R"({"model_type":"qwen2","hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,)"
    R"("num_attention_heads":2,"num_key_value_heads":1,"vocab_size":16,"max_position_embeddings":32,)"
    R"("tie_word_embeddings":true})";

// A file in a private temp directory for readers that take a path (removed at exit).
class TempFile {
 public:
  TempFile() {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("anelab_fuzz_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Writes the bytes to DIR/name (plainly: the reader is under test, not the writer) and returns the path.
  std::string put(const std::string& name, const uint8_t* data, size_t size) const {
    const std::string p = (dir_ / name).string();
    std::FILE* f = std::fopen(p.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) fail("fuzz", "cannot write ", p);
    return p;
  }

 private:
  fs::path dir_;
};

}  // namespace

int run_anelab(const uint8_t* data, size_t size) {
  return accepted([&] {
    const models::Model m = models::parse_anelab(data, size, nullptr, "<fuzz>");
    if (m.vocab) tokenizer_roundtrip(*m.vocab);
    models::validate_config(m.config, "<fuzz>");  // then the loader's checks (load_any_model)
    models::check_complete(m, "<fuzz>");
  });
}

int run_llama2c(const uint8_t* data, size_t size) {
  return accepted([&] { models::parse_llama2c(data, size, nullptr, "<fuzz>"); });
}

int run_safetensors(const uint8_t* data, size_t size) {
  return accepted([&] {
    const models::StTensorMap t = models::parse_safetensors(data, size, nullptr, "<fuzz>");
    models::hf_to_model(kTinyQwenConfig, t, "<fuzz>");
  });
}

int run_gguf(const uint8_t* data, size_t size) {
  return accepted([&] {
    const models::GgufFile g = models::parse_gguf(data, size, nullptr, "<fuzz>");
    if (models::gguf_has_vocab(g)) tokenizer_roundtrip(models::gguf_vocab(g, "<fuzz>"));
    if (!g.tensors.empty()) models::gguf_to_model(g, "<fuzz>");
  });
}

// config.json of a Hugging Face model directory: mapped onto no tensors (the architecture, the
// hyperparameters and their validation run; the tensor mapping then reports the first missing tensor).
int run_hf_config(const uint8_t* data, size_t size) {
  return accepted([&] { models::hf_to_model(std::string(text_of(data, size)), {}, "<fuzz>/config.json"); });
}

int run_hf_index(const uint8_t* data, size_t size) {
  return accepted([&] { models::parse_safetensors_index(text_of(data, size), "<fuzz>/model.safetensors.index.json"); });
}

// A checkpoint file, read by both readers: the trainer's (--resume: weights and optimizer state) and the
// model loader's (infer/export/info: weights only). They take a path, so the bytes go through a file.
int run_checkpoint(const uint8_t* data, size_t size) {
  static const TempFile tmp;
  const std::string path = tmp.put("last.ckpt", data, size);
  const int trainer = accepted([&] { train::read_checkpoint(path); });
  const int model = accepted([&] { models::read_checkpoint_model(path, models::canonical_tensors); });
  return trainer | model;  // 1 when either rejects it
}

}  // namespace anelab::fuzz

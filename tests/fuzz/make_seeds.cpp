// fuzz_seeds OUT_DIR: writes small valid inputs for every fuzz target, made by the project's own writers
// (OUT_DIR/<target>/<name>). scripts/fuzz.sh adds the repo's fixtures and ../shared/data files to them.
// Models are tiny (a few KB) so that a mutated input runs fast.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "framework/mil/blob.h"
#include "framework/mil/printer.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/gguf.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/presets.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/mil/mil_test_programs.h"
#include "train/checkpoint.h"
#include "train/config.h"

namespace anelab::fuzz {
namespace {
namespace fs = std::filesystem;
using models::Model;
using models::ModelConfig;

void put(const fs::path& out, const std::string& target, const std::string& name, const void* data, size_t size) {
  fs::create_directories(out / target);
  write_file_atomic((out / target / name).string(), data, size);
}
void put(const fs::path& out, const std::string& target, const std::string& name, std::string_view text) {
  put(out, target, name, text.data(), text.size());
}
void copy(const fs::path& out, const std::string& target, const std::string& name, const fs::path& from) {
  const std::vector<uint8_t> b = read_file_bytes(from.string());
  put(out, target, name, b.data(), b.size());
}

ModelConfig tiny(const std::string& base, int64_t vocab_size) {
  ModelConfig c = models::preset(base);
  c.dim = 8, c.hidden_dim = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4;
  c.vocab_size = vocab_size, c.max_seq_len = 8;
  return c;
}

// A SentencePiece vocab of 64 tokens: unk, bos, eos, two byte tokens, a few pieces (the llama2.c layout).
tok::VocabData spm_vocab() {
  tok::VocabData v;
  v.tokens = {"<unk>",
              "<s>",
              "</s>",
              "<0x0A>",
              "<0x41>",
              "\xe2\x96\x81",
              "e",
              "t",
              "\xe2\x96\x81"
              "t",
              "he",
              "\xe2\x96\x81"
              "the",
              "in",
              "on",
              "ce",
              "\xe2\x96\x81"
              "a",
              "\xe2\x96\x81"
              "time",
              "\xe2\x96\x81"
              "upon"};
  while (v.tokens.size() < 64) v.tokens.push_back(std::string(1, char('a' + v.tokens.size() % 26)) + "x");
  for (size_t i = 0; i < v.tokens.size(); ++i) v.scores.push_back(i < 5 ? 0.0f : -float(i));
  v.unk_id = 0, v.bos_id = 1, v.eos_id = 2;
  return v;
}

// A GPT-2 style byte-level vocab: the 256 byte images, a few merges, <|endoftext|>.
tok::VocabData byte_vocab() {
  tok::VocabData v;
  v.kind = tok::TokenizerKind::kByteBpe;
  v.pre = "gpt2";
  auto img = [](char c) {
    const char32_t cp = tok::byte_to_unicode(static_cast<uint8_t>(c));
    std::string s;
    if (cp < 0x80)
      s += char(cp);
    else
      s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
    return s;
  };
  for (int b = 0; b < 256; ++b) v.tokens.push_back(img(char(b)));
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{
           {img(' '), "t"}, {"h", "e"}, {img(' ') + "t", "he"}, {"i", "n"}, {"o", "n"}, {img(' '), "a"}, {"c", "e"}}) {
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
  }
  v.tokens.push_back("<|endoftext|>");
  v.types.assign(v.tokens.size(), tok::TokenType::kNormal);
  v.types.back() = tok::TokenType::kControl;
  v.bos_id = v.eos_id = static_cast<int32_t>(v.tokens.size() - 1);
  v.add_space_prefix = false;
  return v;
}

void model_seeds(const fs::path& out, const fs::path& tmp) {
  Model llama = models::random_model(tiny("stories260k", 64), 1);
  llama.vocab = spm_vocab();
  models::save_model(llama, (tmp / "m.anelab").string());
  copy(out, "anelab", "llama_fp32.anelab", tmp / "m.anelab");
  models::save_model(llama, (tmp / "q.anelab").string(), models::DType::kQ8_0);
  copy(out, "anelab", "llama_q8.anelab", tmp / "q.anelab");
  const std::vector<uint8_t> g = models::model_to_gguf(llama);
  put(out, "gguf", "llama.gguf", g.data(), g.size());
  models::export_model(llama, (tmp / "m.bin").string(), models::ExportFormat::kLlama2c);
  copy(out, "llama2c", "llama.bin", tmp / "m.bin");

  const tok::VocabData bytes = byte_vocab();
  Model qwen = models::random_model(tiny("qwen2.5-0.5b", static_cast<int64_t>(bytes.tokens.size())), 2);
  qwen.vocab = bytes;
  models::export_model(qwen, (tmp / "qwen").string(), models::ExportFormat::kSafetensors);
  copy(out, "safetensors", "qwen.safetensors", tmp / "qwen" / "model.safetensors");
  copy(out, "hf_config", "qwen.json", tmp / "qwen" / "config.json");
  copy(out, "tokenizer_hf", "byte_bpe.json", tmp / "qwen" / "tokenizer.json");
  const std::vector<uint8_t> qg = models::model_to_gguf(qwen);
  put(out, "gguf", "qwen.gguf", qg.data(), qg.size());
  models::export_model(llama, (tmp / "llama").string(), models::ExportFormat::kSafetensors);
  copy(out, "safetensors", "llama.safetensors", tmp / "llama" / "model.safetensors");
  copy(out, "hf_config", "llama.json", tmp / "llama" / "config.json");
}

void checkpoint_seed(const fs::path& out, const fs::path& tmp) {
  train::CheckpointState s;
  s.model = tiny("stories260k", 32);
  const size_t P = static_cast<size_t>(models::parameter_count(s.model));
  s.weights.assign(P, 0.01f), s.m.assign(P, 0.0f), s.v.assign(P, 0.0f);
  s.step = s.adam_t = 3;
  s.config = train::to_json(train::TrainConfig{});
  train::write_checkpoint((tmp / "last.ckpt").string(), s);
  copy(out, "checkpoint", "last.ckpt", tmp / "last.ckpt");
}

void tokenizer_seeds(const fs::path& out) {
  const tok::VocabData v = spm_vocab();
  std::string bin(4, '\0');
  const int32_t max_len = 16;
  std::memcpy(bin.data(), &max_len, 4);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string t = i == 1 ? "\n<s>\n" : i == 2 ? "\n</s>\n" : v.tokens[i];
    const int32_t len = static_cast<int32_t>(t.size());
    bin.append(reinterpret_cast<const char*>(&v.scores[i]), 4).append(reinterpret_cast<const char*>(&len), 4) += t;
  }
  put(out, "tokenizer_llama2c", "tokenizer.bin", bin);
  const tok::VocabData b = byte_vocab();
  nlohmann::json enc = nlohmann::json::object();
  for (size_t i = 0; i < b.tokens.size(); ++i) enc[b.tokens[i]] = i;
  std::string bpe = "#version: 0.2\n";
  for (const auto& m : b.merges) bpe += m + "\n";
  put(out, "tokenizer_gpt2", "encoder_nul_vocab", enc.dump() + std::string(1, '\0') + bpe);
}

void framework_seeds(const fs::path& out, const fs::path& tmp) {
  const std::vector<float> x = {1.5f, -2.0f, 0.25f, 65504.0f, 0.0f, -0.0f};
  write_npy((tmp / "a.npy").string(), {2, 3}, x.data());
  copy(out, "npy", "f32_2x3.npy", tmp / "a.npy");
  write_npy((tmp / "b.npy").string(), {1, 6, 1, 1}, x.data());
  copy(out, "npy", "f32_1x6x1x1.npy", tmp / "b.npy");
  mil::BlobWriter w;
  w.add_fp16(x);
  w.add_int8(std::vector<int8_t>{1, -2, 3});
  w.add_uint8(std::vector<uint8_t>{7, 8});
  put(out, "mil_blob", "weights.bin", w.bytes().data(), w.bytes().size());
  using mil::Dialect;
  put(out, "mil_text", "every_op_ios16.mil", mil::print(mil::testprogs::every_op_program(Dialect::kIos16)));
  put(out, "mil_text", "multi_function_ios18.mil", mil::print(mil::testprogs::multi_function_program(Dialect::kIos18)));
  train::TrainConfig c;
  c.preset = "stories260k", c.data = "tokens.bin", c.strategy = "dynamic", c.eval_every = 50;
  put(out, "train_toml", "experiment.toml", train::to_toml(c));
  put(out, "run_config", "config.json", train::to_json(c).dump(2));
}

}  // namespace
}  // namespace anelab::fuzz

int main(int argc, char** argv) {
  using namespace anelab::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  try {
    const fs::path out = argv[1], tmp = out / ".tmp";
    fs::create_directories(tmp);
    model_seeds(out, tmp);
    checkpoint_seed(out, tmp);
    tokenizer_seeds(out);
    framework_seeds(out, tmp);
    fs::remove_all(tmp);
  } catch (const anelab::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

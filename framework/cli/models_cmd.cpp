// anelab convert IN OUT [--dtype D] | anelab convert --random PRESET OUT [--seed N] [--dtype D]
// (OUT ending in .gguf writes GGUF, vocab from --tokenizer)
// anelab info FILE
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "framework/cli/commands.h"
#include "framework/core/error.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/load_any.h"
#include "models/presets.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::cli {
namespace {
using namespace anelab::models;

// A progress bar on stderr, only when stderr is a terminal and the job is large.
ProgressFn progress_bar(const std::string& label) {
  if (!::isatty(2)) return {};
  return [label, last = -1](int64_t done, int64_t total) mutable {
    if (total < (64 << 20)) return;
    const int pct = static_cast<int>(done * 100 / std::max<int64_t>(total, 1));
    if (pct == last) return;
    last = pct;
    const int bar = pct * 30 / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %lld/%lld MiB", label.c_str(), bar, "##############################",
                 30 - bar, "", pct, static_cast<long long>(done >> 20), static_cast<long long>(total >> 20));
    if (done >= total) std::fprintf(stderr, "\n");
  };
}

struct ConvertArgs {
  std::vector<std::string> paths;
  std::string random, dtype, tokenizer;
  uint64_t seed = 1;
};

bool is_gguf_path(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0; }

// OUT.gguf: the model goes through a temporary anelab file (one dtype-conversion path for both formats),
// then is written as GGUF with the vocab from --tokenizer (or the one the source embeds).
int64_t write_gguf_output(const std::string& tmp_anelab, const std::string& out, const std::string& tokenizer) {
  struct Remove {
    std::string p;
    ~Remove() { std::remove(p.c_str()); }
  } cleanup{tmp_anelab};
  Model m = read_anelab_file(tmp_anelab);
  if (!tokenizer.empty()) m.vocab = tok::load_vocab_file(tokenizer);
  if (!m.vocab)
    std::fprintf(stderr, "note: %s gets no tokenizer (pass --tokenizer); llama.cpp refuses GGUFs without one\n",
                 out.c_str());
  return write_gguf_model(m, out);
}

void run_convert(const ConvertArgs& a) {
  std::optional<DType> dt;
  if (!a.dtype.empty()) dt = parse_dtype(a.dtype);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  std::string out;
  if (!a.random.empty()) {
    if (a.paths.size() != 1) fail("cli", "convert --random PRESET takes exactly one path (OUT), got ", a.paths.size());
    out = a.paths[0];
  } else {
    if (a.paths.size() != 2) fail("cli", "convert needs IN and OUT (or --random PRESET OUT), got ", a.paths.size(), " paths");
    out = a.paths[1];
  }
  const bool gguf = is_gguf_path(out);
  const std::string target = gguf ? out + ".anelab.tmp." + std::to_string(::getpid()) : out;
  if (!a.random.empty()) {
    bytes = write_random_model(preset(a.random), target, a.seed, dt, progress_bar("writing"));
  } else {
    Model m = load_any_model(a.paths[0]);
    if (!a.tokenizer.empty()) m.tokenizer_path = a.tokenizer;
    bytes = save_model(m, target, dt, progress_bar("converting"));
  }
  if (gguf) bytes = write_gguf_output(target, out, a.tokenizer);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %.1f MiB in %.2f s\n", out.c_str(), static_cast<double>(bytes) / (1 << 20), s);
}

void print_vocab(const tok::VocabData& v) {
  std::printf("tokenizer: %s, %zu tokens, %zu merges, %zu scores, pre '%s', bos %d, eos %d, add_bos %s\n",
              v.kind == tok::TokenizerKind::kSentencePiece ? "sentencepiece" : "byte_bpe", v.tokens.size(),
              v.merges.size(), v.scores.size(), v.pre.c_str(), v.bos_id, v.eos_id, v.add_bos ? "yes" : "no");
}

void print_model(const Model& m) {
  std::printf("architecture:\n%s", describe_config(m.config).c_str());
  std::map<std::string, int> dtypes;
  for (const Tensor& t : m.tensors()) dtypes[dtype_name(t.dtype)]++;
  std::printf("tensors: %zu (", m.tensors().size());
  bool first = true;
  for (const auto& [k, n] : dtypes) std::printf("%s%d %s", first ? "" : ", ", n, k.c_str()), first = false;
  std::printf(")\n");
  for (const char* n : {"tok_embeddings", "pos_embeddings", "layers.0.wq", "layers.0.wk", "layers.0.w1",
                        "layers.0.fc", "output"})
    if (const Tensor* t = m.find(n)) std::printf("  %-16s %-14s %s\n", n, t->shape_str().c_str(), dtype_name(t->dtype));
  std::printf("parameters: %lld (%.2f M)\nweight bytes: %lld (%.1f MiB)\n", static_cast<long long>(m.parameter_count()),
              static_cast<double>(m.parameter_count()) / 1e6, static_cast<long long>(m.total_bytes()),
              static_cast<double>(m.total_bytes()) / (1 << 20));
  if (m.vocab) print_vocab(*m.vocab);
  if (!m.tokenizer_path.empty()) std::printf("tokenizer path: %s\n", m.tokenizer_path.c_str());
}

void run_info(const std::string& path) {
  const std::string fmt = detect_model_format(path);
  std::printf("file: %s\nformat: %s\n", path.c_str(), fmt.c_str());
  if (std::filesystem::is_regular_file(path))
    std::printf("file size: %lld bytes\n", static_cast<long long>(std::filesystem::file_size(path)));
  if (fmt == "gguf") {
    const GgufFile g = read_gguf_file(path);
    std::printf("gguf version %u, %zu metadata keys, %zu tensors, alignment %llu\n", g.version, g.kv.size(),
                g.tensors.size(), static_cast<unsigned long long>(g.alignment));
    if (g.tensors.empty()) {
      std::printf("(vocab-only file: no weights)\n");
      if (gguf_has_vocab(g)) print_vocab(gguf_vocab(g, path));
      return;
    }
  }
  print_model(load_any_model(path));
}
}  // namespace

void add_model_commands(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  auto* conv = app.add_subcommand(
      "convert", "Convert a model (llama2.c .bin, safetensors file/dir, GGUF, anelab) into an anelab model file "
                 "(or a GGUF when OUT ends in .gguf), or write a random-weight model of a preset's shape");
  conv->add_option("paths", args->paths, "IN OUT, or OUT with --random")->required();
  conv->add_option("--random", args->random, "write seeded random weights for this preset instead of converting")
      ->check(CLI::IsMember(preset_names()));
  conv->add_option("--seed", args->seed, "random seed for --random")->capture_default_str();
  conv->add_option("--dtype", args->dtype,
                   "dtype of matrices in the output: fp32|fp16|bf16|q8_0 (default: keep the source's; 1-D tensors stay fp32)");
  conv->add_option("--tokenizer", args->tokenizer,
                   "record this tokenizer path in the output file; with OUT.gguf its vocab (tokenizer.json, "
                   "encoder.json dir, tokenizer.bin) is written into the GGUF metadata");
  conv->callback([args] { run_convert(*args); });

  auto path = std::make_shared<std::string>();
  auto* info = app.add_subcommand("info", "Summarise a model file (anelab, llama2.c, safetensors, GGUF)");
  info->add_option("file", *path, "model file or safetensors directory")->required();
  info->callback([path] { run_info(*path); });
}

}  // namespace anelab::cli

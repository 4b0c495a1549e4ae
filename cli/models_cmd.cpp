// anelab convert IN OUT [--format F] [--dtype D] [--tokenizer T]
// anelab convert --random PRESET OUT [--seed N] [--shape JSON]
// anelab export CKPT|RUN_DIR|MODEL OUT [--format F] [--dtype D] [--tokenizer T]
//   (the output format comes from --format or OUT's name: models/io/export.h)
// anelab info FILE
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "framework/core/untrusted.h"
#include "infer/generate.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/model_config_json.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "models/tokenizer/tokenizer.h"
#include "train/lora_run.h"

namespace anelab::cli {
namespace {
using namespace anelab::models;

// A progress bar on stderr, only when stderr is a terminal and the job is large.
ProgressFn progress_bar(const std::string& label) {
  if (!platform::is_terminal(2)) return {};
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
  std::string random, dtype, tokenizer, format, shape;
  std::string palettize;  // "", "lut4" or "lut6": k-means palettes of the layer matrices (anelab output only)
  int64_t lut_group = 0;  // rows per palette table (0: one table per tensor)
  uint64_t seed = 1;
  bool adapter = false, fuse = false;  // export of a --lora run: the adapter alone / base + adapter merged
};

int64_t output_bytes(const std::string& out) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(out)) return static_cast<int64_t>(fs::file_size(out));
  int64_t n = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_regular_file()) n += static_cast<int64_t>(e.file_size());
  return n;
}

// The preset of --random with the fields of --shape replaced (models::preset_with_shape).
ModelConfig random_config(const ConvertArgs& a) { return preset_with_shape(a.random, a.shape, "cli"); }

// convert and export: IN (any model file, checkpoint or run dir) or a random preset -> OUT in the format
// its name or --format says (models/io/export.h).
void run_convert(const ConvertArgs& a) {
  std::optional<DType> dt;
  const std::optional<QuantMix> mix = parse_quant_mix(a.dtype);  // llama-quantize's per-tensor mix
  if (!a.dtype.empty() && !mix) dt = parse_dtype(a.dtype);
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  if (a.random.empty() && !a.shape.empty()) fail("cli", "--shape goes with --random PRESET");
  if (!a.random.empty()) {
    if (a.paths.size() != 1) fail("cli", "convert --random PRESET takes exactly one path (OUT), got ", a.paths.size());
    out = a.paths[0];
  } else {
    if (a.paths.size() != 2)
      fail("cli", "needs IN and OUT (or convert --random PRESET OUT), got ", a.paths.size(), " paths");
    out = a.paths[1];
  }
  const ExportFormat fmt = export_format_for(out, a.format);
  if (!a.palettize.empty() && fmt != ExportFormat::kAnelab)
    fail("cli", "--palettize ", a.palettize, ": palettes are stored in anelab files only, and ", out, " is ",
         export_format_name(fmt));
  if (a.lut_group != 0 && a.palettize.empty()) fail("cli", "--lut-group goes with --palettize lut4|lut6");
  std::vector<std::string> notes;
  if (!a.random.empty() && fmt == ExportFormat::kAnelab && a.tokenizer.empty() && !mix && a.palettize.empty()) {
    write_random_model(random_config(a), out, a.seed, dt, progress_bar("writing"));  // streamed, any size
  } else {
    Model m;
    std::string tmp;
    if (!a.random.empty()) {  // other formats go through a temporary anelab file (streamed dtype conversion)
      tmp = out + ".anelab.tmp." + std::to_string(platform::process_id());
      write_random_model(random_config(a), tmp, a.seed, dt, progress_bar("writing"));
      m = read_anelab_file(tmp);
    } else {
      m = load_any_model(a.paths[0]);
    }
    struct Remove {
      std::string p;
      ~Remove() {
        if (!p.empty()) std::remove(p.c_str());
      }
    } cleanup{tmp};
    if (!a.tokenizer.empty()) {  // embedded: the output does not depend on where the tokenizer file was
      m.vocab = tok::load_vocab_file(a.tokenizer);
      infer::check_vocab_fits(static_cast<int64_t>(m.vocab->tokens.size()), a.tokenizer, m.config.vocab_size,
                              a.random.empty() ? a.paths[0] : "--random " + a.random);
      m.tokenizer_path = std::filesystem::absolute(a.tokenizer).lexically_normal().string();
    }
    if (mix) m = quantize_model(m, *mix);
    if (!a.palettize.empty()) m = palettize_model(m, a.palettize == "lut4" ? 4 : 6, a.lut_group);
    notes = export_model(m, out, fmt, tmp.empty() ? dt : std::nullopt, progress_bar("converting"));
  }
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", quote_untrusted(n).c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%s): %.1f MiB in %.2f s\n", out.c_str(), export_format_name(fmt),
              static_cast<double>(output_bytes(out)) / (1 << 20), s);
}

void print_vocab(const tok::VocabData& v) {
  // eos = bos: a model trained on documents separated by BOS (the trainer saves the separator as EOS) ends
  // a text where the next one would start.
  const char* eos_note = v.eos_id >= 0 && v.eos_id == v.bos_id ? " (= bos: the training documents' separator)" : "";
  std::printf("tokenizer: %s, %zu tokens, %zu merges, %zu scores, pre '%s', bos %d, eos %d%s, add_bos %s\n",
              v.kind == tok::TokenizerKind::kSentencePiece ? "sentencepiece" : "byte_bpe", v.tokens.size(),
              v.merges.size(), v.scores.size(), quote_untrusted(v.pre).c_str(), v.bos_id, v.eos_id, eos_note,
              v.add_bos ? "yes" : "no");
}

void print_model(const Model& m) {
  // Every string below that comes from the file goes through quote_untrusted (framework/core/untrusted.h).
  std::printf("architecture:\n%s",
              quote_untrusted(describe_config(m.config) + describe_params(m.config), true).c_str());
  std::map<std::string, int> dtypes;
  for (const Tensor& t : m.tensors()) dtypes[dtype_name(t.dtype)]++;
  std::printf("tensors: %zu (", m.tensors().size());
  bool first = true;
  for (const auto& [k, n] : dtypes) std::printf("%s%d %s", first ? "" : ", ", n, k.c_str()), first = false;
  std::printf(")\n");
  for (const char* n :
       {"tok_embeddings", "pos_embeddings", "layers.0.wq", "layers.0.wk", "layers.0.w1", "layers.0.fc", "output"})
    if (const Tensor* t = m.find(n)) std::printf("  %-16s %-14s %s\n", n, t->shape_str().c_str(), dtype_name(t->dtype));
  std::printf("parameters: %lld (%.2f M)\nweight bytes: %lld (%.1f MiB)\n", static_cast<long long>(m.parameter_count()),
              static_cast<double>(m.parameter_count()) / 1e6, static_cast<long long>(m.total_bytes()),
              static_cast<double>(m.total_bytes()) / (1 << 20));
  if (m.vocab) print_vocab(*m.vocab);
  if (!m.tokenizer_path.empty()) std::printf("tokenizer path: %s\n", quote_untrusted(m.tokenizer_path).c_str());
  if (!m.chat_template.empty()) std::printf("chat template: %zu bytes\n", m.chat_template.size());
}

void run_info(const std::string& path) {
  const std::string fmt = detect_model_format(path);
  std::printf("file: %s\nformat: %s\n", quote_untrusted(path).c_str(), fmt.c_str());
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
  const std::string formats =
      "output format: anelab|gguf|safetensors (a Hugging Face directory)|llama2c (default: from OUT's name: .anelab, "
      ".gguf, .bin = llama2.c, a name without an extension = Hugging Face directory; other extensions are refused)";
  const std::string tok_help =
      "embed this tokenizer (tokenizer.json, encoder.json dir, tokenizer.bin) in the output instead of the one the "
      "source carries";
  auto args = std::make_shared<ConvertArgs>();
  auto* conv = app.add_subcommand(
      "convert",
      "Convert a model (llama2.c .bin, safetensors file/dir, GGUF, anelab, training checkpoint or run "
      "dir) into anelab, GGUF, Hugging Face safetensors or llama2.c, or write a random-weight model of a "
      "preset's shape");
  conv->add_option("paths", args->paths, "IN OUT, or OUT with --random")->required();
  conv->add_option("--random", args->random, "write seeded random weights for this preset instead of converting")
      ->check(CLI::IsMember(preset_names()));
  conv->add_option("--seed", args->seed, "random seed for --random")->capture_default_str();
  conv->add_option("--shape", args->shape,
                   "with --random: a JSON object of model config fields replacing the preset's (the keys of `anelab "
                   "info`'s config JSON, e.g. '{\"dim\": 64, \"n_layers\": 2}')");
  conv->add_option("--format", args->format, formats);
  conv->add_option("--dtype", args->dtype,
                   "dtype of matrices in the output: fp32|fp16|bf16, or a llama-quantize mix q8_0|q4_0|q4_k_m|q5_k_s|"
                   "q5_k_m (Q6_K for the output head and, in q4_k_m / q5_k_m, for half the attn_v/ffn_down; "
                   "docs/quantization.md); default: "
                   "keep the source's; 1-D tensors stay as they are");
  conv->add_option("--tokenizer", args->tokenizer, tok_help);
  conv->add_option("--palettize", args->palettize,
                   "k-means palettes of the layer matrices (wq ... w3), stored in the anelab output for --ane-weights "
                   "lut4|lut6: lut4 (16 fp16 entries) or lut6 (64); each matrix becomes fp16 holding exactly its "
                   "palette's values (docs/quantization.md)")
      ->check(CLI::IsMember({"lut4", "lut6"}));
  conv->add_option("--lut-group", args->lut_group,
                   "with --palettize: output rows sharing one table (0: one table per tensor; a tensor whose rows it "
                   "does not divide gets one table)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  conv->callback([args] { run_convert(*args); });

  auto eargs = std::make_shared<ConvertArgs>();
  auto* exp = app.add_subcommand(
      "export",
      "Export a training checkpoint or run directory (its best.ckpt) - or any model file - as anelab, "
      "GGUF, Hugging Face safetensors directory or llama2.c .bin");
  exp->add_option("paths", eargs->paths, "CKPT|RUN_DIR|MODEL OUT")->required()->expected(2);
  exp->add_option("--format", eargs->format, formats);
  exp->add_option("--dtype", eargs->dtype,
                  "dtype of matrices in the output: fp32|fp16|bf16|q8_0|q4_0|q4_k_m|q5_k_s|q5_k_m (default: fp32 for a "
                  "checkpoint)");
  exp->add_option("--tokenizer", eargs->tokenizer, tok_help);
  exp->add_flag("--adapter", eargs->adapter,
                "a --lora run's adapter alone: a GGUF LoRA adapter (llama.cpp --lora) when OUT ends in .gguf, else a "
                "PEFT directory (adapter_config.json + adapter_model.safetensors)");
  exp->add_flag("--fuse", eargs->fuse,
                "a --lora run's base with the adapter merged (W + alpha/r * B.A in fp32), in any format above (the "
                "run's checkpoints hold the merged model)");
  exp->callback([eargs] {
    if (eargs->adapter && eargs->fuse) fail("cli", "export: --adapter and --fuse exclude each other");
    if ((eargs->adapter || eargs->fuse) && !train::is_lora_run(eargs->paths[0]))
      fail("cli", "export ", eargs->paths[0], ": --", eargs->adapter ? "adapter" : "fuse",
           " needs a run trained with --lora");
    if (!eargs->adapter) return run_convert(*eargs);
    train::export_run_adapter(eargs->paths[0], eargs->paths[1]);
    std::printf("wrote the LoRA adapter of %s to %s\n", eargs->paths[0].c_str(), eargs->paths[1].c_str());
  });

  auto path = std::make_shared<std::string>();
  auto* info = app.add_subcommand(
      "info", "Summarise a model file (anelab, llama2.c, safetensors, GGUF, training checkpoint or run dir)");
  info->add_option("file", *path, "model file, safetensors directory, checkpoint or run directory")->required();
  info->callback([path] { run_info(*path); });
}

}  // namespace anelab::cli

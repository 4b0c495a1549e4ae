// anelab tokenize: text -> token file (training data), text -> id lines (--ids), id lines -> text (--decode).
// Formats: models/tokenizer/token_file.h. Prints the tokenizer, counts and throughput (MB/s of input text).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer, in, out;
  bool ids = false, decode = false, whole = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_tokenize(const TokenizeArgs& a) {
  ANELAB_CHECK(!(a.ids && a.decode), "tokenize", "--ids and --decode are exclusive");
  ANELAB_CHECK(!(a.whole && (a.ids || a.decode)), "tokenize",
               "--whole writes a token file: not with --ids or --decode");
  auto t0 = std::chrono::steady_clock::now();
  const auto tok = tok::load_tokenizer(a.tokenizer);
  const double load_s = seconds_since(t0);
  const std::string input = read_file_text(a.in);
  t0 = std::chrono::steady_clock::now();
  std::string summary;
  if (a.decode) {
    const std::string text = tok::decode_id_lines(*tok, input);
    summary = cat(std::count(input.begin(), input.end(), '\n'), " lines -> ", text.size(), " bytes of text");
    write_file_atomic(a.out, text);
  } else if (a.ids) {
    const std::string lines = tok::encode_id_lines(*tok, input);
    summary = cat(tok::split_paragraphs(input).size(), " paragraphs -> ", lines.size(), " bytes of ids");
    write_file_atomic(a.out, lines);
  } else {
    // The sidecar names the tokenizer by absolute path: `anelab train` finds it from any directory.
    const auto info = tok::write_token_file(
        *tok, input, a.out, std::filesystem::absolute(a.tokenizer).lexically_normal().string(), a.whole);
    summary = cat(info.n_documents, " documents -> ", info.n_tokens, " tokens (", info.dtype, ", separator ",
                  info.separator_id, ") in ", a.out, " + .json");
  }
  const double s = seconds_since(t0);
  std::printf("%s: %s\n", tok->describe().c_str(), summary.c_str());
  std::printf("tokenizer load %.3f s; %zu input bytes in %.3f s = %.2f MB/s\n", load_s, input.size(), s,
              s > 0 ? input.size() / s / 1e6 : 0.0);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "tokenize",
      "Tokenize text: IN.txt -> OUT.bin (+ OUT.bin.json; one separator/BOS per blank-line-separated paragraph), "
      "or with --ids one line of ids per paragraph, or with --decode id lines back to text");
  sub->add_option("--tokenizer", args->tokenizer,
                  "llama2.c tokenizer.bin, HF tokenizer.json, or a directory with encoder.json + vocab.bpe")
      ->required();
  sub->add_flag("--ids", args->ids, "write space-separated ids, one line per paragraph, no BOS (default: off)");
  sub->add_flag(
      "--whole", args->whole,
      "the file as one document: the separator, then the whole text's tokens with its blank lines (the stream "
      "`anelab perplexity` scores) (default: off)");
  sub->add_flag("--decode", args->decode, "IN holds id lines; write the decoded paragraphs (default: off)");
  sub->add_option("input", args->in, "input file")->required();
  sub->add_option("output", args->out, "output file (written atomically)")->required();
  sub->callback([args] { run_tokenize(*args); });
}

}  // namespace anelab::cli

// Shared by the infer tests: a byte-level BPE vocabulary of GPT-2's shape (no BOS; 256 byte tokens, the
// rest control tokens) and a small random model file carrying it, so prompt echo, chat-template and CLI
// behaviour of GPT-2/Qwen-style vocabularies are tested without downloaded data.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "framework/core/file.h"
#include "models/formats/anelab_file.h"
#include "models/io/export.h"
#include "models/presets.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::test {

struct Out {
  int rc = -1;
  std::string out, err;
};

// Runs `anelab ARGS` (ARGS already shell-quoted where needed) with stdin from /dev/null; killed after
// `limit_s` seconds (a command that should fail at once but serves instead does not hang the test).
inline Out anelab(const std::string& args, int limit_s = 120) {
  namespace fs = std::filesystem;
  static int n = 0;
  const std::string bin = std::string(ANELAB_BINARY_DIR) + "/bin/anelab";
  const fs::path dir = fs::temp_directory_path();
  const std::string o = (dir / ("anelab_cli_out_" + std::to_string(::getpid()) + "_" + std::to_string(n))).string();
  const std::string e = (dir / ("anelab_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++))).string();
  const int st = std::system(
      ("timeout " + std::to_string(limit_s) + " " + bin + " " + args + " < /dev/null > " + o + " 2> " + e).c_str());
  Out r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file_text(o);
  r.err = read_file_text(e);
  fs::remove(o);
  fs::remove(e);
  return r;
}

inline std::string utf8_of(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// n tokens: ids 0..255 the bytes (GPT-2 byte images), then control tokens; EOS = 256 ("<|endoftext|>"), no BOS.
// With chat = true, ids 257/258 are <|im_start|>/<|im_end|> (a Qwen-style vocabulary with a chat template).
inline tok::VocabData byte_vocab(int n, bool chat = false) {
  tok::VocabData v;
  v.kind = tok::TokenizerKind::kByteBpe;
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(utf8_of(tok::byte_to_unicode(static_cast<uint8_t>(b))));
    v.types.push_back(tok::TokenType::kNormal);
  }
  for (int i = 256; i < n; ++i) {
    v.tokens.push_back(i == 256           ? "<|endoftext|>"
                       : chat && i == 257 ? "<|im_start|>"
                       : chat && i == 258 ? "<|im_end|>"
                                          : "<|extra_" + std::to_string(i) + "|>");
    v.types.push_back(tok::TokenType::kControl);
  }
  v.eos_id = 256;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

// A random stories260k-shaped model (vocab_size `model_vocab`) with `vocab` embedded, saved as an anelab file.
inline void write_byte_vocab_model(const std::string& path, const tok::VocabData& vocab, int64_t model_vocab = 512) {
  models::ModelConfig c = models::preset("stories260k");
  c.vocab_size = model_vocab;
  models::Model m = models::random_model(c, 11);
  m.vocab = vocab;
  models::save_model(m, path);
}

}  // namespace anelab::test

// Fuzz targets over the tokenizer files: llama2.c tokenizer.bin, GPT-2 encoder.json + vocab.bpe, Hugging
// Face tokenizer.json. An accepted vocab is built into a tokenizer that encodes and decodes a fixed text.
#include <algorithm>
#include <string_view>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/targets.h"

namespace anelab::fuzz {

// make_tokenizer validates the vocab; encode/decode then run the merges, byte fallback, special-token
// matching and the pre-tokenizer over text with spaces, digits, punctuation, non-ASCII and a control token.
void tokenizer_roundtrip(const tok::VocabData& v) {
  const auto t = tok::make_tokenizer(v);
  static constexpr std::string_view kText = "Once upon a time, 42 caf\xc3\xa9s <s>\xe2\x96\x81 <|endoftext|>\n\tend.";
  tok::EncodeOptions opt;
  opt.add_bos = true;
  opt.allow_special = true;
  const std::vector<int32_t> ids = t->encode(kText, opt);
  t->decode(ids, true);
  int32_t prev = -1;
  for (size_t i = 0; i < std::min<size_t>(ids.size(), 64); ++i) {
    t->decode_token(prev, ids[i]);
    prev = ids[i];
  }
}

namespace {
std::string_view text_of(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }
}  // namespace

int run_tokenizer_llama2c(const uint8_t* data, size_t size) {
  return accepted([&] { tokenizer_roundtrip(tok::parse_vocab_llama2c(data, size, "<fuzz>/tokenizer.bin")); });
}

// Two files in one input: encoder.json, a NUL byte, vocab.bpe (neither file can hold a NUL byte).
int run_tokenizer_gpt2(const uint8_t* data, size_t size) {
  const std::string_view all = text_of(data, size);
  const size_t nul = std::min(all.find('\0'), all.size());
  const std::string_view encoder = all.substr(0, nul), bpe = all.substr(std::min(nul + 1, all.size()));
  return accepted([&] { tokenizer_roundtrip(tok::parse_vocab_gpt2(encoder, bpe, "<fuzz>")); });
}

int run_tokenizer_hf(const uint8_t* data, size_t size) {
  return accepted([&] { tokenizer_roundtrip(tok::parse_vocab_hf_json(text_of(data, size), "<fuzz>/tokenizer.json")); });
}

}  // namespace anelab::fuzz

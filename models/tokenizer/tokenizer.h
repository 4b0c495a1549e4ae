// Tokenizers: one interface over
//   - SentencePiece BPE as llama2.c run.c encodes it (Llama 2 32k tokenizer.bin, tok512.bin): score-driven
//     merges over UTF-8 characters, <0xNN> byte fallback, dummy-prefix space, BOS 1 / EOS 2;
//   - byte-level BPE (GPT-2 encoder.json + vocab.bpe; Qwen / HF tokenizer.json): ranked merges over bytes
//     after a pre-tokenizer regex (GPT-2's or Qwen2's, implemented as hand-written scanners), NFC for Qwen.
//
// Behaviour that callers can rely on:
//   - encode() input must be UTF-8. Invalid UTF-8 throws "[tokenizer] invalid UTF-8 at byte offset N"
//     (default), or with EncodeOptions::invalid_utf8 = kReplace each bad byte becomes U+FFFD first.
//   - Empty input encodes to no tokens (plus BOS when asked).
//   - Special (control) tokens such as <s>, <|endoftext|>, <|im_start|> are only produced from text when
//     EncodeOptions::allow_special is set (their literal text is then matched, longest first). Non-special
//     added tokens (Qwen's <tool_call>, <think>, ...) are always matched, as Hugging Face does.
//   - SentencePiece: a space is prepended to non-empty text (dummy prefix) when the vocab says so;
//     decode() removes one leading space from the first piece after BOS or at the start, so
//     decode(encode(x)) == x.
//   - decode() returns raw bytes (byte-level pieces may split a UTF-8 character; the full sequence of a
//     valid encode round-trips). Control tokens decode to "" unless keep_special; ids outside
//     [0, vocab_size) throw "[tokenizer] token id N out of range".
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/vocab.h"

namespace anelab::tok {

enum class InvalidUtf8 { kError, kReplace };

struct EncodeOptions {
  bool add_bos = false;        // prepend bos_id() (ignored when the vocab has none)
  bool add_eos = false;        // append eos_id() (ignored when the vocab has none)
  bool allow_special = false;  // match control tokens' literal text (e.g. "<|im_start|>") in the input
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kError;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const = 0;
  std::vector<int32_t> encode(std::string_view text) const { return encode(text, EncodeOptions{}); }

  // Concatenated pieces (see the header comment for the SentencePiece leading-space rule).
  virtual std::string decode(std::span<const int32_t> ids, bool keep_special = false) const = 0;
  // Streaming: the bytes of `id` given the previous token (llama2.c run.c decode: the leading space of
  // a piece right after BOS is dropped; <0xNN> yields that byte). prev = -1 at the start.
  virtual std::string decode_token(int32_t prev, int32_t id) const = 0;

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // Id of a token given its stored text (e.g. "<|im_end|>"), or -1.
  virtual int32_t token_to_id(std::string_view text) const = 0;
  const std::string& token_text(int32_t id) const;  // throws on a bad id
  const VocabData& vocab() const { return vocab_; }
  virtual std::string describe() const = 0;  // e.g. "sentencepiece-bpe (32000 tokens)"

 protected:
  explicit Tokenizer(VocabData v) : vocab_(std::move(v)) {}
  void check_id(int32_t id) const;
  VocabData vocab_;
};

// Whether a vocabulary of `tokenizer_vocab` tokens belongs to a model of `model_vocab` rows: not larger, and
// at most kVocabPadding smaller (models pad their embedding: Qwen2.5 has 151665 tokens, vocab_size 151936).
// The one rule of infer::check_vocab_fits and of the trainer's data check.
inline constexpr int64_t kVocabPadding = 1024;
inline bool vocab_fits(int64_t tokenizer_vocab, int64_t model_vocab) {
  return tokenizer_vocab <= model_vocab && tokenizer_vocab + kVocabPadding >= model_vocab;
}

// Builds a tokenizer from vocab data (validated: throws anelab::Error naming the bad field).
std::unique_ptr<Tokenizer> make_tokenizer(const VocabData& vocab);

// PATH may be a llama2.c tokenizer.bin, a HF tokenizer.json, an encoder.json (with vocab.bpe beside it),
// a run's tokenizer.anetok (models/formats/checkpoint_file.h), or a directory holding tokenizer.json or
// encoder.json + vocab.bpe.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
VocabData load_vocab_file(const std::string& path);  // the VocabData that load_tokenizer would use

// Individual readers (each validates its input and throws "[tokenizer] PATH: ..." on corrupt data).
VocabData load_vocab_llama2c(const std::string& path);
VocabData parse_vocab_llama2c(const uint8_t* data, size_t size, const std::string& name);
VocabData load_vocab_gpt2(const std::string& dir);  // dir/encoder.json + dir/vocab.bpe
VocabData parse_vocab_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, const std::string& name);
// HF tokenizer.json (byte-level BPE). Reads tokenizer_config.json beside it for eos/pad when present.
VocabData load_vocab_hf_json(const std::string& path);
VocabData parse_vocab_hf_json(std::string_view json, const std::string& name);

// GPT-2's bytes_to_unicode(): byte -> code point used in byte-level token strings, and the inverse
// (-1 for code points that are not a byte image).
char32_t byte_to_unicode(uint8_t b);
int unicode_to_byte(char32_t cp);

}  // namespace anelab::tok

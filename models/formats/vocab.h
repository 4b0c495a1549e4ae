// VocabData: everything needed to rebuild a tokenizer, independent of where it came from
// (llama2.c tokenizer.bin, GPT-2 encoder.json + vocab.bpe, HF tokenizer.json, GGUF metadata,
// or the tokenizer section embedded in an anelab model file).
// The GGUF reader and the anelab model-file reader fill it; make_tokenizer() turns it into a Tokenizer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anelab::tok {

enum class TokenizerKind {
  kSentencePiece,  // llama / llama2.c: score-driven BPE over UTF-8 pieces, <0xNN> byte fallback, "▁" spaces
  kByteBpe,        // GPT-2 / Qwen: byte-level BPE with ranked merges and a pre-tokenizer regex
};

// GGUF tokenizer.ggml.model of a kind ("llama" = SentencePiece, "gpt2" = byte-level BPE: llama.cpp names the
// tokenizer models after the first model that used them), and the inverse (nullopt for other names).
const char* gguf_tokenizer_model(TokenizerKind k);
std::optional<TokenizerKind> parse_gguf_tokenizer_model(std::string_view s);

// Token attributes (values follow GGUF's tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS/EOS/<|im_start|> ...: never produced from plain text unless asked
  kUserDefined = 4,  // added tokens
  kUnused = 5,
  kByte = 6,  // <0xNN>
};

struct VocabData {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  // Pre-tokenizer name for byte-level BPE: "gpt2" or "qwen2" (GGUF tokenizer.ggml.pre), or the
  // split regex from tokenizer.json in `pre_regex` when available.
  std::string pre = "";
  std::string pre_regex = "";
  bool nfc_normalize = false;  // Qwen: NFC before pre-tokenization
  // id -> token text as stored by the source (GPT-2 byte-encoded for byte BPE; added/control tokens as their
  // literal text). SentencePiece pieces may use U+2581 or ' ' for spaces (both accepted).
  std::vector<std::string> tokens;
  std::vector<float> scores;        // SentencePiece scores (empty for byte BPE)
  std::vector<TokenType> types;     // empty = all normal (SentencePiece: bos/eos/pad control, unk unknown,
                                    // "<0xNN>" byte tokens detected by their text)
  std::vector<std::string> merges;  // byte BPE merges "a b" in rank order (empty for SentencePiece)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false;          // whether encode(text, default options) prepends BOS
  bool add_space_prefix = true;  // SentencePiece: llama2.c prepends a space (dummy prefix)
};

}  // namespace anelab::tok

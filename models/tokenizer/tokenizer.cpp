#include "models/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode.h"

namespace anelab::tok {

const char* gguf_tokenizer_model(TokenizerKind k) { return k == TokenizerKind::kSentencePiece ? "llama" : "gpt2"; }
std::optional<TokenizerKind> parse_gguf_tokenizer_model(std::string_view s) {
  if (s == "llama") return TokenizerKind::kSentencePiece;
  if (s == "gpt2") return TokenizerKind::kByteBpe;
  return std::nullopt;
}

namespace detail {

void AddedTokenMatcher::add(int32_t id, std::string text, bool control) {
  if (text.empty()) return;
  first_byte_[static_cast<uint8_t>(text[0])] = true;
  entries_.push_back({id, std::move(text), control});
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special, std::vector<Segment>& out) const {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) continue;
    for (const Entry& e : entries_) {
      if (e.control && !allow_special) continue;
      if (text.compare(i, e.text.size(), e.text) != 0) continue;
      if (i > start) out.push_back({-1, text.substr(start, i - start)});
      out.push_back({e.id, text.substr(i, e.text.size())});
      i += e.text.size() - 1;
      start = i + 1;
      break;
    }
  }
  if (start < text.size()) out.push_back({-1, text.substr(start)});
}

std::string_view checked_utf8(std::string_view text, InvalidUtf8 mode, std::string& storage) {
  const size_t bad = utf8_find_invalid(text);
  if (bad == std::string_view::npos) return text;
  if (mode == InvalidUtf8::kError) {
    fail("tokenizer", "invalid UTF-8 at byte offset ", bad, " (byte 0x", std::hex,
         static_cast<int>(static_cast<uint8_t>(text[bad])), std::dec,
         "); fix the input or encode with invalid_utf8 = replace (each bad byte -> U+FFFD)");
  }
  storage = utf8_replace_invalid(text);
  return storage;
}

}  // namespace detail

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail("tokenizer", "token id ", id, " out of range [0, ", vocab_size(), ") for ", describe());
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.tokens[id];
}

std::unique_ptr<Tokenizer> make_tokenizer(const VocabData& v) {
  const size_t n = v.tokens.size();
  ANELAB_CHECK(n > 0, "tokenizer", "vocab has no tokens");
  ANELAB_CHECK(n < (1u << 31), "tokenizer", "vocab too large: ", n);
  ANELAB_CHECK(v.types.empty() || v.types.size() == n, "tokenizer", "vocab types has ", v.types.size(), " entries for ",
               n, " tokens");
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id})
    ANELAB_CHECK(id >= -1 && id < static_cast<int64_t>(n), "tokenizer", "special token id ", id, " out of range [0, ",
                 n, ")");
  if (v.kind == TokenizerKind::kSentencePiece) {
    ANELAB_CHECK(v.scores.size() == n, "tokenizer", "SentencePiece vocab has ", v.scores.size(), " scores for ", n,
                 " tokens");
    return detail::make_spm_tokenizer(v);
  }
  return detail::make_byte_bpe_tokenizer(v);
}

char32_t byte_to_unicode(uint8_t b) {
  // GPT-2 bytes_to_unicode(): printable Latin-1 bytes map to themselves, the rest to 256 + k in byte order.
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  if (printable(b)) return b;
  int k = 0;
  for (int c = 0; c < b; ++c)
    if (!printable(c)) ++k;
  return 256 + k;
}

int unicode_to_byte(char32_t cp) {
  static const std::vector<int> inv = [] {
    std::vector<int> t(512, -1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(static_cast<uint8_t>(b))] = b;
    return t;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

VocabData load_vocab_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "tokenizer.json"))
      return load_vocab_hf_json((fs::path(path) / "tokenizer.json").string());
    if (fs::exists(fs::path(path) / "encoder.json")) return load_vocab_gpt2(path);
    if (fs::exists(fs::path(path) / "tokenizer.bin"))
      return load_vocab_llama2c((fs::path(path) / "tokenizer.bin").string());
    fail("tokenizer", "directory ", path, " holds neither tokenizer.json, encoder.json + vocab.bpe nor tokenizer.bin");
  }
  if (!fs::exists(path, ec)) fail("tokenizer", "tokenizer file not found: ", path);
  const std::string name = fs::path(path).filename().string();
  if (name == "encoder.json" || name == "vocab.bpe") return load_vocab_gpt2(fs::path(path).parent_path().string());
  char head[4] = {0, 0, 0, 0};
  {
    MappedFile probe(path);
    if (probe.size() > 0) std::memcpy(head, probe.data(), std::min<size_t>(4, probe.size()));
  }
  if (std::memcmp(head, "GGUF", 4) == 0)
    fail("tokenizer", path, " is a GGUF file: read its vocab with the GGUF reader and call make_tokenizer()");
  if (head[0] == '{' || name.ends_with(".json")) return load_vocab_hf_json(path);
  return load_vocab_llama2c(path);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) { return make_tokenizer(load_vocab_file(path)); }

}  // namespace anelab::tok

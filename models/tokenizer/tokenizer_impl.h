// Internal pieces shared by the tokenizer implementations (not part of the public API).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/vocab.h"

namespace anelab::tok {
class Tokenizer;         // models/tokenizer/tokenizer.h (the implementations include it)
enum class InvalidUtf8;  // the same
}  // namespace anelab::tok

namespace anelab::tok::detail {

// Splits text at the literal text of added tokens (longest match first, leftmost).
// Control tokens participate only when allow_special; user-defined (non-special added) tokens always.
class AddedTokenMatcher {
 public:
  struct Segment {
    int32_t id;             // -1 for plain text
    std::string_view text;  // the plain text (or the token's literal)
  };
  void add(int32_t id, std::string text, bool control);
  void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    int32_t id;
    std::string text;
    bool control;
  };
  std::vector<Entry> entries_;  // sorted by length, longest first
  std::array<bool, 256> first_byte_{};
};

// Validates UTF-8 per the options: returns the text to encode (possibly a repaired copy in `storage`).
std::string_view checked_utf8(std::string_view text, InvalidUtf8 mode, std::string& storage);

std::unique_ptr<Tokenizer> make_spm_tokenizer(const VocabData& vocab);
std::unique_ptr<Tokenizer> make_byte_bpe_tokenizer(const VocabData& vocab);

}  // namespace anelab::tok::detail

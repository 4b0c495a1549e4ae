// Sampling constrained by a grammar (models/grammar/gbnf.h): before each draw the tokens whose text the grammar
// does not allow next get logit -inf, and the drawn token advances the recognizer. The server's `grammar`,
// `json_schema` and `response_format` (infer/server/api.h) and `infer generate --grammar` use it through
// infer::GenerateOptions::constraint.
//
// A token is allowed when all of its bytes (its piece as generation prints it; a piece may end inside a UTF-8
// character, which the next token completes) are accepted in order. Control tokens and pieces without bytes are
// never allowed, except the end tokens (the EOS id and the chat template's stop ids), which are allowed exactly
// when the text so far is a complete sentence of the grammar. Once nothing more can follow (finished()),
// generation stops (stop reason "grammar").
//
// Cost: one memoised recognizer step (a hash lookup once the state has been met) per byte of every token per
// generated token; TokenConstraint.MaskOverQwenVocabulary (tests/serve/test_structured.cpp) prints the time per
// mask for Qwen's 151665 tokens.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/grammar/gbnf.h"

namespace anelab::tok {
class Tokenizer;
}

namespace anelab::grammar {

// The bytes each token prints, after a normal token and at the start / after a control token (SentencePiece
// drops a leading space there); built once per tokenizer and shared by every request.
struct TokenPieces {
  TokenPieces(const tok::Tokenizer& tk, int64_t model_vocab);
  std::vector<std::string> after_normal, at_start;  // [model_vocab]; "" for control tokens and padding rows
  std::vector<char> control;                        // [model_vocab]
};

class GrammarConstraint {
 public:
  // end_tokens: the ids that may end the text (EOS, chat stop tokens); prev: the token before the first one
  // generated (the prompt's last; -1 for none).
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenPieces> pieces,
                    std::vector<int32_t> end_tokens, int32_t prev);
  // Sets logits[id] = -inf for every id not allowed next. Returns the number of allowed ids; throws when none is (a
  // vocabulary that cannot spell what the grammar needs next).
  int64_t mask(std::span<float> logits) const;
  // Advances over the drawn token; throws naming the token when the grammar does not allow it.
  void accept(int32_t token);
  bool finished() const { return m_.finished(); }
  bool can_end() const { return m_.can_end(); }

 private:
  // The recognizer's states met so far, interned, and the memoised transitions between them: inside a string
  // nearly every character leads back to the same state, so a mask over 150k tokens is a hash lookup per byte.
  struct States {
    std::vector<std::vector<Stack>> sets;
    std::map<std::vector<Stack>, int32_t> index;
    std::unordered_map<uint64_t, int32_t> next;  // state << 32 | code point -> state (-1: not accepted)
    int32_t intern(const std::vector<Stack>& s);
    int32_t step(const Grammar& g, int32_t state, uint32_t cp);
  };
  const std::string& piece(int32_t id) const;
  std::shared_ptr<const Grammar> g_;
  mutable States states_;
  std::shared_ptr<const TokenPieces> pieces_;
  std::vector<int32_t> end_;
  Matcher m_;
  bool prev_control_;
};

}  // namespace anelab::grammar

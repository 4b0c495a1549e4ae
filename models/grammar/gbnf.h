// GBNF grammars (the form llama.cpp's `grammar` field and grammars/*.gbnf take) and the pushdown recognizer that
// constrains sampling to them (the server's `grammar` and `response_format`, models/grammar/token_constraint.h).
//
// Syntax (llama.cpp grammars/README.md, the language only; this parser is written here):
//   rule    ::= name "::=" alternates          (one rule per line; newlines continue only inside parentheses)
//   alternates: sequences separated by "|"; a sequence: elements separated by spaces
//   element: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), [class] / [^class] with ranges a-z,
//            . (any character), a rule name, ( alternates ), each optionally followed by *, +, ?, {m}, {m,},
//            {m,n} or {,n};  # starts a comment to the end of the line.
// Names are [A-Za-z0-9-]+; the start rule is `root`. Every referenced rule must be defined, and no rule may be
// left-recursive (the recognizer expands rules top-down): both are refused at parse time, naming the rule.
//
// The recognizer works on Unicode code points. Its state is a set of stacks; each stack lists the grammar
// positions still to match, the top (back) being the next one, always a character element after expansion. An
// empty stack means the input so far is a complete sentence of `root`.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anelab::grammar {

// One element of the flattened grammar.
struct Elem {
  enum Kind : uint8_t {
    kEnd,   // end of an alternative
    kChar,  // one code point in [lo, hi] of one of `ranges` (negated: in none of them)
    kRule,  // a reference to rule `rule`
  };
  Kind kind = kEnd;
  bool negated = false;
  uint32_t rule = 0;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  bool matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (for a partial UTF-8 sequence).
  bool matches_any(uint32_t lo, uint32_t hi) const;
};

class Grammar {
 public:
  // Parses GBNF text; throws anelab::Error "[grammar] line L col C: WHAT" on a syntax error, an undefined or
  // left-recursive rule, or a missing `root`.
  static Grammar parse(std::string_view text);

  size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }
  uint32_t root() const { return root_; }
  // The start positions (into elems()) of rule r's alternatives.
  const std::vector<uint32_t>& alternatives(uint32_t r) const { return rules_[r]; }
  const std::vector<Elem>& elems() const { return elems_; }

 private:
  friend class GrammarBuilder;
  std::vector<std::string> names_;
  std::vector<std::vector<uint32_t>> rules_;  // per rule: first element of each alternative
  std::vector<Elem> elems_;                   // all alternatives, each ended by kEnd
  uint32_t root_ = 0;
};

using Stack = std::vector<uint32_t>;  // positions into Grammar::elems(), the next one last

// UTF-8 decoding one byte at a time. Overlong forms (0xC1 0xBB for '{': byte tokens can spell them), surrogates
// and code points past U+10FFFF are not UTF-8.
struct Utf8Decoder {
  uint32_t value = 0;  // the code point so far (complete after feed returned 1)
  int need = 0;        // continuation bytes still to come
  int len = 0;         // length of the sequence being decoded
  // 1: a code point is complete (value); 0: more bytes are needed; -1: not UTF-8.
  int feed(unsigned char b);
  // The code points a pending sequence can still become, [lo, hi] (surrogates cut off its ends); false when none.
  bool span(uint32_t& lo, uint32_t& hi) const;
};

// The recognizer's state: the stacks that the input so far leaves (sorted, unique).
class Matcher {
 public:
  explicit Matcher(const Grammar& g);
  // Advances over one code point; returns false (state unchanged) when no stack accepts it.
  bool accept(uint32_t cp);
  // Advances over UTF-8 bytes (a token's piece), continuing a sequence a previous call left incomplete;
  // returns false (state unchanged) when some code point is not accepted or the bytes are not UTF-8 (overlong
  // forms such as 0xC1 0xBB for '{', surrogates and code points past U+10FFFF are not).
  bool accept_bytes(std::string_view bytes);
  // Whether accept_bytes(bytes) would succeed (the state is not changed).
  bool allows(std::string_view bytes) const;
  // The input so far is a complete sentence (an empty stack is present) and nothing is pending.
  bool can_end() const;
  // Complete and no further character can be accepted.
  bool finished() const;
  const std::vector<Stack>& stacks() const { return stacks_; }
  const Utf8Decoder& pending() const { return partial_; }  // a code point begun by the last bytes

 private:
  static bool step_bytes(const Grammar& g, std::vector<Stack>& stacks, Utf8Decoder& partial, std::string_view bytes);
  const Grammar* g_;
  std::vector<Stack> stacks_;
  Utf8Decoder partial_;
};

// Whether some stack's top accepts a code point in [lo, hi] (a pending UTF-8 sequence can still match).
bool some_top_matches(const Grammar& g, const std::vector<Stack>& stacks, uint32_t lo, uint32_t hi);

// Bounds of the recognizer's state: stacks alive at once, and rules open on one stack (nesting depth). Past
// either, expand/advance throw "[grammar] ..." (a grammar so ambiguous, or an input so deeply nested, that
// following it would take unbounded memory); the server answers that request with an error.
inline constexpr size_t kMaxStacks = 4096, kMaxDepth = 4096;

// The stacks reached from `s` once every rule reference at the top is expanded (into out, unsorted).
void expand(const Grammar& g, Stack s, std::vector<Stack>& out);
// The stacks after code point cp from `stacks` (sorted, unique; empty when none accepts it).
std::vector<Stack> advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp);

}  // namespace anelab::grammar

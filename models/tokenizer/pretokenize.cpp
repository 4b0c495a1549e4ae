#include "models/tokenizer/pretokenize.h"

#include "framework/core/error.h"
#include "models/tokenizer/unicode.h"

namespace anelab::tok {
namespace {

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text decoded once: code points, their class flags and byte offsets (off[n] = text size).
struct Chars {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;
  size_t n = 0;
  bool is(size_t i, uint8_t f) const { return i < n && (cls[i] & f); }
  bool other(size_t i) const { return i < n && !(cls[i] & (kClsLetter | kClsNumber | kClsSpace)); }
  bool at(size_t i, char32_t c) const { return i < n && cp[i] == c; }
  bool crlf(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
};

void decode_chars(std::string_view text, Chars& c) {
  c.cp.clear(), c.cls.clear(), c.off.clear();
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    int len = utf8_decode(text, i, &cp);
    if (len == 0) fail("tokenizer", "invalid UTF-8 at byte offset ", i, " (pre-tokenizer)");
    c.cp.push_back(cp);
    c.cls.push_back(char_class(cp));
    c.off.push_back(static_cast<uint32_t>(i));
    i += len;
  }
  c.n = c.cp.size();
  c.off.push_back(static_cast<uint32_t>(text.size()));
}

char32_t fold(char32_t c, bool icase) {
  if (!icase) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

// Length (in chars) of a contraction match at i, or 0.
size_t contraction(const Chars& c, size_t i, bool icase) {
  if (!c.at(i, '\'') || i + 1 >= c.n) return 0;
  const char32_t a = fold(c.cp[i + 1], icase);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= c.n) return 0;
  const char32_t b = fold(c.cp[i + 2], icase);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t run(const Chars& c, size_t i, uint8_t f) {
  while (c.is(i, f)) ++i;
  return i;
}

// \s+(?!\S) then \s+ at a whitespace char i: end of the match.
size_t whitespace_tail(const Chars& c, size_t i) {
  const size_t j = run(c, i, kClsSpace);
  if (j == c.n || j - 1 == i) return j;  // at end: all; a single space before \S: \s+ takes it
  return j - 1;                          // leave the last space to prefix the next token
}

size_t next_gpt2(const Chars& c, size_t i) {
  if (size_t k = contraction(c, i, false)) return i + k;
  const size_t s = c.at(i, ' ') ? i + 1 : i;  // optional leading space
  if (c.is(s, kClsLetter)) return run(c, s, kClsLetter);
  if (c.is(s, kClsNumber)) return run(c, s, kClsNumber);
  if (c.other(s)) {
    size_t j = s;
    while (c.other(j)) ++j;
    return j;
  }
  return whitespace_tail(c, i);  // c[i] is whitespace here
}

size_t next_qwen2(const Chars& c, size_t i) {
  if (size_t k = contraction(c, i, true)) return i + k;
  if (c.is(i, kClsLetter)) return run(c, i, kClsLetter);
  if (i < c.n && !c.crlf(i) && !c.is(i, kClsNumber) && c.is(i + 1, kClsLetter)) return run(c, i + 1, kClsLetter);
  if (c.is(i, kClsNumber)) return i + 1;
  const size_t s = c.at(i, ' ') ? i + 1 : i;
  if (c.other(s)) {
    size_t j = s;
    while (c.other(j)) ++j;
    while (c.crlf(j)) ++j;
    return j;
  }
  // c[i] is whitespace: \s*[\r\n]+ ends after the last \r/\n of the whitespace run.
  const size_t j = run(c, i, kClsSpace);
  for (size_t k = j; k > i; --k)
    if (c.crlf(k - 1)) return k;
  return whitespace_tail(c, i);
}

}  // namespace

PreTokenizer select_pretokenizer(const std::string& name, const std::string& regex) {
  if (!regex.empty()) {
    if (regex == kGpt2Regex) return PreTokenizer::kGpt2;
    if (regex == kQwen2Regex) return PreTokenizer::kQwen2;
    fail("tokenizer", "unsupported pre-tokenizer regex '", regex,
         "': only GPT-2's and Qwen2's split patterns are implemented (models/tokenizer/pretokenize.cpp)");
  }
  if (name == "gpt2" || name == "gpt-2" || name == "default") return PreTokenizer::kGpt2;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  fail("tokenizer", "unsupported pre-tokenizer '", name, "': known are gpt2, qwen2");
}

const char* pretokenizer_regex(PreTokenizer p) { return p == PreTokenizer::kGpt2 ? kGpt2Regex : kQwen2Regex; }
const char* llama_cpp_pre_name(PreTokenizer p) { return p == PreTokenizer::kGpt2 ? "gpt-2" : "qwen2"; }

void pretokenize(std::string_view text, PreTokenizer kind, std::vector<std::pair<uint32_t, uint32_t>>& out) {
  thread_local Chars c;
  decode_chars(text, c);
  size_t i = 0;
  while (i < c.n) {
    size_t j = kind == PreTokenizer::kGpt2 ? next_gpt2(c, i) : next_qwen2(c, i);
    if (j <= i) j = i + 1;  // cannot happen with these patterns; guarantees progress
    out.emplace_back(c.off[i], c.off[j]);
    i = j;
  }
  // The buffers are kept for the next text of this thread, but not a long one's (9 bytes a character, doubled by
  // growth): a server's every HTTP thread would otherwise hold the largest prompt it ever split, for good.
  if (c.cp.capacity() > (size_t(1) << 16)) c = Chars{};
}

}  // namespace anelab::tok

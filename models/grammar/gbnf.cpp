#include "models/grammar/gbnf.h"

#include <algorithm>
#include <functional>
#include <map>

#include "framework/core/error.h"

namespace anelab::grammar {

bool Elem::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool Elem::matches_any(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && lo <= b) return true;
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every range. Walk [lo, hi] past the ranges covering it.
  uint32_t c = lo;
  for (bool moved = true; moved && c <= hi;) {
    moved = false;
    for (const auto& [a, b] : ranges)
      if (c >= a && c <= b) {
        if (b >= hi) return false;
        c = b + 1;
        moved = true;
      }
  }
  return c <= hi;
}

// ---- parser -------------------------------------------------------------------------------------------------

class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view src) : src_(src) {}

  Grammar build() {
    skip_space(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip_space(true);
    }
    auto root = ids_.find("root");
    if (root == ids_.end() || !defined_[root->second]) fail_at(src_.size(), "the grammar has no `root` rule");
    for (uint32_t r = 0; r < alts_.size(); ++r)
      if (!defined_[r]) fail_at(first_use_[r], "rule `" + names_[r] + "` is used but not defined");
    check_left_recursion();
    Grammar g;
    g.names_ = names_;
    g.root_ = root->second;
    g.rules_.resize(alts_.size());
    for (uint32_t r = 0; r < alts_.size(); ++r)
      for (auto& alt : alts_[r]) {
        g.rules_[r].push_back(static_cast<uint32_t>(g.elems_.size()));
        for (auto& e : alt) g.elems_.push_back(std::move(e));
        g.elems_.push_back(Elem{});
      }
    return g;
  }

 private:
  using Seq = std::vector<Elem>;
  using Alts = std::vector<Seq>;

  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("grammar", "line ", line, " col ", col, ": ", what);
  }

  char peek() const { return pos_ < src_.size() ? src_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= src_.size(); }
  static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == '#') {
        while (!at_end() && src_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto [it, fresh] = ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (fresh) {
      names_.push_back(name);
      alts_.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base, Alts alts) {
    // '#' is no name character (it starts a comment), so a rule the text defines later cannot take this name.
    std::string name;
    do name = base + "#" + std::to_string(++generated_);
    while (ids_.count(name));
    const uint32_t r = rule_id(name, pos_);
    alts_[r] = std::move(alts);
    defined_[r] = true;
    return r;
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && word_char(src_[pos_])) ++pos_;
    if (pos_ == start) fail_at(pos_, std::string("expected a rule name, got '") + peek() + "'");
    return std::string(src_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const size_t at = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail_at(pos_, "expected ::= after rule name `" + name + "`");
    pos_ += 3;
    skip_space(true);
    const uint32_t r = rule_id(name, at);
    if (defined_[r]) fail_at(at, "rule `" + name + "` is defined twice");
    current_ = name;
    alts_[r] = parse_alternates(false);
    defined_[r] = true;
    skip_space(false);
    if (peek() == '\r') ++pos_;
    if (!at_end() && peek() != '\n') fail_at(pos_, std::string("expected the end of the line, got '") + peek() + "'");
  }

  Alts parse_alternates(bool nested) {
    Alts alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  // One code point of a literal or class, escapes decoded (UTF-8 multi-byte sequences read whole).
  uint32_t parse_char() {
    if (at_end()) fail_at(pos_, "unexpected end of the grammar inside a literal or class");
    const auto b = static_cast<unsigned char>(src_[pos_]);
    if (b == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
          return '\\';
        case '"':
          return '"';
        case '[':
          return '[';
        case ']':
          return ']';
        case '-':
          return '-';
        case '^':
          return '^';
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        default:
          fail_at(pos_ - 1, std::string("unknown escape \\") + e);
      }
    }
    const int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + len > src_.size()) fail_at(pos_, "the grammar is not valid UTF-8");
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int i = 1; i < len; ++i) {
      const auto c = static_cast<unsigned char>(src_[pos_ + i]);
      if ((c >> 6) != 0x2) fail_at(pos_, "the grammar is not valid UTF-8");
      cp = (cp << 6) | (c & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) fail_at(pos_, "expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  int parse_int() {
    const size_t start = pos_;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 10000) fail_at(start, "repetition count over 10000");
      ++pos_;
    }
    if (pos_ == start) fail_at(pos_, "expected a number");
    return static_cast<int>(v);
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    size_t last = 0;  // start of the last symbol in seq (what a repetition applies to)
    bool have_last = false;
    for (;;) {
      const char c = peek();
      const size_t at = pos_;
      if (c == '"') {
        ++pos_;
        last = seq.size();
        have_last = true;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail_at(at, "unterminated literal");
          Elem e;
          e.kind = Elem::kChar;
          const uint32_t cp = parse_char();
          e.ranges = {{cp, cp}};
          seq.push_back(std::move(e));
        }
        ++pos_;
        if (seq.size() == last) have_last = false;  // "" matches nothing: nothing to repeat
      } else if (c == '[') {
        ++pos_;
        Elem e;
        e.kind = Elem::kChar;
        if (peek() == '^') {
          e.negated = true;
          ++pos_;
        }
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail_at(at, "unterminated character class");
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail_at(at, "character range with its end before its start");
          }
          e.ranges.emplace_back(lo, hi);
        }
        ++pos_;
        last = seq.size();
        have_last = true;
        seq.push_back(std::move(e));
      } else if (c == '.') {
        ++pos_;
        Elem e;
        e.kind = Elem::kChar;
        e.negated = true;  // outside no range: any code point
        last = seq.size();
        have_last = true;
        seq.push_back(std::move(e));
      } else if (word_char(c)) {
        Elem e;
        e.kind = Elem::kRule;
        e.rule = rule_id(parse_name(), at);
        last = seq.size();
        have_last = true;
        seq.push_back(std::move(e));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        Alts sub = parse_alternates(true);
        if (peek() != ')') fail_at(at, "unclosed (");
        ++pos_;
        Elem e;
        e.kind = Elem::kRule;
        e.rule = new_rule(current_, std::move(sub));
        last = seq.size();
        have_last = true;
        seq.push_back(std::move(e));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail_at(at, std::string("'") + c + "' has nothing before it to repeat");
        ++pos_;
        int lo = 0, hi = -1;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          skip_space(false);
          if (peek() != ',') lo = parse_int();
          skip_space(false);
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            if (peek() != '}') hi = parse_int();
          } else {
            hi = lo;
          }
          skip_space(false);
          if (peek() != '}') fail_at(at, "expected } closing the repetition");
          ++pos_;
          if (hi >= 0 && hi < lo) fail_at(at, "repetition {m,n} with n < m");
        }
        repeat(seq, last, lo, hi);
        have_last = false;
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  // seq[last..] repeated lo..hi times (hi -1: unbounded), as rules of right recursion and optionals.
  void repeat(Seq& seq, size_t last, int lo, int hi) {
    Seq item(seq.begin() + static_cast<std::ptrdiff_t>(last), seq.end());
    // Repetitions are copies: bound what they cost ("a"{10000}{10000} would be 10^8 elements).
    copied_ += item.size() * static_cast<size_t>(std::max(lo, 1) + std::max(hi - lo, 0));
    if (copied_ > kMaxElements)
      fail_at(pos_, "the grammar's repetitions expand to more than " + std::to_string(kMaxElements) + " elements");
    seq.resize(last);
    for (int i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
    Elem ref;
    ref.kind = Elem::kRule;
    if (hi < 0) {  // R ::= item R |
      Alts alts(2);
      const uint32_t r = new_rule(current_, {});
      alts[0] = item;
      Elem self;
      self.kind = Elem::kRule;
      self.rule = r;
      alts[0].push_back(self);
      alts_[r] = std::move(alts);
      ref.rule = r;
      seq.push_back(ref);
      return;
    }
    // (item (item (...)?)?)? with hi - lo items.
    bool have = false;
    uint32_t inner = 0;
    for (int i = 0; i < hi - lo; ++i) {
      Alts alts(2);
      alts[0] = item;
      if (have) {
        Elem e;
        e.kind = Elem::kRule;
        e.rule = inner;
        alts[0].push_back(e);
      }
      inner = new_rule(current_, std::move(alts));
      have = true;
    }
    if (have) {
      ref.rule = inner;
      seq.push_back(ref);
    }
  }

  void check_left_recursion() {
    const size_t n = alts_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {  // fixpoint: a rule is nullable when one alternative is all nullable rules
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : alts_[r]) {
          bool all = true;
          for (const auto& e : alt)
            if (e.kind != Elem::kRule || !nullable[e.rule]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s when s can start r (after nullable prefixes); a cycle is left recursion.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : alts_[r])
        for (const auto& e : alt) {
          if (e.kind != Elem::kRule) break;
          left[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
    std::vector<char> state(n, 0);  // 0 unvisited, 1 on the path, 2 done
    std::function<void(uint32_t)> dfs = [&](uint32_t r) {
      state[r] = 1;
      for (uint32_t s : left[r]) {
        if (state[s] == 1)
          fail_at(first_use_[s], "rule `" + user_name(s) + "` is left-recursive (it can start with itself)");
        if (state[s] == 0) dfs(s);
      }
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (state[r] == 0) dfs(r);
  }

  // A generated rule ("value#3") is reported by the rule it was written in.
  std::string user_name(uint32_t r) const {
    const std::string& s = names_[r];
    const size_t dash = s.rfind('#');
    if (dash != std::string::npos && dash + 1 < s.size() &&
        std::all_of(s.begin() + static_cast<std::ptrdiff_t>(dash + 1), s.end(),
                    [](char c) { return c >= '0' && c <= '9'; }))
      return s.substr(0, dash) + " (a repetition or group in it)";
    return s;
  }

  static constexpr size_t kMaxElements = 200000;
  std::string_view src_;
  size_t copied_ = 0;
  size_t pos_ = 0;
  std::string current_;
  int generated_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alts> alts_;
  std::vector<char> defined_;
  std::vector<size_t> first_use_;
};

Grammar Grammar::parse(std::string_view text) { return GrammarBuilder(text).build(); }

// ---- recognizer -----------------------------------------------------------------------------------------------

void expand(const Grammar& g, Stack s, std::vector<Stack>& out) {
  const auto& el = g.elems();
  if (out.size() > kMaxStacks || s.size() > kMaxDepth)
    fail("grammar", "more than ", out.size() > kMaxStacks ? kMaxStacks : kMaxDepth,
         out.size() > kMaxStacks ? " ways to continue at one character (the grammar is too ambiguous)"
                                 : " nested rules open at once");
  if (s.empty() || el[s.back()].kind == Elem::kChar) {
    out.push_back(std::move(s));
    return;
  }
  const uint32_t pos = s.back();
  const uint32_t rule = el[pos].rule;
  s.pop_back();
  if (el[pos + 1].kind != Elem::kEnd) s.push_back(pos + 1);
  for (uint32_t alt : g.alternatives(rule)) {
    Stack t = s;
    if (el[alt].kind != Elem::kEnd) t.push_back(alt);
    expand(g, std::move(t), out);
  }
}

namespace {
void normalise(std::vector<Stack>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}
}  // namespace

std::vector<Stack> advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp) {
  const auto& el = g.elems();
  std::vector<Stack> out;
  for (const Stack& s : stacks) {
    if (s.empty() || !el[s.back()].matches(cp)) continue;
    Stack t = s;
    const uint32_t pos = t.back();
    t.pop_back();
    if (el[pos + 1].kind != Elem::kEnd) t.push_back(pos + 1);
    expand(g, std::move(t), out);
    if (out.size() > kMaxStacks)
      fail("grammar", "more than ", kMaxStacks, " ways to continue at one character (the grammar is too ambiguous)");
  }
  normalise(out);
  return out;
}

Matcher::Matcher(const Grammar& g) : g_(&g) {
  for (uint32_t alt : g.alternatives(g.root())) {
    Stack s;
    if (g.elems()[alt].kind != Elem::kEnd) s.push_back(alt);
    expand(g, std::move(s), stacks_);
  }
  normalise(stacks_);
}

bool Matcher::accept(uint32_t cp) {
  if (partial_.need) return false;
  std::vector<Stack> next = advance(*g_, stacks_, cp);
  if (next.empty()) return false;
  stacks_ = std::move(next);
  return true;
}

int Utf8Decoder::feed(unsigned char b) {
  if (need > 0) {
    if ((b >> 6) != 0x2) return -1;
    value = (value << 6) | (b & 0x3F);
    if (--need > 0) {
      uint32_t lo, hi;
      return span(lo, hi) ? 0 : -1;
    }
    const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (value < min || (value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF) return -1;
    return 1;
  }
  if (b < 0x80) {
    value = b;
    len = 1;
    return 1;
  }
  len = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (len == 0) return -1;
  value = len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  need = len - 1;
  uint32_t lo, hi;
  return span(lo, hi) ? 0 : -1;
}

bool Utf8Decoder::span(uint32_t& lo, uint32_t& hi) const {
  const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  lo = std::max(value << (6 * need), min);
  hi = std::min((value << (6 * need)) | ((1u << (6 * need)) - 1), 0x10FFFFu);
  // Surrogates are not code points: 0xED 0xA0 can only become one (a dead end a token mask must not enter), and
  // 0xED alone only U+D000..U+D7FF.
  if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
  if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
  return lo <= hi;
}

bool some_top_matches(const Grammar& g, const std::vector<Stack>& stacks, uint32_t lo, uint32_t hi) {
  const auto& el = g.elems();
  for (const Stack& s : stacks)
    if (!s.empty() && el[s.back()].matches_any(lo, hi)) return true;
  return false;
}

bool Matcher::step_bytes(const Grammar& g, std::vector<Stack>& stacks, Utf8Decoder& partial, std::string_view bytes) {
  for (const char ch : bytes) {
    const int r = partial.feed(static_cast<unsigned char>(ch));
    if (r < 0) return false;
    if (r == 0) continue;
    stacks = advance(g, stacks, partial.value);
    if (stacks.empty()) return false;
  }
  uint32_t lo, hi;  // a pending sequence: some stack must accept a code point it can still become
  return partial.need == 0 || (partial.span(lo, hi) && some_top_matches(g, stacks, lo, hi));
}

bool Matcher::accept_bytes(std::string_view bytes) {
  std::vector<Stack> stacks = stacks_;
  Utf8Decoder p = partial_;
  if (!step_bytes(*g_, stacks, p, bytes)) return false;
  stacks_ = std::move(stacks);
  partial_ = p;
  return true;
}

bool Matcher::allows(std::string_view bytes) const {
  if (bytes.empty()) return false;
  // Cheap first test: the first complete code point (or lead byte) must match some stack's top.
  if (partial_.need == 0) {
    const auto b = static_cast<unsigned char>(bytes[0]);
    if (b < 0x80) {
      const auto& el = g_->elems();
      bool any = false;
      for (const Stack& s : stacks_)
        if (!s.empty() && el[s.back()].matches(b)) {
          any = true;
          break;
        }
      if (!any) return false;
    }
  }
  std::vector<Stack> stacks = stacks_;
  Utf8Decoder p = partial_;
  return step_bytes(*g_, stacks, p, bytes);
}

bool Matcher::can_end() const {
  if (partial_.need) return false;
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::finished() const { return can_end() && stacks_.size() == 1; }

}  // namespace anelab::grammar

// SentencePiece BPE as llama2.c run.c (and llama.cpp's SPM tokenizer) encode it: the text (with a dummy
// space in front) is split into UTF-8 characters; repeatedly the adjacent pair whose concatenation is a
// vocab piece with the highest score is merged (ties: leftmost), via a priority queue over a linked list
// of symbols; characters not in the vocab become <0xNN> byte tokens.
#include <array>
#include <cstdio>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "framework/core/error.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode.h"

namespace anelab::tok::detail {
namespace {

// Replaces every U+2581 (SentencePiece's space marker, used by GGUF / .model vocabs) with ' '
// (llama2.c's tokenizer.bin already stores spaces).
std::string unescape_spaces(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out.push_back(' ');
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

int parse_byte_token(const std::string& s) {  // "<0xNN>" -> NN, else -1
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int h = hex(s[3]), l = hex(s[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const VocabData& v) : Tokenizer(v) {
    const size_t n = vocab_.tokens.size();
    pieces_.resize(n);
    byte_of_.assign(n, -1);
    byte_id_.fill(-1);
    for (size_t i = 0; i < n; ++i) {
      pieces_[i] = unescape_spaces(vocab_.tokens[i]);
      const TokenType t = type(i);
      if (t == TokenType::kByte || (vocab_.types.empty() && parse_byte_token(pieces_[i]) >= 0)) {
        const int b = parse_byte_token(pieces_[i]);
        if (b >= 0) {
          byte_of_[i] = b;
          if (byte_id_[b] < 0) byte_id_[b] = static_cast<int32_t>(i);
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = static_cast<int32_t>(i);
      const TokenType t = type(i);
      if (t == TokenType::kControl || t == TokenType::kUserDefined) {
        std::string lit = pieces_[i];
        matcher_.add(id, lit, t == TokenType::kControl);
      }
      if (t == TokenType::kNormal && byte_of_[i] < 0 && !pieces_[i].empty()) lookup_.emplace(pieces_[i], id);
      if (t == TokenType::kUserDefined) lookup_.emplace(pieces_[i], id);
      all_.emplace(vocab_.tokens[i], id);
    }
    word_split_ = true;
    for (const auto& [piece, id] : lookup_)
      for (size_t k = 1; k < piece.size() && word_split_; ++k)
        if (piece[k] == ' ' && piece[k - 1] != ' ') word_split_ = false;
  }

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const override {
    std::string storage;
    text = checked_utf8(text, opt.invalid_utf8, storage);
    std::vector<int32_t> out;
    if (opt.add_bos && bos_id() >= 0) out.push_back(bos_id());
    std::vector<AddedTokenMatcher::Segment> segs;
    matcher_.split(text, opt.allow_special, segs);
    bool prefix = vocab_.add_space_prefix;  // llama.cpp: a dummy space at the start and after special tokens
    for (const auto& s : segs) {
      if (s.id >= 0) {
        out.push_back(s.id);
        prefix = vocab_.add_space_prefix;
        continue;
      }
      encode_text(s.text, prefix, out);
      prefix = false;
    }
    if (opt.add_eos && eos_id() >= 0) out.push_back(eos_id());
    return out;
  }

  std::string decode(std::span<const int32_t> ids, bool keep_special) const override {
    std::string out;
    int32_t prev = vocab_.add_space_prefix ? bos_id() : -1;
    if (prev < 0 && vocab_.add_space_prefix) prev = -2;  // "start of text" marker
    for (int32_t id : ids) {
      check_id(id);
      if (type(id) == TokenType::kControl && !keep_special) {
        prev = id;
        continue;
      }
      out += piece_after(prev, id);
      prev = id;
    }
    return out;
  }

  std::string decode_token(int32_t prev, int32_t id) const override {
    check_id(id);
    if (type(id) == TokenType::kControl) return "";
    return piece_after(prev, id);
  }

  int32_t token_to_id(std::string_view text) const override {
    auto it = all_.find(std::string(text));
    return it == all_.end() ? -1 : it->second;
  }

  std::string describe() const override { return "sentencepiece-bpe (" + std::to_string(vocab_size()) + " tokens)"; }

 private:
  TokenType type(size_t i) const { return vocab_.types.empty() ? default_type(i) : vocab_.types[i]; }
  TokenType default_type(size_t i) const {
    const int32_t id = static_cast<int32_t>(i);
    if (id == vocab_.unk_id) return TokenType::kUnknown;
    if (id == vocab_.bos_id || id == vocab_.eos_id || id == vocab_.pad_id) return TokenType::kControl;
    return TokenType::kNormal;
  }

  // run.c decode: drop the leading space of a piece at the start / after a control token; <0xNN> -> byte.
  std::string piece_after(int32_t prev, int32_t id) const {
    if (byte_of_[id] >= 0) return std::string(1, static_cast<char>(byte_of_[id]));
    const std::string& p = pieces_[id];
    const bool after_control = prev == -2 || (prev >= 0 && prev < vocab_size() && type(prev) == TokenType::kControl);
    if (vocab_.add_space_prefix && after_control && !p.empty() && p[0] == ' ') return p.substr(1);
    return p;
  }

  struct Sym {
    uint32_t start, len;
    int32_t prev, next;
    int32_t id;  // vocab id of the symbol's text, -1 when unknown (emitted as bytes)
  };
  struct Cand {
    float score;
    int32_t left, right;
    uint32_t len;
    bool operator<(const Cand& o) const {  // max-heap: higher score first, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };

  void push_pair(std::string_view t, const std::vector<Sym>& sym, int32_t l, std::priority_queue<Cand>& q) const {
    const int32_t r = sym[l].next;
    if (r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    auto it = lookup_.find(t.substr(sym[l].start, len));
    if (it == lookup_.end()) return;
    q.push({vocab_.scores[it->second], l, r, len});
  }

  // Splits the text into words before each space that follows a non-space byte when no vocab piece has a
  // space after a non-space byte (then no merge can cross such a boundary and words encode independently,
  // with a per-word cache); otherwise encodes the text as one sequence.
  void encode_text(std::string_view text, bool prefix, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string t;
    t.reserve(text.size() + 1);
    if (prefix) t.push_back(' ');
    t.append(text);
    if (!word_split_) {
      bpe(t, out);
      return;
    }
    size_t start = 0;
    for (size_t i = 1; i <= t.size(); ++i) {
      if (i < t.size() && !(t[i] == ' ' && t[i - 1] != ' ')) continue;
      const std::string_view w = std::string_view(t).substr(start, i - start);
      start = i;
      {
        std::lock_guard<std::mutex> lock(cache_mu_);
        auto it = cache_.find(w);
        if (it != cache_.end()) {
          out.insert(out.end(), it->second.begin(), it->second.end());
          continue;
        }
      }
      std::vector<int32_t> ids;
      bpe(w, ids);
      out.insert(out.end(), ids.begin(), ids.end());
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cache_.size() > 500000) cache_.clear();
      cache_.emplace(std::string(w), std::move(ids));
    }
  }

  void bpe(std::string_view t, std::vector<int32_t>& out) const {
    std::vector<Sym> sym;
    sym.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      char32_t cp;
      int len = utf8_decode(t, i, &cp);
      if (len == 0) len = 1;  // unreachable after validation; keeps the loop safe
      auto it = lookup_.find(t.substr(i, len));
      const int32_t n = static_cast<int32_t>(sym.size());
      sym.push_back(
          {static_cast<uint32_t>(i), static_cast<uint32_t>(len), n - 1, -1, it == lookup_.end() ? -1 : it->second});
      if (n > 0) sym[n - 1].next = n;
      i += len;
    }
    std::priority_queue<Cand> q;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(t, sym, i, q);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      Sym& l = sym[c.left];
      if (l.len == 0 || l.next != c.right || l.len + sym[c.right].len != c.len) continue;  // stale
      Sym& r = sym[c.right];
      l.len += r.len;
      l.id = lookup_.find(t.substr(l.start, l.len))->second;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      r.len = 0;
      if (l.prev >= 0) push_pair(t, sym, l.prev, q);
      push_pair(t, sym, c.left, q);
    }
    for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(sym.size()); i = sym[i].next) {
      if (sym[i].id >= 0) {
        out.push_back(sym[i].id);
        continue;
      }
      for (uint32_t k = 0; k < sym[i].len; ++k) {
        const int32_t b = byte_id_[static_cast<uint8_t>(t[sym[i].start + k])];
        if (b >= 0) {
          out.push_back(b);
        } else if (vocab_.unk_id >= 0) {
          out.push_back(vocab_.unk_id);
          break;
        } else {
          fail("tokenizer", "character at byte ", sym[i].start,
               " is not in the vocab and there is no byte "
               "fallback or <unk> token (",
               describe(), ")");
        }
      }
    }
  }

  std::vector<std::string> pieces_;                       // id -> text with real spaces
  std::vector<int> byte_of_;                              // id -> byte value for <0xNN> tokens, else -1
  std::array<int32_t, 256> byte_id_;                      // byte -> <0xNN> token id
  std::unordered_map<std::string_view, int32_t> lookup_;  // mergeable piece -> id (views into pieces_)
  std::unordered_map<std::string, int32_t> all_;          // stored text -> id
  AddedTokenMatcher matcher_;
  bool word_split_ = false;

  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  struct SvEq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  };
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, SvHash, SvEq> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const VocabData& vocab) { return std::make_unique<SpmTokenizer>(vocab); }

}  // namespace anelab::tok::detail

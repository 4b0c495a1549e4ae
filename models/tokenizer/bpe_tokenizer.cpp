// Byte-level BPE (GPT-2, Qwen): optional NFC, pre-tokenizer scanner, then per pre-token word a ranked
// merge over its bytes (priority queue over a linked list of symbols; lowest rank first, ties leftmost),
// with a per-word cache. Token strings are stored GPT-2 byte-encoded (bytes_to_unicode); internally
// every token is kept as its raw bytes.
#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "framework/core/error.h"
#include "models/tokenizer/pretokenize.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode.h"

namespace anelab::tok::detail {
namespace {

// Raw bytes of a byte-encoded token string, or false when some character is not a byte image.
bool byte_decode(const std::string& s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const int len = utf8_decode(s, i, &cp);
    const int b = len ? unicode_to_byte(cp) : -1;
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

class ByteBpeTokenizer final : public Tokenizer {
 public:
  explicit ByteBpeTokenizer(const VocabData& v) : Tokenizer(v) {
    pre_ = select_pretokenizer(vocab_.pre, vocab_.pre_regex);
    const size_t n = vocab_.tokens.size();
    raw_.resize(n);
    byte_id_.fill(-1);
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = static_cast<int32_t>(i);
      const TokenType t = type(i);
      const bool added = t == TokenType::kControl || t == TokenType::kUserDefined;
      if (added || !byte_decode(vocab_.tokens[i], raw_[i])) raw_[i] = vocab_.tokens[i];  // literal text
      if (added) matcher_.add(id, raw_[i], t == TokenType::kControl);
      if (!added && raw_[i].size() == 1 && byte_id_[static_cast<uint8_t>(raw_[i][0])] < 0)
        byte_id_[static_cast<uint8_t>(raw_[i][0])] = id;
      stored_.emplace(vocab_.tokens[i], id);
    }
    for (int b = 0; b < 256; ++b)
      ANELAB_CHECK(byte_id_[b] >= 0, "tokenizer", "byte-level vocab has no single-byte token for byte 0x", std::hex, b,
                   "; not a byte-level BPE vocab?");
    merges_.reserve(vocab_.merges.size() * 2);
    for (size_t r = 0; r < vocab_.merges.size(); ++r) add_merge(vocab_.merges[r], static_cast<int32_t>(r));
  }

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const override {
    std::string storage;
    text = checked_utf8(text, opt.invalid_utf8, storage);
    std::vector<int32_t> out;
    if (opt.add_bos && bos_id() >= 0) out.push_back(bos_id());
    std::vector<AddedTokenMatcher::Segment> segs;
    matcher_.split(text, opt.allow_special, segs);
    std::vector<std::pair<uint32_t, uint32_t>> words;
    for (const auto& s : segs) {
      if (s.id >= 0) {
        out.push_back(s.id);
        continue;
      }
      std::string normalized;
      std::string_view seg = s.text;
      if (vocab_.nfc_normalize) {
        normalized = nfc(seg);
        seg = normalized;
      }
      words.clear();
      pretokenize(seg, pre_, words);
      for (auto [a, b] : words) encode_word(seg.substr(a, b - a), out);
    }
    if (opt.add_eos && eos_id() >= 0) out.push_back(eos_id());
    return out;
  }

  std::string decode(std::span<const int32_t> ids, bool keep_special) const override {
    std::string out;
    for (int32_t id : ids) {
      check_id(id);
      if (!keep_special && type(id) == TokenType::kControl) continue;
      out += raw_[id];
    }
    return out;
  }

  std::string decode_token(int32_t prev, int32_t id) const override {
    check_id(id);
    return type(id) == TokenType::kControl ? std::string() : raw_[id];
  }

  int32_t token_to_id(std::string_view text) const override {
    auto it = stored_.find(std::string(text));
    return it == stored_.end() ? -1 : it->second;
  }

  std::string describe() const override {
    return std::string("byte-bpe/") + (pre_ == PreTokenizer::kGpt2 ? "gpt2" : "qwen2") + " (" +
           std::to_string(vocab_size()) + " tokens, " + std::to_string(vocab_.merges.size()) + " merges)";
  }

 private:
  struct Merge {
    int32_t rank, result;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

  TokenType type(size_t i) const { return vocab_.types.empty() ? TokenType::kNormal : vocab_.types[i]; }

  void add_merge(const std::string& m, int32_t rank) {
    const size_t sp = m.find(' ');
    ANELAB_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < m.size() && m.find(' ', sp + 1) == std::string::npos,
                 "tokenizer", "merge #", rank, " '", m, "' is not of the form 'left right'");
    const std::string l = m.substr(0, sp), r = m.substr(sp + 1);
    auto il = stored_.find(l), ir = stored_.find(r), im = stored_.find(l + r);
    ANELAB_CHECK(il != stored_.end() && ir != stored_.end() && im != stored_.end(), "tokenizer", "merge #", rank, " '",
                 m, "' refers to a token missing from the vocab");
    merges_.emplace(key(il->second, ir->second), Merge{rank, im->second});  // first (lowest) rank wins
  }

  void encode_word(std::string_view w, std::vector<int32_t>& out) const {
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(w);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = bpe(w);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() > 500000) cache_.clear();
    cache_.emplace(std::string(w), std::move(ids));
  }

  struct Sym {
    int32_t id, prev, next;
  };
  struct Cand {
    int32_t rank, left, right, lid, rid;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }  // min-heap
  };

  void push_pair(const std::vector<Sym>& s, int32_t l, std::priority_queue<Cand>& q) const {
    const int32_t r = s[l].next;
    if (r < 0) return;
    auto it = merges_.find(key(s[l].id, s[r].id));
    if (it != merges_.end()) q.push({it->second.rank, l, r, s[l].id, s[r].id});
  }

  std::vector<int32_t> bpe(std::string_view w) const {
    std::vector<Sym> s(w.size());
    for (size_t i = 0; i < w.size(); ++i)
      s[i] = {byte_id_[static_cast<uint8_t>(w[i])], static_cast<int32_t>(i) - 1,
              i + 1 < w.size() ? static_cast<int32_t>(i + 1) : -1};
    std::priority_queue<Cand> q;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(w.size()); ++i) push_pair(s, i, q);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      if (s[c.left].id != c.lid || s[c.left].next != c.right || s[c.right].id != c.rid) continue;  // stale
      Sym& l = s[c.left];
      Sym& r = s[c.right];
      l.id = merges_.find(key(c.lid, c.rid))->second.result;
      l.next = r.next;
      if (r.next >= 0) s[r.next].prev = c.left;
      r.id = -1;
      if (l.prev >= 0) push_pair(s, l.prev, q);
      push_pair(s, c.left, q);
    }
    std::vector<int32_t> ids;
    for (int32_t i = w.empty() ? -1 : 0; i >= 0; i = s[i].next) ids.push_back(s[i].id);
    return ids;
  }

  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  struct SvEq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  };

  PreTokenizer pre_;
  std::vector<std::string> raw_;                     // id -> raw bytes (added tokens: their literal text)
  std::array<int32_t, 256> byte_id_;                 // byte -> single-byte token id
  std::unordered_map<std::string, int32_t> stored_;  // stored (byte-encoded) text -> id
  std::unordered_map<uint64_t, Merge> merges_;       // (left id, right id) -> rank, merged id
  AddedTokenMatcher matcher_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, SvHash, SvEq> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_bpe_tokenizer(const VocabData& vocab) {
  return std::make_unique<ByteBpeTokenizer>(vocab);
}

}  // namespace anelab::tok::detail

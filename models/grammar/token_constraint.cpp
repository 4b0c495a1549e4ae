#include "models/grammar/token_constraint.h"

#include <algorithm>
#include <limits>

#include "framework/core/error.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::grammar {

TokenPieces::TokenPieces(const tok::Tokenizer& tk, int64_t model_vocab) {
  const auto n = static_cast<size_t>(model_vocab);
  after_normal.resize(n);
  at_start.resize(n);
  control.assign(n, 0);
  const auto& types = tk.vocab().types;
  // A normal token to stand before each piece (SentencePiece keeps the leading space after it).
  int32_t normal = -1;
  for (int32_t i = 0; i < tk.vocab_size() && normal < 0; ++i)
    if (types.empty() ? (i != tk.bos_id() && i != tk.eos_id() && i != tk.vocab().pad_id && i != tk.vocab().unk_id)
                      : types[static_cast<size_t>(i)] == tok::TokenType::kNormal)
      normal = i;
  for (int32_t i = 0; i < tk.vocab_size() && static_cast<size_t>(i) < n; ++i) {
    const bool ctl = types.empty() ? (i == tk.bos_id() || i == tk.eos_id() || i == tk.vocab().pad_id)
                                   : types[static_cast<size_t>(i)] == tok::TokenType::kControl;
    control[static_cast<size_t>(i)] = ctl;
    if (ctl) continue;
    after_normal[static_cast<size_t>(i)] = tk.decode_token(normal, i);
    at_start[static_cast<size_t>(i)] = tk.decode_token(-2, i);  // -2: the start (tokenizer.h)
  }
  for (size_t i = static_cast<size_t>(std::max(0, tk.vocab_size())); i < n; ++i) control[i] = 1;  // padding rows
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenPieces> pieces,
                                     std::vector<int32_t> end_tokens, int32_t prev)
    : g_(std::move(g)), pieces_(std::move(pieces)), end_(std::move(end_tokens)), m_(*g_) {
  prev_control_ =
      prev < 0 || (static_cast<size_t>(prev) < pieces_->control.size() && pieces_->control[static_cast<size_t>(prev)]);
}

const std::string& GrammarConstraint::piece(int32_t id) const {
  return prev_control_ ? pieces_->at_start[static_cast<size_t>(id)] : pieces_->after_normal[static_cast<size_t>(id)];
}

int32_t GrammarConstraint::States::intern(const std::vector<Stack>& s) {
  auto [it, fresh] = index.try_emplace(s, static_cast<int32_t>(sets.size()));
  if (fresh) sets.push_back(s);
  return it->second;
}

int32_t GrammarConstraint::States::step(const Grammar& g, int32_t state, uint32_t cp) {
  const uint64_t key = (static_cast<uint64_t>(state) << 32) | cp;
  if (auto it = next.find(key); it != next.end()) return it->second;
  std::vector<Stack> after = advance(g, sets[static_cast<size_t>(state)], cp);
  const int32_t to = after.empty() ? -1 : intern(after);
  next.emplace(key, to);
  return to;
}

int64_t GrammarConstraint::mask(std::span<float> logits) const {
  const float ninf = -std::numeric_limits<float>::infinity();
  const bool end_ok = m_.can_end();
  if (states_.next.size() > (size_t(1) << 22)) states_ = States{};  // bound the memo (a few hundred MB at most)
  const int32_t start = states_.intern(m_.stacks());
  int64_t allowed = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    bool ok = false;
    if (std::find(end_.begin(), end_.end(), id) != end_.end()) {
      ok = end_ok;
    } else if (i < pieces_->control.size() && !pieces_->control[i] && !piece(id).empty()) {
      Utf8Decoder d = m_.pending();
      int32_t st = start;
      ok = true;
      for (const char ch : piece(id)) {
        const int r = d.feed(static_cast<unsigned char>(ch));
        if (r == 0) continue;
        if (r < 0 || (st = states_.step(*g_, st, d.value)) < 0) {
          ok = false;
          break;
        }
      }
      uint32_t lo, hi;
      if (ok && d.need > 0) ok = d.span(lo, hi) && some_top_matches(*g_, states_.sets[static_cast<size_t>(st)], lo, hi);
    }
    if (ok)
      ++allowed;
    else
      logits[i] = ninf;
  }
  // Every logit -inf would leave the sampler a token the grammar refuses: name the dead end instead.
  if (allowed == 0)
    fail("grammar", "no token can continue the text here (a dead end of the grammar over this vocabulary)");
  return allowed;
}

void GrammarConstraint::accept(int32_t token) {
  if (std::find(end_.begin(), end_.end(), token) != end_.end()) return;  // the caller stops on it
  const bool in = token >= 0 && static_cast<size_t>(token) < pieces_->control.size();
  if (!in || pieces_->control[static_cast<size_t>(token)] || !m_.accept_bytes(piece(token)))
    fail("grammar", "token ", token, " is not allowed by the grammar here (a sampler ignored the mask)");
  prev_control_ = false;
}

}  // namespace anelab::grammar

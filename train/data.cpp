#include "train/data.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/tokenizer/token_file.h"

namespace anelab::train {

TokenData::TokenData(const std::string& path, double val_frac, int64_t seq_len) {
  if (std::filesystem::exists(path + ".json")) {
    tokens_ = tok::read_token_file(path, &source_);
    format_ = "anelab-tokens";
  } else {
    MappedFile f(path);
    if (f.size() == 0 || f.size() % 2 != 0)
      fail("train", "data file ", path, ": ", f.size(),
           " bytes is not a flat uint16 token file (odd or empty; anelab token files need their .json sidecar)");
    tokens_.resize(f.size() / 2);
    for (size_t i = 0; i < tokens_.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, f.data() + 2 * i, 2);
      tokens_[i] = v;
    }
    format_ = "uint16-flat";
  }
  split(val_frac, seq_len, path);
}

TokenData::TokenData(const std::string& path, double val_frac, int64_t seq_len, const JsonlOptions& o) {
  if (!o.tokenizer) fail("train", "data file ", path, ": JSONL data needs the model's tokenizer (--tokenizer PATH)");
  const tok::Tokenizer& tk = *o.tokenizer;
  auto add = [&](const std::vector<int32_t>& ids, bool target) {
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    mask_.insert(mask_.end(), ids.size(), uint8_t(target || !o.mask_prompt));
  };
  tok::EncodeOptions plain, special;
  special.allow_special = true;
  auto chat = [&](const std::vector<tok::ChatMessage>& msgs, const std::string& where) {
    if (o.chat == tok::ChatTemplate::kNone)
      fail("train", where, ": chat messages need a model with a chat template (the tokenizer has none)");
    if (msgs.empty() || msgs.back().role != "assistant")
      fail("train", where, ": the last message must be the assistant's (its content is what trains)");
    const std::vector<tok::ChatMessage> head(msgs.begin(), msgs.end() - 1);
    const std::vector<int32_t> p = tk.encode(tok::apply_chat_template(o.chat, head, true), special);
    const std::vector<int32_t> all = tk.encode(tok::apply_chat_template(o.chat, msgs, false), special);
    if (all.size() < p.size() || !std::equal(p.begin(), p.end(), all.begin()))
      fail("train", where, ": the chat template's prompt does not tokenize as a prefix of the conversation");
    add(p, false);
    add(std::vector<int32_t>(all.begin() + int64_t(p.size()), all.end()), true);
  };
  const std::string text = read_file_text(path);
  size_t pos = 0;
  for (int64_t line = 1; pos < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string row = text.substr(pos, end - pos);
    pos = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = cat(path, ":", line);
    const auto j = nlohmann::json::parse(row, nullptr, false);
    auto str = [&](const char* k) {
      if (!j.contains(k) || !j[k].is_string()) fail("train", where, ": \"", k, "\" must be a string");
      return j[k].get<std::string>();
    };
    if (!j.is_object()) fail("train", where, ": not a JSON object");
    if (j.contains("messages")) {
      if (!j["messages"].is_array()) fail("train", where, ": \"messages\" must be an array");
      std::vector<tok::ChatMessage> msgs;
      for (const auto& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
          fail("train", where, ": every message needs string \"role\" and \"content\"");
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(), {}});
      }
      chat(msgs, where);
    } else if (j.contains("prompt") || j.contains("completion")) {
      const std::string p = str("prompt"), c = str("completion");
      if (o.chat != tok::ChatTemplate::kNone) {
        chat({{"user", p, {}}, {"assistant", c, {}}}, where);
      } else {
        tok::EncodeOptions first = plain, last = plain;
        first.add_bos = true, last.add_eos = true;
        add(tk.encode(p, first), false);
        add(tk.encode(c, last), true);
      }
    } else if (j.contains("text")) {
      tok::EncodeOptions both = plain;
      both.add_bos = both.add_eos = true;
      add(tk.encode(str("text"), both), true);
    } else {
      fail("train", where, ": expected \"text\", \"prompt\"/\"completion\" or \"messages\"");
    }
  }
  format_ = "jsonl";
  split(val_frac, seq_len, path);
}

TokenData::TokenData(std::vector<int32_t> tokens, double val_frac, int64_t seq_len) : tokens_(std::move(tokens)) {
  format_ = "memory";
  split(val_frac, seq_len, "<memory>");
}

void TokenData::split(double val_frac, int64_t seq_len, const std::string& where) {
  if (!(val_frac >= 0 && val_frac <= 0.5)) fail("train", "--val-frac ", val_frac, " must be in [0, 0.5]");
  const int64_t n = n_tokens();
  int64_t n_val = int64_t(std::ceil(double(n) * val_frac));
  if (val_frac > 0) n_val = std::max(n_val, seq_len + 1);
  n_train_ = n - n_val;
  if (n_train_ < seq_len + 1)
    fail("train", "data file ", where, " has ", n, " tokens: too few for seq_len ", seq_len, " with ", n_val,
         " held out (need at least ", seq_len + 1 + n_val, ")");
  for (int32_t t : tokens_) {
    if (t < 0) fail("train", "data file ", where, ": negative token id ", t);
    max_id_ = std::max(max_id_, t);
  }
}

uint64_t Rng::next() {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Batcher::Batcher(const TokenData& data, int64_t B, int64_t T, bool random, uint64_t seed)
    : data_(&data), B_(B), T_(T), random_(random) {
  rng_.state = seed * 0x2545f4914f6cdd1dull + 0x1234567ull;
}

void Batcher::set_state(uint64_t s) {
  if (random_) {
    rng_.state = s;
    return;
  }
  if (s > uint64_t(data_->n_train()))
    fail("train", "sequential data position ", s, " is past the ", data_->n_train(),
         " training tokens (a checkpoint of another data file?)");
  pos_ = int64_t(s);
}

int64_t Batcher::next_pos() {
  if (random_) return int64_t(rng_.next() % uint64_t(data_->n_train() - T_));  // valid starts: [0, n_train - T - 1]
  if (pos_ + T_ + 1 > data_->n_train()) pos_ = 0;
  const int64_t pos = pos_;
  pos_ += T_;
  return pos;
}

// Batch::mask [B, T] of windows starting at pos[b]: the target mask of tokens pos + 1 .. pos + T.
void Batcher::fill_mask(Batch* b, const std::vector<int64_t>& pos) const {
  const std::vector<uint8_t>& m = data_->target_mask();
  if (m.empty()) return;
  b->mask.resize(size_t(B_ * T_));
  for (int64_t i = 0; i < B_; ++i) std::memcpy(b->mask.data() + i * T_, m.data() + pos[size_t(i)] + 1, size_t(T_));
}

Batch Batcher::next() {
  Batch b{B_, T_, std::vector<int32_t>(size_t(B_ * (T_ + 1))), {}};
  std::vector<int64_t> pos(static_cast<size_t>(B_));
  for (int64_t i = 0; i < B_; ++i) {
    pos[size_t(i)] = next_pos();
    std::memcpy(b.tokens.data() + i * (T_ + 1), data_->tokens() + pos[size_t(i)], size_t(T_ + 1) * 4);
  }
  fill_mask(&b, pos);
  return b;
}

void Batcher::skip() {
  for (int64_t i = 0; i < B_; ++i) next_pos();
}

bool Batcher::val_batch(int64_t i, Batch* out) const {
  const int64_t start = data_->n_train() + i * B_ * T_;
  if (data_->n_val() == 0 || start + B_ * T_ + 1 > data_->n_tokens()) return false;
  *out = Batch{B_, T_, std::vector<int32_t>(size_t(B_ * (T_ + 1))), {}};
  std::vector<int64_t> pos(static_cast<size_t>(B_));
  for (int64_t b = 0; b < B_; ++b) {
    pos[size_t(b)] = start + b * T_;
    std::memcpy(out->tokens.data() + b * (T_ + 1), data_->tokens() + pos[size_t(b)], size_t(T_ + 1) * 4);
  }
  fill_mask(out, pos);
  return true;
}

}  // namespace anelab::train

#include "train/data.h"

#include <cmath>
#include <cstring>
#include <filesystem>

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

Batch Batcher::next() {
  Batch b{B_, T_, std::vector<int32_t>(size_t(B_ * (T_ + 1)))};
  for (int64_t i = 0; i < B_; ++i)
    std::memcpy(b.tokens.data() + i * (T_ + 1), data_->tokens() + next_pos(), size_t(T_ + 1) * 4);
  return b;
}

void Batcher::skip() {
  for (int64_t i = 0; i < B_; ++i) next_pos();
}

bool Batcher::val_batch(int64_t i, Batch* out) const {
  const int64_t start = data_->n_train() + i * B_ * T_;
  if (data_->n_val() == 0 || start + B_ * T_ + 1 > data_->n_tokens()) return false;
  *out = Batch{B_, T_, std::vector<int32_t>(size_t(B_ * (T_ + 1)))};
  for (int64_t b = 0; b < B_; ++b)
    std::memcpy(out->tokens.data() + b * (T_ + 1), data_->tokens() + start + b * T_, size_t(T_ + 1) * 4);
  return true;
}

}  // namespace anelab::train

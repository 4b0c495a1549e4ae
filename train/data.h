// Training data: llama2.c-style token files (flat little-endian uint16, no header) or anelab token files
// (OUT.bin + OUT.bin.json sidecar, models/tokenizer/token_file.h; uint16 or uint32), split into a train
// part and a held-out validation tail, and the batcher that draws windows of T+1 tokens from the train part:
//   random:     pos uniform in [0, n_train - T - 1] from a splitmix64 generator whose state is checkpointed;
//   sequential: consecutive windows from the start (pos += T), wrapping to 0 (for reference comparisons).
// Validation reads consecutive windows from the start of the held-out tail.
// JSONL (a path ending in .jsonl, MLX-LM's data forms): one JSON object per line, {"text": ...},
// {"prompt": ..., "completion": ...} or {"messages": [{"role", "content"}...]}, tokenized with the model's tokenizer
// and packed one after another (BOS + text + EOS where the vocabulary has them). prompt/completion goes through the
// model's chat template as a user and an assistant turn when it has one, else prompt + completion; messages need a
// chat template. With mask_prompt (--mask-prompt, default on) only completion tokens (the last assistant turn of
// messages, after the template's generation prompt) are loss targets: Batch::mask says which.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "train/cpu_model.h"

namespace anelab::train {

struct JsonlOptions {
  const tok::Tokenizer* tokenizer = nullptr;
  tok::ChatTemplate chat = tok::ChatTemplate::kNone;
  bool mask_prompt = true;
};

class TokenData {
 public:
  TokenData(const std::string& path, double val_frac, int64_t seq_len, const JsonlOptions& o);  // JSONL
  // val_frac in [0, 0.5]; the tail ceil(n * val_frac) tokens are held out (at least T+1 when val_frac > 0).
  TokenData(const std::string& path, double val_frac, int64_t seq_len);
  explicit TokenData(std::vector<int32_t> tokens, double val_frac, int64_t seq_len);  // tests
  int64_t n_tokens() const { return int64_t(tokens_.size()); }
  int64_t n_train() const { return n_train_; }
  int64_t n_val() const { return n_tokens() - n_train_; }
  int32_t max_id() const { return max_id_; }
  const std::string& format() const { return format_; }  // "uint16-flat" | "anelab-tokens"
  // The tokenizer that made the data, as an anelab token file's sidecar says (vocab_size 0: not said).
  const tok::TokenFileSource& source() const { return source_; }
  const int32_t* tokens() const { return tokens_.data(); }
  // [n_tokens] 1 where token i counts as a loss target (JSONL with mask_prompt), empty when every token does.
  const std::vector<uint8_t>& target_mask() const { return mask_; }

 private:
  void split(double val_frac, int64_t seq_len, const std::string& where);
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> mask_;
  int64_t n_train_ = 0;
  int32_t max_id_ = 0;
  std::string format_;
  tok::TokenFileSource source_;
};

struct Rng {  // splitmix64: one uint64 of state, checkpointed as is
  uint64_t state = 0;
  uint64_t next();
};

class Batcher {
 public:
  Batcher(const TokenData& data, int64_t B, int64_t T, bool random, uint64_t seed);
  Batch next();
  // Advances past the batch next() would return, without copying it (a data-parallel rank skips the
  // micro-batches of the other ranks: every rank draws each micro-batch of a step in the same order, so
  // state() is the global position whatever the number of ranks).
  void skip();
  // Validation batch i (consecutive windows of the held-out tail); false when the tail is exhausted.
  bool val_batch(int64_t i, Batch* out) const;
  // Checkpointed position: the generator state (random) or the next window start (sequential).
  uint64_t state() const { return random_ ? rng_.state : uint64_t(pos_); }
  void set_state(uint64_t s);

 private:
  int64_t next_pos();  // start of the next window
  void fill_mask(Batch* b, const std::vector<int64_t>& pos) const;
  const TokenData* data_;
  int64_t B_, T_;
  bool random_;
  Rng rng_;
  int64_t pos_ = 0;
};

}  // namespace anelab::train

// The base run that `anelab perplexity --kl-base FILE` compares with: the log-probabilities of its scored
// positions, from either of two files, told apart by their first bytes:
//
// * anelab's own `--save-logits` file: a NumPy .npy of float32 logits [N, vocab] (framework/core/npy.h).
// * llama.cpp's `llama-perplexity --kl-divergence-base FILE` (tools/perplexity/perplexity.cpp), little-endian:
//     char[8]  "_logits_"
//     i32      n_ctx, n_vocab, n_chunk
//     i32      tokens[n_chunk * n_ctx]   the text as llama.cpp tokenized it (BOS first where the vocabulary
//                                        adds one); chunk c is tokens[c*n_ctx, (c+1)*n_ctx), its first token
//                                        replaced by BOS when run
//     then per chunk, per scored position j = n_ctx/2 .. n_ctx-2 (n_ctx-1-n_ctx/2 records of nv+4 u16,
//     nv = n_vocab rounded up to even):
//       f32 scale, f32 min_log_prob; u16 q[nv]
//       log p[i] = scale * q[i] + min_log_prob, where scale = (max - lo) / 65535, lo = max(min logit,
//       max logit - 16) and q = round((logit - lo) / scale) for logits above lo, else 0 (clamped). So a
//       stored log-probability is within scale/2 <= 16/131070 of llama.cpp's own (plus its fp32 rounding).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace anelab::infer {

struct KlBase {
  enum class Kind : uint8_t { kNpyLogits, kLlamaCpp } kind = Kind::kNpyLogits;
  int64_t n = 0, vocab = 0;  // scored positions, vocabulary size
  // llama.cpp only: its chunking and tokens.
  int64_t ctx = 0, chunks = 0;
  std::vector<int32_t> tokens;    // [chunks * ctx]
  std::vector<float> logits;      // .npy: [n, vocab] logits
  std::vector<uint16_t> records;  // llama.cpp: [n, record_len()] (two f32 then nv u16 per position)

  int64_t record_len() const { return (vocab + 1) / 2 * 2 + 4; }
  // Row t's log-probabilities, out[vocab] (.npy: computed in double from the fp32 logits); returns the clamp level:
  // values at or below it stand for any log-probability down to -inf (llama.cpp's q = 0), -inf where nothing is clamped
  // (.npy).
  double log_probs(int64_t t, double* out) const;
  // Half the quantization step of row t's log-probabilities (0 for .npy).
  float half_step(int64_t t) const;
};

// Reads either file; a malformed one is refused with one line "[perplexity] PATH: ..." naming the field.
KlBase read_kl_base(const std::string& path);
KlBase parse_llama_kl_base(const uint8_t* bytes, size_t size, const std::string& name);

}  // namespace anelab::infer

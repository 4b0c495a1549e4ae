#include "infer/kl_base.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"

namespace anelab::infer {

namespace {

constexpr char kLlamaMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr int64_t kHeaderBytes = 8 + 3 * 4;
// llama.cpp's scale is (max - lo) / 65535 with max - lo <= 16, in fp32: at most 16/65535 and a rounding.
constexpr float kMaxScale = 16.001f / 65535;

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

KlBase from_npy(const std::vector<uint8_t>& bytes, const std::string& path) {
  NpyArray a = parse_npy(bytes.data(), bytes.size(), path);
  if (a.shape.size() != 2 || a.shape[0] < 1 || a.shape[1] < 2)
    fail("perplexity", path, ": a --save-logits file holds logits [N, vocab], this one has ", a.shape.size(),
         " dimensions");
  KlBase b;
  b.kind = KlBase::Kind::kNpyLogits;
  b.n = a.shape[0];
  b.vocab = a.shape[1];
  b.logits = std::move(a.data);
  return b;
}

}  // namespace

double KlBase::log_probs(int64_t t, double* out) const {
  if (kind == Kind::kNpyLogits) {
    const float* row = logits.data() + t * vocab;
    float mx = row[0];
    for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, row[i]);
    double s = 0;
    for (int64_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(row[i]) - mx);
    const double lse = mx + std::log(s);
    for (int64_t i = 0; i < vocab; ++i) out[i] = row[i] - lse;
    return -std::numeric_limits<double>::infinity();
  }
  const uint16_t* r = records.data() + t * record_len();
  float scale, lo;
  std::memcpy(&scale, r, sizeof scale);
  std::memcpy(&lo, r + 2, sizeof lo);
  for (int64_t i = 0; i < vocab; ++i) out[i] = scale * r[4 + i] + lo;  // fp32, as llama.cpp computes it
  return lo;
}

float KlBase::half_step(int64_t t) const {
  if (kind == Kind::kNpyLogits) return 0.0f;
  float scale;
  std::memcpy(&scale, records.data() + t * record_len(), sizeof scale);
  return scale / 2;
}

KlBase parse_llama_kl_base(const uint8_t* bytes, size_t size, const std::string& name) {
  const int64_t sz = static_cast<int64_t>(size);
  if (sz < kHeaderBytes || std::memcmp(bytes, kLlamaMagic, sizeof kLlamaMagic) != 0)
    fail("perplexity", name, ": not a llama-perplexity --kl-divergence-base file (no \"_logits_\" header of ",
         kHeaderBytes, " bytes)");
  KlBase b;
  b.kind = KlBase::Kind::kLlamaCpp;
  b.ctx = read_i32(bytes + 8);
  b.vocab = read_i32(bytes + 12);
  b.chunks = read_i32(bytes + 16);
  if (b.ctx < 4 || b.ctx > (1 << 24)) fail("perplexity", name, ": n_ctx ", b.ctx, " is out of range (4 .. 2^24)");
  if (b.vocab < 2 || b.vocab > (1 << 24))
    fail("perplexity", name, ": n_vocab ", b.vocab, " is out of range (2 .. 2^24)");
  if (b.chunks < 1) fail("perplexity", name, ": n_chunk ", b.chunks, " is not positive");
  const int64_t per_chunk = b.ctx - 1 - b.ctx / 2;
  const int64_t token_bytes = 4 * b.ctx * b.chunks;
  const int64_t chunk_bytes = 2 * per_chunk * b.record_len();
  const int64_t want = kHeaderBytes + token_bytes + chunk_bytes * b.chunks;
  if (sz < kHeaderBytes + token_bytes)
    fail("perplexity", name, ": ends inside its tokens (", sz, " bytes; n_ctx ", b.ctx, " x n_chunk ", b.chunks,
         " tokens need ", kHeaderBytes + token_bytes, ")");
  if (sz != want)
    fail("perplexity", name, ": ", sz, " bytes where n_ctx ", b.ctx, ", n_vocab ", b.vocab, ", n_chunk ", b.chunks,
         " make ", want, sz < want ? " (it ends inside chunk " : " (trailing bytes",
         sz < want ? std::to_string((sz - kHeaderBytes - token_bytes) / chunk_bytes) + "'s log-probabilities)" : ")");
  b.tokens.resize(static_cast<size_t>(b.ctx * b.chunks));
  std::memcpy(b.tokens.data(), bytes + kHeaderBytes, static_cast<size_t>(token_bytes));
  for (size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= b.vocab)
      fail("perplexity", name, ": token ", i, " is ", b.tokens[i], ", outside the vocabulary of ", b.vocab);
  b.n = per_chunk * b.chunks;
  b.records.resize(static_cast<size_t>(b.n * b.record_len()));
  std::memcpy(b.records.data(), bytes + kHeaderBytes + token_bytes, static_cast<size_t>(chunk_bytes * b.chunks));
  for (int64_t t = 0; t < b.n; ++t) {
    float scale, lo;
    std::memcpy(&scale, b.records.data() + t * b.record_len(), sizeof scale);
    std::memcpy(&lo, b.records.data() + t * b.record_len() + 2, sizeof lo);
    if (!(scale >= 0 && scale <= kMaxScale && std::isfinite(lo) && lo <= 0))
      fail("perplexity", name, ": scored position ", t, " has scale ", scale, " and min_log_prob ", lo,
           " (want 0 <= scale <= 16/65535, min_log_prob <= 0)");
  }
  return b;
}

KlBase read_kl_base(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.size() >= sizeof kNpyMagic && std::memcmp(bytes.data(), kNpyMagic, sizeof kNpyMagic) == 0)
    return from_npy(bytes, path);
  if (bytes.size() >= sizeof kLlamaMagic && std::memcmp(bytes.data(), kLlamaMagic, sizeof kLlamaMagic) == 0)
    return parse_llama_kl_base(bytes.data(), bytes.size(), path);
  fail("perplexity", path,
       ": neither a .npy of logits (anelab --save-logits) nor a llama-perplexity "
       "--kl-divergence-base file (\"_logits_\" header)");
}

}  // namespace anelab::infer

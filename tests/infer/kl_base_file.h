// Test helper: writes llama-perplexity's --kl-divergence-base file from logits, written here from the format
// as infer/kl_base.h describes it (llama.cpp's log_softmax + nearest_int quantization of log-probabilities),
// so anelab's reader is checked against an encoder of its own.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace anelab::test {

inline void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

// One scored position: f32 scale, f32 min_log_prob, u16 q[vocab rounded up to even].
inline void put_record(std::vector<uint8_t>& out, const float* logits, int32_t vocab) {
  float mx = logits[0], mn = logits[0];
  for (int32_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]), mn = std::min(mn, logits[i]);
  mn = std::max(mn, mx - 16);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - mx);
  const float lse = static_cast<float>(std::log(sum));
  const float min_log_prob = mn - mx - lse, scale = (mx - mn) / 65535.f;
  put_bytes(out, &scale, 4);
  put_bytes(out, &min_log_prob, 4);
  std::vector<uint16_t> q(static_cast<size_t>((vocab + 1) / 2 * 2), 0);
  for (int32_t i = 0; i < vocab && scale > 0; ++i)
    if (logits[i] > mn) q[static_cast<size_t>(i)] = static_cast<uint16_t>(std::lround((logits[i] - mn) / scale));
  put_bytes(out, q.data(), q.size() * 2);
}

// logits: [chunks * (ctx - 1 - ctx/2), vocab], the scored positions chunk after chunk.
inline std::vector<uint8_t> llama_kl_base_bytes(int32_t ctx, int32_t vocab, int32_t chunks,
                                                const std::vector<int32_t>& tokens, const std::vector<float>& logits) {
  std::vector<uint8_t> out;
  put_bytes(out, "_logits_", 8);
  put_bytes(out, &ctx, 4);
  put_bytes(out, &vocab, 4);
  put_bytes(out, &chunks, 4);
  put_bytes(out, tokens.data(), static_cast<size_t>(ctx) * static_cast<size_t>(chunks) * 4);
  const size_t rows = static_cast<size_t>(chunks) * static_cast<size_t>(ctx - 1 - ctx / 2);
  for (size_t t = 0; t < rows; ++t) put_record(out, logits.data() + t * static_cast<size_t>(vocab), vocab);
  return out;
}

}  // namespace anelab::test

// The input and hash of the quantizer byte check (test_quant.cpp, QuantBlocks.QuantizersMatchLlamaQuantizeBytes),
// shared with scripts/quant_reference_hashes.sh, which hashes llama.cpp's reference quantizers on the same input.
// Header-only and free of anelab code, so that script's program compiles against ggml alone.
//
// The values are the same on every platform: integers from splitmix64, one int -> float conversion (exact below
// 2^24) and one multiply by a power of two per value; no libm call, nothing for a compiler to contract.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace anelab::quant_golden {

constexpr int64_t kValues = int64_t{1} << 18;  // 1024 super-blocks of 256, 8192 blocks of 32

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// About normal: the sum of four uniform 12-bit integers, centred; per super-block a magnitude 1..5 and, on every
// third one, a positive offset (so the affine types' mins are exercised); outliers; an all-zero super-block.
inline std::vector<float> values() {
  std::vector<float> x(static_cast<size_t>(kValues));
  uint64_t s = 2026;
  for (int64_t i = 0; i < kValues; ++i) {
    const uint64_t r = splitmix64(s);
    const int32_t sum =
        static_cast<int32_t>((r & 4095) + ((r >> 12) & 4095) + ((r >> 24) & 4095) + ((r >> 36) & 4095)) - 8190;
    const int32_t sb = static_cast<int32_t>(i / 256);
    const int32_t v = sum * (1 + sb % 5) + (sb % 3 == 0 ? 3000 : 0);  // |v| < 2^24: exact as a float
    x[static_cast<size_t>(i)] = static_cast<float>(v) * 0x1p-11f;
  }
  x[7] = 40.0f, x[300] = -55.5f, x[70001] = 1e-3f;
  for (int64_t i = 2048; i < 2048 + 256; ++i) x[static_cast<size_t>(i)] = 0.0f;
  return x;
}

// FNV-1a, 64 bits.
inline uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace anelab::quant_golden

// Block-quantized weight formats, byte for byte the layouts of GGUF / ggml (ggml-common.h), with the
// reference (scalar) dequantizers and quantizers. A tensor row of n values (n a multiple of the block's
// value count) is a sequence of blocks; x = the value a block encodes for one element.
//
//   Q8_0  32 values,  34 bytes: fp16 d, int8 q[32];                 x = d * q
//   Q4_0  32 values,  18 bytes: fp16 d, u8 qs[16];                  x = d * (nibble - 8); value j < 16 is the
//                                                                   low nibble of qs[j], value 16 + j its high nibble
//   Q5_0  32 values,  22 bytes: fp16 d, u8 qh[4], u8 qs[16];        x = d * ((nibble | h << 4) - 16): nibbles as Q4_0,
//                                                                   h = bit v of the little-endian word qh
//   Q5_1  32 values,  24 bytes: fp16 d, fp16 m, u8 qh[4], u8 qs[16]; x = d * (nibble | h << 4) + m (bits as Q5_0)
//   Q4_K  256 values, 144 bytes: fp16 d, fp16 dmin, u8 scales[12], u8 qs[128]. Eight sub-blocks of 32, each with a
//         6-bit scale sc and 6-bit min m: x = d * sc * nibble - dmin * m. scales[12] packs the 8 (sc, m) pairs:
//         j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6)
//         << 4, m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. qs: per 64 values, 32 bytes; value i < 32 of the
//         chunk is the low nibble of byte i (sub-block 2k), value 32 + i its high nibble (sub-block 2k + 1).
//   Q5_K  256 values, 176 bytes: fp16 d, fp16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]. Q4_K's sub-blocks, scales
//         and nibble order, with a 5th bit: x = d * sc * (nibble | h << 4) - dmin * m, h = bit 2k (low nibbles,
//         sub-block 2k) or bit 2k + 1 (high nibbles, sub-block 2k + 1) of qh[i] for byte i of chunk k.
//   Q6_K  256 values, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], fp16 d. Sixteen sub-blocks of 16 with an
//         int8 scale each: x = d * scales[v / 16] * (q - 32), q 6 bits. Per 128 values (half h): ql[64h..64h+64),
//         qh[32h..32h+32); for l < 32 the values l, l+32, l+64, l+96 of the half take the low nibble of ql[l],
//         ql[l + 32], the high nibble of ql[l], ql[l + 32], and bits 0-1, 2-3, 4-5, 6-7 of qh[l] as their top 2 bits.
//
// Quantizers (reference quality, no importance matrix):
//   Q8_0, Q4_0, Q5_0: per block, the scale maps the largest-magnitude value to the end of the integer range
//     (Q8_0 d = amax / 127, round half away from zero; Q4_0 d = max / -8, Q5_0 d = max / -16 so that value becomes
//     -8 / -16, then truncate x / d + 8.5 / 16.5, capped at 15 / 31).
//   Q5_1: per block, d = (max - min) / 31 and m = min (fp16), then truncate (x - min) / d + 0.5.
//   Q4_K: per sub-block of 32 an affine fit x ~ scale * q + min (q in 0..15, min <= 0) by a search over 21
//     candidate scales around (max - min) / 15 (min: the best fit so far): each candidate rounds the values, then
//     solves the weighted least-squares (scale, min) for those integers; the candidate with the smallest weighted
//     squared error wins (weights |x| + rms of the sub-block, which favours large values). The 8 scales and 8 mins are
//     then quantized to 6 bits against the super-block's largest (d, dmin as fp16), and the values are re-rounded with
//     the quantized scale and min.
//   Q5_K: Q4_K's algorithm with q in 0..31 and 16 candidate scales around (max - min) / 31 (offsets -0.5 + 0.1 k).
//   Q6_K: per sub-block of 16 a symmetric fit over 19 candidate scales around max / -32: each candidate rounds,
//     the least-squares scale for those integers is computed with weights x^2, and the candidate with the largest
//     explained energy (sum w x q)^2 / sum w q^2 wins. The 16 scales are quantized to int8 against the
//     super-block's largest-magnitude scale (d = that scale / -128), and the values re-rounded.
//   These are the algorithms of llama.cpp's reference quantizers (without an imatrix); a one-off comparison
//   with ggml-quants.c's quantize_row_*_ref on 10^6 values gave identical blocks for the first five types; Q5_1 and
//   Q5_K are checked against llama-quantize's files by scripts/quant_interop.sh (docs/quantization.md).
//
// BlockType and each type's name, GGUF id and geometry: the type table, framework/quant/types.h.
#pragma once
#include <cstdint>

#include "framework/quant/types.h"

namespace anelab::quant {

struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;      // fp16
  uint8_t qh[4];   // bit v: the 5th bit of value v
  uint8_t qs[16];  // low 4 bits, as Q4_0
};
struct BlockQ5_1 {
  uint16_t d, m;   // fp16 step and offset
  uint8_t qh[4];   // bit v: the 5th bit of value v
  uint8_t qs[16];  // low 4 bits, as Q4_0
};
struct BlockQ4_K {
  uint16_t d, dmin;    // fp16 super-block scales of the 6-bit scales and mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];     // 256 nibbles
};
struct BlockQ5_K {
  uint16_t d, dmin;    // fp16 super-block scales of the 6-bit scales and mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min), packed as Q4_K's
  uint8_t qh[32];      // 5th bits: bit 2k / 2k + 1 of byte i for the values of chunk k
  uint8_t qs[128];     // 256 low nibbles, as Q4_K's
};
struct BlockQ6_K {
  uint8_t ql[128];  // low 4 bits
  uint8_t qh[64];   // high 2 bits
  int8_t scales[16];
  uint16_t d;  // fp16
};
// The table's block bytes are the structs' sizes.
static_assert(traits(BlockType::kQ8_0).block_bytes == sizeof(BlockQ8_0) &&
              traits(BlockType::kQ4_0).block_bytes == sizeof(BlockQ4_0) &&
              traits(BlockType::kQ5_0).block_bytes == sizeof(BlockQ5_0) &&
              traits(BlockType::kQ5_1).block_bytes == sizeof(BlockQ5_1) &&
              traits(BlockType::kQ4_K).block_bytes == sizeof(BlockQ4_K) &&
              traits(BlockType::kQ5_K).block_bytes == sizeof(BlockQ5_K) &&
              traits(BlockType::kQ6_K).block_bytes == sizeof(BlockQ6_K));

struct BlockInfo {
  int64_t values;  // values per block
  int64_t bytes;   // bytes per block
  const char* name;
};
constexpr BlockInfo block_info(BlockType t) { return {traits(t).block_values, traits(t).block_bytes, traits(t).name}; }

// Q4_K / Q5_K: the (6-bit scale, 6-bit min) of sub-block j < 8 from the packed scales[12].
inline void q4k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// The inverse: stores sub-block j's sc and m (each < 64) into scales[12] that start zeroed.
inline void q4k_set_scale_min(int j, int sc, int m, uint8_t* s) {
  if (j < 4) {
    s[j] = static_cast<uint8_t>(s[j] | sc);
    s[j + 4] = static_cast<uint8_t>(s[j + 4] | m);
  } else {
    s[j + 4] = static_cast<uint8_t>((sc & 15) | (m & 15) << 4);
    s[j - 4] = static_cast<uint8_t>(s[j - 4] | (sc >> 4) << 6);
    s[j] = static_cast<uint8_t>(s[j] | (m >> 4) << 6);
  }
}

// n values (a multiple of block_info(t).values) from / into n / values blocks.
void dequantize(BlockType t, const uint8_t* src, float* dst, int64_t n);
void quantize(BlockType t, const float* src, uint8_t* dst, int64_t n);

}  // namespace anelab::quant

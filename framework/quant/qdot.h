// Dot products of block-quantized weight rows with int8-quantized activations, the inner loop of the
// quantized decode GEMV. The activation vector is quantized once per GEMV into Q8 blocks of 32 (fp32 scale
// d = amax / 127, q = round(x / d), plus the block's sum of q for the weight formats with an offset), then
// every weight block is combined with its activation block(s) by exact int8 dot products (simd::dot_*):
//
//   Q8_0  d_w d_a sum(q_w q_a)
//   Q4_0  d_w d_a (sum(n q_a) - 8 sum(q_a))                                  n = nibble
//   Q4_K  per sub-block j of 32: d sc_j d_a sum(n q_a) - dmin m_j d_a sum(q_a)
//   Q6_K  per sub-block s of 16: d sc_s d_a sum((q - 32) q_a)                (d_a of the 32-block holding s)
//
// The result differs from the dot product with the dequantized weights only by the activation rounding:
// |error| <= sum_i |w_i| d_a(i) / 2 (plus fp32 accumulation rounding).
#pragma once
#include <cstdint>
#include <vector>

#include "framework/quant/blocks.h"

namespace anelab::quant {

struct Q8Acts {
  int64_t n = 0;             // values (a multiple of 32)
  std::vector<int8_t> q;     // [n]
  std::vector<float> d;      // [n / 32] block scales
  std::vector<int32_t> sum;  // [n / 32] sum of the block's q
};

// Quantizes x [n] (n a multiple of 32) into a; a's buffers only grow (no allocation once they are large enough).
void quantize_acts(const float* x, int64_t n, Q8Acts& a);
// sum_i w_i x_i for one weight row of a.n values stored as type t.
float dot_row(BlockType t, const uint8_t* row, const Q8Acts& a);

}  // namespace anelab::quant

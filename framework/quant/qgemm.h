// Batched product with block-quantized weights, the CPU prefill's GEMM over Q8_0 / Q4_0 / Q4_K / Q6_K rows:
// Y[t, r] = sum_k X[t, k] W[r, k] (+ bias[r]), X [n_tok, cols] fp32, Y [n_tok, rows] fp32, W [rows, cols] in
// blocks (framework/quant/blocks.h), row-major.
//
// Every token's activations are quantized once, as the GEMV does (quantize_acts: int8 blocks of 32, fp32
// scale d_a). W is split into panels of kNR rows (simd::kQGemmNV vectors); per (panel, k block of 512
// values) one function per type unpacks the blocks into an int8 panel laid out for the micro-kernel
// ([k / 4][kNR][4]: 4 consecutive k of each row, the vpdpbusd / SDOT group; whole Q8_0 panels by a transpose
// of 32-bit words, kWidth rows at once, simd::rows_w8x8) with per-row scales per group
// of 32 (16 for Q6_K) and, for Q4_K, per-row mins per 32. The micro-kernel keeps kQGemmMR tokens x kNR rows
// of int32 sums in registers (simd::dot4_u8 / dot4_s8: AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw, NEON SDOT
// or SMULL, scalar) and folds them into fp32 accumulators at the end of each group:
//
//   acc[t, r] += scale[r, g] * (d_a[t, g] * float(isum[t, r, g]))        isum exact in int32
//   Q8_0  isum = sum(q q_a)          (with vpdpbusd: weights stored as q + 128, isum starts at -128 sum(q_a))
//   Q4_0  isum = sum(n q_a) - 8 sum(q_a)                                   n = nibble; starts at -8 sum(q_a)
//   Q4_K  isum = sum(n q_a), scale = d sc_j; then acc -= dmin m_j * (d_a sum(q_a)) per sub-block j of 32
//   Q6_K  isum = sum(q q_a) - 32 sum16(q_a) per sub-block of 16, scale = d sc_s
//
// So the result differs from the dot product of the dequantized weights with the quantized activations by
// fp32 rounding only, and from the product with X by the activation rounding, |error| <= sum_k |w_k| d_a / 2.
// The fold order differs from the GEMV's (per-row sums over the same blocks), so prefill and decode agree
// within fp32 rounding, not bit for bit. Panels are spread over the pool; buffers are per thread and only grow.
#pragma once
#include <cstdint>

#include "framework/core/thread_pool.h"
#include "framework/quant/blocks.h"

namespace anelab::quant {

// Y = X W^T (+ bias) for W [rows, cols] of type t (rows of cols / values blocks, each row_bytes apart; for Q8_0
// and Q4_K the first tiled_rows rows may be row tiles, qdot.h, whose groups copy into the panels: Q8_0's as they
// are, Q4_K's split into nibbles).
// cols must be whole blocks; bias [rows] or nullptr.
void gemm(ThreadPool& pool, BlockType t, const uint8_t* w, int64_t rows, int64_t cols, const float* bias,
          const float* x, int64_t n_tok, float* y, int64_t tiled_rows = 0);

}  // namespace anelab::quant

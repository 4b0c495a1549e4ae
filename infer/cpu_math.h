// CPU math of the inference engine (GEMV, GEMM, softmax, ...; "kernels" in this tree are MIL programs,
// framework/kernels), written against the SIMD layer (framework/simd: AVX-512, AVX2, NEON or scalar); fp32
// accumulation everywhere.
//
// Matrices are row-major [rows, cols] like torch nn.Linear.weight (y = W x), stored fp32 or fp16.
// fp16 weights are widened (vcvtph2ps on x86, FCVTL on arm64) and multiplied with fp32 FMA: decode is
// memory-bound (one pass over the weights per token), so the widening is free, and fp32 accumulation
// keeps GEMV results within fp32 rounding of the fp16 weights (fp16 FMA, AVX512-FP16 or ARMv8.2 FP16,
// would accumulate in fp16 and lose ~3 digits over a 4864-long dot product for no bandwidth gain).
//
// Block-quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, framework/quant/blocks.h) stay in their blocks: a GEMV
// quantizes x once into the int8 form(s) its matrices read, as llama.cpp does (Q8_0 blocks of 32 or Q8_K
// blocks of 256; per-thread buffer, reused: no allocation per token), and dots each row with them by exact
// int8 dot products per block (framework/quant/qdot.h: AVX-512 VNNI, AVX2, NEON dotprod or scalar).
// A GEMM over them (framework/quant/qgemm.h) quantizes every token's input once, unpacks the weights per
// (row panel, k block) into int8 panels and runs a register-tiled int8 micro-kernel (tokens x rows).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/core/thread_pool.h"
#include "framework/quant/mat.h"

namespace anelab::infer {

// Weight matrices (fp32, fp16 or block types, row-major [rows, cols]): framework/quant/mat.h.
using quant::block_type;
using quant::is_quantized;
using quant::Mat;
using quant::WType;

// One output segment of a fused GEMV: y[0..W.rows) = W x (+ bias when non-null).
struct GemvOut {
  const Mat* w;
  const float* bias;  // [w->rows] or nullptr
  float* y;           // [w->rows]
};

// Several GEMVs sharing the input x [cols] (e.g. q/k/v, gate/up), rows split over the pool's workers. The
// segments come as a braced list (a stack array: a decode step allocates nothing).
void gemv(ThreadPool& pool, std::initializer_list<GemvOut> outs, const float* x);
inline void gemv(ThreadPool& pool, const Mat& w, const float* bias, const float* x, float* y) {
  gemv(pool, {GemvOut{&w, bias, y}}, x);
}

// The GEMV of a few tokens at once (the server's batched decode step): for each output, y [n_tok, w->rows] =
// W X[t, :] (+ bias) for t < n_tok, X [n_tok, cols]. Each row of each token is computed by the GEMV's own kernels
// (the same bits as gemv of that token alone), and the weights are read from memory once: every block of 64 rows is
// applied to all the tokens while it is in cache (a GEMV is memory-bound; the GEMM's panel unpacking costs more than
// it saves for a few tokens). n_tok = 1 is gemv.
void gemv_batch(ThreadPool& pool, std::initializer_list<GemvOut> outs, const float* x, int64_t n_tok);

// Batched: Y[t, :] = W X[t, :] (+ bias) for t < n_tok. X [n_tok, W.cols], Y [n_tok, W.rows], row-major.
void gemm(ThreadPool& pool, const Mat& w, const float* bias, const float* x, int64_t n_tok, float* y);

// ---- elementwise / row ops (single row, n elements; norms and RoPE: framework/kernels/cpu_ops.h) ----
float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);  // y += a x
float gelu_tanh(float x);
float silu(float x);
// Vectorised (~1 ulp exp): in place over n elements.
void exp_inplace(float* x, int64_t n);
float exp_sub_sum(float* x, float sub, int64_t n);  // x = exp(x - sub); returns the sum
float max_of(const float* x, int64_t n);
void silu_mul(float* a, const float* b, int64_t n);  // a = silu(a) * b
void silu_inplace(float* a, int64_t n);              // a = silu(a)
void gelu_tanh_inplace(float* a, int64_t n);

// Row of an embedding-like matrix as fp32 (block types dequantized).
void mat_row(const Mat& m, int64_t row, float* out);

}  // namespace anelab::infer

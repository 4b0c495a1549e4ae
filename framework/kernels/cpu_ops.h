// The transformer's position and norm arithmetic on the CPU, written once for the inference engine
// (infer/engine.cpp), the CPU training reference (train/cpu_model.cpp) and the MIL RoPE tables
// (blocks.h rope_tables). Plain scalar C++ on one row at a time; callers split rows over their threads.
//
// Two precisions, because each side matches its own independent reference bit for bit or to ulps:
//   kFp32  RoPE frequency and angle in fp32, RMSNorm sum in fp32: llama2.c run.c and Hugging Face
//          (the inference engine; tests/infer compare with both);
//   kFp64  RoPE angle and RMSNorm sum in fp64, rounded once to fp32: scripts/train_reference.py (the
//          training reference, tests/train) and the MIL tables.
#pragma once
#include <cstdint>

#include "framework/kernels/blocks.h"

namespace anelab::kern::cpu {

enum class Precision { kFp32, kFp64 };

// cos / sin [n, HD/2] (row-major) for positions pos0 .. pos0+n-1: angle(p, i) = p * theta^(-2i/HD) / linear
// (linear RoPE scaling divides the frequencies, as Hugging Face's "linear" rope_type).
void rope_half_tables(int64_t n, int64_t head_dim, double theta, int64_t pos0, Precision prec, float* cos, float* sin,
                      double linear = 1.0);

// Rotates every head of one row x [heads * HD] by the row's angles (cos / sin [HD/2]): pairs (x[2i], x[2i+1])
// for adjacent pairs, (x[i], x[i + HD/2]) for rotate-half. sign = -1 rotates back (the backward of RoPE).
void rope_row(float* x, int64_t heads, int64_t head_dim, RopeStyle style, const float* cos, const float* sin,
              float sign = 1.0f);

// 1 / sqrt(mean(x²) + eps) over x [n], summed in fp32 or fp64.
float rms_rrms(const float* x, int64_t n, float eps, Precision prec);
// out [n] = x * rrms * w (RMSNorm); returns rrms.
float rms_norm(const float* x, const float* w, float eps, int64_t n, float* out, Precision prec);
// out [n] = (x - mean) / sqrt(var + eps) * w + b (LayerNorm, mean and variance in fp64); b may be null.
void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t n, float* out);

}  // namespace anelab::kern::cpu

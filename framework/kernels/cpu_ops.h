// The transformer's position and norm arithmetic on the CPU, written once for the inference engine
// (infer/engine.cpp), the CPU training reference (train/cpu_model.cpp) and the MIL RoPE tables
// (nn.h rope_tables). Plain scalar C++ on one row at a time; callers split rows over their threads.
//
// Two conventions, because each side reproduces its own independent reference bit for bit:
//   kRunc       RoPE frequency and angle in fp32, RMSNorm sum in fp32, rotation operands in llama2.c run.c's
//               (adjacent pairs) and Hugging Face's (rotate-half) order: the inference engine (tests/infer
//               compare with both);
//   kReference  RoPE angle and RMSNorm sum in fp64, rounded once to fp32, rotation (a c - b s, a s + b c)
//               for both styles: the CPU training reference (scripts/train_reference.py, tests/train) and
//               the MIL RoPE tables.
// The operand order matters where the compiler fuses a product and a sum into an FMA (the product left
// unfused is rounded).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "framework/kernels/nn.h"

namespace anelab::kern::cpu {

enum class Numerics { kRunc, kReference };

// The inverse frequency of pair i (0 <= i < HD/2): theta^(-2i/HD), then the frequency scaling (arch_types.h
// RopeScaling; llama3 as transformers' _compute_llama3_parameters). kRunc evaluates every step in fp32 in
// transformers' order, kReference in fp64.
double rope_inv_freq(int64_t i, int64_t head_dim, double theta, const RopeScaling& scaling, Numerics prec);

// The frequency of each pair i < HD/2 as the tables below use it: rope_inv_freq(i) / linear (linear RoPE scaling
// divides the frequencies, as Hugging Face's "linear" rope_type: Gemma 3's global layers; in fp32 for kRunc).
std::vector<double> rope_freqs(int64_t head_dim, double theta, Numerics prec, const RopeScaling& scaling = {},
                               double linear = 1.0);

// cos / sin [n, HD/2] (row-major) for positions pos0 .. pos0+n-1: angle(p, i) = p * freqs[i] (fp32 product for
// kRunc, fp64 for kReference). This form allocates nothing (a decode step's, with the frequencies made once).
void rope_half_tables(int64_t n, std::span<const double> freqs, int64_t pos0, Numerics prec, float* cos, float* sin);
// The same with the frequencies of rope_freqs(head_dim, theta, prec, scaling, linear).
void rope_half_tables(int64_t n, int64_t head_dim, double theta, int64_t pos0, Numerics prec, float* cos, float* sin,
                      const RopeScaling& scaling = {}, double linear = 1.0);

// Rotates every head of one row x [heads * HD] by the row's angles (cos / sin [HD/2]): pairs (x[2i], x[2i+1])
// for adjacent pairs, (x[i], x[i + HD/2]) for rotate-half. sign = -1 rotates back (the backward of RoPE).
void rope_row(float* x, int64_t heads, int64_t head_dim, RopeStyle style, const float* cos, const float* sin,
              Numerics num, float sign = 1.0f);

// 1 / sqrt(mean(x²) + eps) over x [n], summed in fp32 (kRunc) or fp64 (kReference).
float rms_rrms(const float* x, int64_t n, float eps, Numerics num);
// out [n] = x * rrms * w (RMSNorm); returns rrms.
float rms_norm(const float* x, const float* w, float eps, int64_t n, float* out, Numerics num);
// out [n] = (x - mean) / sqrt(var + eps) * w + b (LayerNorm, mean and variance in fp64); b may be null.
void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t n, float* out);

}  // namespace anelab::kern::cpu

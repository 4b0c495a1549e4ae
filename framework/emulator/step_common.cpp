// Helpers shared by the step functions of the op families: the vectorised fp32 exp, row softmax (softmax, sdpa) and
// rounding to a dtype over the thread pool.
//
// Every step function reads fp32 arrays that hold dtype-exact values and writes its result rounded to the
// op's declared dtype (fp16: round-to-nearest-even, overflow to +-inf). Arithmetic is fp32; reductions
// and softmax accumulate in fp32 in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/fp16.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {
namespace {

namespace W = simd;

// exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 (two-part ln2), p = degree-7 Taylor
// polynomial (relative error < 1e-8 on |r| <= ln2/2), scaled by 2^n in one rounding (W::ldexp).
// Inputs below -86 (and NaN) give exactly 0 (exp(-86) ~ 4e-38): results stay normal floats. Subnormal
// results (e.g. the masked half of causal attention scores, ~-65504) cost ~100 cycles per operation
// downstream and are far below fp16's smallest subnormal (6e-8) anyway. Same operations in the same order
// on every architecture, hence the same bits.
inline W::F32 exp_v(W::F32 x) {
  const W::Mask keep = W::ge(x, W::set1(-86.0f));
  x = W::min(W::set1(88.8f), W::max(W::set1(-86.0f), x));
  const W::F32 n = W::round_even(W::mul(x, W::set1(1.44269504088896341f)));
  W::F32 r = W::fnmadd(n, W::set1(0.693145751953125f), x);
  r = W::fnmadd(n, W::set1(1.428606765330187e-06f), r);
  W::F32 p = W::set1(1.0f / 5040.0f);
  p = W::fmadd(p, r, W::set1(1.0f / 720.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 120.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 24.0f));
  p = W::fmadd(p, r, W::set1(1.0f / 6.0f));
  p = W::fmadd(p, r, W::set1(0.5f));
  p = W::fmadd(p, r, W::set1(1.0f));
  p = W::fmadd(p, r, W::set1(1.0f));
  return W::select(keep, W::ldexp(p, n), W::zero());
}

}  // namespace

void exp_inplace_fp32(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + W::kWidth <= n; i += W::kWidth) W::store(x + i, exp_v(W::load(x + i)));
  if (i < n) W::store_n(x + i, exp_v(W::load_n(x + i, n - i)), n - i);
}

void round_to_dtype(float* x, int64_t n, mil::DType t, const ExecCtx& ctx) {
  if (t == mil::DType::kFp32) return;
  const int64_t chunk = 1 << 14, nc = (n + chunk - 1) / chunk;
  par_for(ctx, nc, n > kParMin, [&](int64_t c) { round_range(x + c * chunk, std::min(chunk, n - c * chunk), t); });
}

// Shared by softmax (reduce.cpp) and scaled_dot_product_attention (linear.cpp).
void softmax_rows(float* x, int64_t rows, int64_t len, const ExecCtx& ctx) {
  par_for(ctx, rows, rows * len > kParMin, [&](int64_t r) {
    float* row = x + r * len;
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < len; ++j) row[j] -= mx;
    exp_inplace_fp32(row, len);
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) sum += row[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < len; ++j) row[j] *= inv;
    round_fp16_inplace(row, static_cast<size_t>(len));
  });
}

}  // namespace anelab::emu

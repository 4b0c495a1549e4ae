#include "infer/cpu_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"

namespace anelab::infer {

namespace {

constexpr int64_t kMinParallelWork = 1 << 16;

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1); }

inline __m512 load_w(const half_bits* p, __mmask16 m) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_maskz_loadu_epi16(m, p));  // maskz: no GCC 12 false warning
}
inline __m512 load_w(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

// y[r] = dot(W[r, :], x) for rows [r0, r1), 4 rows at a time.
template <typename T>
void gemv_rows(const T* w, int64_t cols, const float* x, const float* bias, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const T* w0 = w + r * cols;
    const T* w1 = w0 + cols;
    const T* w2 = w1 + cols;
    const T* w3 = w2 + cols;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k += 16) {
      const __mmask16 m = tail_mask(cols - k);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
      a0 = _mm512_fmadd_ps(load_w(w0 + k, m), xv, a0);
      a1 = _mm512_fmadd_ps(load_w(w1 + k, m), xv, a1);
      a2 = _mm512_fmadd_ps(load_w(w2 + k, m), xv, a2);
      a3 = _mm512_fmadd_ps(load_w(w3 + k, m), xv, a3);
    }
    y[r] = _mm512_reduce_add_ps(a0) + (bias ? bias[r] : 0.0f);
    y[r + 1] = _mm512_reduce_add_ps(a1) + (bias ? bias[r + 1] : 0.0f);
    y[r + 2] = _mm512_reduce_add_ps(a2) + (bias ? bias[r + 2] : 0.0f);
    y[r + 3] = _mm512_reduce_add_ps(a3) + (bias ? bias[r + 3] : 0.0f);
  }
  for (; r < r1; ++r) {
    const T* w0 = w + r * cols;
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k += 16) {
      const __mmask16 m = tail_mask(cols - k);
      a0 = _mm512_fmadd_ps(load_w(w0 + k, m), _mm512_maskz_loadu_ps(m, x + k), a0);
    }
    y[r] = _mm512_reduce_add_ps(a0) + (bias ? bias[r] : 0.0f);
  }
}

void gemv_range(const GemvOut& o, const float* x, int64_t r0, int64_t r1) {
  if (o.w->type == WType::kF16)
    gemv_rows(o.w->f16(), o.w->cols, x, o.bias, o.y, r0, r1);
  else
    gemv_rows(o.w->f32(), o.w->cols, x, o.bias, o.y, r0, r1);
}

// GEMM tile: rows [r, r+4) of W against tokens [t, t+NT) of X; dot-product form with fp32 accumulators.
template <typename T, int NT>
void gemm_tile(const T* w, int64_t cols, const float* x, int64_t ldy, const float* bias, float* y, int64_t r, int64_t t,
               int nr) {
  __m512 acc[4][NT];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  const T* wr[4];
  for (int i = 0; i < 4; ++i) wr[i] = w + (r + std::min(i, nr - 1)) * cols;
  const float* xr[NT];
  for (int j = 0; j < NT; ++j) xr[j] = x + (t + j) * cols;
  for (int64_t k = 0; k < cols; k += 16) {
    const __mmask16 m = tail_mask(cols - k);
    __m512 wv[4];
    for (int i = 0; i < 4; ++i) wv[i] = load_w(wr[i] + k, m);
    for (int j = 0; j < NT; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xr[j] + k);
      for (int i = 0; i < 4; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < nr; ++i) y[(t + j) * ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]) + (bias ? bias[r + i] : 0.0f);
}

template <typename T>
void gemm_rows(const T* w, int64_t cols, const float* x, int64_t n_tok, int64_t ldy, const float* bias, float* y,
               int64_t r0, int64_t r1) {
  constexpr int64_t kRowBlock = 64;  // W rows kept hot in L1/L2 while the tokens stream past
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    int64_t t = 0;
    for (; t + 6 <= n_tok; t += 6)
      for (int64_t r = rb; r < re; r += 4) gemm_tile<T, 6>(w, cols, x, ldy, bias, y, r, t, static_cast<int>(std::min<int64_t>(4, re - r)));
    for (; t < n_tok; ++t)
      for (int64_t r = rb; r < re; r += 4) gemm_tile<T, 1>(w, cols, x, ldy, bias, y, r, t, static_cast<int>(std::min<int64_t>(4, re - r)));
  }
}

}  // namespace

void gemv(ThreadPool& pool, const std::vector<GemvOut>& outs, const float* x) {
  int64_t total = 0, work = 0;
  for (const auto& o : outs) {
    total += o.w->rows;
    work += o.w->rows * o.w->cols;
  }
  // Below ~64K multiply-adds a wake-up of the other worker costs more than it saves.
  auto body = [&](int64_t b, int64_t e) {
    int64_t base = 0;
    for (const auto& o : outs) {
      const int64_t lo = std::max(b, base), hi = std::min(e, base + o.w->rows);
      if (lo < hi) gemv_range(o, x, lo - base, hi - base);
      base += o.w->rows;
    }
  };
  if (work < kMinParallelWork)
    body(0, total);
  else
    pool.parallel_for(total, 4, body);
}

void gemm(ThreadPool& pool, const Mat& w, const float* bias, const float* x, int64_t n_tok, float* y) {
  if (n_tok == 1) {
    gemv(pool, w, bias, x, y);
    return;
  }
  auto body = [&](int64_t b, int64_t e) {
    if (w.type == WType::kF16)
      gemm_rows(w.f16(), w.cols, x, n_tok, w.rows, bias, y, b, e);
    else
      gemm_rows(w.f32(), w.cols, x, n_tok, w.rows, bias, y, b, e);
  };
  if (w.rows * w.cols * n_tok < kMinParallelWork)
    body(0, w.rows);
  else
    pool.parallel_for(w.rows, 4, body);
}

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (ss * x[i]);
}

void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t n, float* out) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - m) * inv * w[i] + (b ? b[i] : 0.0f);
}

float dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    _mm512_mask_storeu_ps(y + k, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, y + k)));
  }
}

float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
float silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }

void mat_row(const Mat& m, int64_t row, float* out) {
  ANELAB_CHECK(row >= 0 && row < m.rows, "infer", "row ", row, " out of range [0, ", m.rows, ")");
  if (m.type == WType::kF16)
    half_to_float(m.f16() + row * m.cols, out, static_cast<size_t>(m.cols));
  else
    std::memcpy(out, m.f32() + row * m.cols, static_cast<size_t>(m.cols) * sizeof(float));
}

}  // namespace anelab::infer

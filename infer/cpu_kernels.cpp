#include "infer/cpu_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
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

// exp of 16 floats (Cephes-style: n = round(x log2 e), r = x - n ln2 in two parts, degree-6 polynomial,
// scaled by 2^n with vscalefps); ~1 ulp, exp(-inf) = 0, large x saturates to +inf.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// fp16 -> fp32 of 16 values; the unmasked form lets the compiler fold the load into vcvtph2ps.
inline __m512 load16(const half_bits* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

// y[r] = dot(W[r, :], x) for rows [r0, r1), 4 rows at a time, 32 columns per step (two accumulators
// per row: 8 FMA chains in flight), software prefetch 2 KiB ahead on each row stream.
template <typename T>
void gemv_rows(const T* w, int64_t cols, const float* x, const float* bias, float* y, int64_t r0, int64_t r1) {
  constexpr int64_t kAhead = 2048 / sizeof(T);
  const int64_t main = cols & ~int64_t{31};
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const T* w0 = w + r * cols;
    const T* w1 = w0 + cols;
    const T* w2 = w1 + cols;
    const T* w3 = w2 + cols;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps(), b2 = _mm512_setzero_ps(), b3 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < main; k += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + k + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + k + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w2 + k + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w3 + k + kAhead), _MM_HINT_T0);
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
      a0 = _mm512_fmadd_ps(load16(w0 + k), x0, a0);
      a1 = _mm512_fmadd_ps(load16(w1 + k), x0, a1);
      a2 = _mm512_fmadd_ps(load16(w2 + k), x0, a2);
      a3 = _mm512_fmadd_ps(load16(w3 + k), x0, a3);
      b0 = _mm512_fmadd_ps(load16(w0 + k + 16), x1, b0);
      b1 = _mm512_fmadd_ps(load16(w1 + k + 16), x1, b1);
      b2 = _mm512_fmadd_ps(load16(w2 + k + 16), x1, b2);
      b3 = _mm512_fmadd_ps(load16(w3 + k + 16), x1, b3);
    }
    for (; k < cols; k += 16) {
      const __mmask16 m = tail_mask(cols - k);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
      a0 = _mm512_fmadd_ps(load_w(w0 + k, m), xv, a0);
      a1 = _mm512_fmadd_ps(load_w(w1 + k, m), xv, a1);
      a2 = _mm512_fmadd_ps(load_w(w2 + k, m), xv, a2);
      a3 = _mm512_fmadd_ps(load_w(w3 + k, m), xv, a3);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0)) + (bias ? bias[r] : 0.0f);
    y[r + 1] = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1)) + (bias ? bias[r + 1] : 0.0f);
    y[r + 2] = _mm512_reduce_add_ps(_mm512_add_ps(a2, b2)) + (bias ? bias[r + 2] : 0.0f);
    y[r + 3] = _mm512_reduce_add_ps(_mm512_add_ps(a3, b3)) + (bias ? bias[r + 3] : 0.0f);
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

// ---- GEMM: Y[t, r] = sum_k X[t, k] W[r, k] (+ bias[r]) ----
// Outer-product form: W is packed per (32-row panel, kc-column block) into fp32 [kc][32] (converted and
// transposed once, then reused from L1 by every token of the chunk), and a micro-kernel keeps an
// MR-token x 32-row tile of Y in 2*MR zmm registers, broadcasting X[t, k] from the (L2-resident)
// activation block. Each Y element accumulates over k in order in fp32.
constexpr int64_t kNR = 32, kMR = 12, kKC = 256;

template <typename T>
void pack_panel(const T* w, int64_t cols, int64_t r0, int64_t nr, int64_t k0, int64_t kc, float* dst) {
  alignas(64) float row[kKC];
  for (int64_t j = 0; j < kNR; ++j) {
    if (j >= nr) {
      for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = 0.0f;
      continue;
    }
    const T* src = w + (r0 + j) * cols + k0;
    for (int64_t k = 0; k < kc; k += 16) _mm512_store_ps(row + k, load_w(src + k, tail_mask(kc - k)));
    for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = row[k];
  }
}

// Y[t, 0..32) (+)= X[t, k0..k0+kc) . panel for t < MR. First k block: Y = acc + bias; later: Y += acc.
template <int MR>
void micro_kernel(int64_t kc, const float* x, int64_t ldx, const float* wp, float* y, int64_t ldy, __mmask16 m0,
                  __mmask16 m1, bool first, const float* bias) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_load_ps(wp + k * kNR), w1 = _mm512_load_ps(wp + k * kNR + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * ldx + k]);
      c0[i] = _mm512_fmadd_ps(w0, xb, c0[i]);
      c1[i] = _mm512_fmadd_ps(w1, xb, c1[i]);
    }
  }
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (first && bias) b0 = _mm512_maskz_loadu_ps(m0, bias), b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  for (int i = 0; i < MR; ++i) {
    float* yi = y + i * ldy;
    if (first) {
      _mm512_mask_storeu_ps(yi, m0, _mm512_add_ps(c0[i], b0));
      _mm512_mask_storeu_ps(yi + 16, m1, _mm512_add_ps(c1[i], b1));
    } else {
      _mm512_mask_storeu_ps(yi, m0, _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yi)));
      _mm512_mask_storeu_ps(yi + 16, m1, _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yi + 16)));
    }
  }
}

using KernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, __mmask16, __mmask16, bool,
                          const float*);
template <int... I>
constexpr std::array<KernelFn, sizeof...(I)> kernel_table(std::integer_sequence<int, I...>) {
  return {&micro_kernel<I + 1>...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kMR>{});

// Row panels [p0, p1) of Y (32 rows each) for all n_tok tokens.
template <typename T>
void gemm_panels(const T* w, int64_t rows, int64_t cols, const float* x, int64_t n_tok, int64_t ldy, const float* bias,
                 float* y, int64_t p0, int64_t p1) {
  alignas(64) float packed[kKC * kNR];
  for (int64_t k0 = 0; k0 < cols; k0 += kKC) {
    const int64_t kc = std::min(kKC, cols - k0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r0 = p * kNR, nr = std::min(kNR, rows - r0);
      pack_panel(w, cols, r0, nr, k0, kc, packed);
      const __mmask16 m0 = tail_mask(nr), m1 = tail_mask(std::max<int64_t>(0, nr - 16));
      for (int64_t t = 0; t < n_tok; t += kMR) {
        const int64_t mr = std::min(kMR, n_tok - t);
        kKernels[static_cast<size_t>(mr - 1)](kc, x + t * cols + k0, cols, packed, y + t * ldy + r0, ldy, m0, m1,
                                              k0 == 0, bias ? bias + r0 : nullptr);
      }
    }
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
  const int64_t panels = (w.rows + kNR - 1) / kNR;
  auto body = [&](int64_t b, int64_t e) {
    if (w.type == WType::kF16)
      gemm_panels(w.f16(), w.rows, w.cols, x, n_tok, w.rows, bias, y, b, e);
    else
      gemm_panels(w.f32(), w.rows, w.cols, x, n_tok, w.rows, bias, y, b, e);
  };
  if (w.rows * w.cols * n_tok < kMinParallelWork)
    body(0, panels);
  else
    pool.parallel_for(panels, 1, body);
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

void exp_inplace(float* x, int64_t n) {
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    _mm512_mask_storeu_ps(x + k, m, exp16(_mm512_maskz_loadu_ps(m, x + k)));
  }
}

float exp_sub_sum(float* x, float sub, int64_t n) {
  const __m512 s = _mm512_set1_ps(sub);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + k), s)));
    _mm512_mask_storeu_ps(x + k, m, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

float max_of(const float* x, int64_t n) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, x + k));
  }
  return _mm512_reduce_max_ps(mx);
}

// a = silu(a) * b = a b / (1 + exp(-a)).
void silu_mul(float* a, const float* b, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    const __m512 v = _mm512_maskz_loadu_ps(m, a + k);
    const __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), v)));
    _mm512_mask_storeu_ps(a + k, m, _mm512_div_ps(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, b + k)), d));
  }
}

// GELU (tanh form): 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_tanh_inplace(float* a, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), c0 = _mm512_set1_ps(-2.0f * 0.7978845608028654f),
               c1 = _mm512_set1_ps(0.044715f);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail_mask(n - k);
    const __m512 x = _mm512_maskz_loadu_ps(m, a + k);
    const __m512 u = _mm512_mul_ps(c0, _mm512_fmadd_ps(_mm512_mul_ps(c1, x), _mm512_mul_ps(x, x), x));
    _mm512_mask_storeu_ps(a + k, m, _mm512_div_ps(x, _mm512_add_ps(one, exp16(u))));
  }
}

void mat_row(const Mat& m, int64_t row, float* out) {
  ANELAB_CHECK(row >= 0 && row < m.rows, "infer", "row ", row, " out of range [0, ", m.rows, ")");
  if (m.type == WType::kF16)
    half_to_float(m.f16() + row * m.cols, out, static_cast<size_t>(m.cols));
  else
    std::memcpy(out, m.f32() + row * m.cols, static_cast<size_t>(m.cols) * sizeof(float));
}

}  // namespace anelab::infer

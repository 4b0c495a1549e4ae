// RoPE and norms on the CPU (see cpu_ops.h).
#include "framework/kernels/cpu_ops.h"

#include <cmath>

namespace anelab::kern::cpu {

void rope_half_tables(int64_t n, int64_t hd, double theta, int64_t pos0, Precision prec, float* cos, float* sin,
                      double linear) {
  const int64_t half = hd / 2;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < half; ++i) {
      float c, s;
      if (prec == Precision::kFp32) {  // run.c: freq = 1 / theta^(2i / HD) in fp32, angle = pos * freq
        float freq = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
        if (linear != 1.0) freq /= static_cast<float>(linear);
        const float ang = static_cast<float>(pos0 + p) * freq;
        c = std::cos(ang), s = std::sin(ang);
      } else {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd)) / linear;
        const double ang = static_cast<double>(pos0 + p) * freq;
        c = static_cast<float>(std::cos(ang)), s = static_cast<float>(std::sin(ang));
      }
      cos[p * half + i] = c;
      sin[p * half + i] = s;
    }
}

void rope_row(float* x, int64_t heads, int64_t hd, RopeStyle style, const float* cos, const float* sin, float sign) {
  const int64_t half = hd / 2;
  const bool adjacent = style == RopeStyle::kAdjacentPairs;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * hd;
    for (int64_t i = 0; i < half; ++i) {
      float* a = adjacent ? v + 2 * i : v + i;
      float* b = adjacent ? v + 2 * i + 1 : v + i + half;
      const float c = cos[i], s = sign * sin[i];
      const float a0 = *a, b0 = *b;
      *a = a0 * c - b0 * s;
      *b = a0 * s + b0 * c;
    }
  }
}

namespace {
template <typename Acc>
float rrms(const float* x, int64_t n, float eps) {
  Acc ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<Acc>(x[i]) * x[i];
  return static_cast<float>(Acc(1) / std::sqrt(ss / static_cast<Acc>(n) + static_cast<Acc>(eps)));
}
}  // namespace

float rms_rrms(const float* x, int64_t n, float eps, Precision prec) {
  return prec == Precision::kFp32 ? rrms<float>(x, n, eps) : rrms<double>(x, n, eps);
}

float rms_norm(const float* x, const float* w, float eps, int64_t n, float* out, Precision prec) {
  const float r = rms_rrms(x, n, eps, prec);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
  return r;
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

}  // namespace anelab::kern::cpu

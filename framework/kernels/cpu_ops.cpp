// RoPE and norms on the CPU (see cpu_ops.h).
#include "framework/kernels/cpu_ops.h"

#include <cmath>
#include <vector>

namespace anelab::kern::cpu {

double rope_inv_freq(int64_t i, int64_t hd, double theta, const RopeScaling& scaling, Numerics prec) {
  const bool llama3 = scaling.type == RopeScalingType::kLlama3;
  if (prec == Numerics::kRunc) {  // run.c / transformers: 1 / theta^(2i / HD) in fp32
    const float inv = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
    return llama3 ? llama3_scaled_inv_freq(inv, scaling) : inv;
  }
  const double inv = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  return llama3 ? llama3_scaled_inv_freq(inv, scaling) : inv;
}

std::vector<double> rope_freqs(int64_t hd, double theta, Numerics prec, const RopeScaling& scaling, double linear) {
  std::vector<double> freq(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < freq.size(); ++i) {
    const double f = rope_inv_freq(static_cast<int64_t>(i), hd, theta, scaling, prec);
    freq[i] = linear == 1.0 ? f : prec == Numerics::kRunc ? double(float(f) / float(linear)) : f / linear;
  }
  return freq;
}

void rope_half_tables(int64_t n, std::span<const double> freqs, int64_t pos0, Numerics prec, float* cos, float* sin) {
  const auto half = static_cast<int64_t>(freqs.size());
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < half; ++i) {
      float c, s;
      if (prec == Numerics::kRunc) {  // angle = pos * freq in fp32
        const float ang = static_cast<float>(pos0 + p) * static_cast<float>(freqs[static_cast<size_t>(i)]);
        c = std::cos(ang), s = std::sin(ang);
      } else {
        const double ang = static_cast<double>(pos0 + p) * freqs[static_cast<size_t>(i)];
        c = static_cast<float>(std::cos(ang)), s = static_cast<float>(std::sin(ang));
      }
      cos[p * half + i] = c;
      sin[p * half + i] = s;
    }
}

void rope_half_tables(int64_t n, int64_t hd, double theta, int64_t pos0, Numerics prec, float* cos, float* sin,
                      const RopeScaling& scaling, double linear) {
  rope_half_tables(n, rope_freqs(hd, theta, prec, scaling, linear), pos0, prec, cos, sin);
}

namespace {
// (x[i], x[i + HD/2]) of each head as Hugging Face writes it: x1 cos - x2 sin, x2 cos + x1 sin.
void rope_row_hf(float* x, int64_t heads, int64_t hd, const float* cos, const float* sin, float sign) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * hd;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos[i], s = sign * sin[i], x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c - x2 * s;
      v[i + half] = x2 * c + x1 * s;
    }
  }
}
}  // namespace

void rope_row(float* x, int64_t heads, int64_t hd, RopeStyle style, const float* cos, const float* sin, Numerics num,
              float sign) {
  if (style == RopeStyle::kRotateHalf && num == Numerics::kRunc) {
    rope_row_hf(x, heads, hd, cos, sin, sign);
    return;
  }
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

float rms_rrms(const float* x, int64_t n, float eps, Numerics num) {
  return num == Numerics::kRunc ? rrms<float>(x, n, eps) : rrms<double>(x, n, eps);
}

float rms_norm(const float* x, const float* w, float eps, int64_t n, float* out, Numerics num) {
  const float r = rms_rrms(x, n, eps, num);
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

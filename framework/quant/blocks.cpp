// Reference dequantizers and quantizers of the block formats (layouts and algorithms in blocks.h).
#include "framework/quant/blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

inline float h2f(uint16_t h) { return simd::soft_h2f(h); }
inline uint16_t f2h(float x) { return simd::soft_f2h(x); }
inline int round_int(float x) { return static_cast<int>(std::nearbyint(x)); }  // ties to even
constexpr float kTiny = 1e-15f;  // a group whose largest |x| is below this is all zeros

// ---- Q8_0 / Q4_0 ----

void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
  b->d = f2h(d);
  for (int j = 0; j < 32; ++j) b->qs[j] = static_cast<int8_t>(std::round(x[j] * id));  // half away from zero
}

void quantize_q4_0(const float* x, BlockQ4_0* b) {
  float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f2h(d);
  auto q = [&](float v) { return static_cast<uint8_t>(std::min(15, static_cast<int>(v * id + 8.5f))); };
  for (int j = 0; j < 16; ++j) b->qs[j] = static_cast<uint8_t>(q(x[j]) | q(x[j + 16]) << 4);
}

void quantize_q5_0(const float* x, BlockQ5_0* b) {
  float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f2h(d);
  auto q = [&](float v) { return static_cast<uint32_t>(std::min(31, static_cast<int>(v * id + 16.5f))); };
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint32_t q0 = q(x[j]), q1 = q(x[j + 16]);
    b->qs[j] = static_cast<uint8_t>((q0 & 15) | (q1 & 15) << 4);
    qh |= (q0 >> 4) << j | (q1 >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) b->qh[k] = static_cast<uint8_t>(qh >> (8 * k));
}

void quantize_q5_1(const float* x, BlockQ5_1* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f2h(d);
  b->m = f2h(lo);
  auto q = [&](float v) { return static_cast<uint32_t>(static_cast<uint8_t>((v - lo) * id + 0.5f)); };
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint32_t q0 = q(x[j]), q1 = q(x[j + 16]);
    b->qs[j] = static_cast<uint8_t>((q0 & 15) | (q1 & 15) << 4);
    qh |= ((q0 >> 4) & 1) << j | ((q1 >> 4) & 1) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) b->qh[k] = static_cast<uint8_t>(qh >> (8 * k));
}

void dequantize_q5_1(const BlockQ5_1* b, float* y) {
  const float d = h2f(b->d), m = h2f(b->m);
  const uint32_t qh =
      uint32_t{b->qh[0]} | uint32_t{b->qh[1]} << 8 | uint32_t{b->qh[2]} << 16 | uint32_t{b->qh[3]} << 24;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b->qs[j] & 15) | ((qh >> j) & 1) << 4) + m;
    y[j + 16] = d * static_cast<float>((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) + m;
  }
}

void dequantize_q5_0(const BlockQ5_0* b, float* y) {
  const float d = h2f(b->d);
  const uint32_t qh =
      uint32_t{b->qh[0]} | uint32_t{b->qh[1]} << 8 | uint32_t{b->qh[2]} << 16 | uint32_t{b->qh[3]} << 24;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(static_cast<int>((b->qs[j] & 15) | ((qh >> j) & 1) << 4) - 16);
    y[j + 16] = d * static_cast<float>(static_cast<int>((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
  }
}

// ---- Q4_K / Q5_K ----

// Affine fit of n values: x ~ scale * L + min with L in [0, nmax], min <= 0, minimizing sum w (x - fit)^2
// over candidate inverse scales (nmax + rmin + rdelta * k) / (max - min), k = 0..steps, where min is the best
// fit so far (each improvement moves the origin the next candidates round from). Returns scale; *neg_min = -min.
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin, float rdelta,
                 int steps) {
  float lo = x[0], hi = x[0], sum_w = 0.0f, sum_x = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    sum_w += w[i], sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -lo;
    return 0.0f;
  }
  const float iscale0 = static_cast<float>(nmax) / (hi - lo);
  float scale = 1.0f / iscale0, min = lo, best = 0.0f;
  auto err = [&](const uint8_t* q, float s, float m) {
    float e = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = s * static_cast<float>(q[i]) + m - x[i];
      e += w[i] * (diff * diff);
    }
    return e;
  };
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(std::clamp(round_int(iscale0 * (x[i] - lo)), 0, nmax));
  best = err(L, scale, min);
  uint8_t cand[32];
  for (int k = 0; k <= steps; ++k) {
    const float iscale = (rmin + rdelta * static_cast<float>(k) + static_cast<float>(nmax)) / (hi - min);
    float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
    for (int i = 0; i < n; ++i) {
      cand[i] = static_cast<uint8_t>(std::clamp(round_int(iscale * (x[i] - min)), 0, nmax));
      const float l = cand[i];
      sl += w[i] * l, sl2 += w[i] * l * l, sxl += w[i] * l * x[i];
    }
    const float det = sum_w * sl2 - sl * sl;  // weighted least squares for (s, m) given the integers
    if (det <= 0.0f) continue;
    float s = (sum_w * sxl - sum_x * sl) / det, m = (sl2 * sum_x - sl * sxl) / det;
    if (m > 0.0f) m = 0.0f, s = sxl / sl2;
    const float e = err(cand, s, m);
    if (e < best) {
      std::memcpy(L, cand, static_cast<size_t>(n));
      best = e, scale = s, min = m;
    }
  }
  *neg_min = -min;
  return scale;
}

// Q4_K (nmax 15) and Q5_K (nmax 31): the 8 sub-blocks' integers L [256] in 0..nmax, with d, dmin and the packed
// scales written into the block's fields.
template <int kMax>
void quantize_k_affine(const float* x, uint16_t& d_out, uint16_t& dmin_out, uint8_t* packed, uint8_t* L) {
  constexpr float kRmin = kMax == 15 ? -1.0f : -0.5f;
  constexpr int kSteps = kMax == 15 ? 20 : 15;
  float scales[8], mins[8], w[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float ss = 0.0f;
    for (int i = 0; i < 32; ++i) ss += xs[i] * xs[i];
    const float rms = std::sqrt(ss / 32.0f);
    for (int i = 0; i < 32; ++i) w[i] = rms + std::fabs(xs[i]);
    scales[j] = fit_affine(32, kMax, xs, w, L + 32 * j, &mins[j], kRmin, 0.1f, kSteps);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  std::memset(packed, 0, 12);
  for (int j = 0; j < 8; ++j) {
    q4k_set_scale_min(j, std::min(63, round_int(inv_scale * scales[j])), std::min(63, round_int(inv_min * mins[j])),
                      packed);
  }
  d_out = f2h(max_scale / 63.0f);
  dmin_out = f2h(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {  // re-round with the stored (quantized) scale and min
    int sc, m;
    q4k_scale_min(j, packed, sc, m);
    const float d = h2f(d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = h2f(dmin_out) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(round_int((x[32 * j + i] + dm) / d), 0, kMax));
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* b) {
  uint8_t L[256];
  quantize_k_affine<15>(x, b->d, b->dmin, b->scales, L);
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i) b->qs[32 * c + i] = static_cast<uint8_t>(L[64 * c + i] | L[64 * c + 32 + i] << 4);
}

void quantize_q5_k(const float* x, BlockQ5_K* b) {
  uint8_t L[256];
  quantize_k_affine<31>(x, b->d, b->dmin, b->scales, L);
  std::memset(b->qh, 0, sizeof b->qh);
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i) {
      const int lo = L[64 * c + i], hi = L[64 * c + 32 + i];
      b->qs[32 * c + i] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
      b->qh[i] = static_cast<uint8_t>(b->qh[i] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
    }
}

// Q4_K and Q5_K (B): d sc q - dmin m per sub-block; Q5_K's q has bit 2c (low nibbles) or 2c + 1 (high) of qh[i].
template <typename B>
void dequantize_k_affine(const B* b, float* y) {
  const float d = h2f(b->d), dmin = h2f(b->dmin);
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    q4k_scale_min(2 * c, b->scales, sc0, m0);
    q4k_scale_min(2 * c + 1, b->scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), o0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), o1 = dmin * static_cast<float>(m1);
    const uint8_t* q = b->qs + 32 * c;
    for (int i = 0; i < 32; ++i) {
      int lo = q[i] & 15, hi = q[i] >> 4;
      if constexpr (std::is_same_v<B, BlockQ5_K>)
        lo |= ((b->qh[i] >> (2 * c)) & 1) << 4, hi |= ((b->qh[i] >> (2 * c + 1)) & 1) << 4;
      y[64 * c + i] = d0 * static_cast<float>(lo) - o0;
      y[64 * c + 32 + i] = d1 * static_cast<float>(hi) - o1;
    }
  }
}

// ---- Q6_K ----

// Symmetric fit of n values: x ~ scale * l, l in [-nmax, nmax - 1], weights x^2; returns scale and L = l + nmax.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kTiny) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  auto fit = [&](float iscale, float& sxl, float& sl2) {
    sxl = sl2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(std::clamp(round_int(iscale * x[i]), -nmax, nmax - 1)), w = x[i] * x[i];
      sxl += w * x[i] * l, sl2 += w * l * l;
    }
  };
  auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + std::clamp(round_int(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = -static_cast<float>(nmax) / max, sxl, sl2;
  fit(iscale, sxl, sl2);
  assign(iscale);
  float scale = sl2 > 0.0f ? sxl / sl2 : 0.0f, best = scale * sxl;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float is = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    fit(is, sxl, sl2);
    if (sl2 > 0.0f && sxl * sxl > best * sl2) {
      assign(is);
      scale = sxl / sl2, best = scale * sxl;
    }
  }
  return scale;
}

void quantize_q6_k(const float* x, BlockQ6_K* b) {
  int8_t L[256];
  float scales[16], max_scale = 0.0f, max_abs = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_symmetric(16, 32, x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > max_abs) max_abs = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(b, 0, sizeof *b);
  if (max_abs < kTiny) return;
  const float iscale = -128.0f / max_scale;
  b->d = f2h(1.0f / iscale);
  for (int s = 0; s < 16; ++s) b->scales[s] = static_cast<int8_t>(std::min(127, round_int(iscale * scales[s])));
  for (int s = 0; s < 16; ++s) {  // re-round with the stored scales
    const float d = h2f(b->d) * static_cast<float>(b->scales[s]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * s + i] = static_cast<int8_t>(32 + std::clamp(round_int(x[16 * s + i] / d), -32, 31));
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* l = L + 128 * h;
    uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    for (int i = 0; i < 32; ++i) {
      const int q0 = l[i], q1 = l[i + 32], q2 = l[i + 64], q3 = l[i + 96];
      ql[i] = static_cast<uint8_t>((q0 & 15) | (q2 & 15) << 4);
      ql[i + 32] = static_cast<uint8_t>((q1 & 15) | (q3 & 15) << 4);
      qh[i] = static_cast<uint8_t>(q0 >> 4 | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y) {
  const float d = h2f(b->d);
  for (int h = 0; h < 2; ++h) {
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    const int8_t* sc = b->scales + 8 * h;
    float* o = y + 128 * h;
    for (int i = 0; i < 32; ++i) {
      const int s = i / 16;
      const int q0 = ((ql[i] & 15) | ((qh[i] >> 0) & 3) << 4) - 32,
                q1 = ((ql[i + 32] & 15) | ((qh[i] >> 2) & 3) << 4) - 32;
      const int q2 = ((ql[i] >> 4) | ((qh[i] >> 4) & 3) << 4) - 32,
                q3 = ((ql[i + 32] >> 4) | ((qh[i] >> 6) & 3) << 4) - 32;
      o[i] = d * static_cast<float>(sc[s]) * static_cast<float>(q0);
      o[i + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
      o[i + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
      o[i + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
    }
  }
}

void check_count(BlockType t, int64_t n) {
  const BlockInfo bi = block_info(t);
  if (n < 0 || n % bi.values) fail("quant", bi.name, " works on multiples of ", bi.values, " values, got ", n);
}

}  // namespace

void dequantize(BlockType t, const uint8_t* src, float* dst, int64_t n) {
  check_count(t, n);
  const BlockInfo bi = block_info(t);
  for (int64_t b = 0; b < n / bi.values; ++b) {
    const uint8_t* p = src + b * bi.bytes;
    float* y = dst + b * bi.values;
    switch (t) {
      case BlockType::kQ8_0: {
        const auto* q = reinterpret_cast<const BlockQ8_0*>(p);
        const float d = h2f(q->d);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q->qs[j]);
        break;
      }
      case BlockType::kQ4_0: {
        const auto* q = reinterpret_cast<const BlockQ4_0*>(p);
        const float d = h2f(q->d);
        for (int j = 0; j < 16; ++j) {
          y[j] = d * static_cast<float>((q->qs[j] & 15) - 8);
          y[j + 16] = d * static_cast<float>((q->qs[j] >> 4) - 8);
        }
        break;
      }
      case BlockType::kQ5_0:
        dequantize_q5_0(reinterpret_cast<const BlockQ5_0*>(p), y);
        break;
      case BlockType::kQ5_1:
        dequantize_q5_1(reinterpret_cast<const BlockQ5_1*>(p), y);
        break;
      case BlockType::kQ5_K:
        dequantize_k_affine(reinterpret_cast<const BlockQ5_K*>(p), y);
        break;
      case BlockType::kQ4_K:
        dequantize_k_affine(reinterpret_cast<const BlockQ4_K*>(p), y);
        break;
      case BlockType::kQ6_K:
        dequantize_q6_k(reinterpret_cast<const BlockQ6_K*>(p), y);
        break;
    }
  }
}

void quantize(BlockType t, const float* src, uint8_t* dst, int64_t n) {
  check_count(t, n);
  const BlockInfo bi = block_info(t);
  for (int64_t b = 0; b < n / bi.values; ++b) {
    const float* x = src + b * bi.values;
    uint8_t* p = dst + b * bi.bytes;
    switch (t) {
      case BlockType::kQ8_0:
        quantize_q8_0(x, reinterpret_cast<BlockQ8_0*>(p));
        break;
      case BlockType::kQ4_0:
        quantize_q4_0(x, reinterpret_cast<BlockQ4_0*>(p));
        break;
      case BlockType::kQ5_0:
        quantize_q5_0(x, reinterpret_cast<BlockQ5_0*>(p));
        break;
      case BlockType::kQ5_1:
        quantize_q5_1(x, reinterpret_cast<BlockQ5_1*>(p));
        break;
      case BlockType::kQ5_K:
        quantize_q5_k(x, reinterpret_cast<BlockQ5_K*>(p));
        break;
      case BlockType::kQ4_K:
        quantize_q4_k(x, reinterpret_cast<BlockQ4_K*>(p));
        break;
      case BlockType::kQ6_K:
        quantize_q6_k(x, reinterpret_cast<BlockQ6_K*>(p));
        break;
    }
  }
}

}  // namespace anelab::quant

#include "framework/quant/qdot.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

float dot_q8_0(const BlockQ8_0* w, const Q8Acts& a) {
  float s = 0.0f;
  for (int64_t b = 0; b < a.n / 32; ++b)
    s += simd::h2f(w[b].d) * a.d[b] * static_cast<float>(simd::dot_s8_32(w[b].qs, a.q.data() + 32 * b));
  return s;
}

float dot_q4_0(const BlockQ4_0* w, const Q8Acts& a) {
  float s = 0.0f;
  for (int64_t b = 0; b < a.n / 32; ++b) {
    const int32_t isum = simd::dot_u4x16_32(w[b].qs, a.q.data() + 32 * b) - 8 * a.sum[b];
    s += simd::h2f(w[b].d) * a.d[b] * static_cast<float>(isum);
  }
  return s;
}

float dot_q4_k(const BlockQ4_K* w, const Q8Acts& a) {
  float s = 0.0f;
  for (int64_t sb = 0; sb < a.n / 256; ++sb) {
    const BlockQ4_K& b = w[sb];
    const float d = simd::h2f(b.d), dmin = simd::h2f(b.dmin);
    float acc = 0.0f, off = 0.0f;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      const int64_t j0 = sb * 8 + 2 * c;  // activation blocks of sub-blocks 2c and 2c + 1
      int sc0, m0, sc1, m1;
      q4k_scale_min(2 * c, b.scales, sc0, m0);
      q4k_scale_min(2 * c + 1, b.scales, sc1, m1);
      acc += a.d[j0] * static_cast<float>(sc0 * simd::dot_u4lo_32(q, a.q.data() + 32 * j0)) +
             a.d[j0 + 1] * static_cast<float>(sc1 * simd::dot_u4hi_32(q, a.q.data() + 32 * (j0 + 1)));
      off += a.d[j0] * static_cast<float>(m0 * a.sum[j0]) + a.d[j0 + 1] * static_cast<float>(m1 * a.sum[j0 + 1]);
    }
    s += d * acc - dmin * off;
  }
  return s;
}

float dot_q6_k(const BlockQ6_K* w, const Q8Acts& a) {
  float s = 0.0f;
  alignas(32) int8_t q[256];
  for (int64_t sb = 0; sb < a.n / 256; ++sb) {
    const BlockQ6_K& b = w[sb];
    for (int h = 0; h < 2; ++h) {
      const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int i = 0; i < 32; ++i) {
        o[i] = static_cast<int8_t>(((ql[i] & 15) | ((qh[i] >> 0) & 3) << 4) - 32);
        o[i + 32] = static_cast<int8_t>(((ql[i + 32] & 15) | ((qh[i] >> 2) & 3) << 4) - 32);
        o[i + 64] = static_cast<int8_t>(((ql[i] >> 4) | ((qh[i] >> 4) & 3) << 4) - 32);
        o[i + 96] = static_cast<int8_t>(((ql[i + 32] >> 4) | ((qh[i] >> 6) & 3) << 4) - 32);
      }
    }
    float acc = 0.0f;
    const int8_t* aq = a.q.data() + 256 * sb;
    for (int j = 0; j < 8; ++j) {  // activation block j holds sub-blocks 2j and 2j + 1
      const int32_t i0 = b.scales[2 * j] * simd::dot_s8_16(q + 32 * j, aq + 32 * j);
      const int32_t i1 = b.scales[2 * j + 1] * simd::dot_s8_16(q + 32 * j + 16, aq + 32 * j + 16);
      acc += a.d[sb * 8 + j] * static_cast<float>(i0 + i1);
    }
    s += simd::h2f(b.d) * acc;
  }
  return s;
}

}  // namespace

void quantize_acts(const float* x, int64_t n, Q8Acts& a) {
  ANELAB_CHECK(n % 32 == 0, "quant", "activations of ", n, " values are not whole blocks of 32");
  a.n = n;
  if (static_cast<int64_t>(a.q.size()) < n) a.q.resize(static_cast<size_t>(n));
  if (static_cast<int64_t>(a.d.size()) < n / 32) a.d.resize(static_cast<size_t>(n / 32)), a.sum.resize(static_cast<size_t>(n / 32));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const auto q = static_cast<int8_t>(std::nearbyint(xb[i] * id));
      a.q[static_cast<size_t>(32 * b + i)] = q;
      sum += q;
    }
    a.d[static_cast<size_t>(b)] = d;
    a.sum[static_cast<size_t>(b)] = sum;
  }
}

float dot_row(BlockType t, const uint8_t* row, const Q8Acts& a) {
  switch (t) {
    case BlockType::kQ8_0: return dot_q8_0(reinterpret_cast<const BlockQ8_0*>(row), a);
    case BlockType::kQ4_0: return dot_q4_0(reinterpret_cast<const BlockQ4_0*>(row), a);
    case BlockType::kQ4_K: return dot_q4_k(reinterpret_cast<const BlockQ4_K*>(row), a);
    case BlockType::kQ6_K: return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(row), a);
  }
  return 0.0f;
}

}  // namespace anelab::quant

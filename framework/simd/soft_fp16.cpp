// Portable IEEE binary16 conversions by bit manipulation: round to nearest even, overflow to +-inf,
// subnormals kept, NaNs quieted with the payload's top bits kept (as F16C and AArch64 FCVT do).
#include <cstring>

#include "framework/simd/simd.h"

namespace anelab::simd {
namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

uint16_t soft_f2h(float x) {
  uint32_t u = bits_of(x);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((u >> 13) & 0x3FFu));  // NaN
  if (u >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (incl. inf) -> inf
  if (u >= 0x38800000u) {                                              // normal fp16 (>= 2^-14)
    const uint32_t odd = (u >> 13) & 1u;
    u += 0xC8000000u + 0xFFFu + odd;  // exponent rebias (-112 << 23) and round half to even
    return static_cast<uint16_t>(sign | (u >> 13));
  }
  // Subnormal or zero: adding 0.5 lines the fp16 subnormal bits up with the float's low mantissa bits, and
  // the fp32 addition rounds them to nearest even.
  const float f = float_of(u) + 0.5f;
  return static_cast<uint16_t>(sign | (bits_of(f) - 0x3F000000u));
}

float soft_h2f(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return float_of(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace anelab::simd

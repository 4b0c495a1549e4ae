// IEEE binary16 storage: scalar and bulk conversion (round-to-nearest-even, overflow to ±inf).
// Bulk conversions are vectorised through the SIMD layer (framework/simd) and are the hot path of
// emulator staging; every architecture's path gives the same bits (tests/core/test_simd.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "framework/simd/simd.h"

namespace anelab {

using half_bits = uint16_t;  // raw fp16 bits in memory

// Scalar conversions, inlined through the SIMD layer (in its path's namespace: see framework/simd/simd.h).
inline namespace ANELAB_SIMD_ABI {
inline float half_to_float(half_bits h) { return simd::h2f(h); }
inline half_bits float_to_half(float f) { return simd::f2h(f); }
// Rounds a float to the nearest fp16-representable value (the emulator's storage semantics).
inline float round_fp16(float f) { return half_to_float(float_to_half(f)); }
}  // namespace ANELAB_SIMD_ABI

constexpr float kFp16Max = 65504.0f;
constexpr float kFp16Eps = 0.0009765625f;  // 2^-10: relative spacing at 1.0 (unit roundoff = eps/2)

// Bulk conversions; n may be any size; src and dst must not overlap.
void half_to_float(const half_bits* src, float* dst, size_t n);
void float_to_half(const float* src, half_bits* dst, size_t n);
// In-place rounding of fp32 data to fp16 precision.
void round_fp16_inplace(float* data, size_t n);

}  // namespace anelab

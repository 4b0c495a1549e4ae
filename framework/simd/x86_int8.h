// SIMD layer, x86-64 int8 part (AVX2, and AVX-512 VNNI when the build has it): the integer vectors the
// quantized dot products are written against (framework/quant/qdot.cpp). Included by x86_avx512.h and
// x86_avx2.h only. 256-bit registers on both paths: one I8 is 32 bytes, one sub-block of a weight block.
//
//   I8 (32 x int8/uint8), I32 (int32 accumulator lanes), Scales (8 int8 scales), Sc (a 16-bit scale pair),
//   QAcc (fp32 accumulator lanes)
//   load_i8(p) / nib16(p)             32 bytes / the 16 bytes p as low nibbles then high nibbles (Q4_0, Q5_0)
//   and8(v, m), andnot8(v, m) = ~v & m, or8(a, b), shr8<k>(v), shl8<k>(v), sub8(v, k)   byte-wise
//   bit_bytes(bits)                   byte i = 0xFF when bit i of the 32-bit word is set, else 0
//   dot_us(acc, u, s)                 acc + sum u[i] s[i] over groups of 4 (u in [0, 127], s any int8)
//   dot_ss(acc, a, b)                 the same for signed a (any int8) and b in [-127, 127]
//   load_scales(p), scale_pair(sc, i, j)   8 int8 scales; bytes 0-15 of a vector take scale i, 16-31 scale j
//   dot_us_scaled(acc, u, s, sp)      acc + sum_i u[i] s[i] sp(i): the scaled form (u in [0, 63])
//   reduce_i32(acc)                   the exact int32 sum of the lanes
//   madd_u8_i16x8(a, b), madd_s8_i16x16(a, b)   lanes summing to a[i] b[i] over 8 uint8 / 16 int8 a, int16 b
//   sub_i32(a, b), shl_i32<k>(a)      lane-wise int32
//   qacc_zero(), qacc_fmadd(acc, v, f), qacc_sum(acc)   fp32 lanes: acc + float(v) f; horizontal sum
//   store_i8(p, q), sum16_i8(q, s)    32 bytes; s[0], s[1] = the int8 sums of bytes 0-15 and 16-31
// Every int32 result is exact: maddubs pairs stay below 2^15 for the ranges above (2 x 127 x 128 signed,
// 2 x 63 x 127 scaled).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

using I8 = __m256i;
using I32 = __m256i;
using Scales = __m256i;  // the 8 scales as int16, in both 128-bit halves
using Sc = __m256i;
using QAcc = __m256;

inline I8 load_i8(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline I8 nib16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
}
inline I8 and8(I8 v, uint8_t m) { return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(m))); }
inline I8 andnot8(I8 v, uint8_t m) { return _mm256_andnot_si256(v, _mm256_set1_epi8(static_cast<char>(m))); }
inline I8 or8(I8 a, I8 b) { return _mm256_or_si256(a, b); }
template <int K>
inline I8 shr8(I8 v) {
  return and8(_mm256_srli_epi16(v, K), static_cast<uint8_t>(0xFF >> K));
}
template <int K>
inline I8 shl8(I8 v) {
  return and8(_mm256_slli_epi16(v, K), static_cast<uint8_t>(0xFF << K));
}
inline I8 sub8(I8 v, int8_t k) { return _mm256_sub_epi8(v, _mm256_set1_epi8(k)); }
inline I8 bit_bytes(uint32_t bits) {
  // Byte i takes the byte of the word holding bit i, then tests that bit.
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

inline I32 zero_i32() { return _mm256_setzero_si256(); }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// vpdpbusd: u8 x s8 in groups of 4 added to int32 lanes.
inline I32 dot_us(I32 acc, I8 u, I8 s) { return _mm256_dpbusd_epi32(acc, u, s); }
#else
inline I32 dot_us(I32 acc, I8 u, I8 s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
#endif
inline I32 dot_us_scaled(I32 acc, I8 u, I8 s, Sc sp) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sp));
}
inline I32 dot_ss(I32 acc, I8 a, I8 b) { return dot_us(acc, _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

inline Scales load_scales(const void* p) {
  return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
}
inline Sc scale_pair(Scales sc, int i, int j) {  // int16 lane i of the low half, lane j of the high half
  const auto lane = [](int k) {
    return static_cast<long long>(0x0100010001000100ULL + 0x0202020202020202ULL * static_cast<uint64_t>(k));
  };
  return _mm256_shuffle_epi8(sc, _mm256_set_epi64x(lane(j), lane(j), lane(i), lane(i)));
}

inline int32_t reduce_i32(I32 v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline I32 madd_u8_i16x8(const uint8_t* a, const int16_t* b) {
  return _mm256_zextsi128_si256(_mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a))),
                                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(b))));
}
inline I32 madd_s8_i16x16(const int8_t* a, const int16_t* b) {
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
}
inline I32 sub_i32(I32 a, I32 b) { return _mm256_sub_epi32(a, b); }
template <int K>
inline I32 shl_i32(I32 a) {
  return _mm256_slli_epi32(a, K);
}

// vpsadbw sums 8 unsigned bytes per 64-bit lane; the bias q ^ 0x80 = q + 128 makes the bytes unsigned.
inline void store_i8(void* p, I8 q) { _mm256_storeu_si256(static_cast<__m256i*>(p), q); }
inline void sum16_i8(I8 q, int32_t s[2]) {
  const __m256i t = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
  const __m128i lo = _mm256_castsi256_si128(t), hi = _mm256_extracti128_si256(t, 1);
  s[0] = _mm_cvtsi128_si32(_mm_add_epi32(lo, _mm_unpackhi_epi64(lo, lo))) - 16 * 128;
  s[1] = _mm_cvtsi128_si32(_mm_add_epi32(hi, _mm_unpackhi_epi64(hi, hi))) - 16 * 128;
}

inline QAcc qacc_zero() { return _mm256_setzero_ps(); }
inline QAcc qacc_fmadd(QAcc acc, I32 v, float f) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(f), acc);
}
inline float qacc_sum(QAcc v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

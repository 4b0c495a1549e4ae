// SIMD layer, x86-64 AVX-512 (F, BW, VL): 16 fp32 lanes in a zmm register; tails use lane masks.
// Included only through framework/simd/simd.h. The maskz forms of the fp16 conversions avoid a GCC 12
// -Wmaybe-uninitialized false positive in the unmasked intrinsics (they pass an "undefined" register).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace anelab::simd {

constexpr const char* kName = "avx512";
constexpr int kWidth = 16;
constexpr int kGemmMR = 12, kGemmNV = 2;  // 12 x 32 micro-tile: 24 accumulators of 32 zmm
constexpr int kGemvNV = 2;  // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 32;    // vector registers (bounds a kernel's accumulators)

using F32 = __m512;
using Mask = __mmask16;

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? static_cast<__mmask16>(0)
                                                            : static_cast<__mmask16>((1u << n) - 1u);
}

inline F32 zero() { return _mm512_setzero_ps(); }
inline F32 set1(float x) { return _mm512_set1_ps(x); }
inline F32 load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, F32 v) { _mm512_storeu_ps(p, v); }
inline F32 load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
inline void store_n(float* p, F32 v, int64_t n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
// Unmasked, so the compiler can fold the load into vcvtph2ps.
inline F32 load_h(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline F32 load_h_n(const uint16_t* p, int64_t n) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_maskz_loadu_epi16(lanes(n), p));
}
inline void store_h(uint16_t* p, F32 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT));
}

inline F32 add(F32 a, F32 b) { return _mm512_add_ps(a, b); }
inline F32 sub(F32 a, F32 b) { return _mm512_sub_ps(a, b); }
inline F32 mul(F32 a, F32 b) { return _mm512_mul_ps(a, b); }
inline F32 div(F32 a, F32 b) { return _mm512_div_ps(a, b); }
inline F32 min(F32 a, F32 b) { return _mm512_min_ps(a, b); }
inline F32 max(F32 a, F32 b) { return _mm512_max_ps(a, b); }
inline F32 fmadd(F32 a, F32 b, F32 c) { return _mm512_fmadd_ps(a, b, c); }
inline F32 fnmadd(F32 a, F32 b, F32 c) { return _mm512_fnmadd_ps(a, b, c); }
inline F32 round_even(F32 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline F32 ldexp(F32 p, F32 n) { return _mm512_scalef_ps(p, n); }
inline F32 round_fp16(F32 v) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT));
}
inline Mask ge(F32 a, F32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline F32 select(Mask m, F32 t, F32 f) { return _mm512_mask_blend_ps(m, f, t); }
inline float reduce_add(F32 v) { return _mm512_reduce_add_ps(v); }
inline float reduce_max(F32 v) { return _mm512_reduce_max_ps(v); }

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
inline void cpu_relax() { _mm_pause(); }


// ---- int8 dot products (quantized GEMV): exact int32 sums ----
// a: any int8; b: int8 in [-127, 127] (the sign trick negates b). u: bytes in [0, 127].
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
inline int32_t hsum_i32(__m128i s) {
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
inline __m256i load_i8x32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
#if defined(__AVX512VNNI__)
// VNNI: vpdpbusd multiplies u8 x s8 groups of 4 and adds them to int32 lanes in one instruction.
inline int32_t dot_u8s8(__m256i u, __m256i s) { return hsum_i32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)); }
inline int32_t dot_s8_32(const int8_t* a, const int8_t* b) {
  const __m256i x = load_i8x32(a), y = load_i8x32(b);
  return hsum_i32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
}
inline int32_t dot_s8_16(const int8_t* a, const int8_t* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return hsum_i32(_mm_dpbusd_epi32(_mm_setzero_si128(), _mm_sign_epi8(x, x), _mm_sign_epi8(y, x)));
}
#else
inline int32_t dot_u8s8(__m256i u, __m256i s) {  // u8 x s8 pairs to int16 (<= 2 * 15 * 127), then int32
  return hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
inline int32_t dot_s8_32(const int8_t* a, const int8_t* b) {
  const __m256i x = load_i8x32(a), y = load_i8x32(b);
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return hsum_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
inline int32_t dot_s8_16(const int8_t* a, const int8_t* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return hsum_i32(_mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(x, x), _mm_sign_epi8(y, x)), _mm_set1_epi16(1)));
}
#endif

// 4-bit quants: low / high nibbles of 32 bytes, or the 16-byte Q4_0 layout (low nibbles then high nibbles).
inline int32_t dot_u4lo_32(const uint8_t* q, const int8_t* b) {
  return dot_u8s8(_mm256_and_si256(load_i8x32(q), _mm256_set1_epi8(15)), load_i8x32(b));
}
inline int32_t dot_u4hi_32(const uint8_t* q, const int8_t* b) {
  return dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(load_i8x32(q), 4), _mm256_set1_epi8(15)), load_i8x32(b));
}
inline int32_t dot_u4x16_32(const uint8_t* q, const int8_t* b) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
  return dot_u8s8(u, load_i8x32(b));
}

// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 16 rows x 4 consecutive k (64 bytes, row l's 4 bytes at 4l); a4: 4 int8 activations (in [-127, 127])
// packed in an int32 and broadcast to every lane.
constexpr int kQGemmMR = 6, kQGemmNV = 2;  // 6 tokens x 32 rows: 12 int32 + 12 fp32 accumulators of 32 zmm
using I32 = __m512i;
using W8 = __m512i;
inline W8 load_w8(const void* p) { return _mm512_loadu_si512(p); }
inline I32 set1_i32(int32_t x) { return _mm512_set1_epi32(x); }
inline F32 to_f32(I32 v) { return _mm512_maskz_cvtepi32_ps(0xFFFF, v); }
#if defined(__AVX512VNNI__)
constexpr int kDotU8Max = 255;  // vpdpbusd sums u8 x s8 products in int32: any unsigned byte
inline I32 dot4_u8(I32 acc, W8 w, int32_t a4) { return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(a4)); }
#else
constexpr int kDotU8Max = 127;  // vpmaddubsw saturates pairs in int16: 2 x 127 x 127 fits
inline I32 dot4_u8(I32 acc, W8 w, int32_t a4) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, _mm512_set1_epi32(a4)), _mm512_set1_epi16(1)));
}
#endif
// Signed weights: |w| times the activations negated where w < 0 (no vpsignb on zmm: a masked subtract).
inline I32 dot4_s8(I32 acc, W8 w, int32_t a4) {
  const __m512i a = _mm512_set1_epi32(a4);
  const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), sa);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sa), _mm512_set1_epi16(1)));
#endif
}

}  // namespace anelab::simd

// SIMD layer, x86-64 AVX-512 (F, BW, VL): 16 fp32 lanes in a zmm register; tails use lane masks.
// Included only through framework/simd/simd.h. The maskz forms of the fp16 conversions avoid a GCC 12
// -Wmaybe-uninitialized false positive in the unmasked intrinsics (they pass an "undefined" register).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

constexpr const char* kName = "avx512";
constexpr int kWidth = 16;
constexpr int kGemmMR = 12, kGemmNV = 2;  // 12 x 32 micro-tile: 24 accumulators of 32 zmm
// GEMV: vectors of columns per row per step. 1: one FMA chain per row (gemv_rows 8 rows at a time), so the multi-token
// GEMV's tiles hold 6 tokens (infer/cpu_math.cpp says what it measured).
constexpr int kGemvNV = 1;
constexpr int kRegs = 32;  // vector registers (bounds a kernel's accumulators)

using F32 = __m512;
using Mask = __mmask16;

inline __mmask16 lanes(int64_t n) {
  return n >= 16  ? static_cast<__mmask16>(0xFFFF)
         : n <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((1u << n) - 1u);
}

inline F32 zero() { return _mm512_setzero_ps(); }
inline F32 set1(float x) { return _mm512_set1_ps(x); }
inline F32 load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, F32 v) { _mm512_storeu_ps(p, v); }
inline F32 load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
inline void store_n(float* p, F32 v, int64_t n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
// Unmasked, so the compiler can fold the load into vcvtph2ps.
inline F32 load_h(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
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
inline F32 abs(F32 v) { return _mm512_abs_ps(v); }
inline F32 in_reg(F32 v) {  // an empty asm that needs v in a register
  asm("" : "+v"(v));
  return v;
}
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
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
inline void cpu_relax() { _mm_pause(); }
// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 16 rows x 4 consecutive k (64 bytes, row l's 4 bytes at 4l); a4: 4 int8 activations (in [-127, 127])
// packed in an int32 and broadcast to every lane.
constexpr int kQGemmMR = 6, kQGemmNV = 2;  // 6 tokens x 32 rows: 12 int32 + 12 fp32 accumulators of 32 zmm
using GI32 = __m512i;
using W8 = __m512i;
inline W8 load_w8(const void* p) { return _mm512_loadu_si512(p); }
inline void rows_w8x8(const uint8_t* p, int64_t stride, uint8_t x, int8_t* out, int64_t step) {
  __m512i r[8], t[8], u[8];  // r[i]: row i | row i + 8 (words 0-7 each, 128-bit lanes of 4 words)
  for (int i = 0; i < 8; ++i)
    r[i] =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * stride))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + 8) * stride)), 1);
  for (int i = 0; i < 8; i += 2) {  // per lane: rows i, i + 1 interleaved (words 0 1 | 2 3 of the lane)
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // per lane: word c of rows h..h+3 (u[h + c]: word c | word c + 4)
    u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
    u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
    u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
    u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i xv = _mm512_set1_epi8(static_cast<char>(x));
  for (int c = 0; c < 4; ++c) {  // word c and c + 4 of rows 0-3, 4-7, 8-11, 12-15
    _mm512_storeu_si512(out + c * step, _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], lo, u[4 + c]), xv));
    _mm512_storeu_si512(out + (c + 4) * step, _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], hi, u[4 + c]), xv));
  }
}
inline GI32 set1_i32(int32_t x) { return _mm512_set1_epi32(x); }
inline F32 to_f32(GI32 v) { return _mm512_maskz_cvtepi32_ps(0xFFFF, v); }
#if defined(__AVX512VNNI__)
constexpr int kDotU8Max = 255;  // vpdpbusd sums u8 x s8 products in int32: any unsigned byte
inline GI32 dot4_u8(GI32 acc, W8 w, int32_t a4) { return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(a4)); }
#else
constexpr int kDotU8Max = 127;  // vpmaddubsw saturates pairs in int16: 2 x 127 x 127 fits
inline GI32 dot4_u8(GI32 acc, W8 w, int32_t a4) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, _mm512_set1_epi32(a4)), _mm512_set1_epi16(1)));
}
#endif
// Signed weights: |w| times the activations negated where w < 0 (no vpsignb on zmm: a masked subtract).
inline GI32 dot4_s8(GI32 acc, W8 w, int32_t a4) {
  const __m512i a = _mm512_set1_epi32(a4);
  const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), sa);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sa), _mm512_set1_epi16(1)));
#endif
}
// Row-tile kernels (Q4_K tiles): nibbles of W8 bytes; kWidth bytes widened to int32 lanes; int32 lane ops.
inline W8 lo4_w8(W8 w) { return _mm512_and_si512(w, _mm512_set1_epi8(0x0F)); }
inline W8 hi4_w8(W8 w) { return _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi8(0x0F)); }
inline GI32 load_u8_gi32(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline GI32 add_gi32(GI32 a, GI32 b) { return _mm512_add_epi32(a, b); }
inline GI32 mullo_gi32(GI32 a, GI32 b) { return _mm512_mullo_epi32(a, b); }
inline GI32 or_gi32(GI32 a, GI32 b) { return _mm512_or_si512(a, b); }
inline GI32 and_gi32(GI32 a, int32_t m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
template <int K>
inline GI32 shr_gi32(GI32 a) {
  return _mm512_srli_epi32(a, K);
}
template <int K>
inline GI32 shl_gi32(GI32 a) {
  return _mm512_slli_epi32(a, K);
}
// ---- activation quantizers: 16 int32 lanes per GI32, two per 32 values ----
// Rounding mode embedded (nearest even, whatever MXCSR says); NaN and out-of-range lanes give 0x80000000.
inline GI32 cvt_i32(F32 v) {
  return _mm512_maskz_cvt_roundps_epi32(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline __m256i pack_i8(const GI32* v) {  // vpmovsdb: int32 -> int8 with signed saturation
  return _mm256_set_m128i(_mm512_maskz_cvtsepi32_epi8(0xFFFF, v[1]), _mm512_maskz_cvtsepi32_epi8(0xFFFF, v[0]));
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

#include "framework/simd/x86_int8.h"

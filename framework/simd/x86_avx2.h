// SIMD layer, x86-64 AVX2 + FMA + F16C: 8 fp32 lanes in a ymm register, for CPUs without AVX-512.
// Tails use vmaskmovps (masked lanes are neither read nor written). Included only through simd.h.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

constexpr const char* kName = "avx2";
constexpr int kWidth = 8;
constexpr int kGemmMR = 6, kGemmNV = 2;  // 6 x 16 micro-tile: 12 accumulators of 16 ymm
constexpr int kGemvNV = 2;               // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 16;                // vector registers (bounds a kernel's accumulators)

using F32 = __m256;
using Mask = __m256;

inline __m256i lanes(int64_t n) {
  const int c = n >= 8 ? 8 : n <= 0 ? 0 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline F32 zero() { return _mm256_setzero_ps(); }
inline F32 set1(float x) { return _mm256_set1_ps(x); }
inline F32 load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, F32 v) { _mm256_storeu_ps(p, v); }
inline F32 load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, lanes(n)); }
inline void store_n(float* p, F32 v, int64_t n) { _mm256_maskstore_ps(p, lanes(n), v); }
inline F32 load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline F32 load_h_n(const uint16_t* p, int64_t n) {
  alignas(16) uint16_t t[8] = {};
  const int64_t c = n >= 8 ? 8 : n <= 0 ? 0 : n;
  std::memcpy(t, p, static_cast<size_t>(c) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}
inline void store_h(uint16_t* p, F32 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

inline F32 add(F32 a, F32 b) { return _mm256_add_ps(a, b); }
inline F32 sub(F32 a, F32 b) { return _mm256_sub_ps(a, b); }
inline F32 mul(F32 a, F32 b) { return _mm256_mul_ps(a, b); }
inline F32 div(F32 a, F32 b) { return _mm256_div_ps(a, b); }
inline F32 min(F32 a, F32 b) { return _mm256_min_ps(a, b); }
inline F32 max(F32 a, F32 b) { return _mm256_max_ps(a, b); }
inline F32 fmadd(F32 a, F32 b, F32 c) { return _mm256_fmadd_ps(a, b, c); }
inline F32 fnmadd(F32 a, F32 b, F32 c) { return _mm256_fnmadd_ps(a, b, c); }
inline F32 round_even(F32 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline F32 abs(F32 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
inline F32 in_reg(F32 v) {  // an empty asm that needs v in a register
  asm("" : "+x"(v));
  return v;
}
// p * 2^n in two exact power-of-two steps (each 2^k a normal float), so only the last product rounds.
inline F32 ldexp(F32 p, F32 n) {
  const __m256i k = _mm256_cvtps_epi32(n), k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const F32 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const F32 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
inline F32 round_fp16(F32 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
inline Mask ge(F32 a, F32 b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline F32 select(Mask m, F32 t, F32 f) { return _mm256_blendv_ps(f, t, m); }
inline float reduce_add(F32 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(F32 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
inline void cpu_relax() { _mm_pause(); }
// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 8 rows x 4 consecutive k (32 bytes, row l's 4 bytes at 4l); a4: 4 int8 activations (in [-127, 127])
// packed in an int32 and broadcast to every lane. vpmaddubsw + vpmaddwd (pairs saturate in int16, so
// unsigned weights stay <= 127 and signed ones use the sign trick).
constexpr int kQGemmMR = 4, kQGemmNV = 1;  // 4 tokens x 8 rows: 4 int32 + 4 fp32 accumulators of 16 ymm
using GI32 = __m256i;
using W8 = __m256i;
constexpr int kDotU8Max = 127;
inline W8 load_w8(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void rows_w8x8(const uint8_t* p, int64_t stride, uint8_t x, int8_t* out, int64_t step) {
  __m256i r[8], t[8], u[8];  // r[i]: row i (128-bit lanes of 4 words)
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * stride));
  for (int i = 0; i < 8; i += 2) {  // per lane: rows i, i + 1 interleaved
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // per lane: word c of rows h..h+3 (u[h + c]: word c | word c + 4)
    u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
    u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
    u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
    u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
  }
  const __m256i xv = _mm256_set1_epi8(static_cast<char>(x));
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c * step),
                        _mm256_xor_si256(_mm256_permute2x128_si256(u[c], u[4 + c], 0x20), xv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (c + 4) * step),
                        _mm256_xor_si256(_mm256_permute2x128_si256(u[c], u[4 + c], 0x31), xv));
  }
}
inline GI32 set1_i32(int32_t x) { return _mm256_set1_epi32(x); }
inline F32 to_f32(GI32 v) { return _mm256_cvtepi32_ps(v); }
inline GI32 dot4_u8(GI32 acc, W8 w, int32_t a4) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(a4)), _mm256_set1_epi16(1)));
}
inline GI32 dot4_s8(GI32 acc, W8 w, int32_t a4) {
  const __m256i sa = _mm256_sign_epi8(_mm256_set1_epi32(a4), w);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), sa), _mm256_set1_epi16(1)));
}
// Row-tile kernels (Q4_K tiles): nibbles of W8 bytes; kWidth bytes widened to int32 lanes; int32 lane ops.
inline W8 lo4_w8(W8 w) { return _mm256_and_si256(w, _mm256_set1_epi8(0x0F)); }
inline W8 hi4_w8(W8 w) { return _mm256_and_si256(_mm256_srli_epi16(w, 4), _mm256_set1_epi8(0x0F)); }
inline GI32 load_u8_gi32(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline GI32 add_gi32(GI32 a, GI32 b) { return _mm256_add_epi32(a, b); }
inline GI32 mullo_gi32(GI32 a, GI32 b) { return _mm256_mullo_epi32(a, b); }
inline GI32 or_gi32(GI32 a, GI32 b) { return _mm256_or_si256(a, b); }
inline GI32 and_gi32(GI32 a, int32_t m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
template <int K>
inline GI32 shr_gi32(GI32 a) {
  return _mm256_srli_epi32(a, K);
}
template <int K>
inline GI32 shl_gi32(GI32 a) {
  return _mm256_slli_epi32(a, K);
}
// ---- activation quantizers: 8 int32 lanes per GI32, four per 32 values ----
// cvtps2dq rounds by MXCSR (nearest even by default); NaN and out-of-range lanes give 0x80000000.
inline GI32 cvt_i32(F32 v) { return _mm256_cvtps_epi32(v); }
// Two saturating packs (int32 -> int16 -> int8) work per 128-bit half, leaving the 4-byte groups in the
// order v0[0:4] v1[0:4] v2[0:4] v3[0:4] v0[4:8] v1[4:8] ...; one dword permutation restores memory order.
inline __m256i pack_i8(const GI32* v) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

#include "framework/simd/x86_int8.h"

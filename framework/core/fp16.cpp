// The masked (maskz, all lanes) forms of the AVX-512 conversions avoid a GCC 12 -Wmaybe-uninitialized
// false positive in the unmasked intrinsics (they pass an "undefined" register).
#include "framework/core/fp16.h"

namespace anelab {

void half_to_float(const half_bits* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void float_to_half(const float* src, half_bits* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void round_fp16_inplace(float* data, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(data + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(data + i, _mm512_maskz_cvtph_ps(0xFFFF, h));
  }
#endif
  for (; i < n; ++i) data[i] = round_fp16(data[i]);
}

}  // namespace anelab

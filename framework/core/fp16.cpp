#include "framework/core/fp16.h"

namespace anelab {

namespace W = simd;

void half_to_float(const half_bits* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + W::kWidth <= n; i += W::kWidth) W::store(dst + i, W::load_h(src + i));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void float_to_half(const float* src, half_bits* dst, size_t n) {
  size_t i = 0;
  for (; i + W::kWidth <= n; i += W::kWidth) W::store_h(dst + i, W::load(src + i));
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void round_fp16_inplace(float* data, size_t n) {
  size_t i = 0;
  for (; i + W::kWidth <= n; i += W::kWidth) W::store(data + i, W::round_fp16(W::load(data + i)));
  for (; i < n; ++i) data[i] = round_fp16(data[i]);
}

}  // namespace anelab

// SIMD layer, arm64 (AArch64 Advanced SIMD): 4 fp32 lanes in a q register. fp16 <-> fp32 with
// vcvt_f32_f16 / vcvt_f16_f32 (FCVTL / FCVTN: round to nearest even under the default FPCR, overflow to
// inf), scalar conversions through __fp16, FMA with FMLA/FMLS, spin-wait with ISB (YIELD is a no-op on
// Apple cores). Tails go through a small stack buffer. Included only through framework/simd/simd.h.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace anelab::simd {

constexpr const char* kName = "neon";
constexpr int kWidth = 4;
constexpr int kGemmMR = 6, kGemmNV = 4;  // 6 x 16 micro-tile: 24 accumulators of 32 q registers
constexpr int kGemvNV = 4;  // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 32;    // vector registers (bounds a kernel's accumulators)

using F32 = float32x4_t;
using Mask = uint32x4_t;

inline int64_t clamp_lanes(int64_t n) { return n >= 4 ? 4 : n <= 0 ? 0 : n; }

inline F32 zero() { return vdupq_n_f32(0.0f); }
inline F32 set1(float x) { return vdupq_n_f32(x); }
inline F32 load(const float* p) { return vld1q_f32(p); }
inline void store(float* p, F32 v) { vst1q_f32(p, v); }
inline F32 load_n(const float* p, int64_t n) {
  if (n >= 4) return vld1q_f32(p);
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::memcpy(t, p, static_cast<size_t>(clamp_lanes(n)) * sizeof(float));
  return vld1q_f32(t);
}
inline void store_n(float* p, F32 v, int64_t n) {
  if (n >= 4) return vst1q_f32(p, v);
  float t[4];
  vst1q_f32(t, v);
  std::memcpy(p, t, static_cast<size_t>(clamp_lanes(n)) * sizeof(float));
}
inline F32 load_h(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline F32 load_h_n(const uint16_t* p, int64_t n) {
  if (n >= 4) return load_h(p);
  uint16_t t[4] = {0, 0, 0, 0};
  std::memcpy(t, p, static_cast<size_t>(clamp_lanes(n)) * sizeof(uint16_t));
  return load_h(t);
}
inline void store_h(uint16_t* p, F32 v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }

inline F32 add(F32 a, F32 b) { return vaddq_f32(a, b); }
inline F32 sub(F32 a, F32 b) { return vsubq_f32(a, b); }
inline F32 mul(F32 a, F32 b) { return vmulq_f32(a, b); }
inline F32 div(F32 a, F32 b) { return vdivq_f32(a, b); }
// x86 semantics (b when either is NaN): a > b ? a : b, a < b ? a : b.
inline F32 max(F32 a, F32 b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
inline F32 min(F32 a, F32 b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
inline F32 fmadd(F32 a, F32 b, F32 c) { return vfmaq_f32(c, a, b); }
inline F32 fnmadd(F32 a, F32 b, F32 c) { return vfmsq_f32(c, a, b); }
inline F32 round_even(F32 v) { return vrndnq_f32(v); }
// p * 2^n in two exact power-of-two steps (each 2^k a normal float), so only the last product rounds.
inline F32 ldexp(F32 p, F32 n) {
  const int32x4_t k = vcvtnq_s32_f32(n), k1 = vshrq_n_s32(k, 1), k2 = vsubq_s32(k, k1);
  const int32x4_t bias = vdupq_n_s32(127);
  const F32 s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
  const F32 s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
  return vmulq_f32(vmulq_f32(p, s1), s2);
}
inline F32 round_fp16(F32 v) { return vcvt_f32_f16(vcvt_f16_f32(v)); }
inline Mask ge(F32 a, F32 b) { return vcgeq_f32(a, b); }
inline F32 select(Mask m, F32 t, F32 f) { return vbslq_f32(m, t, f); }
inline float reduce_add(F32 v) { return vaddvq_f32(v); }
inline float reduce_max(F32 v) { return vmaxvq_f32(v); }

inline float h2f(uint16_t h) {
  __fp16 x;
  std::memcpy(&x, &h, sizeof h);
  return static_cast<float>(x);
}
inline uint16_t f2h(float x) {
  const __fp16 h = static_cast<__fp16>(x);
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void cpu_relax() { __asm__ __volatile__("isb" ::: "memory"); }


// ---- int8 dot products (quantized GEMV): exact int32 sums ----
// a: any int8; b: int8 in [-127, 127]; nibbles are read as int8 in [0, 15]. SDOT with the dotprod extension
// (ARMv8.2+, -march=...+dotprod or -mcpu=native), else widening multiplies (SMULL) and pairwise adds.
inline int32x4_t dot_acc_s8x16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}
inline int32_t dot_s8_32(const int8_t* a, const int8_t* b) {
  int32x4_t acc = dot_acc_s8x16(vdupq_n_s32(0), vld1q_s8(a), vld1q_s8(b));
  return vaddvq_s32(dot_acc_s8x16(acc, vld1q_s8(a + 16), vld1q_s8(b + 16)));
}
inline int32_t dot_s8_16(const int8_t* a, const int8_t* b) {
  return vaddvq_s32(dot_acc_s8x16(vdupq_n_s32(0), vld1q_s8(a), vld1q_s8(b)));
}
// 4-bit quants: low / high nibbles of 32 bytes, or the 16-byte Q4_0 layout (low nibbles then high nibbles).
inline int32_t dot_u4lo_32(const uint8_t* q, const int8_t* b) {
  const uint8x16_t m = vdupq_n_u8(15);
  const int8x16_t u0 = vreinterpretq_s8_u8(vandq_u8(vld1q_u8(q), m)), u1 = vreinterpretq_s8_u8(vandq_u8(vld1q_u8(q + 16), m));
  return vaddvq_s32(dot_acc_s8x16(dot_acc_s8x16(vdupq_n_s32(0), u0, vld1q_s8(b)), u1, vld1q_s8(b + 16)));
}
inline int32_t dot_u4hi_32(const uint8_t* q, const int8_t* b) {
  const int8x16_t u0 = vreinterpretq_s8_u8(vshrq_n_u8(vld1q_u8(q), 4)), u1 = vreinterpretq_s8_u8(vshrq_n_u8(vld1q_u8(q + 16), 4));
  return vaddvq_s32(dot_acc_s8x16(dot_acc_s8x16(vdupq_n_s32(0), u0, vld1q_s8(b)), u1, vld1q_s8(b + 16)));
}
inline int32_t dot_u4x16_32(const uint8_t* q, const int8_t* b) {
  const uint8x16_t v = vld1q_u8(q);
  const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
  return vaddvq_s32(dot_acc_s8x16(dot_acc_s8x16(vdupq_n_s32(0), lo, vld1q_s8(b)), hi, vld1q_s8(b + 16)));
}

// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 4 rows x 4 consecutive k (16 bytes, row l's 4 bytes at 4l); a4: 4 int8 activations (in [-127, 127])
// packed in an int32 and broadcast to every lane. SDOT, or SMULL + pairwise adds (|w a| <= 128 x 127, so
// a pair fits in int16). Weights are read as int8: unsigned ones must stay <= 127.
constexpr int kQGemmMR = 6, kQGemmNV = 2;  // 6 tokens x 8 rows: 12 int32 + 12 fp32 accumulators of 32 q registers
using I32 = int32x4_t;
using W8 = int8x16_t;
constexpr int kDotU8Max = 127;
inline W8 load_w8(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
inline I32 set1_i32(int32_t x) { return vdupq_n_s32(x); }
inline F32 to_f32(I32 v) { return vcvtq_f32_s32(v); }
inline I32 dot4_s8(I32 acc, W8 w, int32_t a4) {
  const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a4));
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, a);
#else
  return vpadalq_s16(acc, vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a)));
#endif
}
inline I32 dot4_u8(I32 acc, W8 w, int32_t a4) { return dot4_s8(acc, w, a4); }

}  // namespace anelab::simd

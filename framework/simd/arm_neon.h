// SIMD layer, arm64 (AArch64 Advanced SIMD): 4 fp32 lanes in a q register. fp16 <-> fp32 with
// vcvt_f32_f16 / vcvt_f16_f32 (FCVTL / FCVTN: round to nearest even under the default FPCR, overflow to
// inf), scalar conversions through __fp16, FMA with FMLA/FMLS, spin-wait with ISB (YIELD is a no-op on
// Apple cores). Tails go through a small stack buffer. Included only through framework/simd/simd.h.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

constexpr const char* kName = "neon";
constexpr int kWidth = 4;
constexpr int kGemmMR = 6, kGemmNV = 4;  // 6 x 16 micro-tile: 24 accumulators of 32 q registers
constexpr int kGemvNV = 4;               // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 32;                // vector registers (bounds a kernel's accumulators)

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
inline F32 abs(F32 v) { return vabsq_f32(v); }
inline F32 in_reg(F32 v) {  // an empty asm that needs v in a register
  asm("" : "+w"(v));
  return v;
}
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
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }
inline void cpu_relax() { __asm__ __volatile__("isb" ::: "memory"); }

// ---- int8 part: the integer vectors of the quantized dot products (interface: x86_int8.h) ----
// One I8 is two q registers (32 bytes); I32 holds 4 int32 lanes. SDOT with the dotprod extension (ARMv8.2+,
// -march=...+dotprod or -mcpu=native), else widening multiplies (SMULL) and pairwise adds. Unsigned bytes
// are read as int8 (every u operand is at most 127).
struct I8 {
  uint8x16_t lo, hi;
};
using I32 = int32x4_t;
struct Scales {
  int8_t v[8];
};
struct Sc {
  int32_t lo, hi;
};
using QAcc = float32x4_t;

inline I8 load_i8(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return {vld1q_u8(b), vld1q_u8(b + 16)};
}
inline I8 nib16(const uint8_t* p) {
  const uint8x16_t v = vld1q_u8(p);
  return {vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8(v, 4)};
}
inline I8 and8(I8 v, uint8_t m) { return {vandq_u8(v.lo, vdupq_n_u8(m)), vandq_u8(v.hi, vdupq_n_u8(m))}; }
inline I8 andnot8(I8 v, uint8_t m) { return {vbicq_u8(vdupq_n_u8(m), v.lo), vbicq_u8(vdupq_n_u8(m), v.hi)}; }
inline I8 or8(I8 a, I8 b) { return {vorrq_u8(a.lo, b.lo), vorrq_u8(a.hi, b.hi)}; }
template <int K>
inline I8 shr8(I8 v) {
  return {vshrq_n_u8(v.lo, K), vshrq_n_u8(v.hi, K)};
}
template <int K>
inline I8 shl8(I8 v) {
  return {vshlq_n_u8(v.lo, K), vshlq_n_u8(v.hi, K)};
}
inline I8 sub8(I8 v, int8_t k) {
  const uint8x16_t kk = vdupq_n_u8(static_cast<uint8_t>(k));
  return {vsubq_u8(v.lo, kk), vsubq_u8(v.hi, kk)};
}
inline I8 bit_bytes(uint32_t bits) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit);
  const uint8x16_t b01 = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)), vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
  const uint8x16_t b23 =
      vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits >> 16)), vdup_n_u8(static_cast<uint8_t>(bits >> 24)));
  return {vtstq_u8(b01, bit), vtstq_u8(b23, bit)};
}

inline int32x4_t dot_acc_s8x16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}
inline I32 zero_i32() { return vdupq_n_s32(0); }
inline I32 dot_us(I32 acc, I8 u, I8 s) {
  acc = dot_acc_s8x16(acc, vreinterpretq_s8_u8(u.lo), vreinterpretq_s8_u8(s.lo));
  return dot_acc_s8x16(acc, vreinterpretq_s8_u8(u.hi), vreinterpretq_s8_u8(s.hi));
}
inline I32 dot_ss(I32 acc, I8 a, I8 b) { return dot_us(acc, a, b); }
inline Scales load_scales(const void* p) {
  Scales s;
  std::memcpy(s.v, p, sizeof s.v);
  return s;
}
inline Sc scale_pair(const Scales& sc, int i, int j) { return {sc.v[i], sc.v[j]}; }
inline I32 dot_us_scaled(I32 acc, I8 u, I8 s, Sc sp) {
  const int32x4_t d0 = dot_acc_s8x16(vdupq_n_s32(0), vreinterpretq_s8_u8(u.lo), vreinterpretq_s8_u8(s.lo));
  const int32x4_t d1 = dot_acc_s8x16(vdupq_n_s32(0), vreinterpretq_s8_u8(u.hi), vreinterpretq_s8_u8(s.hi));
  return vmlaq_n_s32(vmlaq_n_s32(acc, d0, sp.lo), d1, sp.hi);
}
inline int32_t reduce_i32(I32 v) { return vaddvq_s32(v); }
inline I32 madd_u8_i16x8(const uint8_t* a, const int16_t* b) {
  const int16x8_t x = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(a))), y = vld1q_s16(b);
  return vmlal_high_s16(vmull_s16(vget_low_s16(x), vget_low_s16(y)), x, y);
}
inline I32 madd_s8_i16x16(const int8_t* a, const int16_t* b) {
  const int8x16_t v = vld1q_s8(a);
  const int16x8_t x0 = vmovl_s8(vget_low_s8(v)), x1 = vmovl_high_s8(v), y0 = vld1q_s16(b), y1 = vld1q_s16(b + 8);
  int32x4_t s = vmlal_high_s16(vmull_s16(vget_low_s16(x0), vget_low_s16(y0)), x0, y0);
  s = vmlal_s16(s, vget_low_s16(x1), vget_low_s16(y1));
  return vmlal_high_s16(s, x1, y1);
}
inline I32 sub_i32(I32 a, I32 b) { return vsubq_s32(a, b); }
template <int K>
inline I32 shl_i32(I32 a) {
  return vshlq_n_s32(a, K);
}
inline void store_i8(void* p, I8 q) {
  auto* b = static_cast<uint8_t*>(p);
  vst1q_u8(b, q.lo), vst1q_u8(b + 16, q.hi);
}
inline void sum16_i8(I8 q, int32_t s[2]) {  // SADDLV: the widening sum of 16 int8 lanes
  s[0] = vaddlvq_s8(vreinterpretq_s8_u8(q.lo));
  s[1] = vaddlvq_s8(vreinterpretq_s8_u8(q.hi));
}
inline QAcc qacc_zero() { return vdupq_n_f32(0.0f); }
inline QAcc qacc_fmadd(QAcc acc, I32 v, float f) { return vfmaq_n_f32(acc, vcvtq_f32_s32(v), f); }
inline float qacc_sum(QAcc v) { return vaddvq_f32(v); }

// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 4 rows x 4 consecutive k (16 bytes, row l's 4 bytes at 4l); a4: 4 int8 activations (in [-127, 127])
// packed in an int32 and broadcast to every lane. SDOT, or SMULL + pairwise adds (|w a| <= 128 x 127, so
// a pair fits in int16). Weights are read as int8: unsigned ones must stay <= 127.
constexpr int kQGemmMR = 6, kQGemmNV = 2;  // 6 tokens x 8 rows: 12 int32 + 12 fp32 accumulators of 32 q registers
using GI32 = int32x4_t;
using W8 = int8x16_t;
constexpr int kDotU8Max = 127;
inline W8 load_w8(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
inline void rows_w8x8(const uint8_t* p, int64_t stride, uint8_t x, int8_t* out, int64_t step) {
  const uint8x16_t xv = vdupq_n_u8(x);
  for (int h = 0; h < 2; ++h) {  // words 4h..4h+3 of the 4 rows: a 4x4 transpose
    uint32x4_t r[4];
    for (int i = 0; i < 4; ++i) r[i] = vld1q_u32(reinterpret_cast<const uint32_t*>(p + i * stride + 16 * h));
    const uint32x4x2_t a = vtrnq_u32(r[0], r[1]), b = vtrnq_u32(r[2], r[3]);  // [r0_0 r1_0 r0_2 r1_2], [.._1 .._3]
    const uint32x4_t col[4] = {vcombine_u32(vget_low_u32(a.val[0]), vget_low_u32(b.val[0])),
                               vcombine_u32(vget_low_u32(a.val[1]), vget_low_u32(b.val[1])),
                               vcombine_u32(vget_high_u32(a.val[0]), vget_high_u32(b.val[0])),
                               vcombine_u32(vget_high_u32(a.val[1]), vget_high_u32(b.val[1]))};
    for (int c = 0; c < 4; ++c)
      vst1q_u8(reinterpret_cast<uint8_t*>(out + (4 * h + c) * step), veorq_u8(vreinterpretq_u8_u32(col[c]), xv));
  }
}
inline GI32 set1_i32(int32_t x) { return vdupq_n_s32(x); }
inline F32 to_f32(GI32 v) { return vcvtq_f32_s32(v); }
inline GI32 dot4_s8(GI32 acc, W8 w, int32_t a4) {
  const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a4));
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, a);
#else
  return vpadalq_s16(acc, vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a)));
#endif
}
inline GI32 dot4_u8(GI32 acc, W8 w, int32_t a4) { return dot4_s8(acc, w, a4); }
// Row-tile kernels (Q4_K tiles): nibbles of W8 bytes; kWidth bytes widened to int32 lanes; int32 lane ops.
inline W8 lo4_w8(W8 w) { return vreinterpretq_s8_u8(vandq_u8(vreinterpretq_u8_s8(w), vdupq_n_u8(0x0F))); }
inline W8 hi4_w8(W8 w) { return vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(w), 4)); }
inline GI32 load_u8_gi32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(u))))));
}
inline GI32 add_gi32(GI32 a, GI32 b) { return vaddq_s32(a, b); }
inline GI32 mullo_gi32(GI32 a, GI32 b) { return vmulq_s32(a, b); }
inline GI32 or_gi32(GI32 a, GI32 b) { return vorrq_s32(a, b); }
inline GI32 and_gi32(GI32 a, int32_t m) { return vandq_s32(a, vdupq_n_s32(m)); }
template <int K>
inline GI32 shr_gi32(GI32 a) {
  return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(a), K));
}
template <int K>
inline GI32 shl_gi32(GI32 a) {
  return vshlq_n_s32(a, K);
}
// ---- activation quantizers: 4 int32 lanes per GI32, eight per 32 values ----
// FCVTNS rounds to nearest even and saturates (NaN -> 0); lanes with NaN or |v| >= 2^31 take x86's INT32_MIN.
inline GI32 cvt_i32(F32 v) {
  return vbslq_s32(vcaltq_f32(v, vdupq_n_f32(2147483648.0f)), vcvtnq_s32_f32(v), vdupq_n_s32(INT32_MIN));
}
inline I8 pack_i8(const GI32* v) {  // SQXTN: saturating narrows int32 -> int16 -> int8
  const int16x8_t h0 = vqmovn_high_s32(vqmovn_s32(v[0]), v[1]), h1 = vqmovn_high_s32(vqmovn_s32(v[2]), v[3]);
  const int16x8_t h2 = vqmovn_high_s32(vqmovn_s32(v[4]), v[5]), h3 = vqmovn_high_s32(vqmovn_s32(v[6]), v[7]);
  return {vreinterpretq_u8_s8(vqmovn_high_s16(vqmovn_s16(h0), h1)),
          vreinterpretq_u8_s8(vqmovn_high_s16(vqmovn_s16(h2), h3))};
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

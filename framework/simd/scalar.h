// SIMD layer, portable scalar path: a "vector" of 4 floats in a plain array, every operation a lane loop
// in standard C++ (std::fma for the fused multiply-add, so results equal the vector paths lane for lane).
// fp16 conversions are the exact bit-manipulation ones of soft_fp16.cpp. Builds with any C++20 compiler
// on any architecture; forced on any host with -DANELAB_SIMD=scalar (ANELAB_SIMD_SCALAR). Included only
// through framework/simd/simd.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace anelab::simd {
uint16_t soft_f2h(float x);
float soft_h2f(uint16_t h);

inline namespace ANELAB_SIMD_ABI {

constexpr const char* kName = "scalar";
constexpr int kWidth = 4;
constexpr int kGemmMR = 4, kGemmNV = 2;  // 4 x 8 micro-tile
constexpr int kGemvNV = 2;               // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 16;                // vector registers (bounds a kernel's accumulators)

struct F32 {
  float v[4];
};
struct Mask {
  bool m[4];
};

#define ANELAB_SIMD_LANES(expr)                \
  F32 r;                                       \
  for (int i = 0; i < 4; ++i) r.v[i] = (expr); \
  return r

inline int64_t clamp_lanes(int64_t n) { return n >= 4 ? 4 : n <= 0 ? 0 : n; }

inline F32 zero() { return F32{{0.0f, 0.0f, 0.0f, 0.0f}}; }
inline F32 set1(float x) { return F32{{x, x, x, x}}; }
inline F32 load(const float* p) {
  F32 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline void store(float* p, F32 v) { std::memcpy(p, v.v, sizeof v.v); }
inline F32 load_n(const float* p, int64_t n) {
  F32 r = zero();
  std::memcpy(r.v, p, static_cast<size_t>(clamp_lanes(n)) * sizeof(float));
  return r;
}
inline void store_n(float* p, F32 v, int64_t n) {
  std::memcpy(p, v.v, static_cast<size_t>(clamp_lanes(n)) * sizeof(float));
}
inline F32 load_h(const uint16_t* p) { ANELAB_SIMD_LANES(soft_h2f(p[i])); }
inline F32 load_h_n(const uint16_t* p, int64_t n) { ANELAB_SIMD_LANES(i < n ? soft_h2f(p[i]) : 0.0f); }
inline void store_h(uint16_t* p, F32 v) {
  for (int i = 0; i < 4; ++i) p[i] = soft_f2h(v.v[i]);
}

inline F32 add(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] + b.v[i]); }
inline F32 sub(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] - b.v[i]); }
inline F32 mul(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] * b.v[i]); }
inline F32 div(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] / b.v[i]); }
inline F32 max(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
inline F32 min(F32 a, F32 b) { ANELAB_SIMD_LANES(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
inline F32 fmadd(F32 a, F32 b, F32 c) { ANELAB_SIMD_LANES(std::fma(a.v[i], b.v[i], c.v[i])); }
inline F32 fnmadd(F32 a, F32 b, F32 c) { ANELAB_SIMD_LANES(std::fma(-a.v[i], b.v[i], c.v[i])); }
inline F32 round_even(F32 v) { ANELAB_SIMD_LANES(std::nearbyint(v.v[i])); }  // default mode: ties to even
inline F32 abs(F32 v) { ANELAB_SIMD_LANES(std::fabs(v.v[i])); }
inline F32 in_reg(F32 v) { return v; }
inline F32 ldexp(F32 p, F32 n) {  // NaN n (from a NaN input) propagates; the cast would be undefined
  ANELAB_SIMD_LANES(std::isnan(n.v[i]) ? p.v[i] + n.v[i] : std::ldexp(p.v[i], static_cast<int>(n.v[i])));
}
inline F32 round_fp16(F32 v) { ANELAB_SIMD_LANES(soft_h2f(soft_f2h(v.v[i]))); }
inline Mask ge(F32 a, F32 b) {
  Mask m;
  for (int i = 0; i < 4; ++i) m.m[i] = a.v[i] >= b.v[i];
  return m;
}
inline F32 select(Mask m, F32 t, F32 f) { ANELAB_SIMD_LANES(m.m[i] ? t.v[i] : f.v[i]); }
inline float reduce_add(F32 v) { return (v.v[0] + v.v[1]) + (v.v[2] + v.v[3]); }
inline float reduce_max(F32 v) {
  const float a = v.v[0] > v.v[1] ? v.v[0] : v.v[1], b = v.v[2] > v.v[3] ? v.v[2] : v.v[3];
  return a > b ? a : b;
}
#undef ANELAB_SIMD_LANES

inline float h2f(uint16_t h) { return soft_h2f(h); }
inline uint16_t f2h(float x) { return soft_f2h(x); }

template <int kLocality>
inline void prefetch_at(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p, 0, kLocality);
#else
  (void)p;
#endif
}
inline void prefetch(const void* p) { prefetch_at<3>(p); }
inline void prefetch_l2(const void* p) { prefetch_at<2>(p); }
inline void cpu_relax() {}

// ---- int8 part: the integer vectors of the quantized dot products (interface: x86_int8.h) ----
// Plain loops; I32 is one int32 sum, QAcc one float.
struct I8 {
  uint8_t v[32];
};
using I32 = int32_t;
struct Scales {
  int8_t v[8];
};
struct Sc {
  int32_t lo, hi;
};
using QAcc = float;

#define ANELAB_SIMD_BYTES(expr)                                     \
  I8 r;                                                             \
  for (int i = 0; i < 32; ++i) r.v[i] = static_cast<uint8_t>(expr); \
  return r

inline I8 load_i8(const void* p) {
  I8 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline I8 nib16(const uint8_t* p) { ANELAB_SIMD_BYTES(i < 16 ? p[i] & 15 : p[i - 16] >> 4); }
inline I8 and8(I8 v, uint8_t m) { ANELAB_SIMD_BYTES(v.v[i] & m); }
inline I8 andnot8(I8 v, uint8_t m) { ANELAB_SIMD_BYTES(~v.v[i] & m); }
inline I8 or8(I8 a, I8 b) { ANELAB_SIMD_BYTES(a.v[i] | b.v[i]); }
template <int K>
inline I8 shr8(I8 v) {
  ANELAB_SIMD_BYTES(v.v[i] >> K);
}
template <int K>
inline I8 shl8(I8 v) {
  ANELAB_SIMD_BYTES(v.v[i] << K);
}
inline I8 sub8(I8 v, int8_t k) { ANELAB_SIMD_BYTES(v.v[i] - k); }
inline I8 bit_bytes(uint32_t bits) { ANELAB_SIMD_BYTES((bits >> i) & 1u ? 0xFF : 0); }
#undef ANELAB_SIMD_BYTES

inline I32 zero_i32() { return 0; }
inline I32 dot_us(I32 acc, I8 u, I8 s) {
  for (int i = 0; i < 32; ++i) acc += int32_t{u.v[i]} * int32_t{static_cast<int8_t>(s.v[i])};
  return acc;
}
inline I32 dot_ss(I32 acc, I8 a, I8 b) {
  for (int i = 0; i < 32; ++i) acc += int32_t{static_cast<int8_t>(a.v[i])} * int32_t{static_cast<int8_t>(b.v[i])};
  return acc;
}
inline Scales load_scales(const void* p) {
  Scales s;
  std::memcpy(s.v, p, sizeof s.v);
  return s;
}
inline Sc scale_pair(const Scales& sc, int i, int j) { return {sc.v[i], sc.v[j]}; }
inline I32 dot_us_scaled(I32 acc, I8 u, I8 s, Sc sp) {
  int32_t lo = 0, hi = 0;
  for (int i = 0; i < 16; ++i) lo += int32_t{u.v[i]} * int32_t{static_cast<int8_t>(s.v[i])};
  for (int i = 16; i < 32; ++i) hi += int32_t{u.v[i]} * int32_t{static_cast<int8_t>(s.v[i])};
  return acc + lo * sp.lo + hi * sp.hi;
}
inline int32_t reduce_i32(I32 v) { return v; }
inline I32 madd_u8_i16x8(const uint8_t* a, const int16_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 8; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}
inline I32 madd_s8_i16x16(const int8_t* a, const int16_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}
inline I32 sub_i32(I32 a, I32 b) { return a - b; }
template <int K>
inline I32 shl_i32(I32 a) {
  return a * (1 << K);
}
inline void store_i8(void* p, I8 q) { std::memcpy(p, q.v, sizeof q.v); }
inline void sum16_i8(I8 q, int32_t s[2]) {
  s[0] = s[1] = 0;
  for (int i = 0; i < 32; ++i) s[i / 16] += static_cast<int8_t>(q.v[i]);
}
inline QAcc qacc_zero() { return 0.0f; }
inline QAcc qacc_fmadd(QAcc acc, I32 v, float f) { return std::fma(static_cast<float>(v), f, acc); }
inline float qacc_sum(QAcc v) { return v; }

// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 4 rows x 4 consecutive k (row l's 4 bytes at 4l); a4: 4 int8 activations packed in an int32.
constexpr int kQGemmMR = 4, kQGemmNV = 1;  // 4 tokens x 4 rows
struct GI32 {
  int32_t v[4];
};
struct W8 {
  uint8_t b[16];
};
constexpr int kDotU8Max = 255;
inline W8 load_w8(const void* p) {
  W8 w;
  std::memcpy(w.b, p, sizeof w.b);
  return w;
}
inline void rows_w8x8(const uint8_t* p, int64_t stride, uint8_t x, int8_t* out, int64_t step) {
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 4; ++l)
      for (int b = 0; b < 4; ++b) out[j * step + 4 * l + b] = static_cast<int8_t>(p[l * stride + 4 * j + b] ^ x);
}
inline GI32 set1_i32(int32_t x) { return GI32{{x, x, x, x}}; }
inline F32 to_f32(GI32 v) {
  F32 r;
  for (int i = 0; i < 4; ++i) r.v[i] = static_cast<float>(v.v[i]);
  return r;
}
inline GI32 dot4_u8(GI32 acc, W8 w, int32_t a4) {
  int8_t a[4];
  std::memcpy(a, &a4, sizeof a);
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 4; ++j) acc.v[l] += int32_t{w.b[4 * l + j]} * int32_t{a[j]};
  return acc;
}
inline GI32 dot4_s8(GI32 acc, W8 w, int32_t a4) {
  int8_t a[4];
  std::memcpy(a, &a4, sizeof a);
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 4; ++j) acc.v[l] += int32_t{static_cast<int8_t>(w.b[4 * l + j])} * int32_t{a[j]};
  return acc;
}
// Row-tile kernels (Q4_K tiles): nibbles of W8 bytes; kWidth bytes widened to int32 lanes; int32 lane ops.
inline W8 lo4_w8(W8 w) {
  for (auto& b : w.b) b &= 0x0F;
  return w;
}
inline W8 hi4_w8(W8 w) {
  for (auto& b : w.b) b = static_cast<uint8_t>(b >> 4);
  return w;
}
inline GI32 load_u8_gi32(const uint8_t* p) { return GI32{{p[0], p[1], p[2], p[3]}}; }
template <typename F>
inline GI32 lanes_gi32(GI32 a, GI32 b, F f) {
  for (int i = 0; i < 4; ++i) a.v[i] = f(a.v[i], b.v[i]);
  return a;
}
inline GI32 add_gi32(GI32 a, GI32 b) {
  return lanes_gi32(a, b, [](int32_t x, int32_t y) { return static_cast<int32_t>(uint32_t(x) + uint32_t(y)); });
}
inline GI32 mullo_gi32(GI32 a, GI32 b) {
  return lanes_gi32(a, b, [](int32_t x, int32_t y) { return static_cast<int32_t>(uint32_t(x) * uint32_t(y)); });
}
inline GI32 or_gi32(GI32 a, GI32 b) {
  return lanes_gi32(a, b, [](int32_t x, int32_t y) { return x | y; });
}
inline GI32 and_gi32(GI32 a, int32_t m) {
  return lanes_gi32(a, set1_i32(m), [](int32_t x, int32_t y) { return x & y; });
}
template <int K>
inline GI32 shr_gi32(GI32 a) {
  for (auto& x : a.v) x = static_cast<int32_t>(static_cast<uint32_t>(x) >> K);
  return a;
}
template <int K>
inline GI32 shl_gi32(GI32 a) {
  for (auto& x : a.v) x = static_cast<int32_t>(static_cast<uint32_t>(x) << K);
  return a;
}
// ---- activation quantizers: 4 int32 lanes per GI32, eight per 32 values ----
// nearbyint in the default mode (ties to even); NaN and |v| >= 2^31 give INT32_MIN, as x86's cvtps2dq.
inline GI32 cvt_i32(F32 v) {
  GI32 r;
  for (int i = 0; i < 4; ++i)
    r.v[i] = std::fabs(v.v[i]) < 2147483648.0f ? static_cast<int32_t>(std::nearbyint(v.v[i])) : INT32_MIN;
  return r;
}
inline I8 pack_i8(const GI32* v) {
  I8 r;
  for (int i = 0; i < 32; ++i) {
    const int32_t x = v[i / 4].v[i % 4];
    r.v[i] = static_cast<uint8_t>(static_cast<int8_t>(x < -128 ? -128 : x > 127 ? 127 : x));
  }
  return r;
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

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

constexpr const char* kName = "scalar";
constexpr int kWidth = 4;
constexpr int kGemmMR = 4, kGemmNV = 2;  // 4 x 8 micro-tile
constexpr int kGemvNV = 2;  // GEMV: vectors of columns per row per step (4 rows at a time)
constexpr int kRegs = 16;    // vector registers (bounds a kernel's accumulators)

struct F32 {
  float v[4];
};
struct Mask {
  bool m[4];
};

#define ANELAB_SIMD_LANES(expr) \
  F32 r;                        \
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

inline void prefetch(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}
inline void cpu_relax() {}


// ---- int8 dot products (quantized GEMV): exact int32 sums ----
inline int32_t dot_s8_32(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}
inline int32_t dot_s8_16(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}
inline int32_t dot_u4lo_32(const uint8_t* q, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += int32_t{q[i] & 15} * int32_t{b[i]};
  return s;
}
inline int32_t dot_u4hi_32(const uint8_t* q, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += int32_t{q[i] >> 4} * int32_t{b[i]};
  return s;
}
inline int32_t dot_u4x16_32(const uint8_t* q, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += int32_t{q[i] & 15} * int32_t{b[i]} + int32_t{q[i] >> 4} * int32_t{b[i + 16]};
  return s;
}

// ---- int8 GEMM micro-kernel (quantized prefill): int32 lane l accumulates row l ----
// W8: 4 rows x 4 consecutive k (row l's 4 bytes at 4l); a4: 4 int8 activations packed in an int32.
constexpr int kQGemmMR = 4, kQGemmNV = 1;  // 4 tokens x 4 rows
struct I32 {
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
inline I32 set1_i32(int32_t x) { return I32{{x, x, x, x}}; }
inline F32 to_f32(I32 v) {
  F32 r;
  for (int i = 0; i < 4; ++i) r.v[i] = static_cast<float>(v.v[i]);
  return r;
}
inline I32 dot4_u8(I32 acc, W8 w, int32_t a4) {
  int8_t a[4];
  std::memcpy(a, &a4, sizeof a);
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 4; ++j) acc.v[l] += int32_t{w.b[4 * l + j]} * int32_t{a[j]};
  return acc;
}
inline I32 dot4_s8(I32 acc, W8 w, int32_t a4) {
  int8_t a[4];
  std::memcpy(a, &a4, sizeof a);
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 4; ++j) acc.v[l] += int32_t{static_cast<int8_t>(w.b[4 * l + j])} * int32_t{a[j]};
  return acc;
}

}  // namespace anelab::simd

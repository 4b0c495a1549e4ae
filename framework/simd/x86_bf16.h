// SIMD layer, x86-64 bf16 part: the kernels of framework/simd/bf16_gemm.h that need x86 instructions. Included by
// framework/simd/bf16_gemm.cpp only, in builds with AVX512-BF16, F, BW and VL (not ANELAB_SIMD_SCALAR):
//   bf16_micro_native<MR, NV>   the MR x (16 NV) micro-kernel on vdpbf16ps (the portable chain's bits, bf16_gemm.h)
//   gemm_bf16_amx, amx_available   (x86-64 Linux: defines ANELAB_BF16_AMX) the AMX-BF16 kernel, compiled with a target
//                                   attribute, and whether the CPU has AMX and the OS grants its tile state
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#define ANELAB_BF16_AMX 1
#include <cpuid.h>

#include "framework/core/platform.h"
#endif

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {
namespace x86bf {

inline uint32_t bf16_pair_at(const uint16_t* p) {  // two bf16 as one 32-bit word (memory order)
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __mmask16 bf16_lanes(int64_t n) {
  return n >= 16  ? static_cast<__mmask16>(0xFFFF)
         : n <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((1u << n) - 1u);
}

template <int MR, int NV>
void bf16_micro_native(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t Kp, float* c, int64_t ldc,
                       int64_t cols, bool accumulate) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v)
      acc[m][v] =
          accumulate ? _mm512_maskz_loadu_ps(bf16_lanes(cols - 16 * v), c + m * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < Kp; ++p) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(panel + (v * Kp + p) * 32);
    for (int m = 0; m < MR; ++m) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(bf16_pair_at(a + m * lda + 2 * p)));
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, b[v]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + m * ldc + 16 * v, bf16_lanes(cols - 16 * v), acc[m][v]);
}

#if defined(ANELAB_BF16_AMX)
// AMX: tiles 0-3 hold C (rows m0 and m0 + 16 x groups g0 and g0 + 1), 4-5 A (16 rows x 32 bf16), 6-7 B (16 k pairs x
// 16 columns = 16 panel rows of 64 bytes: the panel is AMX's B layout). Every tile 16 rows x 64 bytes (palette 1).
// Tails (rows past M, pairs past Kp, columns past n) go through zero-filled copies, so every output is one chain of
// ceil(Kp / 16) tdpbf16ps steps; the zero pairs add +0 products.
#define ANELAB_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

struct alignas(64) AmxConfig {  // ldtilecfg's 64 bytes (Intel SDM, LDTILECFG)
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

struct AmxSrc {
  const void* p;
  int64_t stride;  // bytes
};

// A rows [m0, m0 + 16) x pairs [p0, p0 + np) (np <= 16): in place when whole, else a zero-filled copy in buf.
inline AmxSrc amx_a(const uint16_t* a, int64_t lda, int64_t m0, int64_t M, int64_t p0, int64_t np, uint16_t* buf) {
  if (m0 + 16 <= M && np == 16) return {a + m0 * lda + 2 * p0, lda * 2};
  std::memset(buf, 0, 16 * 64);
  for (int64_t m = 0; m < 16 && m0 + m < M; ++m) std::memcpy(buf + m * 32, a + (m0 + m) * lda + 2 * p0, size_t(np) * 4);
  return {buf, 64};
}

// B of group g, pairs [p0, p0 + np): in place when whole, else a zero-filled copy in buf.
inline AmxSrc amx_b(const uint16_t* panel, int64_t Kp, int64_t g, int64_t p0, int64_t np, uint16_t* buf) {
  const uint16_t* src = panel + (g * Kp + p0) * 32;
  if (np == 16) return {src, 64};
  std::memset(buf, 0, 16 * 64);
  std::memcpy(buf, src, size_t(np) * 64);
  return {buf, 64};
}

// The C tile of rows [m0, m0 + 16), columns [16 g, 16 g + 16): in place when whole, else buf (the valid part of C
// when accumulate, zeros elsewhere).
inline bool amx_c_whole(int64_t m0, int64_t M, int64_t g, int64_t n) { return m0 + 16 <= M && 16 * g + 16 <= n; }
inline AmxSrc amx_c_in(float* c, int64_t ldc, int64_t m0, int64_t M, int64_t g, int64_t n, bool accumulate,
                       float* buf) {
  if (amx_c_whole(m0, M, g, n)) return {c + m0 * ldc + 16 * g, ldc * 4};
  std::memset(buf, 0, 16 * 64);
  if (accumulate)
    for (int64_t m = 0; m < 16 && m0 + m < M; ++m)
      std::memcpy(buf + m * 16, c + (m0 + m) * ldc + 16 * g, size_t(std::min<int64_t>(16, n - 16 * g)) * 4);
  return {buf, 64};
}
inline AmxSrc amx_c_out(float* c, int64_t ldc, int64_t m0, int64_t M, int64_t g, int64_t n, float* buf) {
  if (amx_c_whole(m0, M, g, n)) return {c + m0 * ldc + 16 * g, ldc * 4};
  return {buf, 64};
}
inline void amx_c_copy_out(const float* buf, float* c, int64_t ldc, int64_t m0, int64_t M, int64_t g, int64_t n) {
  if (amx_c_whole(m0, M, g, n)) return;
  for (int64_t m = 0; m < 16 && m0 + m < M; ++m)
    std::memcpy(c + (m0 + m) * ldc + 16 * g, buf + m * 16, size_t(std::min<int64_t>(16, n - 16 * g)) * 4);
}

// Tile numbers are immediates: one line per tile.
#define ANELAB_AMX_C_LOAD(T, MB, GB)                              \
  if (accumulate) {                                               \
    const AmxSrc s_ = amx_c_in(c, ldc, MB, M, GB, n, true, cbuf); \
    _tile_loadd(T, s_.p, s_.stride);                              \
  } else {                                                        \
    _tile_zero(T);                                                \
  }
#define ANELAB_AMX_C_STORE(T, MB, GB)                        \
  {                                                          \
    const AmxSrc s_ = amx_c_out(c, ldc, MB, M, GB, n, cbuf); \
    _tile_stored(T, const_cast<void*>(s_.p), s_.stride);     \
    amx_c_copy_out(cbuf, c, ldc, MB, M, GB, n);              \
  }

inline ANELAB_AMX_TARGET void gemm_bf16_amx(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t K, float* c,
                                            int64_t ldc, int64_t M, int64_t n, bool accumulate) {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t abuf[2][16 * 32];
  alignas(64) uint16_t bbuf[2][16 * 32];
  alignas(64) float cbuf[16 * 16];
  const int64_t Kp = (K + 1) / 2, groups = (n + 15) / 16;
  for (int64_t m0 = 0; m0 < M; m0 += 32) {
    const bool two_m = m0 + 16 < M;
    for (int64_t g0 = 0; g0 < groups; g0 += 2) {
      const bool two_g = g0 + 1 < groups;
      ANELAB_AMX_C_LOAD(0, m0, g0)
      if (two_g) {
        ANELAB_AMX_C_LOAD(1, m0, g0 + 1)
      }
      if (two_m) {
        ANELAB_AMX_C_LOAD(2, m0 + 16, g0)
      }
      if (two_m && two_g) {
        ANELAB_AMX_C_LOAD(3, m0 + 16, g0 + 1)
      }
      for (int64_t p0 = 0; p0 < Kp; p0 += 16) {
        const int64_t np = std::min<int64_t>(16, Kp - p0);
        const AmxSrc a0 = amx_a(a, lda, m0, M, p0, np, abuf[0]);
        const AmxSrc b0 = amx_b(panel, Kp, g0, p0, np, bbuf[0]);
        _tile_loadd(4, a0.p, a0.stride);
        _tile_loadd(6, b0.p, b0.stride);
        _tile_dpbf16ps(0, 4, 6);
        if (two_g) {
          const AmxSrc b1 = amx_b(panel, Kp, g0 + 1, p0, np, bbuf[1]);
          _tile_loadd(7, b1.p, b1.stride);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (two_m) {
          const AmxSrc a1 = amx_a(a, lda, m0 + 16, M, p0, np, abuf[1]);
          _tile_loadd(5, a1.p, a1.stride);
          _tile_dpbf16ps(2, 5, 6);
          if (two_g) _tile_dpbf16ps(3, 5, 7);
        }
      }
      ANELAB_AMX_C_STORE(0, m0, g0)
      if (two_g) ANELAB_AMX_C_STORE(1, m0, g0 + 1)
      if (two_m) ANELAB_AMX_C_STORE(2, m0 + 16, g0)
      if (two_m && two_g) ANELAB_AMX_C_STORE(3, m0 + 16, g0 + 1)
    }
  }
  _tile_release();
}
#undef ANELAB_AMX_C_LOAD
#undef ANELAB_AMX_C_STORE

// cpuid leaf 7 sub-leaf 0, EDX bit 24 AMX-TILE and bit 22 AMX-BF16; XCR0 bits 17-18 (XTILECFG, XTILEDATA) enabled by
// the OS (Intel SDM vol. 1, 13.2 and the cpuid table); then the Linux per-process permission.
inline bool amx_available() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!((edx >> 24) & 1u) || !((edx >> 22) & 1u)) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return false;  // OSXSAVE
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
  return bool(platform::request_amx_tile_state());
}
#endif

}  // namespace x86bf
}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

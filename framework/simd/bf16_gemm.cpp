// The bf16 GEMM of framework/simd/bf16_gemm.h: a micro-kernel of kMR rows x kNV column groups (16 columns each) per
// kernel, the panel's k pairs streamed through it. The portable kernel is plain C++ (fma per product, the compiler
// vectorises the lanes); the AVX512-BF16 kernel and the AMX one (x86-64 Linux builds that have the AVX512-BF16 one,
// compiled with a target attribute and picked at run time) are the x86 part of the layer, framework/simd/x86_bf16.h.
#include "framework/simd/bf16_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && !defined(ANELAB_SIMD_SCALAR)
#define ANELAB_BF16_NATIVE 1
#include "framework/simd/x86_bf16.h"  // the vdpbf16ps micro-kernel; AMX (defines ANELAB_BF16_AMX) on Linux
#endif

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

namespace {
// Micro-tile: 6 rows x 4 groups = 24 accumulators (of 32 zmm), 4 panel vectors and a broadcast beside them.
constexpr int kBfMR = 6, kBfNV = 4;

template <int MR, int NV>
void bf16_micro_portable(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t Kp, float* c, int64_t ldc,
                         int64_t cols, bool accumulate) {
  float acc[MR][NV * 16];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NV * 16; ++j) acc[m][j] = accumulate && j < cols ? c[m * ldc + j] : 0.0f;
  for (int64_t p = 0; p < Kp; ++p) {
    float b0[NV * 16], b1[NV * 16];
    for (int v = 0; v < NV; ++v)
      for (int l = 0; l < 16; ++l) {
        const uint16_t* q = panel + (v * Kp + p) * 32 + 2 * l;
        b0[v * 16 + l] = bf16_to_f32(q[0]);
        b1[v * 16 + l] = bf16_to_f32(q[1]);
      }
    for (int m = 0; m < MR; ++m) {
      const float a0 = bf16_to_f32(a[m * lda + 2 * p]), a1 = bf16_to_f32(a[m * lda + 2 * p + 1]);
      for (int j = 0; j < NV * 16; ++j) acc[m][j] = std::fma(a0, b0[j], std::fma(a1, b1[j], acc[m][j]));
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NV * 16 && j < cols; ++j) c[m * ldc + j] = acc[m][j];
}

using Bf16Micro = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t, int64_t, bool);

// The [kBfMR][kBfNV] table of a kernel's instantiations (rows - 1, groups - 1).
template <template <int, int> class K>
struct Bf16Table {
  Bf16Micro f[kBfMR][kBfNV];
};
template <int MR, int NV>
struct PortableMicro {
  static constexpr Bf16Micro f = &bf16_micro_portable<MR, NV>;
};
#if defined(ANELAB_BF16_NATIVE)
template <int MR, int NV>
struct NativeMicro {
  static constexpr Bf16Micro f = &x86bf::bf16_micro_native<MR, NV>;
};
#endif
template <template <int, int> class K>
constexpr Bf16Table<K> bf16_table() {
  return {{{K<1, 1>::f, K<1, 2>::f, K<1, 3>::f, K<1, 4>::f},
           {K<2, 1>::f, K<2, 2>::f, K<2, 3>::f, K<2, 4>::f},
           {K<3, 1>::f, K<3, 2>::f, K<3, 3>::f, K<3, 4>::f},
           {K<4, 1>::f, K<4, 2>::f, K<4, 3>::f, K<4, 4>::f},
           {K<5, 1>::f, K<5, 2>::f, K<5, 3>::f, K<5, 4>::f},
           {K<6, 1>::f, K<6, 2>::f, K<6, 3>::f, K<6, 4>::f}}};
}
}  // namespace

bool bf16_native() {
#if defined(ANELAB_BF16_NATIVE)
  return true;
#else
  return false;
#endif
}

bool bf16_amx() {
#if defined(ANELAB_BF16_AMX)
  static const bool ok = x86bf::amx_available();
  return ok;
#else
  return false;
#endif
}

Bf16Kernel bf16_default_kernel() {
  static const Bf16Kernel k = [] {
    if (const char* e = std::getenv("ANELAB_BF16_KERNEL")) {
      const std::string v = e;
      if (v == "amx") return Bf16Kernel::kAmx;
      if (v == "native") return Bf16Kernel::kNative;
      if (v == "portable") return Bf16Kernel::kPortable;
      std::fprintf(stderr, "[bf16_gemm] ANELAB_BF16_KERNEL=%s: expected amx, native or portable\n", e);
      std::exit(2);
    }
    return bf16_amx() ? Bf16Kernel::kAmx : Bf16Kernel::kNative;
  }();
  return k;
}

uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN: quiet
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void round_bf16_row(const float* src, uint16_t* dst, int64_t n, bool pad) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
  if (pad) dst[n] = 0;
}

namespace {
inline uint16_t bf16_bits(float v) { return round_bf16(v); }
inline uint16_t bf16_bits(uint16_t v) { return v; }

template <class T>
void pack_nk(const T* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  const int64_t Kp = (K + 1) / 2, groups = (n + 15) / 16;
  std::vector<uint16_t> row(size_t(2 * Kp));
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t* out = panel + g * Kp * 32;
    for (int l = 0; l < 16; ++l) {
      const int64_t j = 16 * g + l;
      std::fill(row.begin(), row.end(), uint16_t(0));
      if (j < n)
        for (int64_t k = 0; k < K; ++k) row[size_t(k)] = bf16_bits(src[j * ld + k]);
      for (int64_t p = 0; p < Kp; ++p) {
        out[p * 32 + 2 * l] = row[size_t(2 * p)];
        out[p * 32 + 2 * l + 1] = row[size_t(2 * p + 1)];
      }
    }
  }
}

template <class T>
void pack_kn(const T* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  const int64_t Kp = (K + 1) / 2, groups = (n + 15) / 16;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t j0 = 16 * g, w = std::min<int64_t>(16, n - j0);
    for (int64_t p = 0; p < Kp; ++p) {
      uint16_t* out = panel + (g * Kp + p) * 32;
      const T* r0 = src + 2 * p * ld + j0;
      const T* r1 = r0 + ld;
      const bool has1 = 2 * p + 1 < K;
      for (int64_t l = 0; l < w; ++l) {
        out[2 * l] = bf16_bits(r0[l]);
        out[2 * l + 1] = has1 ? bf16_bits(r1[l]) : uint16_t(0);
      }
      for (int64_t l = w; l < 16; ++l) out[2 * l] = out[2 * l + 1] = 0;
    }
  }
}
}  // namespace

void pack_bf16_nk(const float* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  pack_nk(src, ld, K, n, panel);
}
void pack_bf16_nk(const uint16_t* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  pack_nk(src, ld, K, n, panel);
}
void pack_bf16_kn(const float* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  pack_kn(src, ld, K, n, panel);
}
void pack_bf16_kn(const uint16_t* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel) {
  pack_kn(src, ld, K, n, panel);
}

void gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t K, float* c, int64_t ldc, int64_t M,
               int64_t n, bool accumulate, Bf16Kernel kernel) {
  static constexpr Bf16Table<PortableMicro> portable = bf16_table<PortableMicro>();
#if defined(ANELAB_BF16_AMX)
  if (kernel == Bf16Kernel::kAmx && bf16_amx()) return x86bf::gemm_bf16_amx(a, lda, panel, K, c, ldc, M, n, accumulate);
#endif
#if defined(ANELAB_BF16_NATIVE)
  static constexpr Bf16Table<NativeMicro> native = bf16_table<NativeMicro>();
  const auto& table = kernel == Bf16Kernel::kPortable ? portable.f : native.f;  // kAmx without AMX: kNative
#else
  (void)kernel;
  const auto& table = portable.f;
#endif
  const int64_t Kp = (K + 1) / 2, groups = (n + 15) / 16;
  for (int64_t m0 = 0; m0 < M; m0 += kBfMR) {
    const int64_t mr = std::min<int64_t>(kBfMR, M - m0);
    for (int64_t g0 = 0; g0 < groups; g0 += kBfNV) {
      const int64_t nv = std::min<int64_t>(kBfNV, groups - g0);
      table[mr - 1][nv - 1](a + m0 * lda, lda, panel + g0 * Kp * 32, Kp, c + m0 * ldc + 16 * g0, ldc, n - 16 * g0,
                            accumulate);
    }
  }
}

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

// bf16 products with fp32 sums (the frozen base's products of `anelab train --lora --lora-compute bf16`,
// train/bf16_linalg.h): C[M, n] (+)= A[M, K] · B[K, n] with A and B in bf16 (the high 16 bits of an fp32), every
// output element one chain of fp32 sums over k in pairs, as AVX512-BF16's vdpbf16ps computes it (Intel SDM, VDPBF16PS;
// measured on Zen 4: the odd element of a pair is added first):
//   acc = fma(a[2p], b[2p], fma(a[2p + 1], b[2p + 1], acc))   for p = 0, 1, ..., ceil(K / 2) - 1
// A product of two bf16 (8-bit significands) is exact in fp32, so each step rounds once, like the fma above.
// Two kernels give these bits:
//   kNative    vdpbf16ps (x86-64 builds with __AVX512BF16__ and AVX-512 F/BW/VL, not ANELAB_SIMD_SCALAR)
//   kPortable  the chain above in C++ (every build: AVX2, scalar, arm64; Apple's BFDOT is not used)
// They agree bit for bit except where an operand, a product or a partial sum is an fp32 denormal (|v| < 2^-126):
// vdpbf16ps treats denormal inputs as zero and flushes denormal results to zero (DAZ/FTZ implied by the instruction,
// whatever MXCSR says), the portable chain keeps them (IEEE). The results do not depend on how the caller splits
// the output over threads or on the tile sizes: each element is the same chain.
// A third kernel, on the AMX tiles (Intel SDM, TDPBF16PS: C[16, 16] fp32 += A[16, 32] bf16 · B[32, 16] bf16, DAZ/FTZ,
// round to nearest even; Sapphire Rapids and later Xeons):
//   kAmx       tdpbf16ps on 2 x 2 C tiles of 16 x 16 (x86-64 Linux, only in the builds that have kNative; the CPU must
//              have AMX-TILE and AMX-BF16 and the OS grant the tile state, platform::request_amx_tile_state);
//              elsewhere kAmx runs kNative. Not the chain above: measured on the device's Xeon (2026-11-29), 76-84 %
//              of random outputs differ from it, and as many from the even-first chain of the SDM's pseudocode and
//              from each pair summed exactly then added, all within 1.2e-7 Σ_k |a_k| |b_k| (K = 777). Its guarantee:
//              each output within 2 γ_{K+1} (|c| + Σ_k |a_k| |b_k|) of the chain above (γ_n = n u / (1 - n u),
//              u = 2^-24; both are fp32 sums of the same exact products). Each instruction's 32 products are summed
//              in an order of its own, so the result depends on where K starts and ends: the same inputs give the same
//              bits whatever the split of M and n, and K split into accumulated calls at multiples of 32 gives one
//              call's bits (at 74 it does not). Denormals flushed as with vdpbf16ps.
// The default kernel (bf16_default_kernel) is kAmx where bf16_amx(), else kNative; ANELAB_BF16_KERNEL=amx|native|
// portable picks one for A/B runs (read once per process).
//
// Operands:
//   A  bf16 rows, row m at a + m * lda (lda even, >= K rounded up to even; the pad element of an odd K must be 0)
//   B  packed into a panel by pack_bf16_*: for column group g (16 columns) and k pair p, 32 bf16 at
//      panel + (g * Kp + p) * 32, lane l's pair at 2l, 2l + 1 = (B[2p][16g + l], B[2p + 1][16g + l]); Kp = ceil(K / 2);
//      columns and k past the ends are 0. bf16_panel_size(K, n) elements.
#pragma once
#include <cstdint>

#include "framework/simd/simd.h"

namespace anelab::simd {
inline namespace ANELAB_SIMD_ABI {

enum class Bf16Kernel { kNative, kPortable, kAmx };

// True where kNative is compiled in (it is then the default); elsewhere kNative runs the portable chain.
bool bf16_native();
// True where kAmx runs AMX: compiled in, the CPU has AMX-TILE + AMX-BF16 (cpuid) and the OS granted the tile state
// (asked once, on the first call).
bool bf16_amx();
// $ANELAB_BF16_KERNEL (amx, native or portable; any other value: one line on stderr and exit 2), else kAmx where
// bf16_amx(), else kNative. Read once per process.
Bf16Kernel bf16_default_kernel();

// fp32 -> bf16, round to nearest even (as torch's .to(torch.bfloat16)); NaN stays a quiet NaN, overflow gives inf,
// denormals are kept (rounded like any value).
uint16_t round_bf16(float x);
float bf16_to_f32(uint16_t h);
// dst[i] = round_bf16(src[i]) for i < n; dst[n] = 0 when pad (the zero pad of an odd row).
void round_bf16_row(const float* src, uint16_t* dst, int64_t n, bool pad);

inline int64_t bf16_panel_size(int64_t K, int64_t n) { return (n + 15) / 16 * 16 * ((K + 1) / 2 * 2); }
// B[k][j] = src[j * ld + k] (B = Wᵀ of a row-major W [n, K], as in y = x Wᵀ), k < K, j < n.
void pack_bf16_nk(const float* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel);
// B[k][j] = src[k * ld + j] (a row-major B [K, n], as W in dx = dy W), k < K, j < n.
void pack_bf16_kn(const float* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel);
// The same from bf16 values (bits, as a bf16 tensor holds them), packed as they are.
void pack_bf16_nk(const uint16_t* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel);
void pack_bf16_kn(const uint16_t* src, int64_t ld, int64_t K, int64_t n, uint16_t* panel);

// C[m, j] for m < M, j < n (C row m at c + m * ldc): the chain above over k < K (kAmx: its sums, above), started
// from 0, or from C's value when accumulate.
void gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* panel, int64_t K, float* c, int64_t ldc, int64_t M,
               int64_t n, bool accumulate, Bf16Kernel kernel = bf16_default_kernel());

}  // namespace ANELAB_SIMD_ABI
}  // namespace anelab::simd

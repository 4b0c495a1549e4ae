// The portable SIMD layer the hot kernels are written against (emulator GEMM/elementwise, fp16 staging,
// CPU inference GEMV/GEMM/attention, the thread pool's spin-wait). One header per architecture implements
// the same small interface; exactly one is selected at compile time:
//   x86_avx512.h  x86-64 with AVX-512 F/BW/VL (16 lanes)
//   x86_avx2.h    x86-64 with AVX2 + FMA + F16C (8 lanes): a binary for CPUs without AVX-512
//   arm_neon.h    arm64 (AArch64 NEON, 4 lanes; fp16 <-> fp32 with vcvt_f32_f16 / vcvt_f16_f32, __fp16 scalars)
//   scalar.h      portable C++ (4 lanes as plain arrays): builds anywhere; forced with ANELAB_SIMD_SCALAR
// No other file includes an architecture's intrinsics header, except x86_bf16.h (the x86 kernels of the bf16 GEMM of
// `train --lora --lora-compute bf16`, framework/simd/bf16_gemm.h: AVX512-BF16 and AMX where the build has them,
// included by bf16_gemm.cpp, whose own code is portable).
//
// Interface (namespace anelab::simd), F32 is a vector of kWidth floats:
//   kName, kWidth, kGemmMR, kGemmNV       name, lanes, GEMM micro-tile: kGemmMR rows x (kGemmNV vectors)
//   kGemvNV, kRegs                        GEMV column vectors per step; vector registers
//   zero(), set1(x)
//   load(p), store(p, v)                  kWidth floats, unaligned
//   load_n(p, n), store_n(p, v, n)        the first clamp(n, 0, kWidth) lanes; loaded lanes >= n are 0
//   load_h(p), load_h_n(p, n), store_h(p, v)   fp16 bits <-> fp32 lanes (store_h rounds to nearest even)
//   add, sub, mul, div, min, max          lane-wise; min/max(a, b) return b when either is NaN (x86 rule)
//   fmadd(a, b, c) = a*b + c, fnmadd(a, b, c) = c - a*b   (one rounding)
//   round_even(v)                         nearest integer, ties to even
//   abs(v)                                |v| (the sign bit cleared)
//   in_reg(v)                             v, kept in a register: a value loaded once for several FMAs is not
//                                         folded into each as its memory operand (loaded again each time)
//   ldexp(p, n)                           p * 2^n for integral n in [-150, 128], one rounding (as vscalefps)
//   round_fp16(v)                         to the nearest fp16 value (ties to even, overflow to +-inf), as fp32
//   ge(a, b) -> Mask, select(m, t, f)     lane-wise a >= b (false on NaN); m ? t : f
//   reduce_add(v), reduce_max(v)          horizontal; the summation order is the architecture's own
//   h2f(bits), f2h(x)                     scalar fp16 conversions (ties to even, overflow to +-inf)
//   prefetch(p), prefetch_l2(p)           read prefetch hint into L1 / into L2 (x86 T1, arm locality 2)
//   cpu_relax()                           spin-wait hint (pause / isb)
//   I8, I32, Scales, Sc, QAcc and their operations   the int8 vectors of the quantized dot products
//                                         (interface at the top of x86_int8.h: AVX-512 VNNI vpdpbusd/vpdpwssd,
//                                         AVX2 vpmaddubsw + vpmaddwd, NEON SDOT or SMULL, scalar loops)
//   int8 GEMM micro-kernel (framework/quant/qgemm.cpp): GI32 = kWidth int32 lanes, W8 = kWidth rows x 4
//   consecutive k of int8 weights (row l's 4 bytes at 4l), a4 = 4 int8 activations in [-127, 127] packed
//   in an int32 (memory order) and broadcast:
//   kQGemmMR, kQGemmNV                    micro-tile: kQGemmMR tokens x kQGemmNV vectors of rows
//   load_w8(p), set1_i32(x), to_f32(v)    64 / 32 / 16 / 16 weight bytes; int32 broadcast; int32 -> fp32
//   rows_w8x8(p, stride, x, out, step)    the 8 W8 of 32 consecutive bytes of kWidth rows (row l at p + l
//                                         stride): W8 j, stored at out + j step, holds every row's bytes 4j..4j+3,
//                                         each byte xor x (a transpose of 32-bit words)
//   dot4_u8(acc, w, a4), dot4_s8(...)     acc[l] += sum_j<4 w[4l + j] a4[j], w read as u8 (<= kDotU8Max) / s8
//   lo4_w8(w), hi4_w8(w)                  each byte's low / high nibble (row tiles of 4-bit types)
//   load_u8_gi32(p)                       kWidth bytes, zero-extended into the int32 lanes (lane l: p[l])
//   add_gi32, mullo_gi32, or_gi32(a, b), and_gi32(a, m), shr_gi32<k>, shl_gi32<k>   lane-wise int32 (shr
//                                         logical; add / mullo wrap)
//   kDotU8Max                             largest unsigned weight byte dot4_u8 takes exactly (255 with
//                                         vpdpbusd or on the scalar path; 127 where pairs add in int16)
//   activation quantizers (framework/quant/qdot.cpp), on the same GI32 lanes:
//   cvt_i32(v)                            nearest integer, ties to even, as int32; NaN and |v| >= 2^31 give
//                                         INT32_MIN: x86 cvtps2dq's rule (rounding embedded on AVX-512, the
//                                         default MXCSR on AVX2); NEON and scalar map those lanes to it
//   pack_i8(v) -> I8                      the 32 int32 of v[0 .. 32 / kWidth - 1] to int8, saturating, in order
//   store_i8(p, q), sum16_i8(q, s)        the 32 bytes of an I8; s[0], s[1] = the int8 sums of bytes 0-15, 16-31
//
// Every lane-wise operation is IEEE fp32 with one rounding, so a kernel that applies the same operations
// in the same order gives the same bits on every architecture; only reduce_add/reduce_max and a kernel's
// own choice of accumulator count (summation order) differ between hosts.
//
// Each path's names live in its own inline namespace (ANELAB_SIMD_ABI: simd_avx512, simd_avx2, simd_neon,
// simd_scalar), so code compiled for two paths links into one binary without sharing an inline function or a
// constant: a build with ANELAB_SIMD_VARIANTS (CMakeLists.txt) links the SIMD kernel files compiled for another path
// into extra test binaries beside the rest of the libraries compiled for this one.
#pragma once
#include <cstdint>

#if defined(ANELAB_SIMD_SCALAR)
#define ANELAB_SIMD_ABI simd_scalar
#include "framework/simd/scalar.h"
#elif defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ANELAB_SIMD_ABI simd_avx512
#include "framework/simd/x86_avx512.h"
#elif defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ANELAB_SIMD_ABI simd_avx2
#include "framework/simd/x86_avx2.h"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define ANELAB_SIMD_ABI simd_neon
#include "framework/simd/arm_neon.h"
#else
#define ANELAB_SIMD_ABI simd_scalar
#include "framework/simd/scalar.h"
#endif

namespace anelab::simd {
constexpr int kGemmNR = kGemmNV * kWidth;  // GEMM micro-tile columns

// Exact portable fp16 conversions (the scalar path's, and the reference the tests compare every path to).
uint16_t soft_f2h(float x);
float soft_h2f(uint16_t h);
}  // namespace anelab::simd

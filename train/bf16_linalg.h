// The frozen base's products with `anelab train --lora --lora-compute bf16` (QLoRA's compute dtype, Dettmers et al.
// 2023; bitsandbytes bnb_4bit_compute_dtype): the two products of train/cpu_linalg.h with the weight W and the
// activation operand (x or dy) rounded to bf16 (nearest even) and every output element one chain of fp32 sums
// (framework/simd/bf16_gemm.h: AMX's tdpbf16ps where the CPU has it, else vdpbf16ps where the build has AVX512-BF16,
// its portable twin elsewhere; ANELAB_BF16_KERNEL picks one).
// W is read from its held storage (fp32, or any type through models::Tensor::to_f32) a tile at a time and packed into
// a bf16 panel of each thread's block (at most 256 KiB, plus the tile's fp32 for a non-fp32 type): no bf16 copy of the
// base is held. The activation operand is rounded once per product into a bf16 copy [N, in or out rounded up to even].
// Error (bf16's unit roundoff 2^-8 on each operand: a product off by at most 2^-7 + 2^-16 relative; K fp32 sums:
// γ_K = K u / (1 - K u), u = 2^-24), per element, Σ = Σ_k |x_k| |w_k| (for dx: K = out, x = dy):
//   |y - y_exact| <= (2^-7 + 2^-16 + 2 γ_K) Σ     |y - y_fp32| <= (2^-7 + 2^-16 + 3 γ_K) Σ   (y_fp32: cpu_linalg.h's)
// With AMX the sums are the instruction's, within 2 γ_{K+1} Σ of the chain's: add that to both bounds (measured on
// the device: within the first bound as it is, 0.08 of it at worst).
// The results do not depend on the thread count (each element's chain is fixed; dx's chunks of k are multiples of
// 32, AMX's k step).
#pragma once
#include <cstdint>

#include "models/formats/model.h"

namespace anelab::train {

// y[N, out] = x[N, in] · W[out, in]ᵀ in bf16 x bf16 -> fp32
void matmul_wt_bf16(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out);
void matmul_wt_bf16(const float* x, const models::Tensor& W, float* y, int64_t N, int64_t in, int64_t out);
// dx[N, in] (+)= dy[N, out] · W[out, in] in bf16 x bf16 -> fp32 (add: the chain starts from dx's value)
void matmul_dx_bf16(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add);
void matmul_dx_bf16(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, bool add);

}  // namespace anelab::train

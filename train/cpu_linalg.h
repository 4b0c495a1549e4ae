// The fp32 products and RMSNorm of the CPU training executor (train/cpu_model.h) and of its Gated DeltaNet step
// (train/cpu_deltanet_grad.h). Row-major operands, one row per token; each product is split over blocks of its
// output on the thread pool (train/parallel.h), every block one single-threaded Eigen product, so results are
// bitwise reproducible for a given thread count.
#pragma once
#include <cstdint>

namespace anelab::train {

// y[N, out] = x[N, in] · W[out, in]ᵀ
void matmul_wt(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out);
// dx[N, in] (+)= dy[N, out] · W[out, in]   (add: accumulate, else overwrite)
void matmul_dx(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add);
// dW[out, in] += dy[N, out]ᵀ · x[N, in]
void matmul_dw(const float* dy, const float* x, float* dW, int64_t N, int64_t in, int64_t out);

// y [N, D] = x * rrms * w per row; rrms [N] = 1/sqrt(mean(x^2) + eps) (sums in fp64).
void rmsnorm(const float* x, const float* w, float* y, float* rrms, int64_t N, int64_t D, float eps);
// dx (+)= the RMSNorm backward of dy; dw += Σ_rows dy ⊙ x ⊙ rrms (dw nullptr: not computed).
void rmsnorm_backward(const float* x, const float* w, const float* rrms, const float* dy, float* dx, float* dw,
                      int64_t N, int64_t D, bool add);

}  // namespace anelab::train

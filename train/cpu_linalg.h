// The fp32 products and RMSNorm of the CPU training executor (train/cpu_model.h) and of its Gated DeltaNet step
// (train/cpu_deltanet_grad.h). Row-major operands, one row per token; each product is split over blocks of its
// output on the thread pool (train/parallel.h; the typed dX's rows split over its sum, below), every block one
// single-threaded Eigen product, so results are bitwise reproducible for a given thread count.
#pragma once
#include <cstdint>

#include "models/formats/model.h"

namespace anelab::train {

// y[N, out] = x[N, in] · W[out, in]ᵀ
void matmul_wt(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out);
// dx[N, in] (+)= dy[N, out] · W[out, in]   (add: accumulate, else overwrite)
void matmul_dx(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add);
// The same two products with W a tensor of any type (a frozen base kept in its file's type, train/frozen_base.h):
// fp32 as above; any other type converted to fp32 one tile of W at a time (models::Tensor::to_f32, inference's
// dequantization; about 1 MiB, into a scratch each thread keeps), then the fp32 product on the tile. The conversion
// is O(in * out) per product against O(N * in * out) multiply-adds; the result is the fp32 product of the dequantized
// W up to the order of its sums (Eigen blocks a tile's product by its own sizes; dx adds over `out` tile by tile, and
// kRows adds the threads' partial sums).
// matmul_wt splits over rows of W (columns of y), each block converting whole rows. matmul_dx splits
// - kRows: over rows of W (the sum over `out`): each pool thread converts tiles of whole rows (one to_f32 call per
//   tile) and accumulates a partial dx, the partials then summed into dx (the pool's size - 1 copies of dx, at most
//   16 MiB, as scratch kept by the calling thread; a longer dx goes in blocks of tokens, W converted for each);
// - kColumns: over columns of dx = columns of W: each block converts its band of W row by row (one to_f32 call per
//   row of the band);
// - kAuto: kRows where out >= in (the head, gate, up, q, o), kColumns where in > out (down, k and v of GQA), the
//   faster of the two on each side (scripts/typed_products_bench). Small products and serial threads run on the
//   calling thread, whole row tiles, without partials.
enum class TypedDxSplit { kAuto, kRows, kColumns };
void matmul_wt(const float* x, const models::Tensor& W, float* y, int64_t N, int64_t in, int64_t out);
void matmul_dx(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, bool add,
               TypedDxSplit split = TypedDxSplit::kAuto);
// dW[out, in] += dy[N, out]ᵀ · x[N, in]
void matmul_dw(const float* dy, const float* x, float* dW, int64_t N, int64_t in, int64_t out);

// y [N, D] = x * rrms * w per row; rrms [N] = 1/sqrt(mean(x^2) + eps) (sums in fp64).
void rmsnorm(const float* x, const float* w, float* y, float* rrms, int64_t N, int64_t D, float eps);
// dx (+)= the RMSNorm backward of dy; dw += Σ_rows dy ⊙ x ⊙ rrms (dw nullptr: not computed).
void rmsnorm_backward(const float* x, const float* w, const float* rrms, const float* dy, float* dx, float* dw,
                      int64_t N, int64_t D, bool add);

}  // namespace anelab::train

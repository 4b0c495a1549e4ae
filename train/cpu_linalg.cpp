// The products and norms of train/cpu_linalg.h.
#include "train/cpu_linalg.h"

#include <Eigen/Dense>
#include <algorithm>
#include <numeric>
#include <vector>

#include "framework/kernels/cpu_ops.h"
#include "train/parallel.h"

namespace anelab::train {
// (names of their own: train/ sources share unity batches)
using LinMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using LinMap = Eigen::Map<LinMat>;
using LinCMap = Eigen::Map<const LinMat>;
using LinSMap = Eigen::Map<LinMat, 0, Eigen::OuterStride<>>;  // strided view (a band of columns)
using LinCSMap = Eigen::Map<const LinMat, 0, Eigen::OuterStride<>>;

// The three products, each split over blocks of the output on the thread pool (parallel_blocks): a block is one
// single-threaded Eigen product on column or row bands of the operands.
// y[N, out] = x[N, in] · W[out, in]ᵀ   (blocks: columns of y = rows of W)
void matmul_wt(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out) {
  parallel_blocks(out, N * in * out, [&](int64_t c0, int64_t c1) {
    LinSMap(y + c0, N, c1 - c0, Eigen::OuterStride<>(out)).noalias() =
        LinCMap(x, N, in) * LinCMap(W + c0 * in, c1 - c0, in).transpose();
  });
}
// dx[N, in] (+)= dy[N, out] · W[out, in]   (blocks: columns of dx = columns of W)
void matmul_dx(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  parallel_blocks(in, N * in * out, [&](int64_t c0, int64_t c1) {
    LinSMap d(dx + c0, N, c1 - c0, Eigen::OuterStride<>(in));
    const LinCSMap w(W + c0, out, c1 - c0, Eigen::OuterStride<>(in));
    if (add)
      d.noalias() += LinCMap(dy, N, out) * w;
    else
      d.noalias() = LinCMap(dy, N, out) * w;
  });
}
// dW[out, in] += dy[N, out]ᵀ · x[N, in]   (blocks: rows of dW = columns of dy)
void matmul_dw(const float* dy, const float* x, float* dW, int64_t N, int64_t in, int64_t out) {
  parallel_blocks(out, N * in * out, [&](int64_t r0, int64_t r1) {
    LinMap(dW + r0 * in, r1 - r0, in).noalias() +=
        LinCSMap(dy + r0, N, r1 - r0, Eigen::OuterStride<>(out)).transpose() * LinCMap(x, N, in);
  });
}

namespace {
constexpr int64_t kTileFloats = int64_t(1) << 18;  // a converted tile: 1 MiB (a core's L2)
// Rows of a tile `width` wide: a multiple of 16 (Eigen's register tile), at least 16.
int64_t lin_tile_rows(int64_t width) {
  return std::max<int64_t>(16, kTileFloats / std::max<int64_t>(width, 1) / 16 * 16);
}
}  // namespace

void matmul_wt(const float* x, const models::Tensor& W, float* y, int64_t N, int64_t in, int64_t out) {
  if (W.dtype == models::DType::kF32) return matmul_wt(x, W.f32(), y, N, in, out);
  const int64_t rows = lin_tile_rows(in);
  parallel_blocks(out, N * in * out, [&](int64_t c0, int64_t c1) {  // columns of y = rows of W, whole rows converted
    std::vector<float> tile(size_t(std::min(rows, c1 - c0) * in));
    for (int64_t r0 = c0; r0 < c1; r0 += rows) {
      const int64_t r1 = std::min(c1, r0 + rows);
      W.to_f32(r0 * in, (r1 - r0) * in, tile.data());
      LinSMap(y + r0, N, r1 - r0, Eigen::OuterStride<>(out)).noalias() =
          LinCMap(x, N, in) * LinCMap(tile.data(), r1 - r0, in).transpose();
    }
  });
}

void matmul_dx(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  if (W.dtype == models::DType::kF32) return matmul_dx(dy, W.f32(), dx, N, in, out, add);
  // columns of dx = columns of W, on whole blocks of the type (a row of W is whole blocks); rows of W tile by tile
  const int64_t align = std::lcm(int64_t(16), models::dtype_block(W.dtype));
  auto block = [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0, rows = lin_tile_rows(width);
    std::vector<float> tile(size_t(std::min(rows, out) * width));
    LinSMap d(dx + c0, N, width, Eigen::OuterStride<>(in));
    for (int64_t r0 = 0; r0 < out; r0 += rows) {
      const int64_t r1 = std::min(out, r0 + rows);
      for (int64_t r = r0; r < r1; ++r) W.to_f32(r * in + c0, width, tile.data() + (r - r0) * width);
      const LinCSMap dyt(dy + r0, N, r1 - r0, Eigen::OuterStride<>(out));
      if (r0 == 0 && !add)
        d.noalias() = dyt * LinCMap(tile.data(), r1 - r0, width);
      else
        d.noalias() += dyt * LinCMap(tile.data(), r1 - r0, width);
    }
  };
  if (N * in * out < (int64_t(1) << 20))
    block(0, in);
  else
    split_on_pool(in, align, 2 * int64_t(ThreadPool::global().size()), block);
}

// y = x * rrms * w per row; rrms[n] = 1/sqrt(mean(x^2) + eps)
void rmsnorm(const float* x, const float* w, float* y, float* rrms, int64_t N, int64_t D, float eps) {
  parallel_rows(N, N * D, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      rrms[n] = kern::cpu::rms_norm(x + n * D, w, eps, D, y + n * D, kern::cpu::Numerics::kReference);
  });
}

// dx (+)= rmsnorm backward of dy; dw += Σ_rows dy ⊙ x ⊙ rrms (dw nullptr: not computed).
void rmsnorm_backward(const float* x, const float* w, const float* rrms, const float* dy, float* dx, float* dw,
                      int64_t N, int64_t D, bool add) {
  parallel_rows(N, N * D, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * D;
      const float* dr = dy + n * D;
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double(dr[i]) * w[i] * xr[i];
      const float r = rrms[n];
      const float c = static_cast<float>(dot / double(D)) * r * r * r;
      float* o = dx + n * D;
      for (int64_t i = 0; i < D; ++i) {
        const float v = r * w[i] * dr[i] - xr[i] * c;
        o[i] = add ? o[i] + v : v;
      }
    }
  });
  if (!dw) return;
  parallel_rows(D, N * D, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(dy[n * D + i]) * x[n * D + i] * rrms[n];
      dw[i] += static_cast<float>(s);
    }
  });
}

}  // namespace anelab::train

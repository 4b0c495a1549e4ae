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
// The calling thread's tile scratch of at least `floats` values, kept for the thread's next product (a pool worker
// converts tiles of every typed product; no allocation per block or per call).
float* lin_tile_scratch(int64_t floats) {
  thread_local std::vector<float> tile;
  if (int64_t(tile.size()) < floats) tile.resize(size_t(floats));
  return tile.data();
}
// dx[N, in] (+)= dy[:, r0:r1] · W[r0:r1, :]: rows r0..r1 of W converted a tile of whole rows at a time (one to_f32
// call per tile) into the thread's scratch, each tile's product accumulated into dx (the first one written when
// !add). dy's rows are `out` apart.
void lin_dx_rows(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, int64_t r0,
                 int64_t r1, bool add) {
  LinMap d(dx, N, in);
  if (r0 >= r1) {
    if (!add) d.setZero();
    return;
  }
  const int64_t rows = lin_tile_rows(in);
  float* tile = lin_tile_scratch(std::min(rows, r1 - r0) * in);
  for (int64_t t0 = r0; t0 < r1; t0 += rows) {
    const int64_t t1 = std::min(r1, t0 + rows);
    W.to_f32(t0 * in, (t1 - t0) * in, tile);
    const LinCSMap dyt(dy + t0, N, t1 - t0, Eigen::OuterStride<>(out));
    if (t0 == r0 && !add)
      d.noalias() = dyt * LinCMap(tile, t1 - t0, in);
    else
      d.noalias() += dyt * LinCMap(tile, t1 - t0, in);
  }
}
// dx[N, in] (+)= dy · W split over rows of W (the sum over `out`): chunk c of the pool takes rows [b_c, e_c) and
// computes its partial product, chunk 0 into dx itself (respecting `add`), chunk c > 0 into a partial dx_c of a
// scratch the calling thread keeps; then dx += dx_1 + ... + dx_{C-1}, in that order, split over dx's elements. C =
// the pool's size; the partials are at most kPartialFloats (16 MiB): a longer dx goes through in blocks of tokens
// (rows of dx and dy), each converting W again (O(in * out) against the block's O(tokens * in * out)). Boundaries
// come from the sizes alone: bitwise reproducible for a given thread count.
constexpr int64_t kPartialFloats = int64_t(1) << 22;
void lin_dx_row_split(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out,
                      bool add) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t units = (out + 15) / 16, chunks = std::min<int64_t>(units, pool.size());
  if (chunks <= 1) return lin_dx_rows(dy, W, dx, N, in, out, 0, out, add);
  const int64_t block = std::max<int64_t>(1, kPartialFloats / ((chunks - 1) * in));  // tokens per pass
  thread_local std::vector<float> partials;
  if (int64_t(partials.size()) < (chunks - 1) * std::min(N, block) * in)
    partials.resize(size_t((chunks - 1) * std::min(N, block) * in));
  float* p = partials.data();
  for (int64_t n0 = 0; n0 < N; n0 += block) {
    const int64_t nb = std::min(block, N - n0), plane = nb * in;
    const float* dyb = dy + n0 * out;
    float* dxb = dx + n0 * in;
    pool.run_chunks(chunks, [&](int64_t c, int) {
      const SerialScope inside;
      const int64_t b = std::min(out, units * c / chunks * 16), e = std::min(out, units * (c + 1) / chunks * 16);
      if (c == 0)
        lin_dx_rows(dyb, W, dxb, nb, in, out, b, e, add);
      else
        lin_dx_rows(dyb, W, p + (c - 1) * plane, nb, in, out, b, e, false);
    });
    split_on_pool(plane, 16, 4 * int64_t(pool.size()), [&](int64_t b, int64_t e) {
      Eigen::Map<Eigen::ArrayXf> d(dxb + b, e - b);
      for (int64_t c = 1; c < chunks; ++c) d += Eigen::Map<const Eigen::ArrayXf>(p + (c - 1) * plane + b, e - b);
    });
  }
}
// dx[N, in] (+)= dy · W split over columns of dx = columns of W, on whole blocks of the type (a row of W is whole
// blocks): each block converts its band of W row by row (one to_f32 call per row), rows of W a tile at a time.
void lin_dx_column_split(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out,
                         bool add) {
  const int64_t align = std::lcm(int64_t(16), models::dtype_block(W.dtype));
  split_on_pool(in, align, 2 * int64_t(ThreadPool::global().size()), [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0, rows = lin_tile_rows(width);
    float* tile = lin_tile_scratch(std::min(rows, out) * width);
    LinSMap d(dx + c0, N, width, Eigen::OuterStride<>(in));
    for (int64_t r0 = 0; r0 < out; r0 += rows) {
      const int64_t r1 = std::min(out, r0 + rows);
      for (int64_t r = r0; r < r1; ++r) W.to_f32(r * in + c0, width, tile + (r - r0) * width);
      const LinCSMap dyt(dy + r0, N, r1 - r0, Eigen::OuterStride<>(out));
      if (r0 == 0 && !add)
        d.noalias() = dyt * LinCMap(tile, r1 - r0, width);
      else
        d.noalias() += dyt * LinCMap(tile, r1 - r0, width);
    }
  });
}
}  // namespace

void matmul_wt(const float* x, const models::Tensor& W, float* y, int64_t N, int64_t in, int64_t out) {
  if (W.dtype == models::DType::kF32) return matmul_wt(x, W.f32(), y, N, in, out);
  const int64_t rows = lin_tile_rows(in);
  parallel_blocks(out, N * in * out, [&](int64_t c0, int64_t c1) {  // columns of y = rows of W, whole rows converted
    float* tile = lin_tile_scratch(std::min(rows, c1 - c0) * in);
    for (int64_t r0 = c0; r0 < c1; r0 += rows) {
      const int64_t r1 = std::min(c1, r0 + rows);
      W.to_f32(r0 * in, (r1 - r0) * in, tile);
      LinSMap(y + r0, N, r1 - r0, Eigen::OuterStride<>(out)).noalias() =
          LinCMap(x, N, in) * LinCMap(tile, r1 - r0, in).transpose();
    }
  });
}

void matmul_dx(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, bool add,
               TypedDxSplit split) {
  if (W.dtype == models::DType::kF32) return matmul_dx(dy, W.f32(), dx, N, in, out, add);
  if (N * in * out < (int64_t(1) << 20) || serial_thread() || ThreadPool::global().size() == 1)
    return lin_dx_rows(dy, W, dx, N, in, out, 0, out, add);
  if (split == TypedDxSplit::kAuto) split = out >= in ? TypedDxSplit::kRows : TypedDxSplit::kColumns;
  switch (split) {
    case TypedDxSplit::kRows:
      return lin_dx_row_split(dy, W, dx, N, in, out, add);
    case TypedDxSplit::kColumns:
    case TypedDxSplit::kAuto:
      return lin_dx_column_split(dy, W, dx, N, in, out, add);
  }
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

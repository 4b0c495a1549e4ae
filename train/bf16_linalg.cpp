// The bf16 products of train/bf16_linalg.h on framework/simd/bf16_gemm.h, split over the thread pool by blocks of
// output columns (train/parallel.h).
#include "train/bf16_linalg.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "framework/simd/bf16_gemm.h"
#include "train/parallel.h"

namespace anelab::train {
namespace {

constexpr int64_t kBf16PanelElems = int64_t(1) << 17;  // a packed panel: 256 KiB of bf16 (in a core's L2)

// W [out, in] read where it is held: fp32 (a pointer, or an fp32 tensor) and bf16 tensors in place, any other type
// converted to fp32 into `tile` (models::Tensor::to_f32) a panel at a time.
struct Bf16Source {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const models::Tensor* t = nullptr;
  int64_t in = 0;
  // The panel of y = x Wᵀ: rows [r0, r1) of W, every column.
  void pack_nk(int64_t r0, int64_t r1, std::vector<float>& tile, uint16_t* panel) const {
    if (f32) return simd::pack_bf16_nk(f32 + r0 * in, in, in, r1 - r0, panel);
    if (bf16) return simd::pack_bf16_nk(bf16 + r0 * in, in, in, r1 - r0, panel);
    tile.resize(size_t((r1 - r0) * in));
    t->to_f32(r0 * in, (r1 - r0) * in, tile.data());
    simd::pack_bf16_nk(tile.data(), in, in, r1 - r0, panel);
  }
  // The panel of dx = dy W: rows [k0, k1) of W, columns [c0, c0 + width).
  void pack_kn(int64_t k0, int64_t k1, int64_t c0, int64_t width, std::vector<float>& tile, uint16_t* panel) const {
    if (f32) return simd::pack_bf16_kn(f32 + k0 * in + c0, in, k1 - k0, width, panel);
    if (bf16) return simd::pack_bf16_kn(bf16 + k0 * in + c0, in, k1 - k0, width, panel);
    tile.resize(size_t((k1 - k0) * width));
    for (int64_t r = k0; r < k1; ++r) t->to_f32(r * in + c0, width, tile.data() + (r - k0) * width);
    simd::pack_bf16_kn(tile.data(), width, k1 - k0, width, panel);
  }
  int64_t align() const { return t ? std::lcm(int64_t(16), models::dtype_block(t->dtype)) : 16; }
};

Bf16Source bf16_source(const models::Tensor& W, int64_t in) {
  if (W.dtype == models::DType::kF32) return {W.f32(), nullptr, nullptr, in};
  if (W.dtype == models::DType::kBF16) return {nullptr, reinterpret_cast<const uint16_t*>(W.data), nullptr, in};
  return {nullptr, nullptr, &W, in};
}

// a [N, K] rounded to bf16 rows of ld = K rounded up to even (the pad 0).
std::vector<uint16_t> bf16_rows(const float* a, int64_t N, int64_t K, int64_t ld) {
  std::vector<uint16_t> b(size_t(N * ld));
  parallel_rows(N, N * K, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) simd::round_bf16_row(a + n * K, b.data() + n * ld, K, ld > K);
  });
  return b;
}

// fn over column blocks of [0, n) (multiples of align), two per thread when the product is big.
void bf16_blocks(int64_t n, int64_t align, int64_t flops, FunctionRef<void(int64_t, int64_t)> fn) {
  if (flops < (int64_t(1) << 20))
    fn(0, n);
  else
    split_on_pool(n, align, 2 * int64_t(ThreadPool::global().size()), fn);
}

void wt_bf16(const float* x, const Bf16Source& W, float* y, int64_t N, int64_t in, int64_t out) {
  const int64_t lda = (in + 1) / 2 * 2;
  const std::vector<uint16_t> xb = bf16_rows(x, N, in, lda);
  const int64_t strip = std::max<int64_t>(16, kBf16PanelElems / lda / 16 * 16);  // rows of W per panel
  bf16_blocks(out, 16, N * in * out, [&](int64_t c0, int64_t c1) {               // columns of y = rows of W
    std::vector<float> tile;
    std::vector<uint16_t> panel(size_t(simd::bf16_panel_size(in, std::min(strip, c1 - c0))));
    for (int64_t r0 = c0; r0 < c1; r0 += strip) {
      const int64_t r1 = std::min(c1, r0 + strip);
      W.pack_nk(r0, r1, tile, panel.data());
      simd::gemm_bf16(xb.data(), lda, panel.data(), in, y + r0, out, N, r1 - r0, false);
    }
  });
}

void dx_bf16(const float* dy, const Bf16Source& W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  const int64_t lda = (out + 1) / 2 * 2;
  const std::vector<uint16_t> db = bf16_rows(dy, N, out, lda);
  bf16_blocks(in, W.align(), N * in * out, [&](int64_t c0, int64_t c1) {  // columns of dx = columns of W
    // chunks of k in multiples of 32: the AMX kernel's k step (a tdpbf16ps sums 32 products in an order of its own, so
    // a chunk boundary inside a step would change the bits with the block width, i.e. with the thread count)
    const int64_t width = c1 - c0, kc = std::max<int64_t>(32, kBf16PanelElems / ((width + 15) / 16 * 16) / 32 * 32);
    std::vector<float> tile;
    std::vector<uint16_t> panel(size_t(simd::bf16_panel_size(std::min(kc, out), width)));
    for (int64_t k0 = 0; k0 < out; k0 += kc) {  // rows of W in chunks: the chain goes on from chunk to chunk
      const int64_t k1 = std::min(out, k0 + kc);
      W.pack_kn(k0, k1, c0, width, tile, panel.data());
      simd::gemm_bf16(db.data() + k0, lda, panel.data(), k1 - k0, dx + c0, in, N, width, add || k0 > 0);
    }
  });
}

}  // namespace

void matmul_wt_bf16(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out) {
  wt_bf16(x, {W, nullptr, nullptr, in}, y, N, in, out);
}
void matmul_wt_bf16(const float* x, const models::Tensor& W, float* y, int64_t N, int64_t in, int64_t out) {
  wt_bf16(x, bf16_source(W, in), y, N, in, out);
}
void matmul_dx_bf16(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  dx_bf16(dy, {W, nullptr, nullptr, in}, dx, N, in, out, add);
}
void matmul_dx_bf16(const float* dy, const models::Tensor& W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  dx_bf16(dy, bf16_source(W, in), dx, N, in, out, add);
}

}  // namespace anelab::train

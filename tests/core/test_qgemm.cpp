// The quantized prefill GEMM (framework/quant/qgemm.h) on this build's SIMD path, every block type, against
// fp64 references: exact up to fp32 accumulation against the dequantized weights times the *quantized*
// activations, and within the activation-rounding bound against the fp32 activations. Sizes cover a
// partial token tile, a partial row panel, one block of k, and k spanning several 512-value k blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "framework/quant/blocks.h"
#include "framework/quant/qdot.h"
#include "framework/quant/qgemm.h"
#include "framework/simd/simd.h"

namespace anelab::quant {
namespace {

constexpr int64_t kNR = simd::kQGemmNV * simd::kWidth;  // rows per panel
constexpr int64_t kMR = simd::kQGemmMR;                 // tokens per micro-tile
constexpr double kU = 0x1p-24;                          // fp32 unit roundoff

struct Weights {
  std::vector<uint8_t> blocks;  // [rows, cols / values * bytes]
  std::vector<float> deq;       // [rows, cols] dequantized
  std::vector<float> off;       // [rows, cols] |the offset| of each value's group: Q4_K / Q5_K dmin m, Q5_1 m; else 0
};

Weights make_weights(BlockType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = g(rng);
  const BlockInfo bi = block_info(t);
  Weights m;
  m.blocks.resize(static_cast<size_t>(rows * cols / bi.values * bi.bytes));
  quantize(t, w.data(), m.blocks.data(), rows * cols);
  if (t == BlockType::kQ8_0)  // the most negative int8, which the reference quantizer never writes
    for (size_t b = 0; b < m.blocks.size() / 34; b += 3)
      reinterpret_cast<BlockQ8_0*>(m.blocks.data())[b].qs[b % 32] = -128;
  m.deq.resize(w.size());
  dequantize(t, m.blocks.data(), m.deq.data(), rows * cols);
  m.off.assign(w.size(), 0.0f);
  // K-quants: dmin and scales at the same offsets in Q4_K and Q5_K.
  auto k_offsets = [&](const auto* blk, size_t n) {
    for (size_t b = 0; b < n; ++b)
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        q4k_scale_min(j, blk[b].scales, sc, mn);
        for (int i = 0; i < 32; ++i)
          m.off[256 * b + 32 * static_cast<size_t>(j) + static_cast<size_t>(i)] = simd::h2f(blk[b].dmin) * mn;
      }
  };
  if (t == BlockType::kQ4_K) k_offsets(reinterpret_cast<const BlockQ4_K*>(m.blocks.data()), m.blocks.size() / 144);
  if (t == BlockType::kQ5_K) k_offsets(reinterpret_cast<const BlockQ5_K*>(m.blocks.data()), m.blocks.size() / 176);
  if (t == BlockType::kQ5_1)
    for (size_t b = 0; b < m.blocks.size() / 24; ++b)
      for (size_t i = 0; i < 32; ++i)
        m.off[32 * b + i] = std::fabs(simd::h2f(reinterpret_cast<const BlockQ5_1*>(m.blocks.data())[b].m));
  return m;
}

void check_gemm(ThreadPool& pool, BlockType t, int64_t n_tok, int64_t rows, int64_t cols) {
  SCOPED_TRACE(testing::Message() << block_info(t).name << " n_tok " << n_tok << " rows " << rows << " cols " << cols);
  const Weights w = make_weights(t, rows, cols, static_cast<uint32_t>(rows * 7 + cols));
  std::mt19937 rng(static_cast<uint32_t>(n_tok));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), bias(static_cast<size_t>(rows));
  for (float& v : x) v = g(rng);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 30.0f;  // outliers set some blocks' scales
  for (float& v : bias) v = g(rng);
  std::vector<float> y(static_cast<size_t>(n_tok * rows), NAN);
  gemm(pool, t, w.blocks.data(), rows, cols, bias.data(), x.data(), n_tok, y.data());
  Q8Acts a;
  for (int64_t tk = 0; tk < n_tok; ++tk) {
    const float* xt = x.data() + tk * cols;
    quantize_acts(xt, cols, a);
    for (int64_t r = 0; r < rows; ++r) {
      // ref_q: the dequantized weights times the quantized activations; ref_x: times x itself.
      double ref_q = bias[static_cast<size_t>(r)], ref_x = ref_q, mag = std::fabs(ref_q), act_bound = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const size_t i = static_cast<size_t>(r * cols + k);
        const double da = a.d[static_cast<size_t>(k / 32)], xq = da * a.q[static_cast<size_t>(k)];
        ref_q += double(w.deq[i]) * xq;
        ref_x += double(w.deq[i]) * xt[k];
        // The kernel scales exact integer sums; the reference's weights were rounded once or twice from
        // scale * q - min (terms |w| + 2 |min|). Then one rounding per fold of a group (cols / 16 at most,
        // twice that with the mins of Q4_K, Q5_K, Q5_1) and per k block: (cols / 8 + 8) u of the magnitude bounds both.
        mag += (std::fabs(w.deq[i]) + 2.0 * w.off[i]) * std::fabs(xq);
        act_bound += std::fabs(w.deq[i]) * acts_rounding_bound(a, BlockType::kQ8_0, k);  // the Q8_0 form it reads
      }
      const double fp32 = (static_cast<double>(cols) / 8 + 8) * kU * mag;
      const double yv = y[static_cast<size_t>(tk * rows + r)];
      ASSERT_LE(std::fabs(yv - ref_q), fp32) << "token " << tk << " row " << r;
      ASSERT_LE(std::fabs(yv - ref_x), act_bound + fp32 + 8 * kU * mag) << "token " << tk << " row " << r;
    }
  }
}

TEST(QuantGemm, MatchesFp64ReferenceOnEveryType) {
  ThreadPool pool(3);
  for (BlockType t : {BlockType::kQ8_0, BlockType::kQ4_0, BlockType::kQ5_0, BlockType::kQ5_1, BlockType::kQ4_K,
                      BlockType::kQ5_K, BlockType::kQ6_K}) {
    const int64_t bv = block_info(t).values;
    check_gemm(pool, t, kMR + 1, kNR + 3, bv);            // one block of k; partial tiles of tokens and rows
    check_gemm(pool, t, 1, 1, 3 * bv);                    // one token, one row
    check_gemm(pool, t, 2 * kMR + 3, 2 * kNR + 5, 1280);  // k over three k blocks (512, 512, 256)
    check_gemm(pool, t, 5, 3 * kNR, 512);                 // whole panels
    check_gemm(pool, t, 37, kNR + 7, 768);                // many token tiles, k over a partial second k block
  }
}

TEST(QuantGemm, RejectsColumnsThatAreNotWholeBlocks) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(210);
  std::vector<float> x(128), y(1);
  EXPECT_ANY_THROW(gemm(pool, BlockType::kQ6_K, w.data(), 1, 128, nullptr, x.data(), 1, y.data()));
}

}  // namespace
}  // namespace anelab::quant

// The CPU's weight matrix (framework/quant/mat.h), in anelab_core with the block formats it reads: this binary
// links anelab_core only. Its element types convert through the type table; a row read from the row tiles of a
// quantized matrix is the row its blocks hold; fp16 rows are widened exactly.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/quant/blocks.h"
#include "framework/quant/mat.h"
#include "framework/quant/qdot.h"
#include "framework/quant/types.h"

namespace anelab::quant {
namespace {

TEST(QuantMat, WTypesConvertThroughTheTypeTable) {
  for (const TypeTraits& r : kTypes) {
    const WType w = wtype_of(r.type);
    ASSERT_TRUE(is_quantized(w)) << r.name;
    EXPECT_EQ(block_type(w), r.type) << r.name;
    EXPECT_EQ(std::string(wtype_name(w)), r.name);
  }
  EXPECT_FALSE(block_type_of(WType::kF32).has_value());
  EXPECT_FALSE(is_quantized(WType::kF16));
  EXPECT_EQ(std::string(wtype_name(WType::kF16)), "fp16");
  EXPECT_THROW(block_type(WType::kF32), Error);
}

// Rows [rows, cols] of random values quantized to t, the first tiled_rows of them rewritten as row tiles.
std::vector<uint8_t> quantized_rows(BlockType t, int64_t rows, int64_t cols, std::vector<uint8_t>* plain) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const BlockInfo b = block_info(t);
  const int64_t row_bytes = cols / b.values * b.bytes;
  plain->assign(static_cast<size_t>(rows * row_bytes), 0);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    quantize(t, row.data(), plain->data() + r * row_bytes, cols);
  }
  return *plain;
}

TEST(QuantMat, RowValuesOfRowTilesAreTheRowsBlocks) {
  for (BlockType t : {BlockType::kQ8_0, BlockType::kQ4_K}) {
    const int64_t rows = 2 * kTileRows + 3, cols = 512;
    std::vector<uint8_t> plain;
    std::vector<uint8_t> tiled = quantized_rows(t, rows, cols, &plain);
    tile_rows(t, tiled.data(), 2, cols);
    Mat m;
    m.type = wtype_of(t), m.rows = rows, m.cols = cols, m.data = tiled.data(), m.tiled_rows = 2 * kTileRows;
    const int64_t row_bytes = cols / block_info(t).values * block_info(t).bytes;
    EXPECT_EQ(m.nbytes(), rows * row_bytes);
    std::vector<float> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      m.row_values(r, got.data());
      dequantize(t, plain.data() + r * row_bytes, want.data(), cols);
      ASSERT_EQ(got, want) << block_info(t).name << " row " << r;
    }
    EXPECT_EQ(m.row_blocks(rows - 1), tiled.data() + (rows - 1) * row_bytes);
    EXPECT_THROW(m.row_blocks(0), Error);  // inside the tiles
  }
}

TEST(QuantMat, Fp16RowsAreWidenedAndFp32ViewsChecked) {
  const std::vector<float> v = {0.5f, -1.25f, 3.0f, 0.1f, 2.0f, -0.75f};
  std::vector<half_bits> h(v.size());
  float_to_half(v.data(), h.data(), v.size());
  Mat m;
  m.type = WType::kF16, m.rows = 2, m.cols = 3, m.data = h.data();
  EXPECT_EQ(m.nbytes(), 12);
  float got[3];
  m.row_values(1, got);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got[c], half_to_float(h[3 + c]));
  const Mat f = Mat::f32(v, 3, 2);
  EXPECT_EQ(f.nbytes(), 24);
  f.row_values(2, got);
  EXPECT_EQ(got[0], v[4]);
  EXPECT_EQ(got[1], v[5]);
  EXPECT_THROW(Mat::f32(v, 4, 2), Error);
}

}  // namespace
}  // namespace anelab::quant

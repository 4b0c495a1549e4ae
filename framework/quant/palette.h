// Palettized weight matrices (lut4 / lut6, issue 39): every element of a [rows, cols] matrix is an index into a
// look-up table of 2^bits fp16 values, one table per group of `group` consecutive rows (coremltools'
// per_grouped_channel granularity along the output axis; group = rows is one table per tensor). This is exactly
// what MIL's ios18 constexpr_lut_to_dense takes (indices uint4 / uint6 [rows, cols, 1, 1], lut fp16
// [rows / group, 1, 1, 1, 2^bits, 1]: coremltools defs/iOS18/compression.py).
//
// The tables come from 1-D k-means (Lloyd's algorithm) over each group's values, with k = 2^bits, seeded at the
// quantiles (j + 1/2) / k of the cube root of the values' histogram (the high-resolution optimum's point density;
// deterministic, no random seed), at most kPaletteIterations rounds or until no centroid moves; a cluster that empties
// keeps its centroid. A group with no more distinct values than entries gets those values as its table (exact). The
// centroids are then rounded to fp16 and every element takes the index of the nearest fp16 centroid (the lower index on
// a tie), so the dequantized matrix is exactly lut[group(r), index] in fp16.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/fp16.h"

namespace anelab::quant {

inline constexpr int kPaletteIterations = 100;

struct Palette {
  int bits = 0;                  // 4 (lut4) or 6 (lut6)
  int64_t rows = 0, cols = 0;    // the matrix
  int64_t group = 0;             // rows per table (rows % group == 0)
  std::vector<uint8_t> indices;  // [rows, cols], each < 2^bits
  std::vector<half_bits> lut;    // [rows / group, 2^bits] fp16
  int64_t entries() const { return int64_t{1} << bits; }
  int64_t tables() const { return group > 0 ? rows / group : 0; }
};

// Palettizes w [rows, cols] (row-major) with `bits` in {4, 6} and `group` rows per table (0: one table for the
// whole tensor). Throws "[quant] ..." for other bits or a group that does not divide rows.
Palette palettize(std::span<const float> w, int64_t rows, int64_t cols, int bits, int64_t group);
// The matrix a palette stands for: out[r * cols + c] = fp16 lut[r / group][indices[r * cols + c]] as fp32.
std::vector<float> palette_values(const Palette& p);
// Checks bits, shape, group, sizes and every index against the table size; throws one line
// "[quant] palette of tensor NAME: ..." naming the first problem.
void check_palette(const Palette& p, const std::string& name);

}  // namespace anelab::quant

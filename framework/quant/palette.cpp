// k-means palettes of weight matrices (see palette.h).
#include "framework/quant/palette.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"

namespace anelab::quant {

namespace {

// Lloyd's algorithm in 1-D over sorted values v with k quantile-seeded centroids; returns them ascending.
std::vector<double> kmeans_1d(const std::vector<float>& v, int64_t k) {
  const auto n = static_cast<int64_t>(v.size());
  std::vector<double> c(v.begin(), v.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  if (static_cast<int64_t>(c.size()) <= k) {  // no more distinct values than entries: the table is them (exact)
    c.resize(static_cast<size_t>(k), c.back());
    return c;
  }
  // Seeds: the quantiles (j + 1/2) / k of the density p^(1/3), p the values' histogram over kSeedBins bins of
  // [min, max] (the point density of the MSE-optimal quantizer at high resolution: Panter & Dite 1951), so that
  // Lloyd starts near its optimum and not at the plain quantiles, which crowd the centroids into the bulk. About 8
  // values per bin (at least 4k bins, at most 4096): a histogram of mostly empty bins would be flat under the cube
  // root and give the plain quantiles back.
  const int64_t kSeedBins = std::clamp<int64_t>(n / 8, 4 * k, 4096);
  const double lo = v.front(), width = (static_cast<double>(v.back()) - lo) / kSeedBins;
  std::vector<double> cdf(static_cast<size_t>(kSeedBins + 1), 0.0);
  for (int64_t i = 0, b = 0; b < kSeedBins; ++b) {
    int64_t cnt = 0;
    const double edge = b + 1 == kSeedBins ? v.back() : lo + width * static_cast<double>(b + 1);
    for (; i < n && (v[static_cast<size_t>(i)] < edge || b + 1 == kSeedBins); ++i) ++cnt;
    cdf[static_cast<size_t>(b + 1)] = cdf[static_cast<size_t>(b)] + std::cbrt(static_cast<double>(cnt));
  }
  c.assign(static_cast<size_t>(k), 0.0);
  for (int64_t j = 0, b = 0; j < k; ++j) {
    const double want = (static_cast<double>(j) + 0.5) / static_cast<double>(k) * cdf.back();
    while (b + 1 < kSeedBins && cdf[static_cast<size_t>(b + 1)] < want) ++b;
    const double in_bin = cdf[static_cast<size_t>(b + 1)] - cdf[static_cast<size_t>(b)];
    const double f = in_bin > 0 ? (want - cdf[static_cast<size_t>(b)]) / in_bin : 0.5;
    c[static_cast<size_t>(j)] = lo + width * (static_cast<double>(b) + f);
  }
  std::vector<double> sum(static_cast<size_t>(k));
  std::vector<int64_t> cnt(static_cast<size_t>(k));
  for (int it = 0; it < kPaletteIterations; ++it) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(cnt.begin(), cnt.end(), 0);
    size_t j = 0;  // the values are sorted and so are the centroids: the nearest one only moves up
    for (const float x : v) {
      while (j + 1 < c.size() && std::abs(c[j + 1] - x) < std::abs(c[j] - x)) ++j;
      sum[j] += x, ++cnt[j];
    }
    bool moved = false;
    for (size_t i = 0; i < c.size(); ++i) {
      if (cnt[i] == 0) continue;  // an empty cluster keeps its centroid
      const double m = sum[i] / static_cast<double>(cnt[i]);
      moved |= m != c[i];
      c[i] = m;
    }
    std::sort(c.begin(), c.end());
    if (!moved) break;
  }
  return c;
}

}  // namespace

Palette palettize(std::span<const float> w, int64_t rows, int64_t cols, int bits, int64_t group) {
  ANELAB_CHECK(bits == 4 || bits == 6, "quant", "palette of ", bits, " bits (lut4 or lut6 only)");
  if (group == 0) group = rows;
  ANELAB_CHECK(rows > 0 && cols > 0 && static_cast<int64_t>(w.size()) == rows * cols, "quant", "palettize: ", w.size(),
               " values for [", rows, ", ", cols, "]");
  ANELAB_CHECK(group > 0 && rows % group == 0, "quant", "palette group of ", group, " rows does not divide ", rows,
               " rows");
  Palette p;
  p.bits = bits, p.rows = rows, p.cols = cols, p.group = group;
  const int64_t k = p.entries(), n = group * cols;
  p.indices.resize(static_cast<size_t>(rows * cols));
  p.lut.resize(static_cast<size_t>(p.tables() * k));
  for (int64_t t = 0; t < p.tables(); ++t) {
    const float* g = w.data() + t * n;
    std::vector<float> sorted(g, g + n);
    std::sort(sorted.begin(), sorted.end());
    const std::vector<double> c = kmeans_1d(sorted, k);
    half_bits* lut = p.lut.data() + t * k;
    std::vector<float> c16(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      lut[j] = float_to_half(static_cast<float>(c[static_cast<size_t>(j)]));
      c16[static_cast<size_t>(j)] = half_to_float(lut[j]);
    }
    for (int64_t i = 0; i < n; ++i) {  // the nearest fp16 centroid (ascending: the first of equals on a tie)
      const float x = g[i];
      auto hi = std::lower_bound(c16.begin(), c16.end(), x);
      if (hi == c16.end() || (hi != c16.begin() && x - *(hi - 1) <= *hi - x)) --hi;
      hi = std::lower_bound(c16.begin(), c16.end(), *hi);  // the first of equal centroids
      p.indices[static_cast<size_t>(t * n + i)] = static_cast<uint8_t>(hi - c16.begin());
    }
  }
  return p;
}

std::vector<float> palette_values(const Palette& p) {
  std::vector<float> out(p.indices.size());
  const int64_t k = p.entries();
  for (int64_t r = 0; r < p.rows; ++r) {
    const half_bits* lut = p.lut.data() + r / p.group * k;
    for (int64_t c = 0; c < p.cols; ++c)
      out[static_cast<size_t>(r * p.cols + c)] = half_to_float(lut[p.indices[static_cast<size_t>(r * p.cols + c)]]);
  }
  return out;
}

void check_palette(const Palette& p, const std::string& name) {
  ANELAB_CHECK(p.bits == 4 || p.bits == 6, "quant", "palette of tensor ", name, ": ", p.bits,
               " bits (4 or 6 expected)");
  ANELAB_CHECK(p.rows > 0 && p.cols > 0 && p.group > 0 && p.rows % p.group == 0, "quant", "palette of tensor ", name,
               ": group of ", p.group, " rows for [", p.rows, ", ", p.cols, "]");
  ANELAB_CHECK(static_cast<int64_t>(p.indices.size()) == p.rows * p.cols, "quant", "palette of tensor ", name, ": ",
               p.indices.size(), " indices for [", p.rows, ", ", p.cols, "]");
  ANELAB_CHECK(static_cast<int64_t>(p.lut.size()) == p.tables() * p.entries(), "quant", "palette of tensor ", name,
               ": ", p.lut.size(), " table entries, ", p.tables() * p.entries(), " expected");
  const auto k = static_cast<uint8_t>(p.entries());
  for (size_t i = 0; i < p.indices.size(); ++i)
    ANELAB_CHECK(p.indices[i] < k, "quant", "palette of tensor ", name, ": index ", static_cast<int>(p.indices[i]),
                 " at element ", i, " is past the ", static_cast<int>(k), "-entry table");
}

}  // namespace anelab::quant

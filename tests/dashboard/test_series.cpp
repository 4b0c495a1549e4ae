// Series maths: EMA against a direct reference, ranges, ticks, nearest point, decimation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "dashboard/series.h"

namespace anelab::dashboard {
namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Series, EmaMatchesDirectDebiasedSum) {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(2.0, 0.5);
  std::vector<double> y(200);
  for (auto& v : y) v = nd(rng);
  for (double w : {0.0, 0.5, 0.9, 0.99}) {
    auto s = ema(y, w);
    for (size_t i = 0; i < y.size(); i += 17) {
      // Reference: sum_k w^(i-k) (1-w) y_k / sum_k w^(i-k) (1-w)
      double num = 0, den = 0;
      for (size_t k = 0; k <= i; ++k) {
        double wk = std::pow(w, static_cast<double>(i - k));
        num += wk * y[k], den += wk;
      }
      EXPECT_NEAR(s[i], num / den, 1e-9) << "w=" << w << " i=" << i;
    }
  }
}

TEST(Series, EmaSkipsNaN) {
  auto s = ema({1.0, kNaN, 3.0}, 0.5);
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  EXPECT_TRUE(std::isnan(s[1]));
  EXPECT_NEAR(s[2], (0.5 * 1.0 + 3.0) / 1.5, 1e-12);
}

TEST(Series, YRangeRespectsXWindowAndLog) {
  std::vector<double> x = {0, 1, 2, 3, 4}, y = {-1, 5, 2, kNaN, 100};
  auto r = y_range(x, y, 0.5, 3.5, false);
  EXPECT_DOUBLE_EQ(r.lo, 2);
  EXPECT_DOUBLE_EQ(r.hi, 5);
  r = y_range(x, y, 0, 4, true);
  EXPECT_DOUBLE_EQ(r.lo, 2);
  EXPECT_DOUBLE_EQ(r.hi, 100);
  EXPECT_FALSE(y_range(x, y, 10, 20, false).valid());
  auto p = pad_range({3, 3}, 0.1, false);
  EXPECT_LT(p.lo, 3);
  EXPECT_GT(p.hi, 3);
}

TEST(Series, NiceTicksAreRoundAndInside) {
  auto t = nice_ticks(0.13, 9.7, 6);
  ASSERT_GE(t.size(), 4u);
  for (double v : t) {
    EXPECT_GE(v, 0.13);
    EXPECT_LE(v, 9.7);
    double r = v / 2.0;
    EXPECT_NEAR(r, std::round(r), 1e-9) << v;  // step 2 for this range
  }
  auto l = log_ticks(0.001, 10, 8);
  ASSERT_FALSE(l.empty());
  EXPECT_DOUBLE_EQ(l.front(), 0.001);
  EXPECT_DOUBLE_EQ(l.back(), 10);
  EXPECT_TRUE(nice_ticks(1, 1, 5).empty());
  EXPECT_EQ(tick_label(15000), "15k");
  EXPECT_EQ(tick_label(1500), "1500");
  EXPECT_EQ(tick_label(0), "0");
}

TEST(Series, NearestIndexSortedAndUnsorted) {
  std::vector<double> x, y;
  for (int i = 0; i < 1000; ++i) x.push_back(i * 2.0), y.push_back(i);
  EXPECT_EQ(nearest_index(x, y, 400.8), 200);
  EXPECT_EQ(nearest_index(x, y, -50), 0);
  EXPECT_EQ(nearest_index(x, y, 1e9), 999);
  y[200] = kNaN;
  long i = nearest_index(x, y, 400);
  EXPECT_TRUE(i == 199 || i == 201);
  std::vector<double> ux = {5, 1, 3}, uy = {1, 1, 1};
  EXPECT_EQ(nearest_index(ux, uy, 1.2), 1);
  EXPECT_EQ(nearest_index({}, {}, 1), -1);
}

TEST(Series, DecimationKeepsExtremesAndBoundsSize) {
  std::vector<double> x, y;
  for (int i = 0; i < 100000; ++i) x.push_back(i), y.push_back(std::sin(i * 0.001));
  y[51234] = 7.0;  // a spike must survive
  y[777] = -9.0;
  auto d = decimate(x, y, 0, 99999, 200);
  EXPECT_LE(d.size(), 200u * 4 + 8);
  bool spike = false, dip = false;
  for (auto& p : d) spike |= p.y == 7.0, dip |= p.y == -9.0;
  EXPECT_TRUE(spike);
  EXPECT_TRUE(dip);
  for (size_t i = 1; i < d.size(); ++i) EXPECT_LE(d[i - 1].x, d[i].x);
  // A window keeps one point beyond each edge.
  auto w = decimate(x, y, 10.5, 20.5, 200);
  ASSERT_FALSE(w.empty());
  EXPECT_DOUBLE_EQ(w.front().x, 10);
  EXPECT_DOUBLE_EQ(w.back().x, 21);
}

}  // namespace
}  // namespace anelab::dashboard

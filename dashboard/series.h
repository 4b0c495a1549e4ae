// Series maths for the plots, GUI-free: EMA smoothing, visible ranges, axis ticks, min/max
// decimation and nearest-point lookup. x arrays are expected in arrival order (steps normally
// increase; functions that search assume non-decreasing x and fall back to a scan otherwise).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace anelab::dashboard {

// Debiased exponential moving average (weight 0 = no smoothing, 0.99 = heavy), NaN inputs are
// passed through as NaN and do not disturb the average.
std::vector<double> ema(const std::vector<double>& y, double weight);

struct Range {
  double lo = 0, hi = 0;
  bool valid() const { return hi >= lo && lo == lo; }
};

// Range of finite x values.
Range x_range(const std::vector<double>& x);
// Range of finite y values (positive only when log_y) for points whose x lies in [xlo, xhi].
Range y_range(const std::vector<double>& x, const std::vector<double>& y, double xlo, double xhi, bool log_y);
// Widens a range by a fraction on both sides; makes a zero-width range non-empty.
Range pad_range(Range r, double frac, bool log_y);

// "Nice" tick positions (1, 2, 5 x 10^k) inside [lo, hi], at most about max_ticks of them.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// Ticks for a log axis: decades, with 2 and 5 in between when the range spans few decades.
std::vector<double> log_ticks(double lo, double hi, int max_ticks);
// Short tick label: 1.5k, 2M, 0.001, 1e-05.
std::string tick_label(double v);

// Index of the point whose x is nearest to `x` (finite x and y only); -1 if none.
long nearest_index(const std::vector<double>& x, const std::vector<double>& y, double at);

// Min/max decimation for drawing: reduces the points with x in [xlo, xhi] to at most about
// 2*buckets points (per bucket the first, min, max and last points in x order), keeping extremes.
struct XY {
  double x, y;
};
std::vector<XY> decimate(const std::vector<double>& x, const std::vector<double>& y, double xlo, double xhi,
                         size_t buckets);

}  // namespace anelab::dashboard

#include "dashboard/series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace anelab::dashboard {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
bool finite(double v) { return std::isfinite(v); }
}  // namespace

std::vector<double> ema(const std::vector<double>& y, double weight) {
  weight = std::clamp(weight, 0.0, 0.999);
  std::vector<double> out(y.size(), kNaN);
  double acc = 0, norm = 0;  // acc = sum w^k y, norm = sum w^k (debiasing)
  for (size_t i = 0; i < y.size(); ++i) {
    if (!finite(y[i])) continue;
    acc = acc * weight + (1 - weight) * y[i];
    norm = norm * weight + (1 - weight);
    out[i] = acc / norm;
  }
  return out;
}

Range x_range(const std::vector<double>& x) {
  Range r{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (double v : x)
    if (finite(v)) r.lo = std::min(r.lo, v), r.hi = std::max(r.hi, v);
  if (!(r.hi >= r.lo)) return {kNaN, kNaN};
  return r;
}

Range y_range(const std::vector<double>& x, const std::vector<double>& y, double xlo, double xhi, bool log_y) {
  Range r{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  size_t n = std::min(x.size(), y.size());
  for (size_t i = 0; i < n; ++i) {
    if (!finite(x[i]) || !finite(y[i]) || x[i] < xlo || x[i] > xhi) continue;
    if (log_y && y[i] <= 0) continue;
    r.lo = std::min(r.lo, y[i]), r.hi = std::max(r.hi, y[i]);
  }
  if (!(r.hi >= r.lo)) return {kNaN, kNaN};
  return r;
}

Range pad_range(Range r, double frac, bool log_y) {
  if (!r.valid()) return {0, 1};
  if (log_y) {
    double lo = std::log10(std::max(r.lo, 1e-300)), hi = std::log10(std::max(r.hi, 1e-300));
    if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
    double p = (hi - lo) * frac;
    return {std::pow(10.0, lo - p), std::pow(10.0, hi + p)};
  }
  double span = r.hi - r.lo;
  if (span <= std::abs(r.hi) * 1e-12 || span == 0) {
    double d = r.hi == 0 ? 1.0 : std::abs(r.hi) * 0.05;
    return {r.lo - d, r.hi + d};
  }
  return {r.lo - span * frac, r.hi + span * frac};
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> t;
  if (!finite(lo) || !finite(hi) || hi <= lo || max_ticks < 1) return t;
  double raw = (hi - lo) / max_ticks;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  double first = std::ceil(lo / step) * step;
  for (int i = 0; i < 1000; ++i) {
    double v = first + i * step;
    if (v > hi + step * 1e-9) break;
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

std::vector<double> log_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> t;
  if (!(lo > 0) || !(hi > lo) || !finite(hi)) return t;
  int d0 = static_cast<int>(std::floor(std::log10(lo))), d1 = static_cast<int>(std::ceil(std::log10(hi)));
  int decades = d1 - d0;
  int every = std::max(1, decades / std::max(1, max_ticks));
  bool minor = decades * 3 <= max_ticks;
  for (int d = d0; d <= d1; ++d) {
    double base = std::pow(10.0, d);
    if ((d - d0) % every == 0 && base >= lo && base <= hi) t.push_back(base);
    if (minor)
      for (double m : {2.0, 5.0})
        if (base * m >= lo && base * m <= hi) t.push_back(base * m);
  }
  if (t.size() < 2 && decades <= 1) return nice_ticks(lo, hi, max_ticks);  // less than a decade
  std::sort(t.begin(), t.end());
  return t;
}

std::string tick_label(double v) {
  char buf[32];
  double a = std::abs(v);
  if (v == 0) return "0";
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3gG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  else if (a >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.4g", v);
  else
    std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

long nearest_index(const std::vector<double>& x, const std::vector<double>& y, double at) {
  long best = -1;
  double bd = std::numeric_limits<double>::infinity();
  size_t n = std::min(x.size(), y.size());
  bool sorted = std::is_sorted(x.begin(), x.begin() + static_cast<long>(n));
  size_t lo = 0, hi = n;
  if (sorted && n > 64) {  // search a window around the insertion point
    size_t p = static_cast<size_t>(std::lower_bound(x.begin(), x.begin() + static_cast<long>(n), at) - x.begin());
    lo = p > 32 ? p - 32 : 0, hi = std::min(n, p + 32);
  }
  for (size_t i = lo; i < hi; ++i) {
    if (!finite(x[i]) || !finite(y[i])) continue;
    double d = std::abs(x[i] - at);
    if (d < bd) bd = d, best = static_cast<long>(i);
  }
  return best;
}

std::vector<XY> decimate(const std::vector<double>& x, const std::vector<double>& y, double xlo, double xhi,
                         size_t buckets) {
  std::vector<XY> out;
  size_t n = std::min(x.size(), y.size());
  if (n == 0 || !(xhi > xlo) || buckets == 0) {
    for (size_t i = 0; i < n; ++i)
      if (finite(x[i]) && finite(y[i])) out.push_back({x[i], y[i]});
    return out;
  }
  // Include one point beyond each edge so lines leave the plot instead of stopping short.
  size_t first = n, last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!finite(x[i]) || !finite(y[i])) continue;
    if (x[i] >= xlo && x[i] <= xhi) first = std::min(first, i), last = std::max(last, i);
  }
  if (first == n) return out;
  while (first > 0 && !(finite(x[first - 1]) && finite(y[first - 1]))) --first;
  if (first > 0) --first;
  while (last + 1 < n && !(finite(x[last + 1]) && finite(y[last + 1]))) ++last;
  if (last + 1 < n) ++last;
  size_t count = last - first + 1;
  if (count <= buckets * 4) {
    for (size_t i = first; i <= last; ++i)
      if (finite(x[i]) && finite(y[i])) out.push_back({x[i], y[i]});
    return out;
  }
  double w = (xhi - xlo) / static_cast<double>(buckets);
  long cur = std::numeric_limits<long>::min();
  size_t bfirst = 0, bmin = 0, bmax = 0, blast = 0;
  bool open = false;
  auto flush = [&] {
    if (!open) return;
    size_t idx[4] = {bfirst, bmin, bmax, blast};
    std::sort(idx, idx + 4);
    size_t prev = static_cast<size_t>(-1);
    for (size_t k : idx)
      if (k != prev) out.push_back({x[k], y[k]}), prev = k;
  };
  for (size_t i = first; i <= last; ++i) {
    if (!finite(x[i]) || !finite(y[i])) continue;
    long b = static_cast<long>(std::floor((x[i] - xlo) / w));
    if (!open || b != cur) {
      flush();
      cur = b, bfirst = bmin = bmax = blast = i, open = true;
    } else {
      if (y[i] < y[bmin]) bmin = i;
      if (y[i] > y[bmax]) bmax = i;
      blast = i;
    }
  }
  flush();
  return out;
}

}  // namespace anelab::dashboard

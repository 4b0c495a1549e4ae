#include "infer/params_check.h"

#include <cmath>
#include <cstdio>

namespace anelab::infer {
namespace {
// A bound as written: integers as integers ("16777216", not "1.67772e+07"), the rest shortest.
std::string text(double x) {
  char b[32];
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9007199254740992.0)
    std::snprintf(b, sizeof b, "%.0f", x);
  else
    std::snprintf(b, sizeof b, "%g", x);
  return b;
}
}  // namespace

std::string range_text(const ParamRange& r) {
  if (std::isinf(r.hi)) return (r.lo_open ? "> " : ">= ") + text(r.lo);
  return (r.lo_open ? "in (" : "in [") + text(r.lo) + ", " + text(r.hi) + "]";
}

std::string range_error(const ParamRange& r, double v, const std::string& shown) {
  const bool ok = (r.lo_open ? v > r.lo : v >= r.lo) && v <= r.hi;  // false for NaN
  return ok ? std::string() : "must be " + range_text(r) + " (got " + (shown.empty() ? text(v) : shown) + ")";
}

}  // namespace anelab::infer

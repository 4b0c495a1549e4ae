// Error measures the tests share.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace anelab::test {

// max |a - b| / max |b| over n values (0 when b is all zeros and a equals it).
inline double rel_err(const float* a, const float* b, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::abs(static_cast<double>(b[i])));
  }
  return e / std::max(m, 1e-300);
}

}  // namespace anelab::test

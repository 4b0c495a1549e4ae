// Independent fp64 reference implementations for the op tests (no emulator code is reused).
// Tensors are row-major Vec with an explicit shape.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "framework/mil/types.h"

namespace anelab::test::ref {

using Vec = std::vector<double>;
using mil::Shape;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Element offset of multi-index `idx` (of shape `out`) inside a tensor of shape `s` broadcast to `out`.
inline int64_t bcast_offset(const std::vector<int64_t>& idx, const Shape& s, const Shape& out) {
  int64_t off = 0, stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    const size_t od = out.size() - s.size() + static_cast<size_t>(d);
    const int64_t i = s[static_cast<size_t>(d)] == 1 ? 0 : idx[od];
    off += i * stride;
    stride *= s[static_cast<size_t>(d)];
  }
  return off;
}

inline std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % s[static_cast<size_t>(d)];
    flat /= s[static_cast<size_t>(d)];
  }
  return idx;
}

inline Vec binary(const Vec& a, const Shape& sa, const Vec& b, const Shape& sb, const Shape& out,
                  const std::function<double(double, double)>& f) {
  Vec y(static_cast<size_t>(numel(out)));
  for (int64_t i = 0; i < numel(out); ++i) {
    auto idx = unravel(i, out);
    y[static_cast<size_t>(i)] =
        f(a[static_cast<size_t>(bcast_offset(idx, sa, out))], b[static_cast<size_t>(bcast_offset(idx, sb, out))]);
  }
  return y;
}

inline Vec abs_vec(const Vec& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

struct ConvGeom {
  int64_t N, Cin, H, W, Cout, kh, kw, G, sh, sw, dh, dw, pt, pl, Ho, Wo;
};

// y[n, co, oh, ow] = bias[co] + sum_{ci in group, ki, kj} w[co, ci, ki, kj] x[n, g*Cin/G + ci, ih, iw]; mag = sum
// |terms|.
inline void conv2d(const Vec& x, const Vec& w, const Vec* bias, const ConvGeom& c, Vec* y, Vec* mag) {
  const int64_t cin_g = c.Cin / c.G, cout_g = c.Cout / c.G;
  y->assign(static_cast<size_t>(c.N * c.Cout * c.Ho * c.Wo), 0.0);
  mag->assign(y->size(), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t co = 0; co < c.Cout; ++co)
      for (int64_t oh = 0; oh < c.Ho; ++oh)
        for (int64_t ow = 0; ow < c.Wo; ++ow) {
          double s = bias ? (*bias)[static_cast<size_t>(co)] : 0.0, m = std::fabs(s);
          const int64_t g = co / cout_g;
          for (int64_t ci = 0; ci < cin_g; ++ci)
            for (int64_t ki = 0; ki < c.kh; ++ki)
              for (int64_t kj = 0; kj < c.kw; ++kj) {
                const int64_t ih = oh * c.sh - c.pt + ki * c.dh, iw = ow * c.sw - c.pl + kj * c.dw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const double t = w[static_cast<size_t>(((co * cin_g + ci) * c.kh + ki) * c.kw + kj)] *
                                 x[static_cast<size_t>(((n * c.Cin + g * cin_g + ci) * c.H + ih) * c.W + iw)];
                s += t;
                m += std::fabs(t);
              }
          const size_t o = static_cast<size_t>(((n * c.Cout + co) * c.Ho + oh) * c.Wo + ow);
          (*y)[o] = s;
          (*mag)[o] = m;
        }
}

// Batched matmul with numpy batch broadcasting; x [..., M, K] (or [..., K, M] if tx), y likewise.
inline void matmul(const Vec& x, const Shape& xs, bool tx, const Vec& y, const Shape& ys, bool ty, Vec* out, Vec* mag,
                   Shape* os) {
  const size_t rx = xs.size(), ry = ys.size();
  const int64_t M = tx ? xs[rx - 1] : xs[rx - 2], K = tx ? xs[rx - 2] : xs[rx - 1];
  const int64_t N = ty ? ys[ry - 2] : ys[ry - 1];
  Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2), ob(std::max(xb.size(), yb.size()));
  for (size_t i = 0; i < ob.size(); ++i) {
    const int64_t a = i < ob.size() - xb.size() ? 1 : xb[i - (ob.size() - xb.size())];
    const int64_t b = i < ob.size() - yb.size() ? 1 : yb[i - (ob.size() - yb.size())];
    ob[i] = std::max(a, b);
  }
  *os = ob;
  os->push_back(M);
  os->push_back(N);
  out->assign(static_cast<size_t>(numel(*os)), 0.0);
  mag->assign(out->size(), 0.0);
  for (int64_t b = 0; b < numel(ob); ++b) {
    auto idx = unravel(b, ob);
    const int64_t xo = bcast_offset(idx, xb, ob) * M * K, yo = bcast_offset(idx, yb, ob) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, m = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double a = x[static_cast<size_t>(xo + (tx ? k * M + i : i * K + k))];
          const double c = y[static_cast<size_t>(yo + (ty ? j * K + k : k * N + j))];
          s += a * c;
          m += std::fabs(a * c);
        }
        (*out)[static_cast<size_t>((b * M + i) * N + j)] = s;
        (*mag)[static_cast<size_t>((b * M + i) * N + j)] = m;
      }
  }
}

// softmax over `axis` of shape s.
inline Vec softmax(const Vec& x, const Shape& s, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t len = s[static_cast<size_t>(axis)];
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double mx = -INFINITY, sum = 0;
      for (int64_t a = 0; a < len; ++a) mx = std::max(mx, x[static_cast<size_t>((o * len + a) * inner + j)]);
      for (int64_t a = 0; a < len; ++a) sum += std::exp(x[static_cast<size_t>((o * len + a) * inner + j)] - mx);
      for (int64_t a = 0; a < len; ++a) {
        const size_t i = static_cast<size_t>((o * len + a) * inner + j);
        y[i] = std::exp(x[i] - mx) / sum;
      }
    }
  return y;
}

}  // namespace anelab::test::ref

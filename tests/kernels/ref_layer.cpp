#include "tests/kernels/ref_layer.h"

#include <cmath>

#include "framework/core/error.h"

namespace anelab::test {

using kern::RopeStyle;
using kern::TrainShape;

F64v& RefWeights::get(const std::string& n) {
  if (n == "wq") return wq;
  if (n == "wk") return wk;
  if (n == "wv") return wv;
  if (n == "wo") return wo;
  if (n == "w1") return w1;
  if (n == "w2") return w2;
  if (n == "w3") return w3;
  if (n == "rms_att") return rms_att;
  return rms_ffn;
}

namespace {

// Y[O,S] = W[O,I] X[I,S]
F64v mm(const F64v& w, int64_t O, int64_t I, const F64v& x, int64_t S) {
  F64v y(O * S, 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      const double a = w[o * I + i];
      for (int64_t t = 0; t < S; ++t) y[o * S + t] += a * x[i * S + t];
    }
  return y;
}
// Y[I,S] = W^T G, W [O, I], G [O, S]
F64v mmT(const F64v& w, int64_t O, int64_t I, const F64v& g, int64_t S) {
  F64v y(I * S, 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      const double a = w[o * I + i];
      for (int64_t t = 0; t < S; ++t) y[i * S + t] += a * g[o * S + t];
    }
  return y;
}
// dW[O,I] = G[O,S] X[I,S]^T
F64v outer(const F64v& g, int64_t O, const F64v& x, int64_t I, int64_t S) {
  F64v d(O * I, 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < S; ++t) acc += g[o * S + t] * x[i * S + t];
      d[o * I + i] = acc;
    }
  return d;
}
F64v add(const F64v& a, const F64v& b) {
  F64v r(a);
  for (size_t i = 0; i < r.size(); ++i) r[i] += b[i];
  return r;
}

// Rotation of each (a, b) pair of every head by pos * theta^(-2i/HD); sign -1 applies the inverse.
F64v rope(const F64v& x, int64_t heads, const TrainShape& s, double sign) {
  const int64_t HD = s.head_dim, S = s.seq;
  F64v y(x);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < HD / 2; ++i) {
      const int64_t a = h * HD + (s.rope == RopeStyle::kAdjacentPairs ? 2 * i : i);
      const int64_t b = h * HD + (s.rope == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + HD / 2);
      for (int64_t t = 0; t < S; ++t) {
        const double ang = t * std::pow(s.rope_theta, -2.0 * i / HD);
        const double c = std::cos(ang), sn = sign * std::sin(ang);
        y[a * S + t] = x[a * S + t] * c - x[b * S + t] * sn;
        y[b * S + t] = x[b * S + t] * c + x[a * S + t] * sn;
      }
    }
  return y;
}

}  // namespace

F64v ref_rms_fwd(const F64v& x, const F64v& w, int64_t D, int64_t S, double eps) {
  F64v y(x.size());
  for (int64_t t = 0; t < S; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[d * S + t] * x[d * S + t];
    const double r = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t d = 0; d < D; ++d) y[d * S + t] = x[d * S + t] * r * w[d];
  }
  return y;
}

F64v ref_rms_bwd(const F64v& dy, const F64v& x, const F64v& w, int64_t D, int64_t S, double eps, F64v* dw) {
  F64v dx(x.size());
  if (dw) dw->assign(D, 0.0);
  for (int64_t t = 0; t < S; ++t) {
    double ss = 0, m = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[d * S + t] * x[d * S + t];
    const double r = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t d = 0; d < D; ++d) m += dy[d * S + t] * w[d] * x[d * S + t];
    m /= D;
    for (int64_t d = 0; d < D; ++d) {
      dx[d * S + t] = r * (dy[d * S + t] * w[d] - x[d * S + t] * r * r * m);
      if (dw) (*dw)[d] += dy[d * S + t] * x[d * S + t] * r;
    }
  }
  return dx;
}

RefFwd ref_forward(const TrainShape& s, const RefWeights& w, const F64v& x) {
  const int64_t D = s.dim, S = s.seq, QD = s.q_dim(), KVD = s.kv_dim(), H = s.n_heads, HD = s.head_dim, HID = s.hidden;
  RefFwd f;
  f.x = x;
  f.xn1 = ref_rms_fwd(x, w.rms_att, D, S, s.norm_eps);
  f.q = mm(w.wq, QD, D, f.xn1, S);
  f.k = mm(w.wk, KVD, D, f.xn1, S);
  f.v = mm(w.wv, KVD, D, f.xn1, S);
  f.q_rope = rope(f.q, H, s, 1);
  f.k_rope = rope(f.k, s.n_kv_heads, s, 1);
  f.probs.assign(H * S * S, 0.0);
  f.attn.assign(QD * S, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / s.n_rep();
    for (int64_t i = 0; i < S; ++i) {
      double* p = &f.probs[(h * S + i) * S];
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double sc = 0;
        for (int64_t d = 0; d < HD; ++d) sc += f.q_rope[(h * HD + d) * S + i] * f.k_rope[(g * HD + d) * S + j];
        p[j] = sc * s.attn_scale();
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
      for (int64_t d = 0; d < HD; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[j] * f.v[(g * HD + d) * S + j];
        f.attn[(h * HD + d) * S + i] = acc;
      }
    }
  }
  f.o = mm(w.wo, D, QD, f.attn, S);
  f.x2 = add(x, f.o);
  f.xn2 = ref_rms_fwd(f.x2, w.rms_ffn, D, S, s.norm_eps);
  f.h1 = mm(w.w1, HID, D, f.xn2, S);
  f.h3 = mm(w.w3, HID, D, f.xn2, S);
  f.gate.resize(f.h1.size());
  for (size_t i = 0; i < f.h1.size(); ++i) f.gate[i] = f.h1[i] / (1 + std::exp(-f.h1[i])) * f.h3[i];
  f.y = mm(w.w2, D, HID, f.gate, S);
  f.out = add(f.x2, f.y);
  return f;
}

RefGrads ref_backward(const TrainShape& s, const RefWeights& w, const RefFwd& f, const F64v& dy) {
  const int64_t D = s.dim, S = s.seq, QD = s.q_dim(), KVD = s.kv_dim(), H = s.n_heads, HD = s.head_dim, HID = s.hidden;
  RefGrads g;
  g.dffn = dy;
  F64v dgate = mmT(w.w2, D, HID, dy, S);
  g.dw.w2 = outer(dy, D, f.gate, HID, S);
  g.dh1.resize(f.h1.size());
  g.dh3.resize(f.h1.size());
  for (size_t i = 0; i < f.h1.size(); ++i) {
    const double sg = 1 / (1 + std::exp(-f.h1[i]));
    g.dh3[i] = dgate[i] * f.h1[i] * sg;
    g.dh1[i] = dgate[i] * f.h3[i] * sg * (1 + f.h1[i] * (1 - sg));
  }
  g.dw.w1 = outer(g.dh1, HID, f.xn2, D, S);
  g.dw.w3 = outer(g.dh3, HID, f.xn2, D, S);
  g.dxn2 = add(mmT(w.w1, HID, D, g.dh1, S), mmT(w.w3, HID, D, g.dh3, S));
  g.dx2 = add(ref_rms_bwd(g.dxn2, f.x2, w.rms_ffn, D, S, s.norm_eps, &g.dw.rms_ffn), dy);
  g.dw.wo = outer(g.dx2, D, f.attn, QD, S);
  g.da = mmT(w.wo, D, QD, g.dx2, S);
  g.dv.assign(KVD * S, 0.0);
  g.dq_rope.assign(QD * S, 0.0);
  g.dk_rope.assign(KVD * S, 0.0);
  g.dp.assign(H * S * S, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kv = h / s.n_rep();
    for (int64_t i = 0; i < S; ++i) {
      const double* p = &f.probs[(h * S + i) * S];
      double* dp = &g.dp[(h * S + i) * S];
      double rs = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < HD; ++d) {
          acc += g.da[(h * HD + d) * S + i] * f.v[(kv * HD + d) * S + j];
          g.dv[(kv * HD + d) * S + j] += p[j] * g.da[(h * HD + d) * S + i];
        }
        dp[j] = acc;
        rs += p[j] * acc;
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p[j] * (dp[j] - rs) * s.attn_scale();
        for (int64_t d = 0; d < HD; ++d) {
          g.dq_rope[(h * HD + d) * S + i] += ds * f.k_rope[(kv * HD + d) * S + j];
          g.dk_rope[(kv * HD + d) * S + j] += ds * f.q_rope[(h * HD + d) * S + i];
        }
      }
    }
  }
  g.dq = rope(g.dq_rope, H, s, -1);
  g.dk = rope(g.dk_rope, s.n_kv_heads, s, -1);
  g.dw.wq = outer(g.dq, QD, f.xn1, D, S);
  g.dw.wk = outer(g.dk, KVD, f.xn1, D, S);
  g.dw.wv = outer(g.dv, KVD, f.xn1, D, S);
  g.dxn1 = add(add(mmT(w.wq, QD, D, g.dq, S), mmT(w.wk, KVD, D, g.dk, S)), mmT(w.wv, KVD, D, g.dv, S));
  g.dx = add(ref_rms_bwd(g.dxn1, f.x, w.rms_att, D, S, s.norm_eps, &g.dw.rms_att), g.dx2);
  return g;
}

}  // namespace anelab::test

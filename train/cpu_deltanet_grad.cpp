// The Gated DeltaNet step of the CPU training executor: the math is stated in train/cpu_deltanet_grad.h.
#include "train/cpu_deltanet_grad.h"

#include <algorithm>
#include <cmath>

#include "framework/core/clock.h"
#include "train/cpu_linalg.h"
#include "train/parallel.h"

namespace anelab::train {
// File-local helpers in a namespace of their own (train/ sources share unity batches).
namespace deltanet_grad_detail {
namespace {
constexpr float kL2Eps = 1e-6f;  // transformers' l2norm eps for q and k
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20) and its derivative.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float softplus_grad(float x) { return x > 20.0f ? 1.0f : sigmoid(x); }
float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

// The heads of q or k inside the rows of m [N, C]: head i (of N*H) at m[(i / H) * C + first + (i % H) * d].
struct HeadRows {
  int64_t C, first, H, d;
  int64_t at(int64_t i) const { return (i / H) * C + first + (i % H) * d; }
};

// y [N*H, d] = x * r * scale per head, r [N*H] = 1 / sqrt(Σ x² + eps).
void l2_heads(const float* m, const HeadRows& hr, float* y, float* r, int64_t rows, float scale) {
  const int64_t d = hr.d;
  parallel_rows(rows, rows * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* x = m + hr.at(i);
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += double(x[j]) * x[j];
      r[i] = static_cast<float>(1.0 / std::sqrt(ss + double(kL2Eps)));
      for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[j] * r[i] * scale;
    }
  });
}
// Its backward: dm (at the heads' places) = scale * (r dy - x r³ (x · dy)).
void l2_heads_backward(const float* m, const HeadRows& hr, const float* r, const float* dy, float* dm, int64_t rows,
                       float scale) {
  const int64_t d = hr.d;
  parallel_rows(rows, rows * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* x = m + hr.at(i);
      const float* dr = dy + i * d;
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += double(x[j]) * dr[j];
      const float ri = r[i], c = static_cast<float>(dot) * ri * ri * ri;
      float* o = dm + hr.at(i);
      for (int64_t j = 0; j < d; ++j) o[j] = scale * (ri * dr[j] - x[j] * c);
    }
  });
}
}  // namespace
}  // namespace deltanet_grad_detail

int64_t DeltaNetStep::held_bytes() const {
  int64_t n = 0;
  for (const std::vector<float>* v :
       {&p_, &pre_, &mix_, &q_, &k_, &rq_, &rk_, &z_, &beta_, &ga_, &g_, &o_, &ro_, &on_, &y_, &states_})
    n += int64_t(v->capacity() * sizeof(float));
  return n;
}

void DeltaNetStep::forward(const models::DeltaNetDesc& d, const DeltaNetWeights& w, const float* in, int64_t B,
                           int64_t T, int64_t D, float* out, const DeltaNetAdapters* ad) {
  using namespace deltanet_grad_detail;
  const int64_t N = B * T, C = d.conv_dim(), K = d.conv_kernel, Hk = d.n_k_heads, Hv = d.n_v_heads;
  const int64_t Q = Hk * d.k_dim, V = Hv * d.v_dim;
  p_.resize(size_t(N * C)), pre_.resize(size_t(N * C)), mix_.resize(size_t(N * C));
  q_.resize(size_t(N * Q)), k_.resize(size_t(N * Q)), rq_.resize(size_t(N * Hk)), rk_.resize(size_t(N * Hk));
  z_.resize(size_t(N * V)), beta_.resize(size_t(N * Hv)), ga_.resize(size_t(N * Hv)), g_.resize(size_t(N * Hv));
  o_.resize(size_t(N * V)), ro_.resize(size_t(N * Hv)), on_.resize(size_t(N * V)), y_.resize(size_t(N * V));
  stride_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(T)))));
  states_.resize(size_t(B * Hv * ((T + stride_ - 1) / stride_) * d.k_dim * d.v_dim));
  matmul_wt(in, w.qkv, p_.data(), N, D, C);
  if (ad) ad->forward(DeltaNetProj::kQkv, in, p_.data(), D, C);
  // The causal depthwise conv within each sequence, then SiLU.
  parallel_rows(N, N * C * K, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t t = n % T;
      for (int64_t c = 0; c < C; ++c) {
        float s = 0.0f;
        for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j)
          s += w.conv[c * K + j] * p_[size_t((n - (K - 1) + j) * C + c)];
        pre_[size_t(n * C + c)] = s;
        mix_[size_t(n * C + c)] = s * sigmoid(s);
      }
    }
  });
  l2_heads(mix_.data(), {C, 0, Hk, d.k_dim}, q_.data(), rq_.data(), N * Hk,
           1.0f / std::sqrt(static_cast<float>(d.k_dim)));
  l2_heads(mix_.data(), {C, Q, Hk, d.k_dim}, k_.data(), rk_.data(), N * Hk, 1.0f);
  matmul_wt(in, w.z, z_.data(), N, D, V);
  matmul_wt(in, w.b, beta_.data(), N, D, Hv);
  matmul_wt(in, w.a, ga_.data(), N, D, Hv);
  if (ad) {
    ad->forward(DeltaNetProj::kZ, in, z_.data(), D, V);
    ad->forward(DeltaNetProj::kB, in, beta_.data(), D, Hv);
    ad->forward(DeltaNetProj::kA, in, ga_.data(), D, Hv);
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < Hv; ++h) {
      const size_t i = size_t(n * Hv + h);
      beta_[i] = sigmoid(beta_[i]);
      ga_[i] += w.dt_bias[h];
      g_[i] = -std::exp(w.a_log[h]) * softplus(ga_[i]);
    }
  recurrence(d, B, T);
  // The gated RMSNorm per value head, then out_proj.
  rmsnorm(o_.data(), w.norm, on_.data(), ro_.data(), N * Hv, d.v_dim, d.norm.eps);
  parallel_rows(N * V, N * V, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y_[size_t(i)] = on_[size_t(i)] * z_[size_t(i)] * sigmoid(z_[size_t(i)]);
  });
  matmul_wt(y_.data(), w.out, out, N, V, D);
  if (ad) ad->forward(DeltaNetProj::kOut, y_.data(), out, V, D);
}

// S = exp(g) prev + beta k uᵀ with u = v - (exp(g) prev)ᵀ k, for token n and value head h (S and prev apart). The
// forward and the backward's recomputation of a stretch both run this, so they make the same bits.
void DeltaNetStep::state_step(const models::DeltaNetDesc& d, int64_t n, int64_t h, const float* prev, float* S,
                              float* u) const {
  const int64_t Hv = d.n_v_heads, dk = d.k_dim, dv = d.v_dim, kh = h / (Hv / d.n_k_heads);
  const int64_t Q = d.n_k_heads * dk;
  const float* k = k_.data() + n * Q + kh * dk;
  const float* v = mix_.data() + n * d.conv_dim() + 2 * Q + h * dv;
  const float e = std::exp(g_[size_t(n * Hv + h)]), beta = beta_[size_t(n * Hv + h)];
  for (int64_t i = 0; i < dk * dv; ++i) S[i] = e * prev[i];  // S' = exp(g) S_{t-1}
  for (int64_t j = 0; j < dv; ++j) u[j] = v[j];              // u = v - S'ᵀ k
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) u[j] -= S[i * dv + j] * k[i];
  for (int64_t i = 0; i < dk; ++i)  // S = S' + beta k uᵀ
    for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += beta * k[i] * u[j];
}

// Per (sequence, value head): the states of one stretch of `stride_` tokens at a time in a scratch, o = Sᵀ q from
// each, the state before every stretch kept in states_.
void DeltaNetStep::recurrence(const models::DeltaNetDesc& d, int64_t B, int64_t T) {
  const int64_t Hk = d.n_k_heads, Hv = d.n_v_heads, dk = d.k_dim, dv = d.v_dim, rep = Hv / Hk;
  const int64_t Q = Hk * dk, V = Hv * dv, SS = dk * dv, L = stride_, nck = (T + L - 1) / L;
  parallel_rows(B * Hv, B * Hv * T * SS * 4, [&](int64_t i0, int64_t i1) {
    std::vector<float> u(static_cast<size_t>(dv)), sc(static_cast<size_t>((L + 1) * SS));
    for (int64_t bh = i0; bh < i1; ++bh) {
      const int64_t b = bh / Hv, h = bh % Hv, kh = h / rep;
      float* ck = states_.data() + bh * nck * SS;
      std::fill(sc.begin(), sc.begin() + SS, 0.0f);
      for (int64_t c = 0; c < nck; ++c) {
        std::copy(sc.begin(), sc.begin() + SS, ck + c * SS);
        const int64_t t0 = c * L, t1 = std::min(T, t0 + L);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n = b * T + t;
          const float* S = sc.data() + (t - t0 + 1) * SS;
          state_step(d, n, h, sc.data() + (t - t0) * SS, sc.data() + (t - t0 + 1) * SS, u.data());
          const float* q = q_.data() + n * Q + kh * dk;
          float* o = o_.data() + n * V + h * dv;  // o = Sᵀ q
          std::fill(o, o + dv, 0.0f);
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t j = 0; j < dv; ++j) o[j] += S[i * dv + j] * q[i];
        }
        std::copy(sc.begin() + (t1 - t0) * SS, sc.begin() + (t1 - t0 + 1) * SS, sc.begin());
      }
    }
  });
}

void DeltaNetStep::backward(const models::DeltaNetDesc& d, const DeltaNetWeights& w, const DeltaNetGrads* g,
                            const float* in, const float* dout, int64_t B, int64_t T, int64_t D, float* din,
                            double* tdw, const DeltaNetAdapters* ad) {
  using namespace deltanet_grad_detail;
  const int64_t N = B * T, C = d.conv_dim(), K = d.conv_kernel, Hk = d.n_k_heads, Hv = d.n_v_heads;
  const int64_t dk = d.k_dim, dv = d.v_dim, rep = Hv / Hk, Q = Hk * dk, V = Hv * dv, SS = dk * dv;
  auto timed_dw = [&](const float* dy, const float* x, float* dW, int64_t n, int64_t i, int64_t o) {
    if (!g) return;
    const double t0 = now_ms();
    matmul_dw(dy, x, dW, n, i, o);
    *tdw += now_ms() - t0;
  };
  // out = y W_outᵀ;  y = on * silu(z);  on = rmsnorm(o) * w_norm.
  std::vector<float> dy(size_t(N * V)), dz(size_t(N * V)), don(size_t(N * V)), dO(size_t(N * V));
  timed_dw(dout, y_.data(), g ? g->out : nullptr, N, V, D);
  matmul_dx(dout, w.out, dy.data(), N, V, D, false);
  if (ad) ad->backward(DeltaNetProj::kOut, dout, y_.data(), dy.data(), V, D);
  parallel_rows(N * V, N * V, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float z = z_[size_t(i)];
      don[size_t(i)] = dy[size_t(i)] * z * sigmoid(z);
      dz[size_t(i)] = dy[size_t(i)] * on_[size_t(i)] * silu_grad(z);
    }
  });
  rmsnorm_backward(o_.data(), w.norm, ro_.data(), don.data(), dO.data(), g ? g->norm : nullptr, N * Hv, dv, false);
  // The delta rule backward through time, per (sequence, value head): dq, dk per value head, dv into dmix.
  std::vector<float> dqv(size_t(N * Hv * dk)), dkv(size_t(N * Hv * dk)), dmix(size_t(N * C));
  std::vector<float> dbeta(size_t(N * Hv)), dg(size_t(N * Hv));
  const int64_t L = stride_, nck = (T + L - 1) / L;
  parallel_rows(B * Hv, B * Hv * T * SS * 12, [&](int64_t i0, int64_t i1) {
    std::vector<float> dS(static_cast<size_t>(SS)), u(static_cast<size_t>(dv)), dd(static_cast<size_t>(dv));
    std::vector<float> sc(static_cast<size_t>((L + 1) * SS));  // the states of the stretch at hand
    for (int64_t bh = i0; bh < i1; ++bh) {
      const int64_t b = bh / Hv, h = bh % Hv, kh = h / rep;
      std::fill(dS.begin(), dS.end(), 0.0f);
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t n = b * T + t, nh = n * Hv + h, t0 = t / L * L;
        if (t == T - 1 || t % L == L - 1) {  // recompute the stretch's states from the one kept before it
          const float* ck = states_.data() + (bh * nck + t / L) * SS;
          std::copy(ck, ck + SS, sc.begin());
          for (int64_t r = t0; r <= t; ++r)
            state_step(d, b * T + r, h, sc.data() + (r - t0) * SS, sc.data() + (r - t0 + 1) * SS, u.data());
        }
        const float* prev = sc.data() + (t - t0) * SS;
        const float* S = sc.data() + (t - t0 + 1) * SS;
        const float* k = k_.data() + n * Q + kh * dk;
        const float* q = q_.data() + n * Q + kh * dk;
        const float* v = mix_.data() + n * C + 2 * Q + h * dv;
        const float* dot = dO.data() + n * V + h * dv;
        const float e = std::exp(g_[size_t(nh)]), beta = beta_[size_t(nh)];
        float* dq = dqv.data() + nh * dk;
        float* dkt = dkv.data() + nh * dk;
        // o = Sᵀ q
        for (int64_t i = 0; i < dk; ++i) {
          float s = 0.0f;
          for (int64_t j = 0; j < dv; ++j) s += S[i * dv + j] * dot[j];
          dq[i] = s;
          for (int64_t j = 0; j < dv; ++j) dS[size_t(i * dv + j)] += q[i] * dot[j];
        }
        // u = v - S'ᵀ k with S' = e * prev
        for (int64_t j = 0; j < dv; ++j) u[size_t(j)] = v[j];
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) u[size_t(j)] -= e * prev[i * dv + j] * k[i];
        // S = S' + k δᵀ, δ = beta u:  dδ = dSᵀ k;  dk = dS δ
        std::fill(dd.begin(), dd.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float s = 0.0f;
          for (int64_t j = 0; j < dv; ++j) {
            dd[size_t(j)] += dS[size_t(i * dv + j)] * k[i];
            s += dS[size_t(i * dv + j)] * u[size_t(j)];
          }
          dkt[i] = beta * s;
        }
        double db = 0;
        float* dvv = dmix.data() + n * C + 2 * Q + h * dv;
        for (int64_t j = 0; j < dv; ++j) {
          db += double(dd[size_t(j)]) * u[size_t(j)];
          dvv[j] = beta * dd[size_t(j)];
        }
        dbeta[size_t(nh)] = static_cast<float>(db);
        // u = v - S'ᵀ k:  dS' = dS - beta k dδᵀ;  dk -= beta S' dδ;  dg = Σ dS' ⊙ S';  dS_{t-1} = e dS'
        double dgs = 0;
        for (int64_t i = 0; i < dk; ++i) {
          float s = 0.0f;
          for (int64_t j = 0; j < dv; ++j) {
            const float sp = e * prev[i * dv + j];
            float& x = dS[size_t(i * dv + j)];
            x -= beta * k[i] * dd[size_t(j)];
            s += sp * dd[size_t(j)];
            dgs += double(x) * sp;
            x *= e;
          }
          dkt[i] -= beta * s;
        }
        dg[size_t(nh)] = static_cast<float>(dgs);
      }
    }
  });
  // The value heads' q/k gradients summed per key head (in head order), then the L2 norms' backward into dmix.
  std::vector<float> dq(size_t(N * Q), 0.0f), dkey(size_t(N * Q), 0.0f);
  parallel_rows(N, N * Hv * dk, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t kh = h / rep;
        for (int64_t i = 0; i < dk; ++i) {
          dq[size_t(n * Q + kh * dk + i)] += dqv[size_t((n * Hv + h) * dk + i)];
          dkey[size_t(n * Q + kh * dk + i)] += dkv[size_t((n * Hv + h) * dk + i)];
        }
      }
  });
  l2_heads_backward(mix_.data(), {C, 0, Hk, dk}, rq_.data(), dq.data(), dmix.data(), N * Hk,
                    1.0f / std::sqrt(static_cast<float>(dk)));
  l2_heads_backward(mix_.data(), {C, Q, Hk, dk}, rk_.data(), dkey.data(), dmix.data(), N * Hk, 1.0f);
  // SiLU, then the conv: dP[t', c] = Σ_j conv[c, j] dpre[t' + K-1-j, c];  dconv[c, j] = Σ_t dpre[t, c] P[t-K+1+j, c].
  parallel_rows(N * C, N * C, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dmix[size_t(i)] *= silu_grad(pre_[size_t(i)]);  // now dpre
  });
  std::vector<float> dP(size_t(N * C));
  parallel_rows(N, N * C * K, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t t = n % T;
      for (int64_t c = 0; c < C; ++c) {
        float s = 0.0f;
        for (int64_t j = std::max<int64_t>(0, t + K - T); j < K; ++j)  // (outputs t + K-1-j within the sequence)
          s += w.conv[c * K + j] * dmix[size_t((n + K - 1 - j) * C + c)];
        dP[size_t(n * C + c)] = s;
      }
    }
  });
  if (g)
    parallel_rows(C, N * C * K, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t j = 0; j < K; ++j) {
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const int64_t t = n % T;
            if (t - (K - 1) + j >= 0) s += double(dmix[size_t(n * C + c)]) * p_[size_t((n - (K - 1) + j) * C + c)];
          }
          g->conv[c * K + j] += static_cast<float>(s);
        }
    });
  // beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias): dA_log = Σ dg g;  d(a + dt_bias) = dg (-exp(A_log)) σ.
  std::vector<float> dbr(size_t(N * Hv)), dar(size_t(N * Hv));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < Hv; ++h) {
      const size_t i = size_t(n * Hv + h);
      dbr[i] = dbeta[i] * beta_[i] * (1.0f - beta_[i]);
      dar[i] = dg[i] * -std::exp(w.a_log[h]) * softplus_grad(ga_[i]);
    }
  if (g)
    for (int64_t h = 0; h < Hv; ++h) {
      double sa = 0, sd = 0;
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = size_t(n * Hv + h);
        sa += double(dg[i]) * g_[i];
        sd += dar[i];
      }
      g->a_log[h] += static_cast<float>(sa);
      g->dt_bias[h] += static_cast<float>(sd);
    }
  // The four input projections.
  timed_dw(dP.data(), in, g ? g->qkv : nullptr, N, D, C);
  timed_dw(dz.data(), in, g ? g->z : nullptr, N, D, V);
  timed_dw(dbr.data(), in, g ? g->b : nullptr, N, D, Hv);
  timed_dw(dar.data(), in, g ? g->a : nullptr, N, D, Hv);
  if (din) {
    matmul_dx(dP.data(), w.qkv, din, N, D, C, false);
    matmul_dx(dz.data(), w.z, din, N, D, V, true);
    matmul_dx(dbr.data(), w.b, din, N, D, Hv, true);
    matmul_dx(dar.data(), w.a, din, N, D, Hv, true);
  }
  if (ad) {  // (after the base's dx: the adapters' input gradients add to it)
    ad->backward(DeltaNetProj::kQkv, dP.data(), in, din, D, C);
    ad->backward(DeltaNetProj::kZ, dz.data(), in, din, D, V);
    ad->backward(DeltaNetProj::kB, dbr.data(), in, din, D, Hv);
    ad->backward(DeltaNetProj::kA, dar.data(), in, din, D, Hv);
  }
}

}  // namespace anelab::train

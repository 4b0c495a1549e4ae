#include "train/cpu_model.h"

#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "framework/core/clock.h"
#include "framework/core/error.h"
#include "framework/kernels/cpu_ops.h"
#include "train/parallel.h"

namespace anelab::train {
namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using CMapR = Eigen::Map<const MatR>;
using SMapR = Eigen::Map<MatR, 0, Eigen::OuterStride<>>;  // strided view (one head of [N, H*hd])
using CSMapR = Eigen::Map<const MatR, 0, Eigen::OuterStride<>>;

// Eigen parallelises its products only in OpenMP builds; the products here are split over the thread pool
// instead, so Eigen gets one thread even where OpenMP is compiled in.
void eigen_single_thread() {
  static const bool once = [] {
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)once;
}

// The three products, each split over blocks of the output on the thread pool (parallel_blocks): a block is one
// single-threaded Eigen product on column or row bands of the operands.
// y[N, out] = x[N, in] · W[out, in]ᵀ   (blocks: columns of y = rows of W)
void matmul_wt(const float* x, const float* W, float* y, int64_t N, int64_t in, int64_t out) {
  parallel_blocks(out, N * in * out, [&](int64_t c0, int64_t c1) {
    SMapR(y + c0, N, c1 - c0, Eigen::OuterStride<>(out)).noalias() =
        CMapR(x, N, in) * CMapR(W + c0 * in, c1 - c0, in).transpose();
  });
}
// dx[N, in] (+)= dy[N, out] · W[out, in]   (blocks: columns of dx = columns of W)
void matmul_dx(const float* dy, const float* W, float* dx, int64_t N, int64_t in, int64_t out, bool add) {
  parallel_blocks(in, N * in * out, [&](int64_t c0, int64_t c1) {
    SMapR d(dx + c0, N, c1 - c0, Eigen::OuterStride<>(in));
    const CSMapR w(W + c0, out, c1 - c0, Eigen::OuterStride<>(in));
    if (add)
      d.noalias() += CMapR(dy, N, out) * w;
    else
      d.noalias() = CMapR(dy, N, out) * w;
  });
}
// dW[out, in] += dy[N, out]ᵀ · x[N, in]   (blocks: rows of dW = columns of dy)
void matmul_dw(const float* dy, const float* x, float* dW, int64_t N, int64_t in, int64_t out) {
  parallel_blocks(out, N * in * out, [&](int64_t r0, int64_t r1) {
    MapR(dW + r0 * in, r1 - r0, in).noalias() +=
        CSMapR(dy + r0, N, r1 - r0, Eigen::OuterStride<>(out)).transpose() * CMapR(x, N, in);
  });
}

// y = x * rrms * w per row; rrms[n] = 1/sqrt(mean(x^2) + eps)
void rmsnorm(const float* x, const float* w, float* y, float* rrms, int64_t N, int64_t D, float eps) {
  parallel_rows(N, N * D, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      rrms[n] = kern::cpu::rms_norm(x + n * D, w, eps, D, y + n * D, kern::cpu::Numerics::kReference);
  });
}

// dx (+)= rmsnorm backward of dy; dw += Σ_rows dy ⊙ x ⊙ rrms.
void rmsnorm_backward(const float* x, const float* w, const float* rrms, const float* dy, float* dx, float* dw,
                      int64_t N, int64_t D, bool add) {
  parallel_rows(N, N * D, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * D;
      const float* dr = dy + n * D;
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double(dr[i]) * w[i] * xr[i];
      const float r = rrms[n];
      const float c = static_cast<float>(dot / double(D)) * r * r * r;
      float* o = dx + n * D;
      for (int64_t i = 0; i < D; ++i) {
        const float v = r * w[i] * dr[i] - xr[i] * c;
        o[i] = add ? o[i] + v : v;
      }
    }
  });
  parallel_rows(D, N * D, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(dy[n * D + i]) * x[n * D + i] * rrms[n];
      dw[i] += static_cast<float>(s);
    }
  });
}

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// tanh-GELU (Gemma's gelu_pytorch_tanh) and its derivative.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
inline float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluC * (x + 0.044715f * x * x * x))); }
inline float gelu_tanh_grad(float x) {
  const float t = std::tanh(kGeluC * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * x * x);
}

void add_into(float* y, const float* a, const float* b, int64_t n) {
  parallel_rows(n, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

}  // namespace

// The weights a norm multiplies by: w itself, or (norm_offset + w) in fp32 (Gemma: 1 + w) kept in the norm's own
// buffer. The weight gradient is the same for both (d(offset + w)/dw = 1).
const float* CpuModel::norm_w(const float* w, int64_t n, std::vector<float>& buf) const {
  if (c_.norm_offset == 0.0f) return w;
  buf.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = c_.norm_offset + w[i];
  return buf.data();
}

CpuModel::CpuModel(const ParamLayout& layout) : layout_(layout), c_(layout.config()) {
  eigen_single_thread();
  acts_.resize(static_cast<size_t>(c_.n_layers));
}

double CpuModel::step_flops(const models::ModelConfig& c, int64_t B, int64_t T) {
  const double N = double(B) * double(T), D = double(c.dim), F = double(c.hidden_dim);
  const double lin = 2.0 * N * (D * c.q_dim() * 2 + D * c.kv_dim() * 2 + 3 * D * F);
  const double attn = 2.0 * 2.0 * double(B) * double(c.n_heads) * double(T) * double(T) * double(c.head_dim);
  const double cls = 2.0 * N * D * double(c.vocab_size);
  return 3.0 * (double(c.n_layers) * (lin + attn) + cls);
}

void CpuModel::prepare_head(int64_t B, int64_t T) {
  if (B == head_B_ && T == head_T_) return;
  head_B_ = B;
  head_T_ = T;
  const size_t N = size_t(B * T), D = size_t(c_.dim);
  xL_.resize(N * D), rrmsf_.resize(N), xf_.resize(N * D), logits_.resize(N * size_t(c_.vocab_size));
  if (c_.logit_softcap > 0.0f) capped_.resize(logits_.size());
  inputs_.resize(N);
}

void CpuModel::prepare(int64_t B, int64_t T) {
  prepare_head(B, T);
  if (B == B_ && T == T_) return;
  B_ = B;
  T_ = T;
  const size_t N = size_t(B * T), D = size_t(c_.dim), F = size_t(c_.hidden_dim);
  const size_t QD = size_t(c_.q_dim()), KD = size_t(c_.kv_dim());
  for (auto& a : acts_) {
    a.x.resize(N * D), a.rrms1.resize(N), a.xn.resize(N * D), a.q.resize(N * QD), a.k.resize(N * KD);
    a.v.resize(N * KD), a.p.resize(size_t(B * c_.n_heads) * size_t(T * T)), a.att.resize(N * QD);
    a.x2.resize(N * D), a.rrms2.resize(N), a.xn2.resize(N * D), a.h1.resize(N * F), a.h3.resize(N * F);
    a.g.resize(N * F);
    if (c_.qk_norm)
      a.qp.resize(N * QD), a.kp.resize(N * KD), a.rrmsq.resize(N * size_t(c_.n_heads)),
          a.rrmsk.resize(N * size_t(c_.n_kv_heads));
    if (c_.post_norms) a.o.resize(N * D), a.rrmso.resize(N), a.y.resize(N * D), a.rrmsy.resize(N);
  }
  const int64_t half = c_.head_dim / 2;
  cos_.resize(size_t(T * half)), sin_.resize(size_t(T * half));
  kern::cpu::rope_half_tables(T, c_.head_dim, c_.rope_theta, 0, kern::cpu::Numerics::kReference, cos_.data(),
                              sin_.data(), c_.rope_scaling, c_.rope_linear_factor);
  if (c_.sliding_window > 0) {  // sliding layers: their own base, no scaling
    cosl_.resize(cos_.size()), sinl_.resize(sin_.size());
    kern::cpu::rope_half_tables(T, c_.head_dim, c_.rope_local_theta > 0.0f ? c_.rope_local_theta : c_.rope_theta, 0,
                                kern::cpu::Numerics::kReference, cosl_.data(), sinl_.data());
  }
}

// Rotates every head of x [rows, heads*hd] by +angle (sign = 1) or -angle (sign = -1, the backward), with the
// tables of layer l (sliding layers: cosl_ / sinl_).
void CpuModel::rope(float* x, int64_t rows, int64_t heads, int64_t T, float sign, int64_t l) const {
  const bool local = c_.sliding_layer(l);
  const float* cs = local ? cosl_.data() : cos_.data();
  const float* sn = local ? sinl_.data() : sin_.data();
  const int64_t hd = c_.head_dim, half = hd / 2;
  const auto style = c_.rope_style == models::RopeStyle::kAdjacentPairs ? kern::RopeStyle::kAdjacentPairs
                                                                        : kern::RopeStyle::kRotateHalf;
  parallel_rows(rows, rows * heads * hd, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      kern::cpu::rope_row(x + n * heads * hd, heads, hd, style, cs + (n % T) * half, sn + (n % T) * half,
                          kern::cpu::Numerics::kReference, sign);
  });
}

float CpuModel::score_scale() const {
  return c_.attn_scale > 0.0f ? c_.attn_scale : 1.0f / std::sqrt(float(c_.head_dim));
}

// Query i of layer l sees keys [j0, i]: j0 = 0, or i - sliding_window + 1 in a sliding layer.
void CpuModel::attention_forward(LayerActs& a, int64_t B, int64_t T, int64_t l) {
  const int64_t H = c_.n_heads, G = c_.n_heads / c_.n_kv_heads, hd = c_.head_dim;
  const int64_t QD = c_.q_dim(), KD = c_.kv_dim();
  const int64_t W = c_.sliding_layer(l) ? c_.sliding_window : T;
  const float scale = score_scale();
  parallel_rows(B * H, B * H * T * T * hd, [&](int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / H, h = bh % H, kvh = h / G;
      CSMapR q(a.q.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
      CSMapR k(a.k.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      CSMapR v(a.v.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      MapR p(a.p.data() + bh * T * T, T, T);
      p.noalias() = q * k.transpose();
      for (int64_t i = 0; i < T; ++i) {
        float* row = p.data() + i * T;
        const int64_t j0 = std::max<int64_t>(0, i - W + 1);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = j0; j <= i; ++j) mx = std::max(mx, row[j] * scale);
        double sum = 0;
        for (int64_t j = j0; j <= i; ++j) {
          row[j] = std::exp(row[j] * scale - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < j0; ++j) row[j] = 0.0f;
        for (int64_t j = j0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      SMapR(a.att.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD)).noalias() = p * v;
    }
  });
}

void CpuModel::attention_backward(LayerActs& a, int64_t B, int64_t T, const float* datt, float* dq, float* dk,
                                  float* dv) {
  const int64_t H = c_.n_heads, KVH = c_.n_kv_heads, G = H / KVH, hd = c_.head_dim;
  const int64_t QD = c_.q_dim(), KD = c_.kv_dim();
  const float scale = score_scale();  // P is 0 outside each query's window, so are its gradients
  // One task per (b, kv head): the G query heads sharing it accumulate dK/dV in a fixed order.
  parallel_rows(B * KVH, B * H * T * T * hd, [&](int64_t bk0, int64_t bk1) {
    for (int64_t bk = bk0; bk < bk1; ++bk) {
      const int64_t b = bk / KVH, kvh = bk % KVH;
      CSMapR k(a.k.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      CSMapR v(a.v.data() + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      SMapR dkm(dk + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      SMapR dvm(dv + b * T * KD + kvh * hd, T, hd, Eigen::OuterStride<>(KD));
      dkm.setZero();
      dvm.setZero();
      MatR dp(T, T);
      for (int64_t r = 0; r < G; ++r) {
        const int64_t h = kvh * G + r;
        CSMapR q(a.q.data() + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
        CSMapR da(datt + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD));
        CMapR p(a.p.data() + (b * H + h) * T * T, T, T);
        dvm.noalias() += p.transpose() * da;
        dp.noalias() = da * v.transpose();
        for (int64_t i = 0; i < T; ++i) {
          const float* pr = p.data() + i * T;
          float* dr = dp.data() + i * T;
          double dot = 0;
          for (int64_t j = 0; j <= i; ++j) dot += double(pr[j]) * dr[j];
          const float d = static_cast<float>(dot);
          for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - d) * scale;
          for (int64_t j = i + 1; j < T; ++j) dr[j] = 0.0f;
        }
        SMapR(dq + b * T * QD + h * hd, T, hd, Eigen::OuterStride<>(QD)).noalias() = dp * k;
        dkm.noalias() += dp.transpose() * q;
      }
    }
  });
}

// qk_norm: a.q / a.k (the projections) -> a.qp / a.kp, then every head row [hd] of them normed back into a.q / a.k
// (the [N, H*hd] buffers are [N*H, hd] rows).
void CpuModel::head_norms_forward(LayerActs& a, const LayerPtrs& p, int64_t N) {
  const int64_t hd = c_.head_dim;
  a.qp.swap(a.q), a.kp.swap(a.k);
  std::vector<float> bq, bk;
  rmsnorm(a.qp.data(), norm_w(p.q_norm, hd, bq), a.q.data(), a.rrmsq.data(), N * c_.n_heads, hd, c_.norm_eps);
  rmsnorm(a.kp.data(), norm_w(p.k_norm, hd, bk), a.k.data(), a.rrmsk.data(), N * c_.n_kv_heads, hd, c_.norm_eps);
}

// qk_norm: dq / dk (gradients w.r.t. the normed q / k) -> gradients w.r.t. the projections; g.q_norm / k_norm += ...
void CpuModel::head_norms_backward(LayerActs& a, const LayerPtrs& p, const LayerPtrs& g, int64_t N,
                                   std::vector<float>& dq, std::vector<float>& dk) {
  const int64_t hd = c_.head_dim;
  std::vector<float> d(dq.size()), bq, bk;
  rmsnorm_backward(a.qp.data(), norm_w(p.q_norm, hd, bq), a.rrmsq.data(), dq.data(), d.data(), g.q_norm, N * c_.n_heads,
                   hd, false);
  dq.swap(d);
  d.resize(dk.size());
  rmsnorm_backward(a.kp.data(), norm_w(p.k_norm, hd, bk), a.rrmsk.data(), dk.data(), d.data(), g.k_norm,
                   N * c_.n_kv_heads, hd, false);
  dk.swap(d);
}

void CpuModel::layer_forward(const float* w, int64_t l, int64_t B, int64_t T) {
  LayerActs& a = acts_[size_t(l)];
  const LayerPtrs p = layout_.layer(const_cast<float*>(w), l);
  const int64_t N = B * T, D = c_.dim, F = c_.hidden_dim, QD = c_.q_dim(), KD = c_.kv_dim();
  const bool post = c_.post_norms, geglu = c_.activation == models::Activation::kGeluTanhGated;
  std::vector<float> nb;  // (offset + w) of the norm at hand
  rmsnorm(a.x.data(), norm_w(p.attn_norm, D, nb), a.xn.data(), a.rrms1.data(), N, D, c_.norm_eps);
  matmul_wt(a.xn.data(), p.wq, a.q.data(), N, D, QD);
  matmul_wt(a.xn.data(), p.wk, a.k.data(), N, D, KD);
  matmul_wt(a.xn.data(), p.wv, a.v.data(), N, D, KD);
  if (c_.qk_norm) head_norms_forward(a, p, N);
  rope(a.q.data(), N, c_.n_heads, T, 1.0f, l);
  rope(a.k.data(), N, c_.n_kv_heads, T, 1.0f, l);
  attention_forward(a, B, T, l);
  matmul_wt(a.att.data(), p.wo, post ? a.o.data() : a.x2.data(), N, QD, D);
  if (post) rmsnorm(a.o.data(), norm_w(p.attn_post_norm, D, nb), a.x2.data(), a.rrmso.data(), N, D, c_.norm_eps);
  add_into(a.x2.data(), a.x2.data(), a.x.data(), N * D);
  rmsnorm(a.x2.data(), norm_w(p.ffn_norm, D, nb), a.xn2.data(), a.rrms2.data(), N, D, c_.norm_eps);
  matmul_wt(a.xn2.data(), p.w1, a.h1.data(), N, D, F);
  matmul_wt(a.xn2.data(), p.w3, a.h3.data(), N, D, F);
  parallel_rows(N * F, N * F, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float h1 = a.h1[size_t(i)];
      a.g[size_t(i)] = (geglu ? gelu_tanh(h1) : h1 * sigmoidf(h1)) * a.h3[size_t(i)];
    }
  });
  float* out = l + 1 < c_.n_layers ? acts_[size_t(l + 1)].x.data() : xL_.data();
  matmul_wt(a.g.data(), p.w2, post ? a.y.data() : out, N, F, D);
  if (post) rmsnorm(a.y.data(), norm_w(p.ffn_post_norm, D, nb), out, a.rrmsy.data(), N, D, c_.norm_eps);
  add_into(out, out, a.x2.data(), N * D);
}

void CpuModel::forward(const float* w, const int32_t* tokens, int64_t B, int64_t T, int64_t row_stride) {
  prepare(B, T);
  const int64_t D = c_.dim, V = c_.vocab_size;
  const float* emb = layout_.embedding(const_cast<float*>(w));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = tokens[b * row_stride + t];
      if (id < 0 || id >= V) fail("train", "token id ", id, " out of range for vocab_size ", V);
      inputs_[size_t(b * T + t)] = id;
      float* x = acts_[0].x.data() + (b * T + t) * D;
      std::memcpy(x, emb + int64_t(id) * D, size_t(D) * 4);
      if (c_.embed_scale != 1.0f)
        for (int64_t i = 0; i < D; ++i) x[i] *= c_.embed_scale;
    }
  for (int64_t l = 0; l < c_.n_layers; ++l) layer_forward(w, l, B, T);
  head_forward(w, xL_.data(), B * T);
}

void CpuModel::head_forward(const float* w, const float* xL, int64_t N) {
  const int64_t D = c_.dim, V = c_.vocab_size;
  std::vector<float> nb;
  rmsnorm(xL, norm_w(layout_.final_norm(const_cast<float*>(w)), D, nb), xf_.data(), rrmsf_.data(), N, D, c_.norm_eps);
  matmul_wt(xf_.data(), layout_.output(const_cast<float*>(w)), logits_.data(), N, D, V);
  const float cap = c_.logit_softcap;
  if (cap > 0.0f)  // logits = cap * tanh(z / cap); capped_ keeps tanh(z / cap) for the backward
    parallel_rows(N * V, N * V, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        capped_[size_t(i)] = std::tanh(logits_[size_t(i)] / cap);
        logits_[size_t(i)] = cap * capped_[size_t(i)];
      }
    });
}

// logits_ holds dlogits; dxL = final-norm backward of dlogits · Wout (final norm grads += ...).
void CpuModel::head_backward(const float* w, const float* xL, float* gr, float* dxL, int64_t N) {
  const int64_t D = c_.dim, V = c_.vocab_size;
  dxf_.resize(size_t(N * D));
  matmul_dx(logits_.data(), layout_.output(const_cast<float*>(w)), dxf_.data(), N, D, V, false);
  std::vector<float> nb;
  rmsnorm_backward(xL, norm_w(layout_.final_norm(const_cast<float*>(w)), D, nb), rrmsf_.data(), dxf_.data(), dxL,
                   layout_.final_norm(gr), N, D, false);
}

double CpuModel::head_forward_backward(const float* w, const Batch& b, const float* xL, float grad_scale, float* grads,
                                       float* dxL) {
  if (b.B <= 0 || b.T <= 0 || int64_t(b.tokens.size()) != b.B * (b.T + 1))
    fail("train", "batch of ", b.tokens.size(), " tokens does not hold B=", b.B, " x (T+1)=", b.T + 1);
  prepare_head(b.B, b.T);
  head_forward(w, xL, b.B * b.T);
  const double loss = cross_entropy(b.tokens.data(), b.B, b.T, grad_scale, true);
  head_backward(w, xL, grads, dxL, b.B * b.T);
  return loss;
}

void CpuModel::head_classifier_dw(float* grads) {
  matmul_dw(logits_.data(), xf_.data(), layout_.output(grads), head_B_ * head_T_, c_.dim, c_.vocab_size);
}

double CpuModel::cross_entropy(const int32_t* tokens, int64_t B, int64_t T, float grad_scale, bool want_grad) {
  const int64_t N = B * T, V = c_.vocab_size;
  std::vector<double> row_loss(static_cast<size_t>(N));
  const float gs = grad_scale / float(N);
  parallel_rows(N, N * V, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int32_t tgt = tokens[(n / T) * (T + 1) + (n % T) + 1];
      float* row = logits_.data() + n * V;
      float mx = row[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j] - mx));
      const double tl = (tgt >= 0 && tgt < V) ? double(row[tgt]) : 0.0;
      row_loss[size_t(n)] = std::log(sum) + mx - tl;
      if (want_grad) {
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < V; ++j) row[j] = std::exp(row[j] - mx) * inv * gs;
        if (tgt >= 0 && tgt < V) row[tgt] -= gs;
        if (c_.logit_softcap > 0.0f)  // d(cap tanh(z / cap))/dz = 1 - tanh²
          for (int64_t j = 0; j < V; ++j) row[j] *= 1.0f - capped_[size_t(n * V + j)] * capped_[size_t(n * V + j)];
      }
    }
  });
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tgt = tokens[(n / T) * (T + 1) + (n % T) + 1];
    if (tgt < 0 || tgt >= V) fail("train", "target token id ", tgt, " out of range for vocab_size ", V);
  }
  double total = 0;
  for (double v : row_loss) total += v;
  return total / double(N);
}

double CpuModel::loss(const float* w, const Batch& b) {
  forward(w, b.tokens.data(), b.B, b.T, b.T + 1);
  return cross_entropy(b.tokens.data(), b.B, b.T, 0.0f, false);
}

void CpuModel::last_logits(const float* w, const int32_t* tokens, int64_t n, std::vector<float>* out) {
  forward(w, tokens, 1, n, n);
  const int64_t V = c_.vocab_size;
  out->assign(logits_.begin() + (n - 1) * V, logits_.begin() + n * V);
}

// The MLP half's backward: dy [N, D] = d(loss)/d(layer output); dx2 [N, D] += its path to x2. Returns dW ms.
double CpuModel::ffn_backward(LayerActs& a, const LayerPtrs& p, const LayerPtrs& g, int64_t N, const float* dy,
                              float* dx2) {
  const int64_t D = c_.dim, F = c_.hidden_dim;
  const bool geglu = c_.activation == models::Activation::kGeluTanhGated;
  std::vector<float> dg(size_t(N * F)), dh3(size_t(N * F)), dxn(size_t(N * D)), nb, dyr;
  if (c_.post_norms) {  // y' = rmsnorm(y) * (offset + ffn_post_norm)
    dyr.resize(size_t(N * D));
    rmsnorm_backward(a.y.data(), norm_w(p.ffn_post_norm, D, nb), a.rrmsy.data(), dy, dyr.data(), g.ffn_post_norm, N, D,
                     false);
    dy = dyr.data();
  }
  double t0 = now_ms();
  matmul_dw(dy, a.g.data(), g.w2, N, F, D);
  double tdw = now_ms() - t0;
  matmul_dx(dy, p.w2, dg.data(), N, F, D, false);
  parallel_rows(N * F, N * F, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float h1 = a.h1[size_t(i)], d = dg[size_t(i)];
      if (geglu) {  // gate = gelu(h1) * h3
        dh3[size_t(i)] = d * gelu_tanh(h1);
        dg[size_t(i)] = d * a.h3[size_t(i)] * gelu_tanh_grad(h1);  // dh1
        continue;
      }
      const float s = sigmoidf(h1);  // gate = silu(h1) * h3
      dh3[size_t(i)] = d * h1 * s;
      dg[size_t(i)] = d * a.h3[size_t(i)] * s * (1.0f + h1 * (1.0f - s));  // dh1
    }
  });
  t0 = now_ms();
  matmul_dw(dg.data(), a.xn2.data(), g.w1, N, D, F);
  matmul_dw(dh3.data(), a.xn2.data(), g.w3, N, D, F);
  tdw += now_ms() - t0;
  matmul_dx(dg.data(), p.w1, dxn.data(), N, D, F, false);
  matmul_dx(dh3.data(), p.w3, dxn.data(), N, D, F, true);
  rmsnorm_backward(a.x2.data(), norm_w(p.ffn_norm, D, nb), a.rrms2.data(), dxn.data(), dx2, g.ffn_norm, N, D, true);
  return tdw;
}

void CpuModel::layer_backward(const float* w, float* gr, int64_t l, int64_t B, int64_t T, float* dx, CpuTimes* t) {
  // dx: [N, D] gradient w.r.t. this layer's output on entry, w.r.t. its input on exit.
  LayerActs& a = acts_[size_t(l)];
  const LayerPtrs p = layout_.layer(const_cast<float*>(w), l);
  const LayerPtrs g = layout_.layer(gr, l);
  const int64_t N = B * T, D = c_.dim, QD = c_.q_dim(), KD = c_.kv_dim();
  std::vector<float> dxn(size_t(N * D)), dx2(dx, dx + N * D), nb;
  double tdw = ffn_backward(a, p, g, N, dx, dx2.data());
  // attention block: dx2 is d(loss)/d(x2) = d(loss)/d(o) (post_norms: of rmsnorm(o) * (offset + attn_post_norm))
  std::vector<float> datt(size_t(N * QD)), dq(size_t(N * QD)), dk(size_t(N * KD)), dv(size_t(N * KD)), dor;
  const float* d_o = dx2.data();
  if (c_.post_norms) {
    dor.resize(size_t(N * D));
    rmsnorm_backward(a.o.data(), norm_w(p.attn_post_norm, D, nb), a.rrmso.data(), dx2.data(), dor.data(),
                     g.attn_post_norm, N, D, false);
    d_o = dor.data();
  }
  double t0 = now_ms();
  matmul_dw(d_o, a.att.data(), g.wo, N, QD, D);
  tdw += now_ms() - t0;
  matmul_dx(d_o, p.wo, datt.data(), N, QD, D, false);
  attention_backward(a, B, T, datt.data(), dq.data(), dk.data(), dv.data());
  rope(dq.data(), N, c_.n_heads, T, -1.0f, l);
  rope(dk.data(), N, c_.n_kv_heads, T, -1.0f, l);
  if (c_.qk_norm) head_norms_backward(a, p, g, N, dq, dk);
  t0 = now_ms();
  matmul_dw(dq.data(), a.xn.data(), g.wq, N, D, QD);
  matmul_dw(dk.data(), a.xn.data(), g.wk, N, D, KD);
  matmul_dw(dv.data(), a.xn.data(), g.wv, N, D, KD);
  tdw += now_ms() - t0;
  matmul_dx(dq.data(), p.wq, dxn.data(), N, D, QD, false);
  matmul_dx(dk.data(), p.wk, dxn.data(), N, D, KD, true);
  matmul_dx(dv.data(), p.wv, dxn.data(), N, D, KD, true);
  std::memcpy(dx, dx2.data(), size_t(N * D) * 4);
  rmsnorm_backward(a.x.data(), norm_w(p.attn_norm, D, nb), a.rrms1.data(), dxn.data(), dx, g.attn_norm, N, D, true);
  if (t) t->dw += tdw;
}

double CpuModel::forward_backward(const float* w, const Batch& b, float grad_scale, float* gr, CpuTimes* t) {
  if (b.B <= 0 || b.T <= 0 || int64_t(b.tokens.size()) != b.B * (b.T + 1))
    fail("train", "batch of ", b.tokens.size(), " tokens does not hold B=", b.B, " x (T+1)=", b.T + 1);
  double t0 = now_ms();
  forward(w, b.tokens.data(), b.B, b.T, b.T + 1);
  double t1 = now_ms();
  const double loss = cross_entropy(b.tokens.data(), b.B, b.T, grad_scale, true);
  const int64_t N = b.B * b.T, D = c_.dim;
  double t2 = now_ms();
  head_classifier_dw(gr);
  double t3 = now_ms();
  std::vector<float> dxl(size_t(N * D));
  head_backward(w, xL_.data(), gr, dxl.data(), N);
  if (grads_final_) grads_final_(layout_.final_norm(gr) - gr);
  for (int64_t l = c_.n_layers - 1; l >= 0; --l) {
    layer_backward(w, gr, l, b.B, b.T, dxl.data(), t);
    if (grads_final_) grads_final_(layout_.layer(gr, l).attn_norm - gr);
  }
  float* demb = layout_.embedding(gr);
  for (int64_t n = 0; n < N; ++n) {
    float* row = demb + int64_t(inputs_[size_t(n)]) * D;
    const float* src = dxl.data() + n * D;
    for (int64_t i = 0; i < D; ++i) row[i] += src[i] * c_.embed_scale;
  }
  if (t) {
    t->fwd += t1 - t0;
    t->cls += t3 - t1;
    t->dw += t3 - t2;
    t->bwd += now_ms() - t3;
  }
  return loss;
}

}  // namespace anelab::train

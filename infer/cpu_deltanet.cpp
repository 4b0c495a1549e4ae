#include "infer/cpu_deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"

namespace anelab::infer {

// The file-local helpers in a namespace of their own: the library is a unity build.
namespace deltanet_detail {
namespace {

float dot_n(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[dv] = S^T x for S [dk, dv], x [dk].
void state_t_times(const float* S, const float* x, int64_t dk, int64_t dv, float* y) {
  std::fill(y, y + dv, 0.0f);
  for (int64_t a = 0; a < dk; ++a) {
    const float xa = x[a];
    const float* row = S + a * dv;
    for (int64_t b = 0; b < dv; ++b) y[b] += xa * row[b];
  }
}

void check_shape(const DeltaShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.dk <= 0 || s.dv <= 0 || s.n_v_heads % s.n_k_heads != 0)
    fail("deltanet", "shape: n_k_heads ", s.n_k_heads, ", n_v_heads ", s.n_v_heads, ", dk ", s.dk, ", dv ", s.dv,
         " (all > 0, n_v_heads a multiple of n_k_heads)");
}

}  // namespace
}  // namespace deltanet_detail

void delta_rule_step(const DeltaShape& s, float* state, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* out) {
  const int64_t group = s.n_v_heads / s.n_k_heads, dk = s.dk, dv = s.dv;
  for (int64_t h = 0; h < s.n_v_heads; ++h) {
    float* S = state + h * dk * dv;
    const float* kh = k + (h / group) * dk;
    const float* qh = q + (h / group) * dk;
    const float decay = std::exp(g[h]);
    float* oh = out + h * dv;
    // S = decay S; pred = S^T k (out serves as the scratch of pred, then of the output).
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
    deltanet_detail::state_t_times(S, kh, dk, dv, oh);
    for (int64_t b = 0; b < dv; ++b) oh[b] = beta[h] * (v[h * dv + b] - oh[b]);  // delta
    for (int64_t a = 0; a < dk; ++a) {
      const float ka = kh[a];
      float* row = S + a * dv;
      for (int64_t b = 0; b < dv; ++b) row[b] += ka * oh[b];
    }
    deltanet_detail::state_t_times(S, qh, dk, dv, oh);
  }
}

DeltaRuleChunked::DeltaRuleChunked(const DeltaShape& s, int workers) : s_(s), workers_(std::max(1, workers)) {
  deltanet_detail::check_shape(s);
  u_.assign(static_cast<size_t>(workers_ * kChunk * s.dv), 0.0f);
  c_.assign(static_cast<size_t>(workers_ * kChunk), 0.0f);
  t_.assign(static_cast<size_t>(workers_ * s.dv), 0.0f);
}

void DeltaRuleChunked::run(float* state, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t n, float* out, ThreadPool* pool) {
  if (pool && pool->size() > 1) {
    ANELAB_CHECK(pool->size() <= workers_, "infer", "chunked delta rule: a pool of ", pool->size(),
                 " threads, scratch for ", workers_);
    pool->run_chunks(s_.n_v_heads, [&](int64_t h, int w) { run_head(h, w, state, q, k, v, g, beta, n, out); });
    return;
  }
  for (int64_t h = 0; h < s_.n_v_heads; ++h) run_head(h, 0, state, q, k, v, g, beta, n, out);
}

void DeltaRuleChunked::run_head(int64_t h, int worker, float* state, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, int64_t n, float* out) {
  const int64_t group = s_.n_v_heads / s_.n_k_heads, dk = s_.dk, dv = s_.dv;
  const int64_t qk_row = s_.n_k_heads * dk, v_row = s_.n_v_heads * dv, nh = s_.n_v_heads;
  float* U = u_.data() + worker * kChunk * dv;
  float* c = c_.data() + worker * kChunk;
  float* t = t_.data() + worker * dv;
  float* S = state + h * dk * dv;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t L = std::min(kChunk, n - start);
    {
      const int64_t kq_off = (h / group) * dk;
      auto krow = [&](int64_t i) { return k + (start + i) * qk_row + kq_off; };
      auto qrow = [&](int64_t i) { return q + (start + i) * qk_row + kq_off; };
      float acc = 0.0f;
      for (int64_t i = 0; i < L; ++i) c[i] = acc += g[(start + i) * nh + h];
      // U by forward substitution (the unit lower-triangular system (I + A) U = beta (v - exp(c) S0^T k)).
      for (int64_t i = 0; i < L; ++i) {
        const float bi = beta[(start + i) * nh + h];
        const float* vi = v + (start + i) * v_row + h * dv;
        float* ui = U + i * dv;
        deltanet_detail::state_t_times(S, krow(i), dk, dv, t);
        const float ec = std::exp(c[i]);
        for (int64_t b = 0; b < dv; ++b) ui[b] = bi * (vi[b] - ec * t[b]);
        for (int64_t j = 0; j < i; ++j) {
          const float a = bi * deltanet_detail::dot_n(krow(i), krow(j), dk) * std::exp(c[i] - c[j]);
          const float* uj = U + j * dv;
          for (int64_t b = 0; b < dv; ++b) ui[b] -= a * uj[b];
        }
      }
      // Outputs from the state at the chunk start and the chunk's own U.
      for (int64_t i = 0; i < L; ++i) {
        float* oi = out + (start + i) * v_row + h * dv;
        deltanet_detail::state_t_times(S, qrow(i), dk, dv, oi);
        const float ec = std::exp(c[i]);
        for (int64_t b = 0; b < dv; ++b) oi[b] *= ec;
        for (int64_t j = 0; j <= i; ++j) {
          const float a = deltanet_detail::dot_n(qrow(i), krow(j), dk) * std::exp(c[i] - c[j]);
          const float* uj = U + j * dv;
          for (int64_t b = 0; b < dv; ++b) oi[b] += a * uj[b];
        }
      }
      // The state at the chunk end.
      const float cl = c[L - 1], el = std::exp(cl);
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= el;
      for (int64_t j = 0; j < L; ++j) {
        const float w = std::exp(cl - c[j]);
        const float* kj = krow(j);
        const float* uj = U + j * dv;
        for (int64_t a = 0; a < dk; ++a) {
          const float f = w * kj[a];
          float* row = S + a * dv;
          for (int64_t b = 0; b < dv; ++b) row[b] += f * uj[b];
        }
      }
    }
  }
}

void conv1d_silu_step(int64_t channels, int64_t kernel, float* conv_state, const float* w, const float* x, float* y) {
  const int64_t hist = kernel - 1;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const float* wc = w + ch * kernel;
    float s = wc[hist] * x[ch];
    for (int64_t j = 0; j < hist; ++j) s += wc[j] * conv_state[j * channels + ch];
    y[ch] = s / (1.0f + std::exp(-s));
  }
  // Shift the history by one token: rows 1..hist-1 move up, x becomes the newest row.
  if (hist > 0) {
    std::memmove(conv_state, conv_state + channels, static_cast<size_t>((hist - 1) * channels) * sizeof(float));
    std::memcpy(conv_state + (hist - 1) * channels, x, static_cast<size_t>(channels) * sizeof(float));
  }
}

void l2_normalize_rows(float* x, int64_t n, int64_t d, float eps, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    float* r = x + i * d;
    const float f = scale / std::sqrt(deltanet_detail::dot_n(r, r, d) + eps);
    for (int64_t j = 0; j < d; ++j) r[j] *= f;
  }
}

}  // namespace anelab::infer

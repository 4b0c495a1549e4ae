// The Gated DeltaNet mixer as MIL (see deltanet.h). One op per statement, so the printed program is the same with
// every compiler.
#include "framework/kernels/deltanet.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/kernels/layer.h"
#include "framework/runtime/device_profile.h"

namespace anelab::kern {

// The file-local helpers in a namespace of their own: the library is a unity build.
namespace deltanet_mil {
namespace {

using mil::DType;

Value fp16_const(FunctionBuilder& b, BlobSet& bs, const std::string& stem, mil::Shape shape, std::span<const float> v) {
  return bs.tensor(b, stem, mil::tensor_type(DType::kFp16, std::move(shape)), v);
}

// x [H, d, 1, S] / sqrt(stat + eps) per head (axis 1) and position, stat the mean (RMSNorm) or the sum (L2 norm) of
// x^2 over d. The statistic of x itself underflows fp16 for a small head (the delta rule's outputs and the fixture's q,
// k are ~1e-2: (x / sqrt(d))^2 ~ 1e-5 is subnormal, with few bits), so it is taken of y = x / m, m = max |x| +
// sqrt(eps): x / sqrt(stat(x) + eps) = y / sqrt(stat(y) + (sqrt(eps) / m)^2) for any m > 0, and this m keeps both
// terms in range: |y| <= 1 with max |y| >= 1/2 where max |x| >= sqrt(eps) (stat(y) in [1 / 4d, 1] (mean) or
// [1 / 4, d] (sum)), and (sqrt(eps) / m)^2 <= 1. (With m = max |x| alone, (sqrt(eps) / m)^2 overflowed fp16 for
// max |x| < sqrt(eps) / 256, 4e-6 at eps 1e-6, and zeroed the head; where the delta rule's outputs are ~1e-6 (the
// Qwen3.5-0.8B mixer with weights of +-0.01, test_prefill_qwen35.cpp), eps dominates the gated norm and such a head's
// output is as large as the others': the mixer came out 6.9e-2 off, 2.9e-3 with this m. Where eps dominates, y is
// x / sqrt(eps) and stat(y) adds little to the ~1 of (sqrt(eps) / m)^2, so its underflow costs nothing; a zero head,
// the bucket's padding, gives 0.)
Value scaled_norm(FunctionBuilder& b, const Value& x, double eps, bool mean) {
  const double d = static_cast<double>(x.dim(1));
  Value pos = b.relu(x);
  Value nx = b.mul(x, -1.0);
  Value neg = b.relu(nx);
  Value ax = b.add(pos, neg);
  Value mx = b.reduce_max(ax, {1}, true);
  Value m = b.add(mx, std::max(std::sqrt(eps), 0x1p-24));  // 2^-24: a zero head gives 0, not 0 / 0, at eps 0
  Value y = b.real_div(x, m);
  Value ys = mean ? b.mul(y, 1.0 / std::sqrt(d)) : y;
  Value sq = b.mul(ys, ys);
  Value st = b.reduce_sum(sq, {1}, true);
  Value seps = b.scalar(mil::DType::kFp16, std::sqrt(eps));
  Value se = b.real_div(seps, m);
  Value se2 = b.mul(se, se);
  Value den = b.add(st, se2);
  Value r = b.pow(den, -0.5);
  return b.mul(y, r);
}

// [1, H*d, 1, S] -> heads [H, nc, L, d] (the chunks of each head as the second batch dimension).
Value chunked_heads(FunctionBuilder& b, const Value& x, int64_t heads, int64_t L) {
  const int64_t S = x.dim(3), d = x.dim(1) / heads;
  Value h = split_heads(b, x, heads);  // [1, H, S, d]
  return b.reshape(h, {heads, S / L, L, d});
}

// Chunk i of x [H, nc, L, d]: [H, 1, L, d].
Value chunk(FunctionBuilder& b, const Value& x, int64_t i) {
  return b.slice_by_size(x, {0, i, 0, 0}, {x.dim(0), 1, x.dim(2), x.dim(3)});
}

}  // namespace
}  // namespace deltanet_mil

Value state_rows(FunctionBuilder& b, const Value& state, int64_t S) {
  const int64_t n = state.dim(0) * state.dim(1) * state.dim(2) * state.dim(3), rows = (n + S - 1) / S;
  if (n % S == 0) return b.reshape(state, {1, rows, 1, S});
  ANELAB_CHECK(n <= rt::max_dim_all_profiles(), "kernels", "deltanet state of ", n, " values in rows of ", S,
               ": not whole rows, and too long for one padded row");
  Value flat = b.reshape(state, {1, 1, 1, n});
  Value zeros = b.const_tensor(mil::tensor_type(mil::DType::kFp16, {1, 1, 1, rows * S - n}),
                               std::vector<double>(static_cast<size_t>(rows * S - n), 0.0));
  Value padded = b.concat({flat, zeros}, 3);
  return b.reshape(padded, {1, rows, 1, S});
}

DeltaNetTaps build_deltanet(FunctionBuilder& b, const models::DeltaNetDesc& d, const DeltaNetWeights& w, BlobSet& bs,
                            const Value& xn, const Value& valid) {
  using namespace deltanet_mil;
  const int64_t D = xn.dim(1), S = xn.dim(3), L = kDeltaChunk;
  const int64_t Hk = d.n_k_heads, Hv = d.n_v_heads, dk = d.k_dim, dv = d.v_dim, K = d.conv_kernel;
  const int64_t C = d.conv_dim(), Q = Hk * dk, V = Hv * dv, nc = S / L;
  ANELAB_CHECK(S % L == 0, "kernels", "deltanet: a bucket of ", S, " positions is not whole chunks of ", L);
  ANELAB_CHECK(Hk > 0 && Hv % Hk == 0 && K >= 1, "kernels", "deltanet: ", Hk, " key heads, ", Hv, " value heads, conv ",
               K, " (value heads a multiple of key heads)");
  DeltaNetTaps t;

  // The in-projections as 1x1 convs.
  Value qkv = t.qkv = linear(b, xn, bs.matrix(b, "ssm_qkv", mat_values(w.qkv), C, D));
  Value z = linear(b, xn, bs.matrix(b, "ssm_z", mat_values(w.z), V, D));
  Value pb = linear(b, xn, bs.matrix(b, "ssm_b", mat_values(w.b), Hv, D));
  Value pa = linear(b, xn, bs.matrix(b, "ssm_a", mat_values(w.a), Hv, D));

  // The causal depthwise conv: weight [C, 1, 1, K] (HF conv1d.weight [C, 1, K]), K-1 zeros on the left.
  Value cw = fp16_const(b, bs, "ssm_conv", {C, 1, 1, K}, w.conv);
  Value conv = b.conv(qkv, cw, {.pad = {0, 0, K - 1, 0}, .pad_type = "custom", .groups = C});
  Value mix = silu(b, conv);
  Value q = b.slice_by_size(mix, {0, 0, 0, 0}, {1, Q, 1, S});
  Value k = b.slice_by_size(mix, {0, Q, 0, 0}, {1, Q, 1, S});
  Value v = b.slice_by_size(mix, {0, 2 * Q, 0, 0}, {1, V, 1, S});
  Value qh = b.reshape(q, {Hk, dk, 1, S});
  Value kh = b.reshape(k, {Hk, dk, 1, S});
  Value qu = scaled_norm(b, qh, kDeltaL2Eps, false);
  Value qn = b.mul(qu, 1.0 / std::sqrt(static_cast<double>(dk)));
  Value kn = scaled_norm(b, kh, kDeltaL2Eps, false);
  Value qf = b.reshape(qn, {1, Q, 1, S});
  Value kf = b.reshape(kn, {1, Q, 1, S});

  // beta and g per value head and position, 0 at the padding.
  Value sb = b.sigmoid(pb);
  Value beta_row = b.mul(sb, valid);
  Value dtb = bs.vector(b, "ssm_dt_bias", w.dt_bias);
  std::vector<float> neg_a(static_cast<size_t>(Hv));
  for (int64_t h = 0; h < Hv; ++h) neg_a[static_cast<size_t>(h)] = -std::exp(w.a_log[static_cast<size_t>(h)]);
  Value na = bs.vector(b, "ssm_neg_a", neg_a);
  Value ad = b.add(pa, dtb);
  Value sp = b.softplus(ad);
  Value gr = b.mul(sp, na);
  Value g_row = b.mul(gr, valid);
  Value beta = b.reshape(beta_row, {Hv, nc, L, 1});  // [1, Hv, 1, S] -> per head, chunk, position
  Value g = b.reshape(g_row, {Hv, nc, L, 1});

  // Heads by chunk: q, k [Hv, nc, L, dk] (value head h reads key head h / (Hv / Hk)), v [Hv, nc, L, dv].
  Value qs = split_heads(b, qf, Hk);
  Value ks = split_heads(b, kf, Hk);
  Value qe = gqa_expand(b, qs, Hv / Hk);
  Value ke = gqa_expand(b, ks, Hv / Hk);
  Value Qc = b.reshape(qe, {Hv, nc, L, dk});
  Value Kc = b.reshape(ke, {Hv, nc, L, dk});
  Value Vc = chunked_heads(b, v, Hv, L);

  // Chunk-local constants [1, 1, L, L]: lower-triangular ones, the additive causal mask, the strictly-lower ones, I.
  std::vector<float> tri(static_cast<size_t>(L * L)), strict(tri.size()), eye(tri.size());
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      tri[static_cast<size_t>(i * L + j)] = j <= i ? 1.0f : 0.0f;
      strict[static_cast<size_t>(i * L + j)] = j < i ? 1.0f : 0.0f;
      eye[static_cast<size_t>(i * L + j)] = i == j ? 1.0f : 0.0f;
    }
  Value ltri = fp16_const(b, bs, "ssm_tri", {1, 1, L, L}, tri);
  Value mask = fp16_const(b, bs, "ssm_mask", {1, 1, L, L}, causal_mask(L));
  Value mstrict = fp16_const(b, bs, "ssm_strict", {1, 1, L, L}, strict);
  Value ident = fp16_const(b, bs, "ssm_eye", {1, 1, L, L}, eye);

  // The cumulative log decay c [Hv, nc, L, 1] and Gam = exp(c_i - c_j) on and below the diagonal, 0 above. c_i - c_j
  // is summed as itself, sum_{j < m <= i} g_m (a matmul with the 0/1 table [L*L, L]), not as the difference of the two
  // fp16 sums: c reaches hundreds within a chunk where heads decay fast (|g| ~ 10 per token), and an fp16 c of 300
  // carries an error of 0.1, which exp turns into 10 % of the decay between neighbours. The mask (0 on and below the
  // diagonal, -65504 above) is added before the exp.
  std::vector<float> span_table(static_cast<size_t>(L * L * L), 0.0f);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j)
      for (int64_t m = j + 1; m <= i; ++m) span_table[static_cast<size_t>((i * L + j) * L + m)] = 1.0f;
  Value spans = fp16_const(b, bs, "ssm_spans", {1, 1, L * L, L}, span_table);
  Value c = b.matmul(ltri, g);
  Value cdf = b.matmul(spans, g);  // [Hv, nc, L*L, 1]
  Value cd = b.reshape(cdf, {Hv, nc, L, L});
  Value cm = b.add(cd, mask);
  Value gam = b.exp(cm);

  // A = beta_i (k_i . k_j) Gam_ij, j < i; T = (I + A)^-1 as the product of (I - A) and (I + A^(2^i)).
  Value kk = b.matmul(Kc, Kc, false, true);
  Value kg = b.mul(kk, gam);
  Value ks0 = b.mul(kg, mstrict);
  Value A = b.mul(ks0, beta);
  Value T = b.sub(ident, A);
  Value P = A;
  for (int64_t p = 2; p < L; p *= 2) {
    P = b.matmul(P, P);
    Value f = b.add(ident, P);
    T = b.matmul(T, f);
  }

  // U0 = T (beta v), W = T (beta exp(c) k), the output's chunk-local part O0 = ((q k^T) * Gam) U0 and the factors of
  // the state's terms.
  Value ec = b.exp(c);
  Value cl = b.slice_by_size(c, {0, 0, L - 1, 0}, {Hv, nc, 1, 1});
  Value el = b.exp(cl);
  Value gl = b.slice_by_size(gam, {0, 0, L - 1, 0}, {Hv, nc, 1, L});  // exp(c_L - c_j): Gam's last row
  Value wk = b.reshape(gl, {Hv, nc, L, 1});
  Value vb = b.mul(Vc, beta);
  Value bec = b.mul(beta, ec);
  Value kbe = b.mul(Kc, bec);
  Value U0 = b.matmul(T, vb);
  Value W = b.matmul(T, kbe);
  Value qk = b.matmul(Qc, Kc, false, true);
  Value Pq = b.mul(qk, gam);
  Value O0 = b.matmul(Pq, U0);
  Value qec = b.mul(Qc, ec);
  Value pw = b.matmul(Pq, W);
  Value Qm = b.sub(qec, pw);
  Value Kw = b.mul(Kc, wk);

  // The inter-chunk recurrence, chunk after chunk; the state starts at zero.
  std::vector<Value> outs;
  Value state;
  for (int64_t i = 0; i < nc; ++i) {
    Value u = chunk(b, U0, i);
    Value o = chunk(b, O0, i);
    if (i > 0) {
      Value wi = chunk(b, W, i);
      Value ws = b.matmul(wi, state);
      u = b.sub(u, ws);
      Value qi = chunk(b, Qm, i);
      Value qs0 = b.matmul(qi, state);
      o = b.add(o, qs0);
    }
    outs.push_back(o);
    Value kwi = chunk(b, Kw, i);
    Value upd = b.matmul(kwi, u, true, false);  // [Hv, 1, dk, dv]
    if (i == 0) {
      state = upd;
    } else {
      Value eli = chunk(b, el, i);
      Value decayed = b.mul(state, eli);
      state = b.add(decayed, upd);
    }
  }
  t.state = state;
  Value oc = nc == 1 ? outs[0] : b.concat(outs, 1);  // [Hv, nc, L, dv]
  Value oh = b.reshape(oc, {1, Hv, S, dv});
  Value o = merge_heads(b, oh);  // [1, V, 1, S]

  // The gated RMSNorm per value head (weight [dv] shared by the heads), * silu(z), then the out projection.
  Value on = b.reshape(o, {Hv, dv, 1, S});
  Value nw = bs.vector(b, "ssm_norm", w.norm);
  Value nu = scaled_norm(b, on, d.norm.eps, true);
  Value nn = b.mul(nu, nw);
  Value nf = b.reshape(nn, {1, V, 1, S});
  Value sz = silu(b, z);
  Value gated = b.mul(nf, sz);
  t.out = linear(b, gated, bs.matrix(b, "ssm_out", mat_values(w.out), D, V));
  return t;
}

}  // namespace anelab::kern

// Shared fixture for the training-kernel tests: shapes, fp16-exact random weights / inputs, and the
// float64 reference of one layer (ref_layer.h).
#pragma once
#include <string>

#include "framework/kernels/runner.h"
#include "tests/kernels/kern_util.h"
#include "tests/kernels/ref_layer.h"

namespace anelab::test {

// GQA: 8 query heads share 4 kv heads (n_rep 2), adjacent-pair RoPE (llama2.c).
inline kern::TrainShape gqa_shape() {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 172, s.n_heads = 8, s.n_kv_heads = 4, s.head_dim = 8, s.seq = 64;
  return s;
}
// MHA with head_dim 16, rotate-half RoPE (HF) and S = 64.
inline kern::TrainShape mha_shape() {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 128, s.n_heads = 4, s.n_kv_heads = 4, s.head_dim = 16, s.seq = 64;
  s.rope = kern::RopeStyle::kRotateHalf;
  return s;
}

struct LayerData {
  kern::TrainShape shape;
  F32 wq, wk, wv, wo, w1, w2, w3, rms_att, rms_ffn, x, dy;  // fp16-exact values
  RefWeights ref;
  RefFwd fwd;
  RefGrads grads;

  kern::LayerWeights weights() const {
    return kern::train_weights(shape, wq, wk, wv, wo, w1, w3, w2, rms_att, rms_ffn);
  }
};

// Deterministic layer data (seed) with init scales like the trainer's: W ~ U(±1/sqrt(in)) (Wo, W2
// scaled down as in digest §5.4), norm weights ~ 1 ± 0.25, x ~ U(±1), dy ~ U(±1).
inline LayerData make_layer(const kern::TrainShape& s, uint32_t seed) {
  LayerData L;
  L.shape = s;
  const int64_t D = s.dim, QD = s.q_dim(), KVD = s.kv_dim(), H = s.hidden, S = s.seq;
  auto sc = [](int64_t in) { return 1.0 / std::sqrt(static_cast<double>(in)); };
  L.wq = rand_f16(QD * D, 2 * sc(D), seed + 1);
  L.wk = rand_f16(KVD * D, 2 * sc(D), seed + 2);
  L.wv = rand_f16(KVD * D, sc(D), seed + 3);
  L.wo = rand_f16(D * QD, sc(QD), seed + 4);
  L.w1 = rand_f16(H * D, sc(D), seed + 5);
  L.w3 = rand_f16(H * D, sc(D), seed + 6);
  L.w2 = rand_f16(D * H, sc(H), seed + 7);
  L.rms_att = rand_f16(D, 0.25, seed + 8);
  L.rms_ffn = rand_f16(D, 0.25, seed + 9);
  for (auto& v : L.rms_att) v = round_fp16(v + 1.0f);
  for (auto& v : L.rms_ffn) v = round_fp16(v + 1.0f);
  L.x = rand_f16(D * S, 1.0, seed + 10);
  L.dy = rand_f16(D * S, 1.0, seed + 11);
  L.ref = {to64(L.wq), to64(L.wk), to64(L.wv),      to64(L.wo),     to64(L.w1),
           to64(L.w2), to64(L.w3), to64(L.rms_att), to64(L.rms_ffn)};
  L.fwd = ref_forward(s, L.ref, to64(L.x));
  L.grads = ref_backward(s, L.ref, L.fwd, to64(L.dy));
  return L;
}

inline F32 f16(const F64& v) {
  F32 r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round_fp16(static_cast<float>(v[i]));
  return r;
}

// The whole layer through LayerRunner with the trainer's CPU glue (residual adds, dW on the CPU).
struct ChainResult {
  F32 out, dx, dwq, dwk, dwv, dwo, dw1, dw2, dw3;
  F32 attn, dx2, dq, dk, dv;  // intermediates (pre-RoPE dq / dk)
};

inline F32 cpu_outer(const F32& g, int64_t O, const F32& x, int64_t I, int64_t S) {
  F32 d(static_cast<size_t>(O * I));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < S; ++t) acc += double(g[o * S + t]) * x[i * S + t];
      d[o * I + i] = static_cast<float>(acc);
    }
  return d;
}

ChainResult run_chain(kern::LayerRunner& r, const LayerData& L);

}  // namespace anelab::test

// The pure-CPU fp32 reference of a Llama-family model (llama2.c semantics): forward, cross-entropy loss and
// backward of the whole model. It is the `--strategy cpu` engine, the CPU part of the ANE strategies
// (embedding, final RMSNorm, classifier + loss, RMSNorm backward, dW) and the reference kernels are
// compared against.
//
// Layout: row-major activations, one row per token, rows = batch * seq ([N, C] with N = B*T), i.e. the
// transpose of the ANE's channel-first [C, S]. Matrices use Eigen (one thread; big products are split into
// output blocks over the thread pool, train/parallel.h); elementwise work is split by rows. Every reduction has
// a fixed order, so results are bitwise reproducible for a given thread count (resume and exec-restart equality
// rely on this).
//
// Math (per layer, eps = config.norm_eps, hd = head_dim, G = n_heads / n_kv_heads):
//   xn = rmsnorm(x) * attn_norm;  q = xn Wqᵀ, k = xn Wkᵀ, v = xn Wvᵀ;
//   qk_norm (Qwen3): every head of q and k -> rmsnorm over hd * q_norm / k_norm;  RoPE(q, k) at position t = row % T
//   (RoPE frequencies with the config's scaling: llama3's via kern::cpu::rope_inv_freq)
//   head h attends with kv head h / G (llama2.c, HF);  a = softmax(q kᵀ / √hd + causal) v;  x2 = x + a Woᵀ
//   xn2 = rmsnorm(x2) * ffn_norm;  x' = x2 + (silu(xn2 W1ᵀ) ⊙ xn2 W3ᵀ) W2ᵀ
//   logits = rmsnorm(x_L) * norm · Woutᵀ;  loss = mean over tokens of −log softmax(logits)[target]
// Gemma 3 (each with its ModelConfig field): norms multiply by (norm_offset + w); x0 = embedding * embed_scale;
// scores scaled by attn_scale; sliding layers (ModelConfig::sliding_layer) see the last sliding_window keys and
// rotate by rope_local_theta, global ones by rope_theta with positions / rope_linear_factor; post_norms:
// x2 = x + rmsnorm(a Woᵀ) * attn_post_norm, x' = x2 + rmsnorm(mlp) * ffn_post_norm; GeGLU: gelu_tanh(h1) ⊙ h3;
// logits = cap * tanh(logits / cap) with logit_softcap.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "train/params.h"

namespace anelab::train {

// B sequences of T+1 tokens: inputs tokens[b*(T+1) + t], targets tokens[b*(T+1) + t + 1], t < T.
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;  // [B, T+1]
};

struct CpuTimes {  // milliseconds, accumulated by forward_backward
  double fwd = 0, cls = 0, bwd = 0, dw = 0;
};

class CpuModel {
 public:
  explicit CpuModel(const ParamLayout& layout);

  // Mean cross-entropy over the B*T targets. Adds d(loss)/dw * grad_scale into grads (same layout as w).
  double forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, CpuTimes* t = nullptr);
  // f(from): grads[from, P) are final during forward_backward (after the head, then after each layer: the
  // offset of layer l's first tensor), on the calling thread (StepEngine::set_grads_final_hook).
  void set_grads_final_hook(std::function<void(int64_t from)> f) { grads_final_ = std::move(f); }
  // Mean cross-entropy only.
  double loss(const float* w, const Batch& b);
  // Logits of the last position of one sequence of n tokens: out [V].
  void last_logits(const float* w, const int32_t* tokens, int64_t n, std::vector<float>* out);

  // The CPU head shared with the kernel engines (train/kernel_engine.h): final RMSNorm, classifier and mean
  // cross-entropy of xL [N, D] (the last layer's output, row b*T + t; targets from b), then their backward:
  // dxL [N, D] = d(loss)/d(xL) * grad_scale, grads (final norm) += ... The classifier's weight gradient is
  // left to head_classifier_dw (call it before the next call of any CpuModel function) so it can overlap.
  double head_forward_backward(const float* w, const Batch& b, const float* xL, float grad_scale, float* grads,
                               float* dxL);
  void head_classifier_dw(float* grads);  // grads(output) += dlogitsᵀ · xf of the last head_forward_backward

  // Model FLOPs of one forward+backward on B*T tokens (matmuls + attention, 3x forward), for reports.
  static double step_flops(const models::ModelConfig& c, int64_t B, int64_t T);

 private:
  struct LayerActs {
    std::vector<float> x, rrms1, xn, q, k, v, p, att, x2, rrms2, xn2, h1, h3, g;
    std::vector<float> qp, kp, rrmsq, rrmsk;  // qk_norm: q / k before the head norms [N, QD] / [N, KVD]; [N*H], [N*KVH]
    std::vector<float> o, rrmso, y, rrmsy;    // post_norms: Wo·attn and W2·gate before their norms [N, D]; [N]
  };
  void forward(const float* w, const int32_t* tokens, int64_t B, int64_t T, int64_t row_stride);
  void layer_forward(const float* w, int64_t l, int64_t B, int64_t T);
  void layer_backward(const float* w, float* g, int64_t l, int64_t B, int64_t T, float* dx, CpuTimes* t);
  void attention_forward(LayerActs& a, int64_t B, int64_t T, int64_t l);
  double ffn_backward(LayerActs& a, const LayerPtrs& p, const LayerPtrs& g, int64_t N, const float* dy, float* dx2);
  float score_scale() const;
  const float* norm_w(const float* w, int64_t n, std::vector<float>& buf) const;
  void attention_backward(LayerActs& a, int64_t B, int64_t T, const float* datt, float* dq, float* dk, float* dv);
  double cross_entropy(const int32_t* tokens, int64_t B, int64_t T, float grad_scale, bool want_grad);
  void rope(float* x, int64_t rows, int64_t heads, int64_t T, float sign, int64_t l) const;
  void head_norms_forward(LayerActs& a, const LayerPtrs& p, int64_t N);
  void head_norms_backward(LayerActs& a, const LayerPtrs& p, const LayerPtrs& g, int64_t N, std::vector<float>& dq,
                           std::vector<float>& dk);
  void prepare(int64_t B, int64_t T);
  void prepare_head(int64_t B, int64_t T);
  void head_forward(const float* w, const float* xL, int64_t N);                          // xf_, rrmsf_, logits_
  void head_backward(const float* w, const float* xL, float* gr, float* dxL, int64_t N);  // from dlogits_ in logits_

  ParamLayout layout_;
  models::ModelConfig c_;
  int64_t B_ = 0, T_ = 0;
  std::vector<LayerActs> acts_;
  std::vector<float> xL_, rrmsf_, xf_;  // [N, D], [N], [N, D]
  std::vector<float> logits_;           // [N, V] (overwritten by dlogits in backward)
  std::vector<float> cos_, sin_;        // [T, hd/2] (global layers: rope_theta, scaling, linear factor)
  std::vector<float> cosl_, sinl_;      // [T, hd/2] sliding layers (rope_local_theta)
  std::vector<float> capped_;           // [N, V] tanh(z / logit_softcap) of the last head_forward (soft-capping)
  std::vector<int32_t> inputs_;         // [N]
  std::vector<float> dxf_;              // [N, D] head backward scratch
  int64_t head_B_ = 0, head_T_ = 0;
  std::function<void(int64_t)> grads_final_;
};

}  // namespace anelab::train

// The Gated DeltaNet step (models::StepKind::kLinearAttention, Qwen3.5's "linear_attention" layers) of the CPU
// training executor (train/cpu_model.h): its forward on B sequences of T tokens, and its backward written from the
// math, fp32. The definitions are Hugging Face transformers' Qwen3_5GatedDeltaNet (modeling_qwen3_5.py) as
// framework/core/model_desc.h (DeltaNetDesc) and infer/cpu_deltanet.h state them; scripts/qwen35_reference.py is
// the fp64 oracle (its train mode gives autograd's gradients, tests/train/test_qwen35_train.cpp compares).
//
// Forward, per sequence (rows n = b*T + t; C = 2*Hk*dk + Hv*dv; value head h reads key head h / (Hv/Hk)):
//   P = x·W_qkvᵀ [N, C];  pre[t, c] = Σ_{j<K} conv[c, j] P[t-K+1+j, c] (zero before the sequence);  m = silu(pre)
//   q = m_q * r_q * dk^-0.5,  k = m_k * r_k  per key head, r = 1 / sqrt(Σ m² + 1e-6);  v = m_v
//   beta = sigmoid(x·W_bᵀ);  g = -exp(A_log) * softplus(x·W_aᵀ + dt_bias)                    [N, Hv]
//   per value head, S_{-1} = 0:  S'_t = exp(g_t) S_{t-1};  u_t = v_t - S'_tᵀ k_t;  S_t = S'_t + beta_t k_t u_tᵀ;
//     o_t = S_tᵀ q_t                                                                          (S [dk, dv])
//   y = rmsnorm(o) * w_norm * silu(z) per value head (z = x·W_zᵀ);  out = y·W_outᵀ
// Backward through time, per value head, from dS = 0 after the last token, t = T-1 .. 0:
//   dq_t = S_t do_t;  dS += q_t do_tᵀ;  dδ = dSᵀ k_t (δ = beta u);  dk_t = dS δ_t;  dbeta_t = dδ · u_t;
//   dv_t = beta dδ;  dS' = dS - beta k_t dδᵀ;  dk_t -= beta S'_t dδ;  dg_t = Σ dS' ⊙ S'_t;  dS = exp(g_t) dS'
// the states it reads recomputed by stretches of L = ceil(sqrt(T)) tokens from the state before each stretch, which
// the forward keeps ([B, Hv, ceil(T/L), dk, dv]: O(sqrt T) states per head, not T). The q/k gradients of the value
// heads sharing a key head are added in head order; then the L2 norms', the SiLU's and the conv's backward, and the
// four input projections'.
// LoRA (train/lora.h): with DeltaNetAdapters, each of the five products gets the adapter's term added to its output
// right after the base product (P, z, x·W_bᵀ, x·W_aᵀ before their nonlinearities, out), and in the backward the
// adapter's input gradient added to the base's (dy of out_proj's input, din) with dA, dB taken from the same dY.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "framework/core/model_desc.h"

namespace anelab::train {

// The step's weights (shapes as DeltaNetDesc's, D the model dim).
struct DeltaNetWeights {
  const float* qkv;      // [C, D]
  const float* z;        // [Hv*dv, D]
  const float* b;        // [Hv, D]
  const float* a;        // [Hv, D]
  const float* conv;     // [C, K]
  const float* a_log;    // [Hv]
  const float* dt_bias;  // [Hv]
  const float* norm;     // [dv] the gated norm's multiplier (offset + weight)
  const float* out;      // [D, Hv*dv]
};
// Where their gradients are added (same shapes).
struct DeltaNetGrads {
  float *qkv, *z, *b, *a, *conv, *a_log, *dt_bias, *norm, *out;
};

// The five projections of the step (HF in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj).
enum class DeltaNetProj { kQkv, kZ, kB, kA, kOut };
// Adapters around the projections (CpuModel's LoRA): forward(p, x, y, in, out) adds the adapter's product of
// x [N, in] to y [N, out] (nothing for a projection without one); backward(p, dy, x, dx, in, out) takes
// dy [N, out] = d(loss)/d(y) and x, adds the adapter path's input gradient into dx [N, in] (dx nullptr: not
// wanted) and the adapter's dA, dB into its gradients.
struct DeltaNetAdapters {
  std::function<void(DeltaNetProj, const float*, float*, int64_t, int64_t)> forward;
  std::function<void(DeltaNetProj, const float*, const float*, float*, int64_t, int64_t)> backward;
};

// One Gated DeltaNet step: forward keeps what its backward reads.
class DeltaNetStep {
 public:
  // in [B*T, D] (the step's normed input) -> out [B*T, D]; ad: adapters around the projections (nullptr: none).
  void forward(const models::DeltaNetDesc& d, const DeltaNetWeights& w, const float* in, int64_t B, int64_t T,
               int64_t D, float* out, const DeltaNetAdapters* ad = nullptr);
  // dout [B*T, D] = d(loss)/d(out) of the last forward (same in, same ad) -> din [B*T, D] = d(loss)/d(in)
  // (overwritten; nullptr: not computed); the weight gradients added into g (nullptr: a frozen base, none computed);
  // *tdw += their milliseconds.
  void backward(const models::DeltaNetDesc& d, const DeltaNetWeights& w, const DeltaNetGrads* g, const float* in,
                const float* dout, int64_t B, int64_t T, int64_t D, float* din, double* tdw,
                const DeltaNetAdapters* ad = nullptr);
  // Bytes its buffers hold (sized by its first forward: 0 before).
  int64_t held_bytes() const;

 private:
  // The delta rule over every (sequence, value head) from q_, k_, mix_'s v, beta_, g_ into o_ and states_.
  void recurrence(const models::DeltaNetDesc& d, int64_t B, int64_t T);
  // One token's state update S = f(prev) (row n, value head h); u [dv] scratch.
  void state_step(const models::DeltaNetDesc& d, int64_t n, int64_t h, const float* prev, float* S, float* u) const;
  int64_t stride_ = 1;          // L: tokens per stretch between kept states
  std::vector<float> p_;        // [N, C] the qkv projection (the conv's input)
  std::vector<float> pre_;      // [N, C] the conv's output (SiLU's input)
  std::vector<float> mix_;      // [N, C] silu(pre): [q | k | v] before the L2 norms
  std::vector<float> q_, k_;    // [N, Hk*dk] L2-normed (q also * dk^-0.5)
  std::vector<float> rq_, rk_;  // [N*Hk] their 1 / sqrt(Σ m² + eps)
  std::vector<float> z_;        // [N, Hv*dv] the gate's projection
  std::vector<float> beta_;     // [N, Hv] sigmoid(x·W_bᵀ)
  std::vector<float> ga_;       // [N, Hv] x·W_aᵀ + dt_bias (softplus's input)
  std::vector<float> g_;        // [N, Hv] the log decay
  std::vector<float> o_;        // [N, Hv*dv] the delta rule's output
  std::vector<float> ro_;       // [N*Hv] its RMSNorm's 1/rms
  std::vector<float> on_;       // [N, Hv*dv] rmsnorm(o) * w_norm
  std::vector<float> y_;        // [N, Hv*dv] on * silu(z) (out_proj's input)
  std::vector<float> states_;   // [B, Hv, ceil(T/L), dk, dv] the state before each stretch (S_{-1} = 0 first)
};

}  // namespace anelab::train

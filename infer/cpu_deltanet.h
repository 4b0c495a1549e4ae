// The gated delta rule of a Gated DeltaNet layer (Qwen3.5's "linear_attention" layers) on the CPU, fp32.
//
// Per value head h, reading key head h / (n_v_heads / n_k_heads) (each key head serves that many consecutive
// value heads), with q, k already L2-normalised and q scaled by dk^-0.5, g <= 0 the log decay and beta in (0, 1):
//   S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t        (S: [dk, dv])
// delta_rule_step is that recurrence for one token, updating the state in place (decode); DeltaRuleChunked runs
// n tokens by chunks of kChunk with the UT transform (prefill), its products as register-tiled fp32 matrix products
// (K S0, Q S0, K K^T, Q K^T, P U, K^T U; framework/simd's micro-tile): within a chunk, with c_i the cumulative log
// decay from the chunk start,
//   U_i = beta_i (v_i - exp(c_i) S0^T k_i) - sum_{j<i} beta_i (k_i . k_j) exp(c_i - c_j) U_j   (forward substitution)
//   o_i = exp(c_i) S0^T q_i + sum_{j<=i} (q_i . k_j) exp(c_i - c_j) U_j
//   S   = exp(c_L) S0 + sum_j exp(c_L - c_j) k_j U_j^T
// which equals the recurrence exactly in real arithmetic (scripts/qwen35_reference.py --self-test checks the two in
// fp64; tests/infer/test_deltanet.cpp checks these fp32 ones against a double loop).
//
// The short causal convolution before it: conv1d_silu_step, a depthwise conv of kernel K over the last K inputs of
// each channel (the K-1 previous ones kept in a conv state, updated in place) followed by SiLU.
// Nothing here allocates: the chunked form works in a scratch sized once by its constructor.
#pragma once
#include <cstdint>
#include <vector>

#include "framework/core/thread_pool.h"

namespace anelab::infer {

struct DeltaShape {
  int64_t n_k_heads = 0, n_v_heads = 0;  // n_v_heads is a multiple of n_k_heads
  int64_t dk = 0, dv = 0;                // head dims of q/k and of v
  int64_t state_floats() const { return n_v_heads * dk * dv; }
};

// One token. state [n_v_heads, dk, dv]; q, k [n_k_heads * dk]; v [n_v_heads * dv]; g, beta [n_v_heads];
// out [n_v_heads * dv]. Two passes over each head's state; with a pool the value heads run in parallel (the same bits
// as without one).
void delta_rule_step(const DeltaShape& s, float* state, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* out, ThreadPool* pool = nullptr);

class DeltaRuleChunked {
 public:
  static constexpr int64_t kChunk = 64;
  // workers: the threads of the pool run() may be given (scratch for each, allocated here).
  explicit DeltaRuleChunked(const DeltaShape& s, int workers = 1);
  // n tokens, rows of the layouts of delta_rule_step (q/k rows n_k_heads*dk, v/out rows n_v_heads*dv, g/beta rows
  // n_v_heads); the state is read as the state before the first token and left as the one after the last. The value
  // heads are independent: with a pool (of at most `workers` threads) they run in parallel, each head's chunks in
  // order, so the result is the same bits as without one.
  void run(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t n,
           float* out, ThreadPool* pool = nullptr);

 private:
  // Value head h over all n tokens, chunk after chunk, with the scratch of `worker`.
  void run_head(int64_t h, int worker, float* state, const float* q, const float* k, const float* v, const float* g,
                const float* beta, int64_t n, float* out);
  DeltaShape s_;
  int workers_ = 1;
  // Per worker: U [kChunk, dv], K S0 [kChunk, dv], K^T [dk, kChunk], the two Gram matrices [kChunk, kChunk] and
  // three rows of kChunk (run_head names them).
  std::vector<float> scratch_;
};

// Depthwise causal conv + SiLU for one token: y[c] = silu(sum_{j<K} w[c, j] * x_{t-K+1+j}[c]) with the K-1
// previous inputs in conv_state [K-1, C] (oldest first; zeros before the first token), shifted in place.
// w [C, K] (HF conv1d.weight [C, 1, K]); x, y [C].
void conv1d_silu_step(int64_t channels, int64_t kernel, float* conv_state, const float* w, const float* x, float* y);
// n tokens of it at once (prefill): x, y [n, C]; the same bits as n steps. With a pool the channels are split over its
// threads.
void conv1d_silu_rows(int64_t channels, int64_t kernel, float* conv_state, const float* w, const float* x, int64_t n,
                      float* y, ThreadPool* pool = nullptr);

// x[i*d .. i*d+d) *= scale / sqrt(sum x^2 + eps) for each of n rows (the L2 norm of q and k, eps 1e-6 in HF).
void l2_normalize_rows(float* x, int64_t n, int64_t d, float eps, float scale);

}  // namespace anelab::infer

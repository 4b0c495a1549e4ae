// The CPU engine's Gated DeltaNet step (models::StepKind::kLinearAttention, Qwen3.5's linear-attention layers) and
// the layer bookkeeping it needs: which layers hold KV-cache rows, which hold a recurrent state. The math follows
// Hugging Face transformers' Qwen3_5GatedDeltaNet (modeling_qwen3_5.py) as scripts/qwen35_reference.py restates it;
// the delta rule itself is infer/cpu_deltanet.h (recurrent for one token, chunked UT transform for more).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/kernels/cpu_ops.h"
#include "infer/engine.h"

namespace anelab::infer {

namespace engine_linear_detail {
namespace {
// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace
}  // namespace engine_linear_detail

void Engine::plan_layers() {
  const size_t nl = desc_.layers.size();
  kv_slot_.assign(nl, -1);
  lin_slot_.assign(nl, -1);
  n_kv_layers_ = n_lin_layers_ = 0;
  bool gated = false;
  for (size_t l = 0; l < nl; ++l)
    for (const models::Step& s : desc_.layers[l].steps) {
      if (s.kind == models::StepKind::kAttention) {
        kv_slot_[l] = n_kv_layers_++;
        gated |= s.attn.output_gate;
      } else if (s.kind == models::StepKind::kLinearAttention) {
        if (n_lin_layers_ == 0) lin_ = s.deltanet;
        lin_slot_[l] = n_lin_layers_++;
      }
    }
  const int64_t n = chunk_;
  if (gated) qg_.grow(n * 2 * config().q_dim());
  if (n_lin_layers_ == 0) return;
  const int64_t C = lin_.conv_dim(), Q = lin_.n_k_heads * lin_.k_dim, V = lin_.n_v_heads * lin_.v_dim;
  const int64_t Hv = lin_.n_v_heads;
  dstate_.grow(n_lin_layers_ * Hv * lin_.k_dim * lin_.v_dim);
  cstate_.grow(n_lin_layers_ * (lin_.conv_kernel - 1) * C);
  lqkv_.grow(n * C);
  lmix_.grow(n * C);
  lq_.grow(n * Q);
  lk_.grow(n * Q);
  lv_.grow(n * V);
  lz_.grow(n * V);
  lo_.grow(n * V);
  lb_.grow(n * Hv);
  la_.grow(n * Hv);
  chunked_ = std::make_unique<DeltaRuleChunked>(DeltaShape{lin_.n_k_heads, Hv, lin_.k_dim, lin_.v_dim}, pool_.size());
  std::fill(dstate_.data(), dstate_.data() + dstate_.size(), 0.0f);
  std::fill(cstate_.data(), cstate_.data() + cstate_.size(), 0.0f);
}

int64_t Engine::state_bytes() const {
  if (n_lin_layers_ == 0) return 0;
  const int64_t per_layer =
      lin_.n_v_heads * lin_.k_dim * lin_.v_dim + (lin_.conv_kernel - 1) * lin_.conv_dim();  // floats
  return n_lin_layers_ * per_layer * static_cast<int64_t>(sizeof(float));
}

void Engine::begin_state(int64_t pos) {
  if (n_lin_layers_ == 0) return;
  if (pos == 0) {
    std::fill(dstate_.data(), dstate_.data() + dstate_.size(), 0.0f);
    std::fill(cstate_.data(), cstate_.data() + cstate_.size(), 0.0f);
  } else if (pos != state_pos_) {
    fail("infer", "the linear-attention state holds positions [0, ", state_pos_, "); a forward from position ", pos,
         " would need it at that position (a recurrent state cannot rewind: start again from position 0)");
  }
}

const kern::DeltaNetWeights& Engine::deltanet(int64_t l) const {
  ANELAB_CHECK(l >= 0 && l < static_cast<int64_t>(lin_slot_.size()) && lin_slot_[static_cast<size_t>(l)] >= 0, "infer",
               "layer ", l, " is not a linear-attention layer");
  return delta_[static_cast<size_t>(l)];
}

// The MIL prefill's states of layer l after n tokens from position 0 (infer/prefill_mil.h): the layer's delta-rule and
// conv states as a CPU prefill of those tokens would leave them; the state position follows the prefill.
void Engine::store_state(int64_t l, const float* delta_state, const float* conv_state, int64_t n) {
  (void)deltanet(l);  // throws for a layer without a state
  const int64_t slot = lin_slot_[static_cast<size_t>(l)];
  const int64_t ns = lin_.n_v_heads * lin_.k_dim * lin_.v_dim, nc = (lin_.conv_kernel - 1) * lin_.conv_dim();
  std::memcpy(dstate_.data() + slot * ns, delta_state, static_cast<size_t>(ns) * sizeof(float));
  std::memcpy(cstate_.data() + slot * nc, conv_state, static_cast<size_t>(nc) * sizeof(float));
  state_pos_ = n;
}

std::span<const float> Engine::delta_state(int64_t l) const {
  (void)deltanet(l);
  const int64_t ns = lin_.n_v_heads * lin_.k_dim * lin_.v_dim;
  return {dstate_.data() + lin_slot_[static_cast<size_t>(l)] * ns, static_cast<size_t>(ns)};
}

std::span<const float> Engine::conv_state(int64_t l) const {
  (void)deltanet(l);
  const int64_t nc = (lin_.conv_kernel - 1) * lin_.conv_dim();
  return {cstate_.data() + lin_slot_[static_cast<size_t>(l)] * nc, static_cast<size_t>(nc)};
}

void Engine::load_deltanet(const models::DeltaNetDesc& d, DeltaWeights& W) {
  W.qkv = matrix(d.w_qkv);
  W.z = matrix(d.w_z);
  W.b = matrix(d.w_b);
  W.a = matrix(d.w_a);
  W.out = matrix(d.w_out);
  W.conv = vec(d.conv);
  W.a_log = vec(d.a_log);
  W.dt_bias = vec(d.dt_bias);
  W.norm = vec(d.norm.weight);
}

// The Gated DeltaNet of layer l on the branch xb_ [n, dim] of the n new tokens, back into xb_; the layer's conv and
// delta-rule states advance by n tokens in place (one token: the recurrent step; more: the chunked form).
void Engine::linear_attention(int64_t l, const models::DeltaNetDesc& d, int64_t n) {
  using namespace engine_linear_detail;
  const DeltaWeights& W = delta_[static_cast<size_t>(l)];
  const int64_t slot = lin_slot_[static_cast<size_t>(l)];
  const int64_t C = d.conv_dim(), Q = d.n_k_heads * d.k_dim, V = d.n_v_heads * d.v_dim, Hv = d.n_v_heads;
  const int64_t K = d.conv_kernel;
  if (n == 1) {
    gemv(pool_,
         {{&W.qkv, nullptr, lqkv_.data()},
          {&W.z, nullptr, lz_.data()},
          {&W.b, nullptr, lb_.data()},
          {&W.a, nullptr, la_.data()}},
         xb_.data());
  } else {
    gemm(pool_, W.qkv, nullptr, xb_.data(), n, lqkv_.data());
    gemm(pool_, W.z, nullptr, xb_.data(), n, lz_.data());
    gemm(pool_, W.b, nullptr, xb_.data(), n, lb_.data());
    gemm(pool_, W.a, nullptr, xb_.data(), n, la_.data());
  }
  lora_apply(l, LoraSite::kLinQkv, xb_.data(), n, lqkv_.data());
  lora_apply(l, LoraSite::kLinZ, xb_.data(), n, lz_.data());
  lora_apply(l, LoraSite::kLinB, xb_.data(), n, lb_.data());
  lora_apply(l, LoraSite::kLinA, xb_.data(), n, la_.data());
  // The causal conv + SiLU through the conv state; then q | k | v apart.
  float* cs = cstate_.data() + slot * (K - 1) * C;
  conv1d_silu_rows(C, K, cs, W.conv.data(), lqkv_.data(), n, lmix_.data(), &pool_);
  for (int64_t t = 0; t < n; ++t) {
    const float* m = lmix_.data() + t * C;
    std::memcpy(lq_.data() + t * Q, m, static_cast<size_t>(Q) * sizeof(float));
    std::memcpy(lk_.data() + t * Q, m + Q, static_cast<size_t>(Q) * sizeof(float));
    std::memcpy(lv_.data() + t * V, m + 2 * Q, static_cast<size_t>(V) * sizeof(float));
  }
  l2_normalize_rows(lq_.data(), n * d.n_k_heads, d.k_dim, kern::kDeltaL2Eps,
                    1.0f / std::sqrt(static_cast<float>(d.k_dim)));
  l2_normalize_rows(lk_.data(), n * d.n_k_heads, d.k_dim, kern::kDeltaL2Eps, 1.0f);
  // beta = sigmoid(b) in lb_, g = -exp(a_log) softplus(a + dt_bias) in la_.
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t i = t * Hv + h;
      lb_[i] = sigmoid(lb_[i]);
      la_[i] = -std::exp(W.a_log[static_cast<size_t>(h)]) * softplus(la_[i] + W.dt_bias[static_cast<size_t>(h)]);
    }
  float* S = dstate_.data() + slot * Hv * d.k_dim * d.v_dim;
  if (n == 1)
    delta_rule_step(DeltaShape{d.n_k_heads, Hv, d.k_dim, d.v_dim}, S, lq_.data(), lk_.data(), lv_.data(), la_.data(),
                    lb_.data(), lo_.data(), &pool_);
  else
    chunked_->run(S, lq_.data(), lk_.data(), lv_.data(), la_.data(), lb_.data(), n, lo_.data(), &pool_);
  // The gated RMSNorm per value head: silu(z) * norm(o) * w, into lz_.
  auto gated_norm = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* o = lo_.data() + r * d.v_dim;
      kern::cpu::rms_norm(o, W.norm.data(), d.norm.eps, d.v_dim, o, kern::cpu::Numerics::kRunc);
      silu_mul(lz_.data() + r * d.v_dim, o, d.v_dim);
    }
  };
  if (n > 1)
    pool_.parallel_for(n * Hv, 1, gated_norm);
  else
    gated_norm(0, Hv);
  gemm(pool_, W.out, nullptr, lz_.data(), n, xb_.data());
  lora_apply(l, LoraSite::kLinOut, lz_.data(), n, xb_.data());
}

}  // namespace anelab::infer

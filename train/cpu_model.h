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
// The model is its description (framework/core/model_desc.h, built from the config by the architecture): every layer
// is walked step by step, and each step kind has one forward and one backward (cpu_model.cpp states the math).
// What the description holds and this executor lacks is refused when the model is built, in one line naming the
// layer, the step and the executor (models::unsupported).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "train/cpu_deltanet_grad.h"
#include "train/params.h"

namespace anelab::train {

struct LoraStep;        // train/lora.h
enum class LoraTarget;  // train/lora.h
class FrozenBase;       // train/frozen_base.h

// B sequences of T+1 tokens: inputs tokens[b*(T+1) + t], targets tokens[b*(T+1) + t + 1], t < T.
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;  // [B, T+1]
  // [B, T] 1 where target t of sequence b counts in the loss, 0 where it does not (prompt tokens of
  // --mask-prompt data); empty: every target counts. The loss is the mean over the counted targets.
  std::vector<uint8_t> mask;
};

struct CpuTimes {  // milliseconds, accumulated by forward_backward
  double fwd = 0, cls = 0, bwd = 0, dw = 0;
};

class CpuModel {
 public:
  explicit CpuModel(const ParamLayout& layout);  // the description of layout.config() (models::describe_model)
  // A description of one's own over the layout's tensors (its weight names must be in the layout); throws one
  // line naming the layer, the step and this executor at the first part it does not implement.
  CpuModel(const ParamLayout& layout, models::ModelDesc d);

  // Mean cross-entropy over the B*T targets. Adds d(loss)/dw * grad_scale into grads (same layout as w).
  double forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, CpuTimes* t = nullptr);
  // f(from): grads[from, P) are final during forward_backward (after the head, then after each layer: the
  // offset of layer l's first tensor), on the calling thread (StepEngine::set_grads_final_hook).
  void set_grads_final_hook(std::function<void(int64_t from)> f) { grads_final_ = std::move(f); }
  // LoRA (train/lora.h): with l set, every call adds the adapters of l->layout to their projections, and
  // forward_backward adds d(loss)/d(adapters) * grad_scale into l->g and computes NO gradient of the base: every
  // base weight-gradient product is skipped and `grads` is not touched (it may be nullptr). nullptr: no adapters.
  void set_lora(const LoraStep* l) { lora_ = l; }
  // A frozen base held in its own types (train/frozen_base.h, not dense): with b set, every weight is read from b
  // (matrices converted tile by tile in the products, train/cpu_linalg.h) and the `w` arguments are ignored (pass
  // nullptr); forward_backward needs adapters (set_lora). nullptr: the weights are the fp32 `w`.
  void set_base(const FrozenBase* b);
  // true: the base's products (every base_wt / base_dx: the projections, the classifier) take W and the activation
  // operand in bf16 with fp32 sums (train/bf16_linalg.h; `train --lora --lora-compute bf16`). Default false: fp32.
  void set_base_bf16(bool on) { base_bf16_ = on; }
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

  // Bytes of the activations kept for the backward of one micro-batch of B sequences of T tokens: what prepare(B, T)
  // sizes (every step's StepActs, the head's buffers, the RoPE tables; with adapters set, their t, dropout mask and
  // x ⊙ mask), sized now as the first forward_backward would and summed as held (capacity). A linear-attention
  // step's buffers are its own, sized by its first forward (counted once it ran).
  int64_t activation_bytes(int64_t B, int64_t T);

  // Model FLOPs of one forward+backward on B*T tokens (matmuls + attention, 3x forward), for reports.
  static double step_flops(const models::ModelConfig& c, int64_t B, int64_t T);

 private:
  // One step of the description with its weights resolved to offsets into the flat buffers (-1: absent).
  struct StepPlan {
    const models::Step* s = nullptr;
    int64_t layer = 0;
    int64_t pre = -1, post = -1;                                   // norm weights [D]
    int64_t wq = -1, wk = -1, wv = -1, wo = -1, qn = -1, kn = -1;  // attention (q/k norms [hd])
    int64_t w_in = -1, w_up = -1, w_out = -1;                      // ffn
    int rope = -1;                                                 // index into ropes_ (-1: no RoPE)
    // linear attention (models::DeltaNetDesc's weights, in its order)
    int64_t qkv = -1, z = -1, b = -1, a = -1, conv = -1, a_log = -1, dt_bias = -1, gnorm = -1, sout = -1;
  };
  // The activations of one step kept for its backward.
  struct StepActs {
    std::vector<float> x, rrms, xn;           // the stream into the step [N, D]; pre-norm 1/rms [N]; normed [N, D]
    std::vector<float> o, rrmso;              // the op's output before the step's closing norm [N, D]; its 1/rms [N]
    std::vector<float> q, k, v, p, att;       // attention [N, QD], [N, KD] x2, [B*H, T, T], [N, QD]
    std::vector<float> qp, kp, rrmsq, rrmsk;  // q/k norms: q / k before them [N, QD] / [N, KD]; [N*H], [N*KVH]
    std::vector<float> gate, gated;           // output gate: its logits [N, QD]; att * sigmoid(gate) [N, QD]
    std::vector<float> h1, h3, g;             // ffn [N, F] x3
    // LoRA, by LoraTarget: t = xd Aᵀ [N, r]; with dropout the mask (0 or 1/(1-p)) [N, in] and xd = x ⊙ mask [N, in]
    std::vector<std::vector<float>> lt, lmask, lx;
    DeltaNetStep dn;  // linear attention: its activations (train/cpu_deltanet_grad.h)
  };
  struct RopeTable {  // cos / sin [T, dims/2] of one RopeDesc and head_dim (the first `dims` of each head rotate)
    models::RopeDesc desc;
    int64_t head_dim = 0, dims = 0;
    std::vector<float> cos, sin;
  };
  void plan();  // steps_ and ropes_ from d_; refuses what this executor lacks
  void forward(const float* w, const int32_t* tokens, int64_t B, int64_t T, int64_t row_stride);
  void step_forward(const float* w, size_t i, int64_t B, int64_t T, float* out);
  // need_dx false: d(loss)/d(the step's input) is not computed (dx is left as it came); the branch's weight or
  // adapter gradients are.
  void step_backward(const float* w, float* g, size_t i, int64_t B, int64_t T, float* dx, double* tdw,
                     bool need_dx = true);
  // With adapters: the index in steps_ of the lowest step holding one (steps_.size() when none). Below it nothing
  // has a gradient to compute (the base is frozen), so the backward stops there and skips that step's dx.
  size_t lowest_adapted_step() const;
  void attention_forward(const StepPlan& sp, StepActs& a, const float* w, const float* in, int64_t B, int64_t T,
                         float* out);
  void attention_backward(const StepPlan& sp, StepActs& a, const float* w, float* g, const float* dout, int64_t B,
                          int64_t T, float* din, double* tdw);
  // A linear-attention step's weights in w (its gated norm's (offset + w) kept in nb), and their gradients in g
  // (the step is train/cpu_deltanet_grad.h's DeltaNetStep).
  DeltaNetWeights deltanet_weights(const StepPlan& sp, const float* w, std::vector<float>& nb) const;
  DeltaNetGrads deltanet_grads(const StepPlan& sp, float* g) const;
  void ffn_forward(const StepPlan& sp, StepActs& a, const float* w, const float* in, int64_t N, float* out);
  void ffn_backward(const StepPlan& sp, StepActs& a, const float* w, float* g, const float* dout, const float* in,
                    int64_t N, float* din, double* tdw);
  // y [N, out] = x Wᵀ (W the base matrix at w_off), plus scale * (xd Aᵀ) Bᵀ when (sp.layer, t) has an adapter.
  void project(const StepPlan& sp, StepActs& a, LoraTarget t, const float* x, const float* w, int64_t w_off, float* y,
               int64_t N, int64_t in, int64_t out);
  // Its backward: dx (+)= dy W (+ the adapter's path), skipped when dx is nullptr; dW (g + w_off) += dyᵀ x unless
  // the base is frozen; the adapter's dA, dB into lora_->g.
  void project_backward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* dy, const float* x, const float* w,
                        float* g, int64_t w_off, float* dx, int64_t N, int64_t in, int64_t out, bool add, double* tdw);
  // The adapter's part of both: y += scale * (xd Aᵀ) Bᵀ; and dx += the adapter path's input gradient (dx nullptr:
  // none), dA, dB into lora_->g. Nothing when (sp.layer, t) has no adapter.
  void lora_forward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* x, float* y, int64_t N, int64_t in,
                    int64_t out);
  void lora_backward(const StepPlan& sp, StepActs& a, LoraTarget t, const float* dy, const float* x, float* dx,
                     int64_t N, int64_t in, int64_t out, double* tdw);
  // A linear-attention step's adapters (lora_forward / lora_backward on its projections) for N rows.
  DeltaNetAdapters deltanet_adapters(const StepPlan& sp, StepActs& a, int64_t N, double* tdw);
  static bool step_has_target(const models::Step& s, LoraTarget t);  // s runs the projection t adapts
  // The base's weights at layout offset off: w + off, or the frozen base's fp32 copy of them (norms).
  const float* wp(const float* w, int64_t off) const;
  // y [N, out] = x Wᵀ and dx [N, in] (+)= dy W of the base matrix W [out, in] at layout offset off (w + off, or the
  // frozen base's tensor in its own type).
  void base_wt(const float* w, int64_t off, const float* x, float* y, int64_t N, int64_t in, int64_t out) const;
  void base_dx(const float* w, int64_t off, const float* dy, float* dx, int64_t N, int64_t in, int64_t out,
               bool add) const;
  // g + off, or nullptr when the base is frozen (LoRA): no base gradient is written.
  float* base_grad(float* g, int64_t off) const { return lora_ || base_ ? nullptr : g + off; }
  void scores_forward(const models::AttnDesc& at, StepActs& a, int64_t B, int64_t T);
  void scores_backward(const models::AttnDesc& at, StepActs& a, int64_t B, int64_t T, const float* datt, float* dq,
                       float* dk, float* dv);
  const float* norm_w(const models::NormDesc& n, const float* w, int64_t len, std::vector<float>& buf) const;
  double cross_entropy(const Batch& b, float grad_scale, bool want_grad);
  void rope(const StepPlan& sp, float* x, int64_t rows, int64_t heads, int64_t T, float sign) const;
  void prepare(int64_t B, int64_t T);
  void prepare_lora(int64_t N);  // with adapters set: every adapted step's lt (and dropout's lmask, lx)
  void prepare_head(int64_t B, int64_t T);
  void head_forward(const float* w, const float* xL, int64_t N);                          // xf_, rrmsf_, logits_
  void head_backward(const float* w, const float* xL, float* gr, float* dxL, int64_t N);  // from dlogits_ in logits_

  ParamLayout layout_;
  models::ModelDesc d_;
  std::vector<StepPlan> steps_;       // every layer's steps, in order
  std::vector<int64_t> layer_first_;  // [L] index in steps_ of layer l's first step
  std::vector<int64_t> layer_grads_;  // [L] offset of layer l's first tensor (grads_final_)
  std::vector<RopeTable> ropes_;      // the distinct RoPEs of the attention steps
  int64_t B_ = 0, T_ = 0;
  std::vector<StepActs> acts_;          // [steps_.size()]
  std::vector<float> xL_, rrmsf_, xf_;  // [N, D], [N], [N, D]
  std::vector<float> logits_;           // [N, V] (overwritten by dlogits in backward)
  std::vector<float> capped_;           // [N, V] tanh(z / cap) of the last head_forward (the head's cap)
  std::vector<int32_t> inputs_;         // [N]
  std::vector<float> dxf_;              // [N, D] head backward scratch
  int64_t head_B_ = 0, head_T_ = 0;
  std::function<void(int64_t)> grads_final_;
  const LoraStep* lora_ = nullptr;
  const FrozenBase* base_ = nullptr;
  bool base_bf16_ = false;                            // set_base_bf16
  int64_t emb_off_ = 0, norm_off_ = 0, out_off_ = 0;  // layout offsets of the embedding, final norm, classifier
};

}  // namespace anelab::train

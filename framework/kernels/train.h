// Per-layer MIL kernel generators for Llama-style transformer training.
//
// One layer  x -> x2 = x + Wo·attn(rope(Wq·n1), rope(Wk·n1), Wv·n1) -> y = x2 + W2·(silu(W1·n2) * W3·n2)
// with n1 = rmsnorm(x; rms_att), n2 = rmsnorm(x2; rms_ffn), RoPE (theta, style, frequency scaling from TrainShape),
// GQA (query head h reads kv head h / n_rep), causal attention with an additive mask. With q / k norms (TrainShape's
// q_norm / k_norm, both or neither; Qwen3) every head of Wq·n1 / Wk·n1 is RMS-normed over HD with the weights
// q_norm / k_norm [HD] before RoPE.
//
// attn_fwd and ffn_fwd are the two halves of the one layer generator (framework/kernels/layer.h), asked for
// the taps below; the backward kernels are written here.
//
// Kernels (every kernel: ONE fp16 input surface, ONE fp16 output surface, both [1, C, 1, S]-shaped and
// described by IOLayouts `in` / `out`; outputs are channel-packed "taps"):
//
//   kind        input slots                         output slots (channel order)             weights
//   attn_fwd    x[D]                                o[D] attn[QD] q_rope[QD] k_rope[KVD]     rms_att wq wk wv wo
//                                                   v[KVD] xnorm[D]
//   ffn_fwd     x[D] (= x2)                         y[D] h1[H] h3[H] gate[H] xnorm[D]        rms_ffn w1 w3 w2
//   ffn_bwd     dy[D] h1[H] h3[H]                   dx[D] dh1[H] dh3[H]                      w2ᵀ w1ᵀ w3ᵀ
//   wo_bwd      dy[D]                               da[QD]                                   woᵀ
//   sdpa_bwd1   q_rope[QD] k_rope[KVD] v[KVD] da[QD] dv[KVD] probs[H·S] dp[H·S]              (mask)
//   sdpa_bwd2   probs[H·S] dp[H·S] q_rope[QD]        dq[QD] dk[KVD]                          (mask, rope)
//               k_rope[KVD]
//   qkv_bwd     dq[QD] dk[KVD] dv[KVD]              dx[D]                                    wqᵀ wkᵀ wvᵀ
//   rms_bwd     dy[D] x[D]                          dx[D]                                    rms (att or ffn)
//
// With q / k norms: attn_fwd also returns q[QD] k[KVD] (the projections before the head norms) and reads the weights
// q_norm k_norm; qkv_bwd also reads q[QD] k[KVD] and q_norm k_norm, turns dq / dk (gradients w.r.t. the normed
// q / k) into gradients w.r.t. the projections by the per-head RMSNorm backward, and returns them after dx:
//   qkv_bwd     dq[QD] dk[KVD] dv[KVD] q[QD] k[KVD]  dx[D] dq_proj[QD] dk_proj[KVD]   wqᵀ wkᵀ wvᵀ q_norm k_norm
//
// dx of ffn_bwd / qkv_bwd is the gradient w.r.t. the normalised input (xnorm); rms_bwd turns it into
// the gradient w.r.t. the layer input (dw of the norm, all dW, the residual adds stay on the CPU).
// sdpa_bwd1 recomputes the probabilities; dv is already reduced over the n_rep query heads of each kv
// head. sdpa_bwd2 computes dS = P·(dP − rowsum(P·dP))·scale, dQ = dS·K, dK = dSᵀ·Q, reduces dK over
// the GQA groups and applies the inverse RoPE in-kernel (rope with −sin), so dq / dk are gradients
// w.r.t. the pre-RoPE q, k: the projections q = Wq·xnorm, k = Wk·xnorm (dWq = dq·xnormᵀ), or with q / k norms the
// normed heads (dWq = dq_proj·xnormᵀ; the q_norm / k_norm weight gradients are left to the CPU).
//
// Weight strategies:
//   kStatic   weights baked as BLOBFILE consts (fp16); weight-bearing kernels are rebuilt and recompiled
//             after every update; sdpa_bwd1/2 are weight-free and compiled once per shape.
//   kDynamic  weights travel in the input surface by spatial packing (digest §5.4): every input slot is
//             a column band [0, rows) x [off, off+width) of the one input surface; activations are
//             bands of width S, a matrix is a band holding W or Wᵀ (see WeightSlot), a norm weight a
//             band of width 1. The kernel multiplies with matmul (linear_runtime*). All kernels compile
//             once per shape (shared by every layer); after an update the weights are restaged.
//   Weight-free kernels (sdpa_bwd1/2) are identical in both strategies (channel-packed input).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "framework/kernels/layer.h"
#include "framework/kernels/nn.h"
#include "framework/mil/io_layout.h"
#include "framework/runtime/backend.h"

namespace anelab::kern {

struct TrainShape {
  int64_t dim = 0;         // D: model width
  int64_t hidden = 0;      // H: FFN width
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int64_t head_dim = 0;    // HD (Qwen3: not dim / n_heads)
  int64_t seq = 0;         // S: a multiple of rt::dense_width_multiple(fp16) (whole device rows)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  RopeStyle rope = RopeStyle::kAdjacentPairs;
  RopeScaling rope_scaling;                        // frequency scaling of the RoPE tables (arch_types.h)
  std::optional<models::NormDesc> q_norm, k_norm;  // per-head RMSNorms of q and k before RoPE ([HD]); both or neither
  // LoRA (lora_rank 0: none): every projection named in lora_targets ("wq" ... "w2") computes
  // y = W x + lora_scale * B (A x) with W baked (kStatic) or read from its band (kDynamic) and A [r, in], B [out, r]
  // read from bands of the kernel's input surface (staged every step, so nothing is recompiled for new adapters);
  // the transposed products of the backward kernels use Wᵀ + lora_scale * Aᵀ Bᵀ.
  // With lora_dropout p > 0 (PEFT's lora_B(lora_A(dropout(x))), inverted dropout) every targeted projection reads a
  // mask band "W.lora_m" of 0 / 1 (m01 [in, S] or m01ᵀ, exact in fp16; staged per sequence, KernelSpec::lora_masks)
  // and computes y = W x + s' * B (A (x ⊙ m01)), its transposed products Wᵀ dy + s' * m01 ⊙ (Aᵀ (Bᵀ dy)), with the one
  // constant s' = lora_scale / (1 - p) (the inverted dropout's 1/(1-p) folded into the scale: fp16 rounds s' once,
  // relative error <= 2^-11, where a mask band of 0 / 1/(1-p) would round every kept element's 1/(1-p) the same way
  // and the scale again). p = 0: no mask band, the MIL of the adapters alone.
  int64_t lora_rank = 0;
  double lora_scale = 0;
  double lora_dropout = 0;
  std::vector<std::string> lora_targets;
  bool lora_on(const std::string& weight) const;

  int64_t q_dim() const { return n_heads * head_dim; }      // QD
  int64_t kv_dim() const { return n_kv_heads * head_dim; }  // KVD
  int64_t n_rep() const { return n_heads / n_kv_heads; }
  double attn_scale() const;  // 1 / sqrt(HD)
  void validate() const;      // throws "[kernels] ..." naming the bad field
  std::string str() const;    // "D=64 H=172 heads=8/4 hd=8 S=64" (+ " q/k norms")
};

enum class Strategy { kStatic, kDynamic };
const char* strategy_name(Strategy s);

enum class KernelKind { kAttnFwd, kFfnFwd, kFfnBwd, kWoBwd, kSdpaBwd1, kSdpaBwd2, kQkvBwd, kRmsAttBwd, kRmsFfnBwd };
constexpr std::array<KernelKind, 9> kAllKernelKinds = {
    KernelKind::kAttnFwd,  KernelKind::kFfnFwd, KernelKind::kFfnBwd,    KernelKind::kWoBwd,    KernelKind::kSdpaBwd1,
    KernelKind::kSdpaBwd2, KernelKind::kQkvBwd, KernelKind::kRmsAttBwd, KernelKind::kRmsFfnBwd};
const char* kernel_name(KernelKind k);  // "attn_fwd", ...
// Does the kernel read layer weights (other than the shape-only mask / RoPE tables)?
bool kernel_has_weights(KernelKind k);
// Must the kernel be recompiled for each layer / after each update? (static + has weights)
inline bool kernel_per_layer(KernelKind k, Strategy s) { return s == Strategy::kStatic && kernel_has_weights(k); }

// The layer of a training shape as the model description has it (RMSNorm pre-norms, SwiGLU, RoPE, the shape's q/k
// norms, no biases, score scale 0: 1 / sqrt(HD)), for layer.h; the norms' weights are named "attn_norm", "ffn_norm",
// "q_norm", "k_norm" (LayerWeights::norm).
models::LayerDesc layer_steps(const TrainShape& s);
// Training reads fp32 weights (LayerWeights, layer.h): throws "[kernels] ..." naming the weight whose type
// or shape does not match `s` (matrices [out, in], norms [D]).
void validate_train_weights(const LayerWeights& w, const TrainShape& s);
// fp32 layer weights from row-major values with the shapes of `s` (wq [QD, D] ... rms_att / rms_ffn [D];
// q_norm / k_norm [HD] when the shape has them, else empty).
LayerWeights train_weights(const TrainShape& s, std::span<const float> wq, std::span<const float> wk,
                           std::span<const float> wv, std::span<const float> wo, std::span<const float> w1,
                           std::span<const float> w3, std::span<const float> w2, std::span<const float> rms_att,
                           std::span<const float> rms_ffn, std::span<const float> q_norm = {},
                           std::span<const float> k_norm = {});

// A weight staged into a dynamic kernel's input surface: slot `slot` of `in` holds weight `weight`
// as a [rows, cols] band: W itself ([out, in]) or, when transposed, Wᵀ ([in, out]); vectors [D, 1] ([HD, 1]).
// Weight names: wq wk wv wo w1 w2 w3, rms_att (LayerWeights::attn_norm), rms_ffn (ffn_norm), q_norm, k_norm.
struct WeightSlot {
  std::string slot;
  std::string weight;
  bool transposed = false;
};

// One generated kernel: program + weights dictionary + the IO layouts used by both MIL and host.
struct KernelSpec {
  std::string name;  // "attn_fwd"
  mil::Program program;
  rt::Weights weights;                   // BLOBFILE contents (static weights, mask, RoPE tables)
  mil::IOLayout in, out;                 // the one input / output surface
  std::vector<WeightSlot> weight_slots;  // dynamic: weights the host stages into `in`
  // LoRA dropout (TrainShape::lora_dropout > 0): the mask band of each targeted projection (slot lora_mask_slot(W),
  // weight W: 0 / 1 by element of the projection's input), which the host stages before each sequence: m01 [in, S],
  // or when transposed m01ᵀ [S, in] (where `in` is over the surface's channels and S is not).
  std::vector<WeightSlot> lora_masks;
};
// The mask band of projection `weight` ("wq.lora_m").
std::string lora_mask_slot(const std::string& weight);

// Builds one kernel. `w` is required for weight-bearing kernels under kStatic, ignored otherwise.
KernelSpec build_kernel(KernelKind kind, const TrainShape& shape, Strategy strategy, const LayerWeights* w = nullptr);

struct LayerKernels {
  KernelSpec attn_fwd, ffn_fwd, ffn_bwd, wo_bwd, sdpa_bwd1, sdpa_bwd2, qkv_bwd, rms_att_bwd, rms_ffn_bwd;
  KernelSpec& get(KernelKind k);
};
LayerKernels build_layer_kernels(const TrainShape& shape, Strategy strategy, const LayerWeights* w = nullptr);

// LoRA bands (TrainShape::lora_rank > 0, either strategy): a weight-bearing kernel's input surface holds, for each
// targeted projection W it multiplies, the spatial bands "W.lora_a" (A) and "W.lora_bt" (B), each r columns wide
// where its rows fit the surface's channels: Aᵀ [in, r] and B [out, r] (WeightSlot::transposed), else r rows high:
// A [r, in] and Bᵀ [r, out] (WeightSlot weight names the same as the slots; activations are then spatial bands of
// width S too; under kDynamic the LoRA bands follow the base weights' bands). Values of such a slot from A [r, in] and
// B [out, r] row-major; false when ws is not a LoRA band. With dropout (TrainShape::lora_dropout > 0) the mask bands
// lora_mask_slot(W) follow, one per targeted projection of the kernel: m01 [in, S] where `in` fits the channels the
// surface has without them, else m01ᵀ [S, in] (transposed back in MIL: a band [in, S] would raise the channels of the
// whole surface to `in`, e.g. ffn_fwd's to H for the mask of W2's input). KernelSpec::lora_masks; not weight slots:
// the host stages them per sequence, LayerRunner::set_masks.
bool lora_slot_values(const WeightSlot& ws, std::span<const float> a, std::span<const float> b, const TrainShape& s,
                      std::vector<float>& out);
// "wq" of "wq.lora_a" / "wq.lora_bt"; "" for a slot that is not a LoRA band.
std::string lora_slot_weight(const WeightSlot& ws);

// Host helper: the contents of a dynamic weight slot, [rows, cols] fp32 row-major (W, Wᵀ or the vector),
// ready for rt::stage_in(surface, spec.in, ws.slot, out.data()). LayerRunner does this for you.
void weight_slot_values(const WeightSlot& ws, const LayerWeights& w, const TrainShape& s, std::vector<float>& out);

}  // namespace anelab::kern

// The transformer layer as MIL, written once: the inference prefill (infer/prefill_mil.h) and the
// training forward kernels (framework/kernels/train.h) both emit their layer here; they differ only in
// where the weights come from (LayerSource) and in the taps they ask for; what the layer computes is a
// LayerParams (below), shaped like a layer of the model description (models/arch/layer_desc.h).
//
//   attention half  x -> xnorm = norm(x) -> q = Wq·xnorm (+bq), k = Wk·xnorm (+bk), v = Wv·xnorm (+bv)
//                   -> [q_norm / k_norm: per-head norms of q and k] -> RoPE(q, k) -> softmax(q kᵀ * scale + mask) v
//                   (query head h reads kv head h / n_rep) -> attn -> o = Wo·attn (+bo) [post_norm: norm(o)]
//   ffn half        x -> xnorm = norm(x) -> SwiGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = silu(h1) * h3
//                                         or tanh-GELU: h1 = W1·xnorm (+b1), gate = gelu(h1)
//                                         or GeGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = gelu(h1) * h3
//                   -> y = W2·gate (+b2) [post_norm: norm(y)]
//   whole layer     x2 = x + o(x);  out = x2 + y(x2)
// Each norm is RMSNorm (norm weight) or LayerNorm (weight and optional bias), by its NormParams; the mask keeps
// the last `window` keys when the attention has a window. Activations are channel-first [1, C, 1, S] fp16
// (nn.h); every tap is a [1, C, 1, S] value.
//
// Taps (the values a caller may ask for, returned in the order asked):
//   build_attention: o [D], attn [QD], q_rope [QD], k_rope [KVD], q [QD], k [KVD], v [KVD], xnorm [D]
//                    (q_rope / k_rope after the q/k norms and RoPE; q / k the projections Wq·xnorm, Wk·xnorm)
//   build_ffn:       y [D], h1 [H], h3 [H] (gated MLPs only), gate [H], xnorm [D]
//   build_layer:     out [D] followed by the attention taps asked for
// Training asks attn_fwd for {o attn q_rope k_rope v xnorm} (+ {q k} with q/k norms) and ffn_fwd for {y h1 h3 gate
// xnorm} (its backward kernels read them); the prefill asks the whole layer for {out k_rope v} (the KV cache).
//
// One layer's weights (LayerWeights) are described once here for the kernels, the inference engine and
// the trainer: matrices in nn.Linear order [out, in] row-major (quant::Mat, framework/quant/mat.h: fp32, fp16 or
// quantized blocks), not owned.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/kernels/nn.h"
#include "framework/quant/mat.h"

namespace anelab::kern {

// ---- weights --------------------------------------------------------------------------------------

// The values of m as fp32 (fp16 widened, block types dequantized): the MIL kernels take fp16 / fp32 weights;
// throws "[kernels] ..." for a block type the type table does not give the MIL kernels (quant::kExecMilFp16).
std::vector<float> mat_values(const quant::Mat& m);

// One transformer layer's weights (not owned). Vectors are empty when the model has no such tensor.
// The kernels name them: wq wk wv wo w1 w2 w3, norms attn_norm / ffn_norm (training's rms_att / rms_ffn).
struct LayerWeights {
  quant::Mat wq;                                            // [QD, D]
  quant::Mat wk, wv;                                        // [KVD, D]
  quant::Mat wo;                                            // [D, QD]
  quant::Mat w1, w3;                                        // [H, D] (SwiGLU gate / up; GELU: w1 = fc, no w3)
  quant::Mat w2;                                            // [D, H] (down; GELU: proj)
  std::span<const float> attn_norm, ffn_norm;               // [D]
  std::span<const float> attn_norm_b, ffn_norm_b;           // [D] LayerNorm biases
  std::span<const float> bq;                                // [QD]
  std::span<const float> bk, bv;                            // [KVD]
  std::span<const float> bo, b2;                            // [D]
  std::span<const float> b1;                                // [H]
  std::span<const float> q_norm, k_norm;                    // [HD] per-head RMSNorm of q and k (before RoPE)
  std::span<const float> attn_post_norm, ffn_post_norm;     // [D] norms of the attention / MLP outputs
  const quant::Mat& matrix(const std::string& name) const;  // "wq" ... "w3"; throws for others
};

// ---- the layer's parameters ------------------------------------------------------------------------
// What the layer computes, shaped like one layer of the model description (models/arch/layer_desc.h: an attention
// step and an FFN step, each with its pre-norm and optional post-norm). The caller fills it: the prefill from the
// description (infer/prefill_mil.cpp), training from its shape (layer_params, train.h). An optional part is
// emitted when present; the generator reads no architecture.

// A norm over the channels (q / k norms: over each head's HD channels): RMSNorm, or LayerNorm with the bias
// the source has (LayerSource::norm_bias). Its weight is LayerSource::norm_weight(<the norm's name>).
struct NormParams {
  NormType kind = NormType::kRms;
  double eps = 1e-5;
};

// The attention step: x -> pre_norm ("attn_norm") -> attention -> post_norm ("attn_post_norm", when present).
struct AttnParams {
  NormParams pre_norm;
  std::optional<NormParams> post_norm;       // of o = Wo·attn, before the residual add
  int64_t n_heads = 0;                       // query heads
  int64_t n_kv_heads = 0;                    // key/value heads (GQA when < n_heads)
  int64_t head_dim = 0;                      // HD
  std::optional<NormParams> q_norm, k_norm;  // per head of q / k before RoPE ("q_norm" / "k_norm" [HD])
  std::optional<RopeStyle> rope;             // none: no RoPE (learned positions)
  int64_t window = 0;                        // keys limited to the last `window` positions (LayerSource::mask); 0: all
  double score_scale = 0.0;                  // scores = q·k * score_scale; 0: 1 / sqrt(HD)

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t n_rep() const { return n_heads / n_kv_heads; }
  double scale() const;  // score_scale, or 1 / sqrt(HD)
};

// The FFN step: x -> pre_norm ("ffn_norm") -> MLP of `activation` -> post_norm ("ffn_post_norm", when present).
struct FfnParams {
  NormParams pre_norm;
  std::optional<NormParams> post_norm;  // of y = W2·gate, before the residual add
  int64_t hidden = 0;                   // H
  Activation activation = Activation::kSilu;
};

struct LayerParams {
  int64_t dim = 0;  // D
  AttnParams attn;
  FfnParams ffn;
};

// Where a layer kernel's inputs and weights come from: the prefill bakes weights as BLOBFILE consts,
// training bakes them (static) or slices them from the input surface (dynamic).
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual Value input(const std::string& slot) = 0;  // an activation input, [1, C, 1, S]
  // y = W x (+ the bias of W when the model has one) for "wq" ... "w3"
  virtual Value project(const std::string& weight, const Value& x) = 0;
  // a norm's weight by the norm's name (NormParams above): [1, D, 1, 1]; "q_norm" | "k_norm": [1, HD, 1, 1]
  virtual Value norm_weight(const std::string& norm) = 0;
  virtual std::optional<Value> norm_bias(const std::string& norm) = 0;  // a LayerNorm's bias, if any
  // [1, 1, S, S] additive causal mask, keys limited to the last `window` positions when > 0 (causal_mask)
  virtual Value mask(int64_t window) = 0;
  virtual Value rope_table(const std::string& which) = 0;  // "cos" | "sin": [1, 1, S, HD] (rope_tables)
};

using Taps = std::vector<std::pair<std::string, Value>>;

// The attention half on input slot "x"; returns the taps asked for (names above), in that order.
Taps build_attention(FunctionBuilder& b, const AttnParams& a, LayerSource& p, const std::vector<std::string>& taps);
// The feed-forward half on input slot "x".
Taps build_ffn(FunctionBuilder& b, const FfnParams& f, LayerSource& p, const std::vector<std::string>& taps);
// The whole layer with both residual adds on input slot "x": "out", then the attention taps asked for.
Taps build_layer(FunctionBuilder& b, const LayerParams& d, LayerSource& p, const std::vector<std::string>& attn_taps);

}  // namespace anelab::kern

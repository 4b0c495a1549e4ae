// The transformer layer as MIL, written once: the inference prefill (infer/prefill_mil.h) and the
// training forward kernels (framework/kernels/train.h) both emit their layer here; they differ only in
// where the weights come from (LayerSource) and in the taps they ask for; what the layer computes is a layer
// of the model description (framework/core/model_desc.h: its attention step and its FFN step), read as it is.
//
//   attention half  x -> xnorm = norm(x) -> q = Wq·xnorm (+bq), k = Wk·xnorm (+bk), v = Wv·xnorm (+bv)
//                   [output gate: Wq's rows per head [q | gate], split]
//                   -> [q_norm / k_norm: per-head norms of q and k] -> RoPE(q, k) (on the first rope.dims of each
//                   head when partial) -> softmax(q kᵀ * scale + mask) v
//                   (query head h reads kv head h / n_rep) -> attn [* sigmoid(gate)] -> o = Wo·attn (+bo)
//                   [the step's norm of o]
//   ffn half        x -> xnorm = norm(x) -> SwiGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = silu(h1) * h3
//                                         or tanh-GELU: h1 = W1·xnorm (+b1), gate = gelu(h1)
//                                         or GeGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = gelu(h1) * h3
//                   -> y = W2·gate (+b2) [the step's norm of y]
//   whole layer     x2 = x + o(x);  out = x2 + y(x2)
// Each norm is RMSNorm (norm weight) or LayerNorm (weight and optional bias), by its NormDesc; the mask keeps
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
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/core/model_desc.h"
#include "framework/kernels/nn.h"
#include "framework/quant/mat.h"
#include "framework/quant/palette.h"

namespace anelab::kern {

// ---- weights --------------------------------------------------------------------------------------

// The values of m as fp32 (fp16 widened, block types dequantized): the MIL kernels take fp16 / fp32 weights;
// throws "[kernels] ..." for a block type the type table does not give the MIL kernels (quant::kExecMilFp16).
std::vector<float> mat_values(const quant::Mat& m);

// One transformer layer's weights (not owned). Vectors are empty when the model has no such tensor.
// The kernels name the matrices wq wk wv wo w1 w2 w3; the norm vectors are kept by the name of the norm's weight in
// the description (NormDesc::weight: the engine's canonical tensor names, training's "attn_norm" ... "k_norm").
struct LayerWeights {
  quant::Mat wq;                  // [QD, D]
  quant::Mat wk, wv;              // [KVD, D]
  quant::Mat wo;                  // [D, QD]
  quant::Mat w1, w3;              // [H, D] (SwiGLU gate / up; GELU: w1 = fc, no w3)
  quant::Mat w2;                  // [D, H] (down; GELU: proj)
  std::span<const float> bq;      // [QD]
  std::span<const float> bk, bv;  // [KVD]
  std::span<const float> bo, b2;  // [D]
  std::span<const float> b1;      // [H]
  // Norm weights (offset added: what the kernels multiply by) and LayerNorm biases, by tensor name: [D] or [HD].
  std::vector<std::pair<std::string, std::span<const float>>> norms;
  // Palettes of the matrices (lut4 / lut6, quant/palette.h) by "wq" ... "w3", when the model file stores them; the
  // matrices above then hold exactly their values (models/formats/anelab_file.h).
  std::map<std::string, std::shared_ptr<const quant::Palette>> palettes;
  const quant::Palette* palette(const std::string& name) const;      // nullptr when absent
  const quant::Mat& matrix(const std::string& name) const;           // "wq" ... "w3"; throws for others
  std::span<const float> norm(const std::string& name) const;        // empty when absent (or name empty)
  void set_norm(const std::string& name, std::span<const float> v);  // adds or replaces
};

// ---- the layer, from its description ----------------------------------------------------------------
// build_layer takes a layer of the model description as it is: an attention step then an FFN step, each
// pre-normed, with an optional post-norm, optional q / k norms, RoPE or none, a window, a score scale and an
// activation. check_layer refuses everything else (one line naming the layer, the step and the executor).

// Throws models::unsupported(component, executor, layer, ...) at the first step or parameter of `l` the MIL layer
// does not implement; returns its attention and FFN steps.
struct LayerSteps {
  const models::Step& attn;
  const models::Step& ffn;
};
LayerSteps check_layer(const models::LayerDesc& l, int64_t layer, const char* component, const char* executor);

// Where a layer kernel's inputs and weights come from: the prefill bakes weights as BLOBFILE consts,
// training bakes them (static) or slices them from the input surface (dynamic).
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual Value input(const std::string& slot) = 0;  // an activation input, [1, C, 1, S]
  // y = W x (+ the bias of W when the model has one) for "wq" ... "w3"
  virtual Value project(const std::string& weight, const Value& x) = 0;
  // The weight of norm n ([1, D, 1, 1]; q / k norms: [1, HD, 1, 1]) as the const `name` (the kernel's name for the
  // norm: "attn_norm", "q_norm", ...), and a LayerNorm's bias (n.bias), if any.
  virtual Value norm_weight(const std::string& name, const models::NormDesc& n) = 0;
  virtual std::optional<Value> norm_bias(const std::string& name, const models::NormDesc& n) = 0;
  // [1, 1, S, S] additive causal mask, keys limited to the last `window` positions when > 0 (causal_mask)
  virtual Value mask(int64_t window) = 0;
  // "cos" | "sin": [1, 1, S, R] (rope_tables), R the rotated dims (rope.dims, or HD when 0)
  virtual Value rope_table(const std::string& which) = 0;
};

using Taps = std::vector<std::pair<std::string, Value>>;

// The attention step on input slot "x"; returns the taps asked for (names above), in that order.
Taps build_attention(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::vector<std::string>& taps);
// The FFN step on input slot "x".
Taps build_ffn(FunctionBuilder& b, const models::Step& s, LayerSource& p, const std::vector<std::string>& taps);
// The whole layer (check_layer's steps) with both residual adds on input slot "x": "out", then the attention taps
// asked for.
Taps build_layer(FunctionBuilder& b, const LayerSteps& l, LayerSource& p, const std::vector<std::string>& attn_taps);

}  // namespace anelab::kern

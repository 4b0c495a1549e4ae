// The transformer layer as MIL, written once: the inference prefill (infer/prefill_mil.h) and the
// training forward kernels (framework/kernels/train.h) both emit their layer here; they differ only in
// where the parameters come from (LayerParams) and in the taps they ask for.
//
//   attention half  x -> xnorm = norm(x) -> q = Wq·xnorm (+bq), k = Wk·xnorm (+bk), v = Wv·xnorm (+bv)
//                   -> [qk_norm: per-head RMSNorm of q and k] -> RoPE(q, k) -> softmax(q kᵀ * scale + mask) v
//                   (query head h reads kv head h / n_rep) -> attn -> o = Wo·attn (+bo) [post_norms: norm(o)]
//   ffn half        x -> xnorm = norm(x) -> SwiGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = silu(h1) * h3
//                                         or tanh-GELU: h1 = W1·xnorm (+b1), gate = gelu(h1)
//                                         or GeGLU: h1 = W1·xnorm, h3 = W3·xnorm, gate = gelu(h1) * h3
//                   -> y = W2·gate (+b2) [post_norms: norm(y)]
//   whole layer     x2 = x + o(x);  out = x2 + y(x2)
// norm is RMSNorm (norm weight) or LayerNorm (weight and optional bias). Activations are channel-first
// [1, C, 1, S] fp16 (blocks.h); every tap is a [1, C, 1, S] value.
//
// Taps (the values a caller may ask for, returned in the order asked):
//   attention_block: o [D], attn [QD], q_rope [QD], k_rope [KVD], q [QD], k [KVD], v [KVD], xnorm [D]
//                    (q_rope / k_rope after the q/k norms and RoPE; q / k the projections Wq·xnorm, Wk·xnorm)
//   ffn_block:       y [D], h1 [H], h3 [H] (SwiGLU only), gate [H], xnorm [D]
//   layer_block:     out [D] followed by the attention taps asked for
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
#include "framework/kernels/blocks.h"
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

// ---- the layer description --------------------------------------------------------------------------

struct LayerDesc {
  int64_t dim = 0;         // D
  int64_t hidden = 0;      // H
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int64_t head_dim = 0;    // HD
  int64_t seq = 0;         // S
  double norm_eps = 1e-5;
  bool layer_norm = false;        // LayerNorm (GPT-2); else RMSNorm
  bool gelu = false;              // tanh-GELU MLP (w1, w2); else SwiGLU (w1, w3, w2)
  bool geglu = false;             // GeGLU MLP (w1, w3, w2): gelu_tanh(W1·x) * W3·x (Gemma)
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE (norm weights "q_norm" / "k_norm" [HD])
  bool post_norms = false;        // RMSNorm of the attention and MLP outputs ("attn_post_norm" / "ffn_post_norm")
  double score_scale = 0.0;       // scores = q·k * score_scale; 0: 1 / sqrt(HD)
  std::optional<RopeStyle> rope;  // none: no RoPE (learned positions)
  double rope_theta = 10000.0;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t n_rep() const { return n_heads / n_kv_heads; }
  double attn_scale() const;  // score_scale, or 1 / sqrt(HD)
};

// Where a layer kernel's inputs and parameters come from: the prefill bakes weights as BLOBFILE consts,
// training bakes them (static) or slices them from the input surface (dynamic).
class LayerParams {
 public:
  virtual ~LayerParams() = default;
  virtual Value input(const std::string& slot) = 0;  // an activation input, [1, C, 1, S]
  // y = W x (+ the bias of W when the model has one) for "wq" ... "w3"
  virtual Value project(const std::string& weight, const Value& x) = 0;
  // "attn_norm" | "ffn_norm" | "attn_post_norm" | "ffn_post_norm": [1, D, 1, 1]; "q_norm" | "k_norm": [1, HD, 1, 1]
  virtual Value norm_weight(const std::string& norm) = 0;
  virtual std::optional<Value> norm_bias(const std::string& norm) = 0;  // LayerNorm bias, if any
  virtual Value mask() = 0;  // [1, 1, S, S] additive causal mask (causal_mask; a window's)
  virtual Value rope_table(const std::string& which) = 0;  // "cos" | "sin": [1, 1, S, HD] (rope_tables)
};

using Taps = std::vector<std::pair<std::string, Value>>;

// The attention half on input slot "x"; returns the taps asked for (names above), in that order.
Taps attention_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& taps);
// The feed-forward half on input slot "x".
Taps ffn_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& taps);
// The whole layer with both residual adds on input slot "x": "out", then the attention taps asked for.
Taps layer_block(FunctionBuilder& b, const LayerDesc& d, LayerParams& p, const std::vector<std::string>& attn_taps);

}  // namespace anelab::kern

// A model as one description: what each layer computes, in order, with the names of its weights. An
// architecture builds it from its config (Arch::describe, models/arch/<arch>.cpp); an executor walks it and
// implements each step kind once, so no executor reads an architecture flag of the ModelConfig. It lives in
// framework/core (in namespace models, the vocabulary of the model layer) so that every executor, the MIL kernels
// of framework/kernels included, takes it as it is.
//
// A layer is a sequence of residual steps. Each step reads the residual stream x [n, dim] and adds to it:
//   branch = pre_norm ? norm(x) : x     (the sub-layer's input norm; absent: the stream itself)
//   branch = op(branch)                 (the step's kind: attention, or the feed-forward network)
//   branch = post_norm(branch)          (when present: Gemma 3's sandwich norms, before the add)
//   x     += residual_scale * branch
// A Llama layer is [attention, ffn], both pre-normed; Gemma 3 adds both post-norms; Qwen3.5's linear layers are
// [linear attention, ffn].
//
// Executors, each implementing a step kind once: infer/engine.cpp (CPU inference), train/cpu_model.cpp (CPU
// training: one forward and one backward per step kind), framework/kernels/layer.cpp (the MIL layer of the
// prefill, infer/prefill_mil.cpp, and of the training forward kernels) and the MIL training kernels
// (framework/kernels/train.cpp, their shape from the description in train/kernel_engine.cpp behind
// check_kernel_steps, train/params.h).
// An executor that meets a step or parameter it does not implement throws one line naming the layer, the
// step and the executor (unsupported()).
//
// Weight names are canonical tensor names (models/formats/model.h); "" means the weight is absent.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/arch_types.h"

namespace anelab::models {

// A norm over the last axis: RMSNorm, or LayerNorm (with a bias when `bias` names one). The kernels multiply
// by (offset + weight), the offset added once in fp32 at load (Gemma: 1).
struct NormDesc {
  NormType kind = NormType::kRms;
  float eps = 1e-5f;
  float offset = 0.0f;
  std::string weight;  // [width] (dim, or head_dim for q/k norms)
  std::string bias;    // [width] or "" (RMSNorm has none)
  bool operator==(const NormDesc&) const = default;
};

// Rotary positions of q and k (style kNone: none, the model has learned positions). inv_freq(i) =
// theta^(-2i/dims), scaled by `scaling` (Llama 3) and divided by `linear_factor` (linear scaling); the first `dims`
// of each head rotate (partial RoPE, Qwen3.5: head_dim / 4), the rest pass through; dims 0 means head_dim.
struct RopeDesc {
  RopeStyle style = RopeStyle::kNone;
  float theta = 10000.0f;
  RopeScaling scaling;
  float linear_factor = 1.0f;
  int64_t dims = 0;
  bool operator==(const RopeDesc&) const = default;
};

// Causal self-attention with grouped-query heads (query head h reads kv head h / (n_heads / n_kv_heads)).
//   q, k, v = x·wq^T + bq, x·wk^T + bk, x·wv^T + bv;  q/k norms per head (before RoPE);  RoPE;
//   scores = q·k * score_scale (soft-capped: cap * tanh(s / cap) when score_softcap > 0);
//   keys limited to the last `window` positions when window > 0 (sliding layers);  out = softmax·v·wo^T + bo.
// With output_gate (Qwen3.5), wq's rows are per head [q (head_dim) | gate (head_dim)] and the attention output is
// multiplied by sigmoid(gate) before wo.
struct AttnDesc {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float score_scale = 0.0f;    // the resolved scale (1 / sqrt(head_dim) unless the architecture says otherwise)
  float score_softcap = 0.0f;  // 0: none
  int64_t window = 0;          // 0: global (full causal)
  RopeDesc rope;
  std::optional<NormDesc> q_norm, k_norm;  // per-head norms of q and k (Qwen3, Gemma 3)
  std::string wq, wk, wv, wo;              // [n_heads*head_dim, dim], [kv_dim, dim] x2, [dim, n_heads*head_dim]
  std::string bq, bk, bv, bo;              // biases or ""
  bool output_gate = false;                // wq [2*n_heads*head_dim, dim], per head [q | gate]
};

// A Gated DeltaNet mixer (Qwen3.5's "linear_attention" layers; the math: infer/cpu_deltanet.h):
//   [q|k|v] = silu(causal_conv1d(x·w_qkv^T, conv))        (depthwise, kernel conv_kernel, zero history)
//   q, k = L2-normalised per head (q also * k_dim^-0.5);  beta = sigmoid(x·w_b^T);
//   g = -exp(a_log) * softplus(x·w_a^T + dt_bias);  the delta rule per value head (state [k_dim, v_dim]);
//   o = norm(o) * silu(x·w_z^T) per value head (the gated RMSNorm, weight [v_dim]);  out = o·w_out^T.
struct DeltaNetDesc {
  int64_t n_k_heads = 0, n_v_heads = 0;  // each key head serves n_v_heads / n_k_heads consecutive value heads
  int64_t k_dim = 0, v_dim = 0, conv_kernel = 0;
  NormDesc norm;               // the gated RMSNorm over each value head's output
  std::string w_qkv;           // [2*n_k_heads*k_dim + n_v_heads*v_dim, dim]: rows [q | k | v]
  std::string w_z;             // [n_v_heads*v_dim, dim]
  std::string w_b, w_a;        // [n_v_heads, dim]
  std::string conv;            // [2*n_k_heads*k_dim + n_v_heads*v_dim, conv_kernel]
  std::string a_log, dt_bias;  // [n_v_heads]
  std::string w_out;           // [dim, n_v_heads*v_dim]
  int64_t conv_dim() const { return 2 * n_k_heads * k_dim + n_v_heads * v_dim; }
};

// The feed-forward network, by activation (framework/core/arch_types.h):
//   kSilu (SwiGLU) / kGeluTanhGated (GeGLU): w_out · (act(w_in · x) * (w_up · x))
//   kGeluTanh (GPT-2 MLP):                   w_out · gelu_tanh(w_in · x + b_in) + b_out
struct FfnDesc {
  Activation activation = Activation::kSilu;
  int64_t hidden = 0;
  std::string w_in;         // [hidden, dim]: the gate (w1) or fc
  std::string w_up;         // [hidden, dim]: w3 of the gated kinds, "" otherwise
  std::string w_out;        // [dim, hidden]: w2 or proj
  std::string b_in, b_out;  // biases or ""
};

enum class StepKind : uint8_t { kAttention, kFfn, kLinearAttention };
constexpr int kStepKinds = 3;
const char* step_kind_name(StepKind k);  // "attention", "ffn", "linear attention"

struct Step {
  StepKind kind = StepKind::kAttention;
  std::optional<NormDesc> pre_norm;   // norm of the residual stream into the step
  std::optional<NormDesc> post_norm;  // norm of the step's output, before the residual add
  float residual_scale = 1.0f;
  AttnDesc attn;          // kind kAttention
  FfnDesc ffn;            // kind kFfn
  DeltaNetDesc deltanet;  // kind kLinearAttention
};

struct LayerDesc {
  std::vector<Step> steps;  // in order
};

// x = embed_scale * (tokens[t] + positions[pos]) (positions "" without learned positions).
struct EmbedDesc {
  std::string tokens = "tok_embeddings";  // [vocab, dim]
  std::string positions;                  // [n_positions, dim] or ""
  int64_t n_positions = 0;                // rows of positions (the context length), 0 without them
  float scale = 1.0f;
};

// logits = softcap(norm(x) · weight^T); the weight is the token embeddings when tied.
struct HeadDesc {
  NormDesc norm;
  std::string weight;  // [vocab, dim]: "output", or EmbedDesc::tokens when tied
  bool tied = false;
  float softcap = 0.0f;  // logits = cap * tanh(logits / cap) when > 0
};

struct ModelDesc {
  std::string arch;
  int64_t dim = 0, vocab_size = 0;
  EmbedDesc embed;
  std::vector<LayerDesc> layers;  // [n_layers]
  HeadDesc head;
};

// Every norm of step s (its pre- and post-norm, an attention's q / k norms, a DeltaNet's gated norm), those present,
// with its width: `dim` for the step's own norms, the head dim for the per-head ones.
struct StepNorm {
  const NormDesc* norm;
  int64_t width;
};
std::vector<StepNorm> step_norms(const Step& s, int64_t dim);

// A weight with its shape ([out, in] for matrices).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};
// Every weight d names, with the shape its descriptors give it, in the canonical order (the anelab file's, the
// checkpoint's and training's parameter layout): tok_embeddings (and the positions); per layer, each step's
// pre-norm (+ bias), then its kind's weights — an attention's wq, wk, wv, wo, bq, bk, bv, bo, q/k norms; a DeltaNet's
// w_qkv, w_z, w_b, w_a, conv, a_log, dt_bias, norm, w_out; an FFN's w_in, b_in, w_out, b_out, w_up — then its
// post-norm; the head's norm (+ bias) and its untied weight. models::canonical_tensors (models/arch/tensors.h) is
// this list for a config.
std::vector<TensorSpec> desc_weights(const ModelDesc& d);

// "[COMPONENT] layer L STEP: WHAT is not supported by EXECUTOR" — thrown by an executor that meets a step or
// parameter it does not implement (executor: "the CPU inference engine", ...).
[[noreturn]] void unsupported(const char* component, const char* executor, int64_t layer, StepKind step,
                              const std::string& what);

}  // namespace anelab::models

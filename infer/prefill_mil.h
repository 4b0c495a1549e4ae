// Prefill through MIL kernels on a backend (emulator / ane): one whole-layer kernel per layer and
// sequence-length bucket (32, 64, 128, ... up to the context), compiled on first use and cached.
//
// Kernel of layer l at bucket S (fp16 I/O, channel-major [1, C, 1, S] surfaces, ane_digest §4.1):
//   input  x   [1, dim, 1, S]                      the residual stream, tokens zero-padded to S
//   output out [1, dim + 2*kv_dim, 1, S]           [ x + attn + ffn ; k (after RoPE) ; v ]  (taps)
//   body: kern::build_layer (framework/kernels/layer.h), the layer the training forward kernels use too,
//         asked for the taps k_rope and v: RMSNorm or LayerNorm -> q/k/v 1x1 convs (+bias) -> RoPE in the
//         model's own style (cos/sin tables [1,1,S,hd] baked as consts) -> GQA attention (each kv head
//         repeated for its query heads) with the causal mask (0 / -65504) -> wo conv (+bias) -> residual
//         -> norm -> SwiGLU or tanh-GELU MLP -> residual. Every weight is a BLOBFILE const: fp16, or with
//         --ane-weights int8 / w8a8 the matrices int8 per output channel (kern::quantize_w8, baked through
//         constexpr_affine_dequantize), w8a8 also quantizing each conv input to int8 and back at a static
//         per-tensor scale (framework/kernels/w8.h). The w8a8 scales come from a calibration prompt
//         (EngineOptions::calibration_tokens, else the first prompt) run through the fp16 kernels on the
//         emulator: per layer and conv input, act_scale(max |x| over the prompt's positions).
// A Gated DeltaNet layer (Qwen3.5's linear attention, framework/kernels/deltanet.h) is a kernel of its own:
//   inputs valid [1, 1, 1, S] (1 at the prompt's positions, 0 at the padding), x [1, dim, 1, S]
//   output out [1, dim + conv_dim + R, 1, S]   [ x + mixer + ffn ; qkv (the conv's input) ; the final delta-rule
//          state as R rows of S (kern::state_rows) ]
//   body: norm -> kern::build_deltanet (in-projections, causal conv + SiLU, the chunked delta rule with the
//         inter-chunk recurrence unrolled over the bucket's chunks, gated RMSNorm, out projection; its matrices fp16
//         whatever --ane-weights says) -> residual -> the FFN (build_ffn, the weight path's matrices) -> residual.
//   The host hands the state and the conv state (the last conv_kernel - 1 real columns of qkv) to the engine
//   (store_state), so decode continues from the prefill as after a CPU prefill.
// Padding positions sit after the prompt, so the causal mask (attention) and the causal conv and recurrence
// (DeltaNet, whose padding has beta = g = 0: an identity update) keep them out of every real row and state.
// The LM head runs on the CPU (engine.head); only the positions asked for are projected.
// Compile budget: one compile per layer per bucket; when Backend::compiles_left() cannot cover a
// bucket the prefill falls back to the CPU path and says so once on stderr.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/model_desc.h"
#include "framework/core/thread_pool.h"
#include "framework/kernels/deltanet.h"
#include "framework/kernels/layer.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"
#include "infer/engine_options.h"
#include "models/formats/model.h"

namespace anelab::infer {

using kern::LayerWeights;

// What the MIL prefill needs from the engine it runs for (infer::Engine is one): the model, its description and
// weights, the thread pool, the KV cache it fills and the LM head it ends with.
class PrefillHost {
 public:
  virtual const models::ModelConfig& config() const = 0;
  virtual const models::ModelDesc& desc() const = 0;
  virtual const EngineOptions& options() const = 0;
  virtual int64_t context() const = 0;  // KV-cache positions
  virtual ThreadPool& pool() = 0;
  virtual const LayerWeights& layer(int64_t l) const = 0;
  virtual mil::Dialect backend_dialect() const = 0;  // of the prefill backend's device profile
  // x [n, dim] = the embeddings of tokens at positions pos..
  virtual void embed(std::span<const int32_t> tokens, int64_t pos, float* x) = 0;
  // Keys and values [n, kv_dim] of layer l at positions pos.. into the KV cache.
  virtual void store_kv(int64_t l, int64_t pos, const float* k, const float* v, int64_t n) = 0;
  // The Gated DeltaNet weights of linear-attention layer l (kern::DeltaNetWeights; throws for another layer).
  virtual const kern::DeltaNetWeights& deltanet(int64_t l) const = 0;
  // The recurrent states of linear-attention layer l after a prefill of n tokens from position 0: the delta-rule
  // state [n_v_heads, k_dim, v_dim] and the conv state [conv_kernel - 1, conv_dim] (oldest input first), fp32.
  virtual void store_state(int64_t l, const float* delta_state, const float* conv_state, int64_t n) = 0;
  // The final norm and LM head of x [n, dim]: the last row's logits, or every row's into all_logits when all.
  virtual void head(const float* x, int64_t n, bool all, std::vector<float>* all_logits) = 0;

 protected:
  ~PrefillHost() = default;
};

// W8A8 activation scales: per layer, the scale of each conv input (kern::act_input_of names).
using ActScales = std::vector<std::map<std::string, float>>;  // [layer] input -> scale

// How a layer kernel bakes its weight matrices; act_scales (the layer's) only for kW8A8.
struct KernelWeights {
  rt::WeightPath path = rt::WeightPath::kFp16;
  const std::map<std::string, float>* act_scales = nullptr;
  std::optional<rt::WeightPath> ffn;  // the FFN matrices' (w1, w2, w3) path when it is not `path` (auto's table)
};

// Builds the whole-layer program for layer l at bucket S, plus its weights dictionary.
struct LayerKernelSource {
  mil::Program program;
  rt::Weights weights;
};
// The bytes of the weight-matrix blobs (wq ... w3) of a layer kernel and the elements of those matrices in L.
struct MatrixBytes {
  int64_t bytes = 0, weights = 0;
};
MatrixBytes matrix_bytes(const LayerKernelSource& src, const LayerWeights& L);
LayerKernelSource build_layer_kernel(const PrefillHost& e, int64_t layer, int64_t S, const KernelWeights& kw = {});
// The same from the model description and one layer's weights (what the engine passes; tests use it directly):
// the kernel's parameters are layer `layer`'s steps (its norms, q / k norms, window, RoPE, MLP). A step or parameter
// the kernel lacks throws one line naming the layer, the step and "the MIL prefill" (models::unsupported).
LayerKernelSource build_layer_kernel(const models::ModelDesc& d, const LayerWeights& L, int64_t S, mil::Dialect dialect,
                                     int64_t layer = 0, const KernelWeights& kw = {});
// Whether layer `layer` of d is a linear-attention (Gated DeltaNet) layer: its kernel is build_deltanet_layer_kernel's.
bool is_deltanet_layer(const models::ModelDesc& d, int64_t layer);
// The DeltaNet layer kernel of layer `layer` (the layout above) at bucket S, from its mixer's weights W and the
// layer's LayerWeights (its norms and FFN). A step or parameter the kernel lacks throws one line naming the layer, the
// step and "the MIL prefill".
LayerKernelSource build_deltanet_layer_kernel(const models::ModelDesc& d, const LayerWeights& L,
                                              const kern::DeltaNetWeights& W, int64_t S, mil::Dialect dialect,
                                              int64_t layer, const KernelWeights& kw = {});
// The same for the description of config c (models::describe_model).
LayerKernelSource build_layer_kernel(const models::ModelConfig& c, const LayerWeights& L, int64_t S,
                                     mil::Dialect dialect, int64_t layer = 0, const KernelWeights& kw = {});

// W8A8 calibration: tokens (at positions 0..n-1, n <= the context) through the fp16 layer kernels on
// `backend`, one layer after the other; each layer's scales are act_scale(max |x|) of its conv inputs
// over the n real positions. Uses n_layers compiles of `backend`.
ActScales calibrate_act_scales(PrefillHost& e, std::span<const int32_t> tokens, rt::Backend& backend);

// Bucket for n tokens: the smallest m * 2^k >= n, capped at the context rounded up to a multiple of m,
// where m = rt::dense_width_multiple(fp16) columns fill whole device rows (64 columns: 128-byte rows);
// the padding is masked out.
int64_t prefill_bucket(int64_t n, int64_t context);

class MilPrefill {
 public:
  // ane_weights: "fp16" | "int8" | "w8a8" | "q4" | "lut4" | "lut6" | "auto" (the device profile's auto_weights, and
  // with auto_ffn_4bit the FFN in 4 bits where the model has them: lut4 palettes, else Q4_0; printed once).
  MilPrefill(PrefillHost& e, const std::string& backend, const std::string& device, const std::string& ane_weights,
             bool quiet);
  ~MilPrefill();
  // Runs the prefill when it can (pos == 0, the bucket compiles); false = caller uses the CPU path.
  bool run(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits, PrefillStats& stats);
  rt::Backend& backend() { return *backend_; }
  rt::WeightPath weight_path() const { return weights_; }
  const ActScales& act_scales() const { return act_; }

 private:
  bool ensure_bucket(int64_t S, PrefillStats& stats);
  // Backend "ane", once: the silent-zeros self-check (framework/kernels/self_check.h) with the I/O types of
  // the layer kernel `layer` at bucket S. A difference prints its line, writes <temp dir>/anelab-self-check.json
  // and returns false: every prefill of this engine then runs on the CPU.
  bool self_check(const mil::Program& layer, int64_t S);
  void calibrate(std::span<const int32_t> prompt);
  PrefillHost& e_;
  bool quiet_;
  rt::WeightPath weights_ = rt::WeightPath::kFp16;
  std::optional<rt::WeightPath> ffn_weights_;  // auto's FFN class when it differs from weights_
  std::string weights_name() const;            // "w8a8", or "w8a8 (ffn lut4)" with an FFN class
  ActScales act_;                              // kW8A8: calibrated on the first run
  double matrix_bytes_per_weight_ = 0;  // of the kernels compiled last (fp16: ~2, int8: ~1, q4: 0.5625 + headers)
  bool warned_ = false;
  bool self_checked_ = false, self_check_failed_ = false;
  std::unique_ptr<rt::Backend> backend_;
  std::map<int64_t, std::vector<std::unique_ptr<rt::Kernel>>> kernels_;  // bucket -> per layer
};

}  // namespace anelab::infer

// Prefill through MIL kernels on a backend (emulator / ane): one whole-layer kernel per layer and
// sequence-length bucket (32, 64, 128, ... up to the context), compiled on first use and cached.
//
// Kernel of layer l at bucket S (fp16 I/O, channel-major [1, C, 1, S] surfaces, ane_digest §4.1):
//   input  x   [1, dim, 1, S]                      the residual stream, tokens zero-padded to S
//   output out [1, dim + 2*kv_dim, 1, S]           [ x + attn + ffn ; k (after RoPE) ; v ]  (taps)
//   body: kern::layer_block (framework/kernels/layer.h), the layer the training forward kernels use too,
//         asked for the taps k_rope and v: RMSNorm or LayerNorm -> q/k/v 1x1 convs (+bias) -> RoPE in the
//         model's own style (cos/sin tables [1,1,S,hd] baked as consts) -> GQA attention (each kv head
//         repeated for its query heads) with the causal mask (0 / -65504) -> wo conv (+bias) -> residual
//         -> norm -> SwiGLU or tanh-GELU MLP -> residual. Every weight is a BLOBFILE const (fp16).
// Padding positions sit after the prompt, so the causal mask keeps them out of every real row.
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

#include "framework/kernels/layer.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"
#include "models/formats/model.h"

namespace anelab::infer {

class Engine;
struct PrefillStats;
using kern::LayerWeights;

// Builds the whole-layer program for layer l at bucket S, plus its weights dictionary.
struct LayerKernelSource {
  mil::Program program;
  rt::Weights weights;
};
LayerKernelSource build_layer_kernel(const Engine& e, int64_t layer, int64_t S);
// The same from a config and one layer's weights (what the engine passes; tests use it directly); `layer`
// picks a sliding-window layer's mask and RoPE base.
LayerKernelSource build_layer_kernel(const models::ModelConfig& c, const LayerWeights& L, int64_t S, mil::Dialect dialect,
                                     int64_t layer = 0);

// Bucket for n tokens: the smallest 32 * 2^k >= n, capped at the context rounded up to a multiple of
// 32 columns (rt::dense_width_multiple: the device's rows are 64 bytes; the padding is masked out).
int64_t prefill_bucket(int64_t n, int64_t context);

class MilPrefill {
 public:
  MilPrefill(Engine& e, const std::string& backend, const std::string& device, bool quiet);
  ~MilPrefill();
  // Runs the prefill when it can (pos == 0, the bucket compiles); false = caller uses the CPU path.
  bool run(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits, PrefillStats& stats);
  rt::Backend& backend() { return *backend_; }

 private:
  bool ensure_bucket(int64_t S, PrefillStats& stats);
  Engine& e_;
  bool quiet_;
  bool warned_ = false;
  std::unique_ptr<rt::Backend> backend_;
  std::map<int64_t, std::vector<std::unique_ptr<rt::Kernel>>> kernels_;  // bucket -> per layer
};

}  // namespace anelab::infer

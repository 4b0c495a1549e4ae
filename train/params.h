// Trainable parameters: every canonical tensor of a Llama-family ModelConfig (models/formats/model.h) as
// fp32 master weights in ONE flat buffer, in canonical order. Gradients and AdamW moments use the same
// layout (same offsets), so optimizer, clipping and checkpoints work on flat spans.
//
// What trains is decided by walking the model description (framework/core/model_desc.h): check_trainable names the
// parts no training executor has; CpuModel (train/cpu_model.h) and check_kernel_steps refuse, per executor, the
// first step they lack. Today: RMSNorm steps (offset, post norms, per-head q/k norms), SwiGLU or GeGLU, RoPE of any
// base / scaling per step, key windows, GQA, tied or untied classifier, logit soft-capping on the CPU; partial RoPE,
// the attention output gate and Gated DeltaNet steps (Qwen3.5) on the CPU only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/model_desc.h"
#include "models/formats/model.h"

namespace anelab::train {

struct ParamInfo {
  std::string name;            // canonical name, e.g. "layers.3.wq"
  std::vector<int64_t> shape;  // [out, in] or [n]
  int64_t offset = 0;          // element offset into the flat buffer
  int64_t numel = 0;
  bool decay = true;  // weight decay applies (false for norm weights)
};

// Pointers into a flat buffer for the tensors of one Llama-shaped layer that the MIL training kernels take (weights
// or gradients); other tensors of a layer by name (ParamLayout::lookup).
struct LayerPtrs {
  float* attn_norm;  // [D]
  float* wq;         // [Hq*hd, D]
  float* wk;         // [Hkv*hd, D]
  float* wv;         // [Hkv*hd, D]
  float* wo;         // [D, Hq*hd]
  float* q_norm;     // [hd] per-head RMSNorm of q (null when the architecture has none)
  float* k_norm;     // [hd] per-head RMSNorm of k (null when the architecture has none)
  float* ffn_norm;   // [D]
  float* w1;         // [F, D]
  float* w2;         // [D, F]
  float* w3;         // [F, D]
};

class ParamLayout {
 public:
  ParamLayout() = default;
  explicit ParamLayout(const models::ModelConfig& c);  // throws when the config is not trainable
  const models::ModelConfig& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;    // throws naming the known tensors
  const ParamInfo* lookup(const std::string& name) const;  // nullptr when absent
  LayerPtrs layer(float* base, int64_t l) const;
  float* embedding(float* base) const { return base + emb_; }    // [V, D]
  float* final_norm(float* base) const { return base + norm_; }  // [D]
  float* output(float* base) const { return base + out_; }       // [V, D] (== embedding when tied)

 private:
  models::ModelConfig config_;
  std::vector<ParamInfo> params_;
  int64_t total_ = 0, emb_ = 0, norm_ = 0, out_ = 0;
  std::vector<int64_t> layer_offsets_;  // [L * 11] offsets in LayerPtrs field order (-1: no such tensor)
};

// Throws one line "[train] model 'ARCH': ... not supported for training ..." naming every part of c's description
// that no training executor implements (LayerNorm, a GELU MLP, biases, learned positions) when c cannot be trained
// at all.
void check_trainable(const models::ModelConfig& c);
// The kernel strategies (static / dynamic) on top: walks the description and throws, at the first step or
// parameter the training kernels do not implement, one line "[train] layer L STEP: WHAT is not supported by the
// MIL training kernels (--strategy S; --strategy cpu has it)" (models::unsupported); the embedding scale and
// the logit soft-cap are refused in one line naming the executor too.
void check_kernel_steps(const models::ModelDesc& d, const std::string& strategy);

// Initialisation into a flat buffer of layout.total() floats.
std::vector<float> init_random(const ParamLayout& layout, uint64_t seed);               // models::random_init
std::vector<float> init_from_model(const ParamLayout& layout, const models::Model& m);  // dequantised copy
// A Model (owned fp32 tensors) holding the given weights, e.g. to save with models::save_model.
models::Model to_model(const ParamLayout& layout, const std::vector<float>& w);

}  // namespace anelab::train

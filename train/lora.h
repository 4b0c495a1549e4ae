// LoRA (Hu et al. 2021, as PEFT's `LoraLayer` computes it) on the CPU training executor: a frozen base and, on
// every targeted projection W [out, in] of every layer, two fp32 adapter matrices
//   A [r, in] (Kaiming-uniform with a = sqrt(5), PEFT's init: U(-1/sqrt(in), 1/sqrt(in))), B [out, r] (zeros)
//   y = x Wᵀ + scale * (dropout(x) Aᵀ) Bᵀ,   scale = alpha / r
// The adapters of all layers live in ONE flat buffer (LoraLayout, the ParamInfo convention of train/params.h),
// so the trainer's optimizer, clipping and checkpoints work on them as on full weights. CpuModel
// (train/cpu_model.h) applies them around its matmuls when given a LoraStep; the run's side (LoraEngine, the
// adapter state files, export) is train/lora_run.h.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/io/adapter.h"
#include "train/params.h"

namespace anelab::train {

// The projections an adapter can target. Each --lora-targets name is one PEFT target_modules name (Hugging Face
// transformers' module names) and one canonical tensor (models/formats/model.h):
//   q k v o          self_attn.q_proj k_proj v_proj o_proj             wq wk wv wo
//   gate up down     mlp.gate_proj up_proj down_proj                    w1 w3 w2
//   lin_qkv lin_z    linear_attn.in_proj_qkv in_proj_z                  ssm_qkv ssm_z    (Qwen3.5's Gated DeltaNet,
//   lin_b lin_a      linear_attn.in_proj_b in_proj_a                    ssm_b ssm_a       Qwen3_5GatedDeltaNet in
//   lin_out          linear_attn.out_proj                               ssm_out           modeling_qwen3_5.py)
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown, kLinQkv, kLinZ, kLinB, kLinA, kLinOut };
constexpr int kLoraTargets = 12;
const char* lora_target_name(LoraTarget t);  // "q" .. "lin_out" (the --lora-targets spelling)
// Every target, the default of --lora-targets (PEFT's "all-linear": a model adapts those it has).
inline constexpr const char* kLoraAllTargets = "q,k,v,o,gate,up,down,lin_qkv,lin_z,lin_b,lin_a,lin_out";

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;                                         // on the adapter's input, training only
  std::array<bool, kLoraTargets> targets{};                   // by LoraTarget
  float scale() const { return float(alpha) / float(rank); }  // as models::LoraAdapter::scale (equal merges)
};
// A comma list of target names (any non-empty subset of kLoraAllTargets, any order) -> targets; throws naming the
// bad entry.
std::array<bool, kLoraTargets> parse_lora_targets(const std::string& list);
std::string lora_targets_text(const std::array<bool, kLoraTargets>& t);  // "q,k,v" in LoraTarget order

// One adapted projection: its layer, target, shape, and the offsets of A and B in the flat adapter buffer.
struct LoraSlot {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  int64_t in = 0, out = 0;
  int64_t a = 0, b = 0;  // offsets of A [r, in] and B [out, r]
};

class LoraLayout {
 public:
  // Every targeted projection of the model's description, layer by layer in LoraTarget order.
  LoraLayout(const models::ModelConfig& c, const LoraConfig& lc);
  const LoraConfig& lora() const { return lc_; }
  const std::vector<LoraSlot>& slots() const { return slots_; }
  // The adapters as parameters: "layers.N.q.lora_A" [r, in], "layers.N.q.lora_B" [out, r], all decayed
  // (PEFT / HF Trainer apply weight decay to every LoRA weight).
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  // Index into slots() of (layer, target), -1 when not adapted.
  int64_t slot(int64_t layer, LoraTarget t) const { return index_[size_t(layer * kLoraTargets + int(t))]; }

 private:
  LoraConfig lc_;
  std::vector<LoraSlot> slots_;
  std::vector<ParamInfo> params_;
  std::vector<int64_t> index_;  // [L * kLoraTargets]
  int64_t total_ = 0;
};

// Uniform bits of element i of a dropout stream (splitmix64 of stream + i): counter-based, so the masks of a
// micro-batch do not depend on the thread split or on what ran before.
inline uint64_t lora_uniform_bits(uint64_t stream, uint64_t i) {
  uint64_t z = stream + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The dropout stream of adapter slot `slot` (an index into LoraLayout::slots()) in micro-batch `micro_batch` of a run
// seeded `seed`: element i of the slot's input [N, in] (row-major, N = B·T tokens of the micro-batch, sequence by
// sequence) is kept, scaled by 1/(1-p), when lora_dropout_kept(stream, i, p), else zeroed. The one generator of the
// masks: CpuModel (train/cpu_model.cpp) and the kernel strategies (train/kernel_engine.cpp) both draw from it.
inline uint64_t lora_dropout_stream(uint64_t seed, uint64_t micro_batch, int64_t slot) {
  return seed ^ (micro_batch * 0x9E3779B97F4A7C15ull) ^ (uint64_t(slot) << 40);
}
inline float lora_dropout_scale(double p) { return float(1.0 / (1.0 - p)); }  // a kept element's factor, fp32
inline bool lora_dropout_kept(uint64_t stream, uint64_t i, double p) {
  return double(lora_uniform_bits(stream, i) >> 11) * 0x1.0p-53 >= p;  // u in [0, 1): dropped when u < p
}

// W[out, in] += s * B · A for every slot (fp32), into full weights of `layout` (the merge of infer --lora and
// export --fuse).
void lora_merge(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, float* w);
// The same merge of the weights [off, off + n) only, any range (slots' tensors cut at its ends): out [n] holds them
// (out[0] is weight off) and gets the adapters' s * B · A added, element for element as lora_merge adds them.
void lora_merge_range(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, int64_t off,
                      int64_t n, float* out);

// The adapters as an adapter file holds them (models/io/adapter.h), base_model its name when known.
models::LoraAdapter to_lora_adapter(const LoraLayout& l, const float* w, const std::string& base_model);
// What CpuModel needs for one forward_backward with adapters: the layout, the adapter weights, their gradients
// (nullptr: forward only), and the dropout stream (a counter-based hash of seed and micro-batch index, so a
// resumed run draws the same masks).
struct LoraStep {
  const LoraLayout* layout = nullptr;
  const float* w = nullptr;  // [total] adapters
  float* g = nullptr;        // [total] adapter gradients (+=)
  uint64_t seed = 0, micro_batch = 0;
  bool train = true;  // dropout on (only when lc.dropout > 0)
};

}  // namespace anelab::train

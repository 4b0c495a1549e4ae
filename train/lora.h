// LoRA (Hu et al. 2021, as PEFT's `LoraLayer` computes it) on the CPU training executor: a frozen base and, on
// every targeted projection W [out, in] of every layer, two fp32 adapter matrices
//   A [r, in] (Kaiming-uniform with a = sqrt(5), PEFT's init: U(-1/sqrt(in), 1/sqrt(in))), B [out, r] (zeros)
//   y = x Wᵀ + scale * (dropout(x) Aᵀ) Bᵀ,   scale = alpha / r
// The adapters of all layers live in ONE flat buffer (LoraLayout, the ParamInfo convention of train/params.h),
// so the trainer's optimizer, clipping and checkpoints work on them as on full weights. CpuModel
// (train/cpu_model.h) applies them around its matmuls when given a LoraStep; LoraEngine is the step engine of
// `anelab train --lora` (base weights held inside, the trainer's w/g are the adapters).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/io/adapter.h"
#include "train/params.h"
#include "train/step_engine.h"

namespace anelab::train {

// The projections an adapter can target, in PEFT's module names: q_proj k_proj v_proj o_proj gate_proj up_proj
// down_proj (models/arch: wq wk wv wo, ffn w_in w_up w_out).
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kLoraTargets = 7;
const char* lora_target_name(LoraTarget t);  // "q" .. "down" (the --lora-targets spelling)

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;                                         // on the adapter's input, training only
  std::array<bool, kLoraTargets> targets{};                   // by LoraTarget
  float scale() const { return float(alpha) / float(rank); }  // as models::LoraAdapter::scale (equal merges)
};
// "q,k,v,o,gate,up,down" (any non-empty subset, any order) -> targets; throws naming the bad entry.
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

// A: Kaiming-uniform bound 1/sqrt(in) from a seeded generator, B: zeros.
std::vector<float> lora_init(const LoraLayout& l, uint64_t seed);
// W[out, in] += s * B · A for every slot (fp32), into full weights of `layout` (the merge of infer --lora and
// export --fuse).
void lora_merge(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, float* w);

// The adapter training state of a run (RUN_DIR/last.lora, best.lora next to the checkpoints): a safetensors file
// of F32 tensors NAME, adam_m.NAME, adam_v.NAME for every LoraLayout parameter NAME. Written atomically; read
// back with every name and shape checked against the layout ("[train] PATH: ..." on a mismatch).
void write_lora_state(const std::string& path, const LoraLayout& l, const std::vector<float>& w,
                      const std::vector<float>& m, const std::vector<float>& v);
void read_lora_state(const std::string& path, const LoraLayout& l, std::vector<float>* w, std::vector<float>* m,
                     std::vector<float>* v);

// The adapters as an adapter file holds them (models/io/adapter.h), base_model its name when known.
models::LoraAdapter to_lora_adapter(const LoraLayout& l, const float* w, const std::string& base_model);
// `anelab export RUN OUT --adapter`: the adapter of a --lora run (RUN_DIR, or its checkpoint file: the KIND.lora
// next to the checkpoint models::checkpoint_path picks) as a GGUF LoRA adapter when OUT ends in .gguf, else a PEFT
// directory. Throws one line naming RUN when it is not a --lora run.
void export_run_adapter(const std::string& run, const std::string& out);
// True when RUN (a run directory or checkpoint file) was trained with --lora (its run's config.json says so).
bool is_lora_run(const std::string& run);

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

// The step engine of `anelab train --lora --strategy cpu`: base weights frozen inside (fp32, as init_from_model or
// init_random gave them), w and g of forward_backward are the adapters and their gradients. No base gradient is
// computed or stored: CpuModel skips every weight-gradient product of the base when it has adapters.
class LoraEngine final : public StepEngine {
 public:
  LoraEngine(const ParamLayout& layout, std::vector<float> base, const LoraLayout& lora, uint64_t seed);
  std::string name() const override { return "cpu-lora"; }
  int compiles_needed() const override { return 0; }
  int compiles_left() const override { return -1; }
  int budget() const override { return -1; }
  int compiles_total() const override { return 0; }
  std::pair<int, double> take_compile_batch() override { return {0, 0.0}; }
  double forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, StepTimes* t) override;
  void weights_updated() override {}
  void set_grads_final_hook(std::function<void(int64_t)>) override {}
  // The dropout stream's position (micro-batches done): restored on resume.
  uint64_t micro_batches() const { return micro_; }
  void set_micro_batches(uint64_t n) { micro_ = n; }
  const std::vector<float>& base() const { return base_; }
  // Mean loss with the adapters, no dropout (evaluation).
  double loss(const float* w, const Batch& b);

 private:
  std::unique_ptr<CpuModel> model_;
  std::vector<float> base_;  // [P] frozen base weights
  const LoraLayout* lora_;
  uint64_t seed_, micro_ = 0;
};

}  // namespace anelab::train

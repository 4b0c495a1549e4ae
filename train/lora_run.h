// The run side of `anelab train --lora` (train/lora.h has the adapters themselves): LoraEngine, the step engine
// (base weights held inside, the trainer's w/g are the adapters), the adapter state files next to the checkpoints,
// and `anelab export RUN OUT --adapter`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/cpu_model.h"
#include "train/frozen_base.h"
#include "train/lora.h"
#include "train/step_engine.h"

namespace anelab::train {

// A: Kaiming-uniform bound 1/sqrt(in) from a seeded generator, B: zeros.
std::vector<float> lora_init(const LoraLayout& l, uint64_t seed);

// The adapter training state of a run (RUN_DIR/last.lora, best.lora next to the checkpoints): a safetensors file
// of F32 tensors NAME, adam_m.NAME, adam_v.NAME for every LoraLayout parameter NAME. Written atomically; read
// back with every name and shape checked against the layout ("[train] PATH: ..." on a mismatch).
void write_lora_state(const std::string& path, const LoraLayout& l, const std::vector<float>& w,
                      const std::vector<float>& m, const std::vector<float>& v);
void read_lora_state(const std::string& path, const LoraLayout& l, std::vector<float>* w, std::vector<float>* m,
                     std::vector<float>* v);

// `anelab export RUN OUT --adapter`: the adapter of a --lora run (RUN_DIR, or its checkpoint file: the KIND.lora
// next to the checkpoint models::checkpoint_path picks) as a GGUF LoRA adapter when OUT ends in .gguf, else a PEFT
// directory. Throws one line naming RUN when it is not a --lora run.
void export_run_adapter(const std::string& run, const std::string& out);
// True when RUN (a run directory or checkpoint file) was trained with --lora (its run's config.json says so).
bool is_lora_run(const std::string& run);

// The step engine of `anelab train --lora --strategy cpu`: the frozen base inside (train/frozen_base.h: the model
// file's types, or fp32 [P] as init_random gave it), w and g of forward_backward are the adapters and their
// gradients. No base gradient is computed or stored: CpuModel skips every weight-gradient product of the base when
// it has adapters.
class LoraEngine final : public StepEngine {
 public:
  LoraEngine(const ParamLayout& layout, FrozenBase base, const LoraLayout& lora, uint64_t seed);
  LoraEngine(const ParamLayout& layout, std::vector<float> base, const LoraLayout& lora, uint64_t seed)
      : LoraEngine(layout, FrozenBase(layout, std::move(base)), lora, seed) {}
  LoraEngine(const LoraEngine&) = delete;  // (the model holds a pointer to base_)
  LoraEngine& operator=(const LoraEngine&) = delete;
  std::string name() const override { return steps_ ? steps_->name() + "-lora" : "cpu-lora"; }
  int compiles_needed() const override { return steps_ ? steps_->compiles_needed() : 0; }
  int compiles_left() const override { return steps_ ? steps_->compiles_left() : -1; }
  int budget() const override { return steps_ ? steps_->budget() : -1; }
  int compiles_total() const override { return steps_ ? steps_->compiles_total() : 0; }
  std::pair<int, double> take_compile_batch() override {
    return steps_ ? steps_->take_compile_batch() : std::pair<int, double>{0, 0.0};
  }
  std::string take_self_check() override { return steps_ ? steps_->take_self_check() : std::string(); }
  double forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, StepTimes* t) override;
  void weights_updated() override {
    if (steps_) steps_->weights_updated();
  }
  void set_grads_final_hook(std::function<void(int64_t)>) override {}
  // The CPU model's, with the adapters' own buffers (-1 on a kernel engine: set_step_engine).
  int64_t activation_bytes(int64_t B, int64_t T) override;
  // The dropout stream's position (micro-batches done): restored on resume.
  uint64_t micro_batches() const { return micro_; }
  void set_micro_batches(uint64_t n) { micro_ = n; }
  const FrozenBase& base() const { return base_; }
  // --lora-compute bf16: the base's products in bf16 with fp32 sums (CpuModel::set_base_bf16); the CPU steps only.
  void set_base_bf16(bool on) { model_->set_base_bf16(on); }
  // The steps run on `e` from now on (`train --lora --strategy static | dynamic`: make_kernel_lora_engine over base());
  // the compile counts are e's; loss() stays on the CPU. (A dense base: base().dense_data().)
  void set_step_engine(std::unique_ptr<StepEngine> e) { steps_ = std::move(e); }
  // Mean loss with the adapters, no dropout (evaluation).
  double loss(const float* w, const Batch& b);

 private:
  std::unique_ptr<CpuModel> model_;
  FrozenBase base_;  // the frozen base weights
  const LoraLayout* lora_;
  uint64_t seed_, micro_ = 0;
  std::unique_ptr<StepEngine> steps_;  // nullptr: the steps run on model_ (--strategy cpu)
};

}  // namespace anelab::train

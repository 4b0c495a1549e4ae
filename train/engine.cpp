#include "train/engine.h"

#include "framework/core/error.h"
#include "train/kernel_engine.h"

namespace anelab::train {
namespace {

class CpuEngine final : public StepEngine {
 public:
  CpuEngine(const ParamLayout& layout, int budget) : model_(layout), budget_(budget) {}
  std::string name() const override { return "cpu"; }
  int compiles_needed() const override { return budget_ > 0 && dirty_ ? 1 : 0; }
  int compiles_left() const override { return budget_ > 0 ? budget_ - used_ : -1; }
  int budget() const override { return budget_ > 0 ? budget_ : -1; }
  int compiles_total() const override { return used_; }
  std::pair<int, double> take_compile_batch() override {
    auto r = std::pair<int, double>{pending_, 0.0};
    pending_ = 0;
    return r;
  }
  double forward_backward(const float* w, const Batch& b, float s, float* g, StepTimes* t) override {
    if (budget_ > 0 && dirty_) {  // simulated recompile of the "static" kernels after an update
      if (used_ >= budget_) fail("train", "simulated compile budget ", budget_, " exhausted (restart logic failed)");
      ++used_;
      ++pending_;
      dirty_ = false;
    }
    CpuTimes ct;
    const double loss = model_.forward_backward(w, b, s, g, &ct);
    if (t) {
      t->cpu_dw += ct.dw;
      t->fwd += ct.fwd;
      t->bwd += ct.bwd;
      t->cls += ct.cls;
    }
    return loss;
  }
  void weights_updated() override { dirty_ = true; }
  void set_grads_final_hook(std::function<void(int64_t)> f) override { model_.set_grads_final_hook(std::move(f)); }
  int64_t activation_bytes(int64_t B, int64_t T) override { return model_.activation_bytes(B, T); }

 private:
  CpuModel model_;
  int budget_;
  int used_ = 0, pending_ = 0;
  bool dirty_ = true;
};

}  // namespace

KernelEngineOptions kernel_engine_options(const TrainConfig& c) {
  KernelEngineOptions o;
  o.strategy = c.strategy, o.backend = c.backend, o.device = c.device;
  o.compile_budget = int(c.compile_budget), o.seq_len = c.seq_len;
  if (!c.run_dir.empty()) o.self_check_report = c.run_dir + "/self_check.json";
  return o;
}

std::unique_ptr<StepEngine> make_engine(const TrainConfig& c, const ParamLayout& layout) {
  if (c.strategy == "cpu") return std::make_unique<CpuEngine>(layout, int(c.compile_budget));
  if (c.strategy == "static" || c.strategy == "dynamic") return make_kernel_engine(kernel_engine_options(c), layout);
  fail("train", "--strategy ", c.strategy, ": unknown (cpu, static or dynamic)");
}

}  // namespace anelab::train

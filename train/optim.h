// Optimisation pieces over flat fp32 spans (train/params.h layout): learning-rate schedule, global-norm
// clipping, AdamW (PyTorch torch.optim.AdamW arithmetic, decoupled weight decay, none on norm weights)
// and loss scaling (static N or dynamic: halve + skip on inf/NaN, ×2 after `interval` good steps).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/params.h"

namespace anelab::train {

struct ScheduleConfig {
  double max_lr = 3e-4;
  double min_lr_frac = 0.1;  // cosine decays to min_lr_frac * max_lr
  int64_t warmup_steps = 0;  // linear warmup: lr * (step + 1) / warmup
  int64_t total_steps = 1;
  bool cosine = true;  // false: constant after warmup
};
// Learning rate of optimizer update `step` (0-based).
double learning_rate(const ScheduleConfig& s, int64_t step);

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, AdamWConfig cfg);
  // Over any flat buffer of `total` floats described by params (e.g. the LoRA adapters, train/lora.h).
  AdamW(const std::vector<ParamInfo>& params, int64_t total, AdamWConfig cfg);
  // One update with gradients g (already unscaled and clipped); increments t().
  void update(float* w, const float* g, double lr);
  int64_t t() const { return t_; }
  std::vector<float>& m() { return m_; }  // [P] first moments
  std::vector<float>& v() { return v_; }  // [P] second moments
  void set_t(int64_t t) { t_ = t; }

 private:
  const std::vector<ParamInfo>* params_;
  AdamWConfig cfg_;
  int64_t t_ = 0;
  std::vector<float> m_, v_;
};

// Global L2 norm (double accumulation, fixed order); false via *finite when any value is inf/NaN.
double global_norm(const float* g, int64_t n, bool* finite);
void scale_inplace(float* g, int64_t n, float s);
// torch.nn.utils.clip_grad_norm_: scales by max_norm / (norm + 1e-6) when that is < 1. Returns the factor.
float clip_factor(double norm, double max_norm);

struct LossScaler {
  bool dynamic = false;
  double scale = 1.0;
  int64_t interval = 1000;  // dynamic: good steps before doubling
  int64_t good_steps = 0;
  // Parses "static:N", "dynamic", "dynamic:INIT" or "dynamic:INIT:INTERVAL", "none" (= static:1).
  static LossScaler parse(const std::string& spec);
  // Records a step's outcome; returns true when the update must be skipped (non-finite gradients).
  bool after_backward(bool finite);
};

}  // namespace anelab::train

// StepEngine: who computes forward + backward of a micro-batch. The trainer owns weights, gradients and
// the optimizer; an engine only turns (weights, batch) into loss + accumulated gradients, and reports
// its compile needs so the trainer can checkpoint + exec-restart before a per-process budget runs out.
// The engines (train/engine.h makes them): cpu (train/cpu_model.h), static and dynamic (train/kernel_engine.h).
#pragma once
#include <functional>
#include <string>
#include <utility>

#include "train/cpu_model.h"

namespace anelab::train {

struct StepTimes {  // ms of one optimizer step, split as docs/events.md's step event
  double kernel = 0, cpu_dw = 0, staging = 0, fwd = 0, bwd = 0, cls = 0;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual std::string name() const = 0;
  // Compiles the next forward_backward will perform (0 when kernels are current).
  virtual int compiles_needed() const = 0;
  // Compiles left in this process (-1: unlimited), and the per-process budget (-1: none).
  virtual int compiles_left() const = 0;
  virtual int budget() const = 0;
  virtual int compiles_total() const = 0;
  // Compiles performed since the last call, with their wall ms (for the compile event).
  virtual std::pair<int, double> take_compile_batch() = 0;
  // The ANE self-check that passed since the last call (framework/kernels/self_check.h, its JSON report),
  // empty when none ran; its wall ms is reported apart from the step's, as compiles are.
  virtual std::string take_self_check() { return {}; }
  // Mean loss of the batch; grads += d(loss)/dw * grad_scale.
  virtual double forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, StepTimes* t) = 0;
  // Called after every optimizer update.
  virtual void weights_updated() = 0;
  // f(from) is called when grads[from, P) of the running forward_backward hold their final values (after the
  // head, then after each layer, from the last layer down; from decreases within a call), on the calling
  // thread or an engine worker thread, one call at a time; the trainer starts their sum over the ranks
  // (train/dist_overlap.h). Empty: no calls.
  virtual void set_grads_final_hook(std::function<void(int64_t from)> f) = 0;
  // Bytes of the activations this engine keeps for the backward of one micro-batch of B sequences of T tokens
  // (sizing them now, as the first step would); -1 when it does not say (the kernel engines).
  virtual int64_t activation_bytes(int64_t /*B*/, int64_t /*T*/) { return -1; }
};

}  // namespace anelab::train

// A training step of the MIL kernels (framework/kernels/train.h) on a chip: builds the nine per-layer kernels of
// a shape under a strategy (static kernels get zero weights: the cost reads shapes only) and sums them as
// train/kernel_engine.h runs them — every kernel once per layer and step, one sequence of shape.seq tokens.
//
// LoRA (shape.lora_rank > 0, the fields train::kernel_lora_shape sets): the kernels as make_kernel_lora_engine builds
// them, the adapters' bands A / Bᵀ in the weight-bearing kernels' input surfaces and their products in the MIL. Per
// step the host stages the activations' and the adapters' bands of every kernel and reads its outputs (dynamic: the
// base's weight bands are staged once, before the first step, into every layer's surfaces); the worker computes the
// adapters' gradients (per projection and sequence, A X, dY·(A X)ᵀ, Bᵀ dY, (Bᵀ dY)·Xᵀ: 4·S·r·(in + out) flops) and no
// dW, norm, classifier or embedding gradient; Adam updates the adapters; static compiles 2 + 7·L programs, dynamic 9,
// once, amortised over TrainModel::steps.
#pragma once
#include <cstdint>

#include "framework/cost/cost.h"
#include "framework/kernels/train.h"

namespace anelab::cost {

struct TrainModel {
  kern::TrainShape shape;
  int64_t n_layers = 0;
  int64_t vocab = 0;
  int64_t cls_vocab = 0;  // classifier rows (TrainShapeInfo::cls_vocab; 0 = vocab)
  int accum_steps = 10;   // steps per weight update (Adam, static recompiles)
  int64_t steps = 100;    // LoRA: the run's steps, over which the compiles once are amortised
};

StepCost estimate_train(const TrainModel& m, kern::Strategy strategy, const Chip& chip);

// `estimate train --lora`: the LoRA shape m.shape on both strategies, and full training of the same shape (no
// adapters) for reference.
struct LoraEstimate {
  StepCost static_step, dynamic_step;  // LoRA steps
  StepCost full_static, full_dynamic;  // full training of m.shape without the adapters
  int budget = 0;                      // compiles per process the chip's device profile plans (compile_budget)
  int64_t static_need = 0;  // static_step.compiles_once + the ANE self-check's compile (train/kernel_engine.h)
  bool static_fits() const { return static_need <= budget; }
  // Static where it fits the budget and is not slower per step with its compiles amortised; dynamic otherwise.
  kern::Strategy pick() const;
  // The run length (steps) from which static, compiles included, costs no more than dynamic: static's extra time before
  // step 1 over what it saves per step; -1 when static is not faster per step (in the steady state).
  int64_t static_break_even() const;
};
// Throws "[cost] ..." when m.shape has no LoRA rank.
LoraEstimate estimate_lora(const TrainModel& m, const Chip& chip);

}  // namespace anelab::cost

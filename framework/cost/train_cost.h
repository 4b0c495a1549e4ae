// A training step of the MIL kernels (framework/kernels/train.h) on a chip: builds the nine per-layer kernels of
// a shape under a strategy (static kernels get zero weights: the cost reads shapes only) and sums them as
// train/kernel_engine.h runs them — every kernel once per layer and step, one sequence of shape.seq tokens.
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
};

StepCost estimate_train(const TrainModel& m, kern::Strategy strategy, const Chip& chip);

}  // namespace anelab::cost

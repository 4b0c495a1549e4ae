// The step engines (the interface: train/step_engine.h), made by strategy:
//   cpu      CpuEngine: the fp32 reference (train/cpu_model.h). With --compile-budget N > 0 it simulates
//            the static strategy's budget: every weight update "needs" kernels_per_update compiles.
//   static   kernels with baked weights, recompiled after every update (train/kernel_engine.h)
//   dynamic  kernels compiled once, weights restaged into the input surfaces after updates (same)
#pragma once
#include <memory>

#include "train/config.h"
#include "train/kernel_engine.h"
#include "train/step_engine.h"

namespace anelab::train {

std::unique_ptr<StepEngine> make_engine(const TrainConfig& c, const ParamLayout& layout);
// The kernel strategies' options of a run's config (strategy, backend, device, budget, T, self-check report).
KernelEngineOptions kernel_engine_options(const TrainConfig& c);

}  // namespace anelab::train

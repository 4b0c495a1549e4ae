// Lowering of one MIL function to the emulator's FunctionPlan (internal to framework/emulator).
#pragma once
#include "framework/emulator/plan.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"

namespace anelab::emu {

// Builds steps, decodes consts (BLOBFILE consts from `weights`, keyed by their path string) and
// allocates the arena. Throws anelab::Error("[emulator] ...") naming the function, op and problem.
void lower_function(const mil::Function& fn, const rt::Weights& weights, FunctionPlan& plan);

// Largest per-thread GEMM workspace (floats) over all steps of a plan.
void gemm_workspace_needs(const FunctionPlan& plan, size_t* ws_a, size_t* ws_b);

}  // namespace anelab::emu

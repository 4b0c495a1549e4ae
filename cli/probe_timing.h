// One program timed on a backend, as `anelab probe`'s cases (probe_cmd.cpp) and seed sections (probe_seeds.cpp)
// measure it: compile (timed), one warm-up evaluate, the best of `repeats` timed evaluates, the last outputs.
#pragma once
#include <string>
#include <vector>

#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"
#include "framework/runtime/weights.h"

namespace anelab::cli {

struct TimedRun {
  double compile_ms = 0;
  double eval_ms = 0;      // best of the timed evaluates
  std::vector<float> out;  // fp32 values of the last evaluate, outputs in order
  std::string error;       // "compile: ..." or "evaluate: ..." (then the fields above are not set)
};

// `p` runs in the backend's dialect (the workloads are built once; M1-M3 take them as ios16 programs); inputs are
// random (kern::fill_random_inputs).
TimedRun time_program(rt::Backend& be, const mil::Program& p, const rt::Weights& w, int repeats);

}  // namespace anelab::cli

// `anelab train --bench` / `anelab bench train`: one Stories110M training step (B=1, T=256, forward +
// backward + AdamW, random init) timed on our engine, next to a PyTorch fp32 step of the same model
// measured in the same run (before and after ours) by scripts/bench_train_torch.py (/usr/bin/python3), printed
// as a ratio to their mean, with the
// load average (the machine may be shared). Kernel strategies run on the emulator backend; the static
// strategy recompiles after every update and its compile time is reported separately from ms/step.
#pragma once
#include <string>

namespace anelab::train {

struct BenchOptions {
  int steps = 3;                 // timed steps per side (after one warm-up step)
  std::string strategy = "cpu";  // engines measured, comma-separated: cpu | dynamic | static ("dynamic,static")
  std::string preset = "stories110m";
  int batch = 1, seq = 256;
  bool run_torch = true;
};

// Returns the report text; throws anelab::Error when the PyTorch side fails (naming the command).
std::string bench_train(const BenchOptions& o);

}  // namespace anelab::train

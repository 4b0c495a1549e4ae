// The training loop. run_training() reads like the loop it is:
//   setup (model, data, optimizer, engine, events) -> per step: batches, forward/backward, unscale,
//   check, clip, AdamW, log -> periodic eval / sample / checkpoint -> final eval, checkpoint, report.
// Resume (--resume) restores everything that influences the next step (weights, moments, step, adam_t,
// loss-scale state, data generator state), so N steps == N/2 + resume + N/2 bitwise.
// Exec-restart: before a step whose compiles would exceed the engine's per-process budget, the trainer
// writes last.ckpt, emits `restart`, and execv()s the running executable (platform::executable_path) with the
// original argv (platform::saved_argv, saved in main) + --resume, whatever the cwd and however it was invoked.
// A compile that fails anyway (rt::CompileError: the budget, or the compiler failing) also checkpoints the
// last completed step and exec-restarts; a second failure before the restarted process completes a step is
// reported as an error (docs/native_backend.md "Compile failures and restarts").
// Data parallelism (train/dist.h, docs/training.md): under mpirun each of N ranks trains micro-batch r of every
// N drawn, gradients are summed in rank order (the bits of one process with N times the --accum-steps; layer by
// layer during the backward with --comm-overlap on, train/dist_overlap.h), the optimizer runs on every rank
// (identical inputs, identical updates: no weight broadcast); rank 0 alone
// evaluates, samples, writes events and checkpoints. A rank cannot exec() itself: the job checkpoints, every
// process exits with kRestartExitCode and scripts/mpi_train.sh reruns it with --resume.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "framework/core/power.h"
#include "train/config.h"

namespace anelab::train {

struct TrainOutcome {
  int64_t steps = 0;      // optimizer steps done in total
  double final_loss = 0;  // last step's train loss
  std::optional<double> best_val_loss;
  std::optional<double> last_val_loss;
  bool finished = false;          // reached --steps (false: stopped by --stop-after)
  double train_ms_per_step = 0;   // this process
  bool already_finished = false;  // --resume of a run already at --steps: nothing done, nothing written
  bool restart = false;           // under MPI: last.ckpt written for a restart; exit with kRestartExitCode
};

// The exit status of `anelab train` under an MPI launcher when the job must be restarted with --resume
// (a static-strategy compile budget or a compile failure): scripts/mpi_train.sh reruns the job on it.
// 75 = EX_TEMPFAIL of <sysexits.h>.
constexpr int kRestartExitCode = 75;

struct RunHooks {
  bool allow_exec_restart = true;  // false (tests in-process): fail instead of exec
  bool console = true;             // print progress lines + report to stdout
  // The power source for step energy; empty: power::select_source() for this machine.
  std::function<power::Selection()> power;
};

// c must be resolved (resolve_names) and validated. Throws anelab::Error on failure (after an `error` event).
TrainOutcome run_training(const TrainConfig& c, const RunHooks& hooks = {});

}  // namespace anelab::train

#!/usr/bin/env bash
# Runs a data-parallel `anelab train` job under an MPI launcher until it ends (docs/training.md, "Several
# processes or Macs over MPI"):
#   scripts/mpi_train.sh [launcher options ...] -- anelab train [train options ...]
#   scripts/mpi_train.sh -np 2 --hostfile hosts -- build/bin/anelab train --config exp.toml --strategy static
# A rank cannot exec() itself back into its MPI job, so when the trainer must restart (the static strategy's
# compile budget, or a kernel compile failure) rank 0 writes last.ckpt and every rank exits with status 75;
# this loop then reruns the same job with --resume. Any other status ends the loop with that status.
# Environment: MPIRUN (default mpirun; e.g. mpiexec for MPICH), ANELAB_MAX_RESTARTS (default 10000).
set -uo pipefail
launcher=()
while (($#)) && [[ $1 != -- ]]; do launcher+=("$1"); shift; done
if [[ ${1:-} != -- || $# -lt 2 ]]; then
  echo "[mpi_train] usage: scripts/mpi_train.sh [mpirun options ...] -- anelab train [options ...]" >&2
  exit 2
fi
shift
cmd=("$@")
restart_status=75  # train/trainer.h kRestartExitCode
max=${ANELAB_MAX_RESTARTS:-10000}
for ((run = 0; ; ++run)); do
  "${MPIRUN:-mpirun}" "${launcher[@]}" "${cmd[@]}"
  rc=$?
  [[ $rc -eq $restart_status ]] || exit "$rc"
  if ((run + 1 > max)); then
    echo "[mpi_train] ${max} restarts (ANELAB_MAX_RESTARTS): giving up; continue with --resume" >&2
    exit 1
  fi
  [[ " ${cmd[*]} " == *" --resume "* ]] || cmd+=(--resume)
  echo "[mpi_train] the job checkpointed for a restart (exit status ${restart_status}): rerunning it with --resume" >&2
done

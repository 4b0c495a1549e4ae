#!/usr/bin/env bash
# Data-parallel scaling of `anelab train` (docs/training.md, "Measured"): Stories110M from a random init on a
# token file, one run per configuration RANKSxTHREADS (1 rank: a plain process; more: mpirun, unbound ranks,
# ANELAB_THREADS per rank), ":off" appended = --comm-overlap off. Prints per configuration the medians over
# steps 2..STEPS (step 1 compiles and warms up) of ms/step, global tokens/s (with its range), ms_comm and
# ms_comm_wait (rank 0), and the load average before and after.
#   DATA=tokens.bin [BIN=build/bin/anelab] [STEPS=6] [STRATEGY=dynamic] [B=1] [T=256] [MPIRUN=mpirun] \
#     scripts/mpi_bench.sh 1x1 2x1 2x1:off ...
set -uo pipefail
BIN=${BIN:-build/bin/anelab} DATA=${DATA:?DATA=token file} STEPS=${STEPS:-6} STRATEGY=${STRATEGY:-dynamic}
B=${B:-1} T=${T:-256} MPIRUN=${MPIRUN:-mpirun} WORK=${WORK:-/tmp/mpi_bench}
mkdir -p "$WORK"
printf '%-9s %8s %10s %22s %9s %13s %s\n' config tok/step ms/step "tokens/s (range)" ms_comm ms_comm_wait load
for cfg in "$@"; do
  ranks=${cfg%%x*} rest=${cfg#*x} overlap=on
  threads=${rest%%:*}
  [[ $rest == *:off ]] && overlap=off
  dir=$WORK/${cfg/:/_}
  rm -rf "$dir"
  args=(train --preset stories110m --data "$DATA" --run-dir "$dir" --run bench --strategy "$STRATEGY"
        --batch-size "$B" --seq-len "$T" --steps "$STEPS" --eval-batches 0 --quiet --comm-overlap "$overlap")
  load0=$(cut -d' ' -f1 /proc/loadavg)
  if ((ranks == 1)); then
    ANELAB_THREADS=$threads "$BIN" "${args[@]}" --launcher none >"$dir.log" 2>&1
  else
    "$MPIRUN" -np "$ranks" --bind-to none -x ANELAB_THREADS="$threads" "$BIN" "${args[@]}" --launcher mpi >"$dir.log" 2>&1
  fi || { echo "[mpi_bench] $cfg failed:"; tail -15 "$dir.log"; continue; }
  load1=$(cut -d' ' -f1 /proc/loadavg)
  python3 - "$dir/events.jsonl" "$cfg" "$load0" "$load1" <<'PY'
import json, statistics, sys
path, cfg, l0, l1 = sys.argv[1:]
steps = [e for e in map(json.loads, open(path)) if e["event"] == "step"][1:]
med = lambda k: statistics.median(e[k] for e in steps)
tps = [e["tokens_per_s"] for e in steps]
print(f"{cfg:<9} {steps[0]['tokens']:>8} {med('ms'):>10.0f} {med('tokens_per_s'):>8.1f} ({min(tps):.1f}-{max(tps):.1f}) "
      f"{med('ms_comm'):>9.0f} {med('ms_comm_wait'):>13.0f} {l0}->{l1}")
PY
done

#!/usr/bin/env bash
# Two anelab binaries side by side in one run (e.g. before/after a kernel change): the emulator bench and
# the CPU inference bench, alternating A and B per round (A B, B A, ...) so drift and load hit both alike.
#
#   scripts/bench_compare.sh A_BIN B_BIN [--threads N] [--rounds R] [--models "gpt2-124m qwen2.5-0.5b"]
#                            [--work DIR] [--kernels "conv attention attn_fwd ffn_bwd"] [--pin CPUS]
#                            [--concurrent CPUS1 CPUS2]
#
# Per round and binary: `anelab bench emulator --json` (GFLOP/s per kernel, median of 20 evaluates) and
# `anelab infer bench` on random fp16 weights of each preset (prefill pp512 and decode tg128 tok/s). The
# table gives the median and the best value over rounds for A and B, each with the ratio B/A (> 1: B
# faster). --pin runs both under
# `taskset -c CPUS` (a quiet machine: pin to as many cores as threads).
# --concurrent runs each workload for A and B at the same time, A on CPUS1 and B on CPUS2 in odd rounds and
# the other way round in even rounds: both see the same moment of a machine whose speed drifts (a shared VM
# host), and the swap cancels a difference between the two core sets. An A/A run (the same binary twice)
# shows the noise floor of the paired ratio.
set -euo pipefail
A="${1:?usage: bench_compare.sh A_BIN B_BIN [options]}" B="${2:?usage: bench_compare.sh A_BIN B_BIN [options]}"
shift 2
THREADS=2 ROUNDS=3 MODELS="gpt2-124m qwen2.5-0.5b" WORK=/tmp/anelab_bench_compare PIN="" LANE1="" LANE2=""
KERNELS="conv attention attn_fwd ffn_bwd"
while (($#)); do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --kernels) KERNELS="$2"; shift 2 ;;
    --pin) PIN="$2"; shift 2 ;;
    --concurrent) LANE1="$2" LANE2="$3"; shift 3 ;;
    *) echo "bench_compare: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$WORK"
export ANELAB_THREADS="$THREADS"

declare -A VALS  # "bin|metric" -> space-separated values over rounds
declare -A PAIR  # "bin|metric|round" -> that round's value
RAW="$WORK/raw.tsv"  # every value: round, binary, metric (tab-separated), for statistics beyond the table
: >"$RAW"
add() { VALS["$1|$2"]+="$3 "; PAIR["$1|$2|$r"]="$3"; printf '%s\t%s\t%s\t%s\n' "$r" "$1" "$2" "$3" >>"$RAW"; }

kargs=()
for k in $KERNELS; do kargs+=(--kernel "$k"); done
for preset in $MODELS; do
  [[ -f "$WORK/$preset.anelab" ]] || "$A" convert --random "$preset" "$WORK/$preset.anelab" --dtype fp16 >&2
done

bin_of() { if [[ $1 == B ]]; then echo "$B"; else echo "$A"; fi; }
# The pinning of TAG's run in round r: --pin for both, or its lane under --concurrent.
pin_of() {
  if [[ -z "$LANE1" ]]; then echo "${PIN}"; return; fi
  local first=B
  ((r % 2)) && first=A  # the binary on LANE1 this round
  if [[ $1 == "$first" ]]; then echo "$LANE1"; else echo "$LANE2"; fi
}
# launch_emulator / launch_model TAG [PRESET]: one run, its output in $WORK/out.TAG; returns its exit status.
launch() {
  local tag="$1" pin run=()
  shift
  pin=$(pin_of "$tag")
  [[ -n "$pin" ]] && run=(taskset -c "$pin")
  timeout 120 "${run[@]}" "$(bin_of "$tag")" "$@" >"$WORK/out.$tag" 2>"$WORK/err.$tag"
}
emulator_args() {
  echo bench emulator --threads "$THREADS" --strategy static --no-peak --json "${kargs[@]}"
}
model_args() {
  echo infer bench --model "$WORK/$1.anelab" --prompt-len 512 --gen-len 128 --threads "$THREADS" --backend cpu \
    --dtype fp16
}
# A run that fails or hangs (120 s) is reported and left out, never silently dropped.
collect_emulator() {
  local tag="$1" rc="$2" out
  out=$(cat "$WORK/out.$tag")
  if ((rc)); then
    echo "[bench_compare] $tag emulator bench failed (rc $rc):" >&2; tail -3 "$WORK/err.$tag" >&2
    out='{"benches": []}'
  fi
  while read -r name g; do add "$tag" "emulator $name GFLOP/s" "$g"; done < <(
    python3 -c 'import json,sys
d=json.load(sys.stdin)
for b in d["benches"]:
    print(b["name"].replace(" ", "_"), b["gflops"])' <<<"$out")
}
collect_model() {
  local tag="$1" rc="$2" preset="$3" out
  out=$(cat "$WORK/out.$tag" "$WORK/err.$tag")
  if ((rc)); then echo "[bench_compare] $tag $preset failed (rc $rc):" >&2; echo "$out" | tail -3 >&2; return 0; fi
  add "$tag" "$preset prefill pp512 tok/s" "$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
  add "$tag" "$preset decode tg128 tok/s" "$(echo "$out" | sed -n 's/^decode tg[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
}
# pair ORDER KIND [PRESET]: the workload for both binaries, one after the other in ORDER or, with
# --concurrent, at the same time; then both results are recorded.
pair() {
  local order="$1" kind="$2" preset="${3:-}" tag rcA=0 rcB=0 pa pb args
  if [[ $kind == emulator ]]; then args=$(emulator_args); else args=$(model_args "$preset"); fi
  # shellcheck disable=SC2086
  if [[ -n "$LANE1" ]]; then
    launch A $args & pa=$!
    launch B $args & pb=$!
    wait "$pa" || rcA=$?
    wait "$pb" || rcB=$?
  else
    for tag in $order; do
      if [[ $tag == A ]]; then launch A $args || rcA=$?; else launch B $args || rcB=$?; fi
    done
  fi
  "collect_$kind" A "$rcA" $preset
  "collect_$kind" B "$rcB" $preset
}

for ((r = 1; r <= ROUNDS; ++r)); do
  order="A B"; ((r % 2)) || order="B A"  # ABBA...: neither binary always runs first
  # Each workload runs for both binaries back to back (or together), so a round's B/A pairs see the same
  # machine state.
  pair "$order" emulator
  for preset in $MODELS; do pair "$order" model "$preset"; done
  echo "[bench_compare] round $r done (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))" >&2
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "A = $A"
echo "B = $B"
best() { tr ' ' '\n' | grep -v '^$' | sort -g | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b != "") printf "%.3f", b / a; else print "-" }'; }
mode="pin '${PIN:-none}'"
[[ -n "$LANE1" ]] && mode="concurrent on '$LANE1' and '$LANE2' (swapped every round)"
echo "$THREADS threads, $ROUNDS rounds, $(nproc) cores, $mode, $(date -u +%FT%TZ)"
echo "median and best (highest) over rounds, and the median of the per-round B/A ratios (paired: A and B ran"
echo "back to back in each round); B/A > 1: B faster"
echo "paired: median, lowest and highest of the per-round ratios"
printf '%-40s %9s %9s %6s %9s %9s %6s %7s %6s %6s\n' metric "A med" "B med" B/A "A best" "B best" B/A paired p-low p-high
for key in "${!VALS[@]}"; do
  [[ $key == A\|* ]] || continue
  m=${key#A|}
  a=$(echo "${VALS["A|$m"]}" | median) b=$(echo "${VALS["B|$m"]:-}" | median)
  ab=$(echo "${VALS["A|$m"]}" | best) bb=$(echo "${VALS["B|$m"]:-}" | best)
  pr=""
  for ((r = 1; r <= ROUNDS; ++r)); do
    pa=${PAIR["A|$m|$r"]:-} pb=${PAIR["B|$m|$r"]:-}
    [[ -n "$pa" && -n "$pb" ]] && pr+="$(ratio "$pa" "$pb") "
  done
  printf '%-40s %9.1f %9.1f %6s %9.1f %9.1f %6s %7s %6s %6s\n' "$m" "$a" "$b" "$(ratio "$a" "$b")" "$ab" "$bb" \
    "$(ratio "$ab" "$bb")" "$(echo "$pr" | median)" "$(echo "$pr" | tr ' ' '\n' | grep -v '^$' | sort -g | head -1)" \
    "$(echo "$pr" | best)"
done | sort

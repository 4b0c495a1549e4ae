#!/usr/bin/env bash
# Two anelab binaries side by side in one run (e.g. before/after a kernel change): the emulator bench and
# the CPU inference bench, alternating A and B per round (A B, B A, ...) so drift and load hit both alike.
#
#   scripts/bench_compare.sh A_BIN B_BIN [--threads N] [--rounds R] [--models "gpt2-124m qwen2.5-0.5b"]
#                            [--work DIR] [--kernels "conv attention attn_fwd ffn_bwd"] [--pin CPUS]
#
# Per round and binary: `anelab bench emulator --json` (GFLOP/s per kernel, median of 20 evaluates) and
# `anelab infer bench` on random fp16 weights of each preset (prefill pp512 and decode tg128 tok/s). The
# table gives the median and the best value over rounds for A and B, each with the ratio B/A (> 1: B
# faster). --pin runs both under
# `taskset -c CPUS` (a quiet machine: pin to as many cores as threads).
set -euo pipefail
A="${1:?usage: bench_compare.sh A_BIN B_BIN [options]}" B="${2:?usage: bench_compare.sh A_BIN B_BIN [options]}"
shift 2
THREADS=2 ROUNDS=3 MODELS="gpt2-124m qwen2.5-0.5b" WORK=/tmp/anelab_bench_compare PIN=""
KERNELS="conv attention attn_fwd ffn_bwd"
while (($#)); do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --kernels) KERNELS="$2"; shift 2 ;;
    --pin) PIN="$2"; shift 2 ;;
    *) echo "bench_compare: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$WORK"
RUN=()
[[ -n "$PIN" ]] && RUN=(taskset -c "$PIN")
export ANELAB_THREADS="$THREADS"

declare -A VALS  # "bin|metric" -> space-separated values over rounds
declare -A PAIR  # "bin|metric|round" -> that round's value
add() { VALS["$1|$2"]+="$3 "; PAIR["$1|$2|$r"]="$3"; }

kargs=()
for k in $KERNELS; do kargs+=(--kernel "$k"); done
for preset in $MODELS; do
  [[ -f "$WORK/$preset.anelab" ]] || "$A" convert --random "$preset" "$WORK/$preset.anelab" --dtype fp16 >&2
done

bin_of() { if [[ $1 == B ]]; then echo "$B"; else echo "$A"; fi; }
# A run that fails or hangs (120 s) is reported and left out, never silently dropped.
run_emulator() {
  local tag="$1" out
  out=$(timeout 120 "${RUN[@]}" "$(bin_of "$tag")" bench emulator --threads "$THREADS" --strategy static --no-peak \
        --json "${kargs[@]}" 2>"$WORK/err.txt") || { echo "[bench_compare] $tag emulator bench failed (rc $?):" >&2;
                                                   tail -3 "$WORK/err.txt" >&2; out='{"benches": []}'; }
  while read -r name g; do add "$tag" "emulator $name GFLOP/s" "$g"; done < <(
    python3 -c 'import json,sys
d=json.load(sys.stdin)
for b in d["benches"]:
    print(b["name"].replace(" ", "_"), b["gflops"])' <<<"$out")
}
run_model() {
  local tag="$1" preset="$2" out
  out=$(timeout 120 "${RUN[@]}" "$(bin_of "$tag")" infer bench --model "$WORK/$preset.anelab" --prompt-len 512 \
        --gen-len 128 --threads "$THREADS" --backend cpu --dtype fp16 2>&1) || {
    echo "[bench_compare] $tag $preset failed (rc $?):" >&2; echo "$out" | tail -3 >&2; return 0; }
  add "$tag" "$preset prefill pp512 tok/s" "$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
  add "$tag" "$preset decode tg128 tok/s" "$(echo "$out" | sed -n 's/^decode tg[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
}

for ((r = 1; r <= ROUNDS; ++r)); do
  order="A B"; ((r % 2)) || order="B A"  # ABBA...: neither binary always runs first
  # Each workload runs for both binaries back to back, so a round's B/A pairs see the same machine state.
  for tag in $order; do run_emulator "$tag"; done
  for preset in $MODELS; do
    for tag in $order; do run_model "$tag" "$preset"; done
  done
  echo "[bench_compare] round $r done (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))" >&2
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "A = $A"
echo "B = $B"
best() { tr ' ' '\n' | grep -v '^$' | sort -g | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b != "") printf "%.3f", b / a; else print "-" }'; }
echo "$THREADS threads, $ROUNDS rounds, $(nproc) cores, pin '${PIN:-none}', $(date -u +%FT%TZ)"
echo "median and best (highest) over rounds, and the median of the per-round B/A ratios (paired: A and B ran"
echo "back to back in each round); B/A > 1: B faster"
printf '%-40s %9s %9s %6s %9s %9s %6s %7s\n' metric "A med" "B med" B/A "A best" "B best" B/A paired
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
  printf '%-40s %9.1f %9.1f %6s %9.1f %9.1f %6s %7s\n' "$m" "$a" "$b" "$(ratio "$a" "$b")" "$ab" "$bb" \
    "$(ratio "$ab" "$bb")" "$(echo "$pr" | median)"
done | sort

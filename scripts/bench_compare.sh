#!/usr/bin/env bash
# Two anelab binaries side by side in one run (e.g. before/after a kernel change): the emulator bench and
# the CPU inference bench, alternating A and B per round so drift and load hit both alike.
#
#   scripts/bench_compare.sh A_BIN B_BIN [--threads N] [--rounds R] [--models "gpt2-124m qwen2.5-0.5b"]
#                            [--work DIR] [--kernels "conv attention attn_fwd ffn_bwd"] [--pin CPUS]
#
# Per round and binary: `anelab bench emulator --json` (GFLOP/s per kernel, median of 20 evaluates) and
# `anelab infer bench` on random fp16 weights of each preset (prefill pp512 and decode tg128 tok/s). The
# table gives the median over rounds for A and B and the ratio B/A (> 1: B faster). --pin runs both under
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
add() { VALS["$1|$2"]+="$3 "; }

kargs=()
for k in $KERNELS; do kargs+=(--kernel "$k"); done
for preset in $MODELS; do
  [[ -f "$WORK/$preset.anelab" ]] || "$A" convert --random "$preset" "$WORK/$preset.anelab" --dtype fp16 >&2
done

for ((r = 1; r <= ROUNDS; ++r)); do
  for tag in A B; do
    bin=$A; [[ $tag == B ]] && bin=$B
    out=$("${RUN[@]}" "$bin" bench emulator --threads "$THREADS" --strategy static --no-peak --json "${kargs[@]}")
    while read -r name g; do add "$tag" "emulator $name GFLOP/s" "$g"; done < <(
      python3 -c 'import json,sys
d=json.load(sys.stdin)
for b in d["benches"]:
    print(b["name"].replace(" ", "_"), b["gflops"])' <<<"$out")
    for preset in $MODELS; do
      out=$("${RUN[@]}" "$bin" infer bench --model "$WORK/$preset.anelab" --prompt-len 512 --gen-len 128 \
            --threads "$THREADS" --backend cpu --dtype fp16 2>&1)
      add "$tag" "$preset prefill pp512 tok/s" "$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
      add "$tag" "$preset decode tg128 tok/s" "$(echo "$out" | sed -n 's/^decode tg[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')"
    done
    echo "[bench_compare] round $r $tag done (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))" >&2
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "A = $A"
echo "B = $B"
echo "$THREADS threads, $ROUNDS rounds (median), $(nproc) cores, pin '${PIN:-none}', $(date -u +%FT%TZ)"
printf '%-44s %12s %12s %8s\n' metric A B B/A
for key in "${!VALS[@]}"; do
  [[ $key == A\|* ]] || continue
  m=${key#A|}
  a=$(echo "${VALS["A|$m"]}" | median) b=$(echo "${VALS["B|$m"]:-}" | median)
  printf '%-44s %12s %12s %8s\n' "$m" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')"
done | sort

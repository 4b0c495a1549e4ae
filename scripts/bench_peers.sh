#!/usr/bin/env bash
# anelab inference vs llama.cpp on the same random fp16 weights, back to back in one run.
#
#   scripts/bench_peers.sh LLAMA_CPP_BUILD_DIR [options]
#     LLAMA_CPP_BUILD_DIR   a llama.cpp CMake build dir holding bin/llama-bench (never built or
#                           changed by this script; nothing from it goes into the repo)
#     --anelab BIN          anelab binary (default: build/bin/anelab)
#     --work DIR            where the model files live / are made (default: /tmp/anelab_bench_peers)
#     --models "a b"        presets (default: "gpt2-124m qwen2.5-0.5b")
#     --threads N           threads for both (default 2)
#     --pp N --tg N         prompt / generated tokens (default 512 / 128)
#     --reps N              llama-bench repetitions (default 3)
#     --emulator            also time the emulator (MIL) prefill of anelab (compiles a bucket: slow)
#     --no-llama            skip llama.cpp (our numbers only)
#
# Per model it makes (once) X.anelab (`anelab convert --random PRESET --dtype fp16`) and X.gguf (the
# same weights through `anelab convert X.anelab X.gguf --tokenizer ...`, vocab from $ANELAB_DATA or
# /work/shared/data), then runs
#   llama-bench -m X.gguf -p PP -n TG -t THREADS          (f16, prompt and generation tests)
#   anelab infer bench --model X.anelab --prompt-len PP --gen-len TG --threads THREADS --backend cpu
#   anelab infer generate ... --max-tokens 1              (a cold process: wall time to the first token)
# and prints a table: tok/s, ratio anelab / llama.cpp, cold start, peak RSS vs weight bytes, and the
# load average at each measurement (the box is shared: compare ratios taken in the same run).
set -euo pipefail

LLAMA=""
ANELAB="build/bin/anelab"
WORK="/tmp/anelab_bench_peers"
MODELS="gpt2-124m qwen2.5-0.5b"
THREADS=2 PP=512 TG=128 REPS=3 EMU=0 NOLLAMA=0
DATA="${ANELAB_DATA:-/work/shared/data}"

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case "$1" in
    --anelab) ANELAB="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --pp) PP="$2"; shift 2 ;;
    --tg) TG="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --emulator) EMU=1; shift ;;
    --no-llama) NOLLAMA=1; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "bench_peers: unknown option $1" >&2; usage 2 ;;
    *) LLAMA="$1"; shift ;;
  esac
done
[[ -n "$LLAMA" || $NOLLAMA == 1 ]] || { echo "bench_peers: give the llama.cpp build dir" >&2; usage 2; }
BENCH="$LLAMA/bin/llama-bench"
[[ $NOLLAMA == 1 || -x "$BENCH" ]] || { echo "bench_peers: $BENCH not found (build llama.cpp first)" >&2; exit 2; }
[[ -x "$ANELAB" ]] || { echo "bench_peers: $ANELAB not found (cmake --build ... --target anelab)" >&2; exit 2; }
mkdir -p "$WORK"
# Peak RSS through GNU time when present (else llama.cpp's RSS column stays empty; anelab reports its own).
TIMEV=()
[[ -x /usr/bin/time ]] && TIMEV=(/usr/bin/time -f "RSS_KB %M")

load() { cut -d' ' -f1 /proc/loadavg; }
short() { case "$1" in gpt2-124m) echo gpt2 ;; qwen2.5-0.5b) echo qwen ;; *) echo "$1" ;; esac; }
tokenizer_for() { case "$1" in gpt2*) echo "$DATA/gpt2" ;; qwen*) echo "$DATA/qwen/tokenizer.json" ;; esac; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "-" }'; }

ROWS=()
row() { ROWS+=("$(printf '%-13s %-22s %10s %10s %7s  %s' "$@")"); }

for preset in $MODELS; do
  s=$(short "$preset")
  an="$WORK/$s.anelab" gg="$WORK/$s.gguf"
  [[ -f "$an" ]] || "$ANELAB" convert --random "$preset" "$an" --dtype fp16 >&2
  if [[ $NOLLAMA == 0 && ! -f "$gg" ]]; then
    "$ANELAB" convert "$an" "$gg" --tokenizer "$(tokenizer_for "$preset")" >&2
  fi
  wbytes=$(stat -c %s "$an")

  # llama.cpp: one llama-bench run for pp and tg (csv: avg_ts per test).
  l_pp="" l_tg="" l_rss="" l_load="-"
  if [[ $NOLLAMA == 0 ]]; then
    l_load=$(load)
    out=$("${TIMEV[@]}" "$BENCH" -m "$gg" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" -o csv 2>&1)
    csv() {  # csv N_PROMPT N_GEN -> avg_ts of that llama-bench test
      echo "$out" | awk -F, -v p="$1" -v g="$2" '{ gsub(/"/, "") } /^build_commit/ { for (i = 1; i <= NF; i++) h[$i] = i; next }
        h["avg_ts"] && $h["n_prompt"] == p && $h["n_gen"] == g { printf "%.1f", $h["avg_ts"] }'
    }
    l_pp=$(csv "$PP" 0)
    l_tg=$(csv 0 "$TG")
    l_rss=$(echo "$out" | awk '/^RSS_KB/ { print $2 }')
    [[ -n "$l_pp" && -n "$l_tg" ]] || { echo "bench_peers: could not parse llama-bench output:" >&2; echo "$out" >&2; exit 1; }
  fi

  # anelab: CPU prefill + decode in one process (its own peak RSS).
  a_load=$(load)
  out=$("${TIMEV[@]}" "$ANELAB" infer bench --model "$an" --prompt-len "$PP" --gen-len "$TG" \
        --threads "$THREADS" --backend cpu --dtype fp16 2>&1)
  echo "$out" | sed 's/^/  [anelab] /' >&2
  a_pp=$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')
  a_tg=$(echo "$out" | sed -n 's/^decode tg[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')
  a_ttft=$(echo "$out" | sed -n 's/.*cold start to first token \([0-9.]*\) ms.*/\1/p')
  a_rss=$(echo "$out" | awk '/^RSS_KB/ { print $2 }')
  [[ -n "$a_rss" ]] || a_rss=$(echo "$out" | awk '/^peak RSS/ { printf "%d", $3 * 1024 }')

  # Cold process: wall time of a fresh `infer generate` that prints one token (page cache warm).
  c_load=$(load)
  t0=$(date +%s.%N)
  "$ANELAB" infer generate --model "$an" --backend cpu --dtype fp16 --threads "$THREADS" --prompt "Hello" \
    --max-tokens 1 --temperature 0 --tokenizer "$(tokenizer_for "$preset")" >/dev/null 2>&1 || true
  cold_ms=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", (b - a) * 1000 }')

  row "$preset" "decode tg$TG tok/s" "$a_tg" "${l_tg:--}" "$(ratio "$a_tg" "$l_tg")" "load $a_load / $l_load (target >= 1.0)"
  row "$preset" "prefill pp$PP tok/s" "$a_pp" "${l_pp:--}" "$(ratio "$a_pp" "$l_pp")" "load $a_load / $l_load (target >= 0.8)"
  row "$preset" "first token ms" "$a_ttft" "-" "-" "in-process: load + 1-token prefill"
  row "$preset" "cold process ms" "$cold_ms" "-" "-" "load $c_load; exec .. 1 token printed (target < 1000, qwen)"
  row "$preset" "peak RSS MiB" "$((a_rss / 1024))" "$([[ -n "$l_rss" ]] && echo $((l_rss / 1024)) || echo -)" \
      "$(ratio "$a_rss" "$l_rss")" "weights $((wbytes >> 20)) MiB; anelab RSS/weights $(ratio $((a_rss * 1024)) "$wbytes") (target <= 1.3)"

  if [[ $EMU == 1 ]]; then
    e_load=$(load)
    out=$("$ANELAB" infer bench --model "$an" --prompt-len "$PP" --gen-len 1 --threads "$THREADS" \
          --backend emulator --dtype fp16 2>&1)
    e_pp=$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')
    e_c=$(echo "$out" | sed -n 's/.*bucket compile \([0-9.]*\) ms.*/\1/p')
    row "$preset" "emulator prefill tok/s" "$e_pp" "${l_pp:--}" "$(ratio "$e_pp" "$l_pp")" "load $e_load; compile ${e_c} ms"
  fi
done

echo
echo "anelab vs llama.cpp (${LLAMA:-not run}), $THREADS threads, fp16 weights, $(nproc) cores, $(date -u +%FT%TZ)"
echo "load = 1-min load average when the measurement started (anelab / llama.cpp)"
printf '%-13s %-22s %10s %10s %7s  %s\n' model metric anelab llama.cpp ratio notes
for r in "${ROWS[@]}"; do echo "$r"; done

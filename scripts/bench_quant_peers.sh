#!/usr/bin/env bash
# anelab vs llama.cpp on the same GGUF files (fp16 and quantized), in one run, next to the machine's
# measured read bandwidth.
#
#   scripts/bench_quant_peers.sh LLAMA_CPP_BUILD_DIR [options]
#     LLAMA_CPP_BUILD_DIR   a llama.cpp CMake build dir with bin/llama-bench and bin/llama-quantize (built
#                           outside the repo; nothing from it goes into the repo)
#     --anelab BIN          anelab binary (default: build/bin/anelab)
#     --work DIR            model files (default: /tmp/anelab_bench_quant)
#     --models "a b"        presets (default: "stories110m qwen2.5-0.5b")
#     --types "t ..."       f16 and/or llama-quantize types: q8_0 q4_0 q4_k_m q5_k_s q5_k_m (default: "q8_0 q4_k_m")
#     --quantizer Q         who writes the quantized files: llama (llama-quantize, default) or anelab
#     --threads "2 8"       thread counts (default: "2")
#     --pp N --tg N         prompt / generated tokens (default 512 / 128)
#     --rounds N            alternating rounds (llama.cpp, anelab) per point; medians reported (default 3)
#     --pin                 pin each run with taskset to the first N physical cores of NUMA node 0
#     --shape JSON          config overrides for every preset (convert --random --shape), e.g. a vocabulary that
#                           fits the tokenizer at hand: '{"vocab_size":151936}' for qwen3.5-0.8b with Qwen2.5's
#
# Per preset: X.anelab (`anelab convert --random PRESET --dtype fp16`), X-f16.gguf (anelab's export with a
# tokenizer), then X-TYPE.gguf per type. Per (file, threads): `anelab bench memory` (read GB/s at those
# threads), then ROUNDS x { llama-bench -p PP -n TG -r 1 ; anelab infer bench --prompt-len PP --gen-len 1 ;
# anelab infer bench --prompt-len 1 --gen-len TG } (both programs' tg from an empty context, as llama-bench's)
# with peak RSS from GNU time. anelab runs with --kv-type f16: llama-bench's default KV cache is f16
# (--cache-type-k/-v f16), so both hold and read the same cache bytes. Prints one table: tok/s, ratio
# anelab / llama.cpp, weight GB/s streamed per decoded token (file's weight bytes x tok/s) and its share of
# the measured bandwidth, peak RSS / file size.
set -euo pipefail

LLAMA="" ANELAB="build/bin/anelab" WORK="/tmp/anelab_bench_quant"
MODELS="stories110m qwen2.5-0.5b" TYPES="q8_0 q4_k_m" QUANTIZER=llama THREADS="2"
PP=512 TG=128 ROUNDS=3 PIN=0 SHAPE=""
DATA="${ANELAB_DATA:-/work/shared/data}"

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case "$1" in
    --anelab) ANELAB="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --types) TYPES="$2"; shift 2 ;;
    --quantizer) QUANTIZER="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --pp) PP="$2"; shift 2 ;;
    --tg) TG="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --pin) PIN=1; shift ;;
    --shape) SHAPE="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "bench_quant_peers: unknown option $1" >&2; usage 2 ;;
    *) LLAMA="$1"; shift ;;
  esac
done
[[ -n "$LLAMA" ]] || { echo "bench_quant_peers: give the llama.cpp build dir" >&2; usage 2; }
[[ "$QUANTIZER" == llama || "$QUANTIZER" == anelab ]] || { echo "bench_quant_peers: --quantizer '$QUANTIZER' (llama|anelab)" >&2; exit 2; }
for b in llama-bench llama-quantize; do
  [[ -x "$LLAMA/bin/$b" ]] || { echo "bench_quant_peers: $LLAMA/bin/$b not found (build llama.cpp first)" >&2; exit 2; }
done
[[ -x "$ANELAB" ]] || { echo "bench_quant_peers: $ANELAB not found (cmake --build ... --target anelab)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_quant_peers: /usr/bin/time (GNU time) is needed for peak RSS" >&2; exit 2; }
mkdir -p "$WORK"
export LD_LIBRARY_PATH="$LLAMA/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

tokenizer_for() {
  case "$1" in
    stories*) echo "$DATA/llama2c/tokenizer.bin" ;;
    gpt2*) echo "$DATA/gpt2" ;;
    qwen*) echo "$DATA/qwen/tokenizer.json" ;;
    *) echo "" ;;  # no tokenizer of the model's vocab at hand: exported with tokenizer.ggml.model "none"
  esac
}
llama_type() { case "$1" in q8_0) echo Q8_0 ;; q4_0) echo Q4_0 ;; q4_k_m) echo Q4_K_M ;; q5_k_s) echo Q5_K_S ;; q5_k_m) echo Q5_K_M ;; esac; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "-" }'; }
# First N physical cores of NUMA node 0 (one logical CPU per core), as a taskset list.
cpus_for() {
  lscpu -p=CPU,CORE,NODE | grep -v '^#' | awk -F, '$3 == 0 && !seen[$2]++ { print $1 }' | head -n "$1" | paste -sd,
}
pinned() {  # pinned N cmd...
  local n="$1"; shift
  if [[ $PIN == 1 ]]; then taskset -c "$(cpus_for "$n")" "$@"; else "$@"; fi
}

ROWS=()
row() { ROWS+=("$(printf '%-13s %-7s %3s %-10s %9s %9s %6s  %s' "$@")"); }

for preset in $MODELS; do
  an="$WORK/$preset.anelab" f16="$WORK/$preset-f16.gguf"
  [[ -f "$an" ]] || "$ANELAB" convert --random "$preset" "$an" --dtype fp16 ${SHAPE:+--shape "$SHAPE"} >&2
  tok=$(tokenizer_for "$preset")
  [[ -f "$f16" ]] || "$ANELAB" convert "$an" "$f16" ${tok:+--tokenizer "$tok"} >&2
  for type in $TYPES; do
    file="$f16"
    if [[ "$type" != f16 ]]; then
      file="$WORK/$preset-$type-$QUANTIZER.gguf"
      if [[ ! -f "$file" ]]; then
        if [[ $QUANTIZER == llama ]]; then
          "$LLAMA/bin/llama-quantize" "$f16" "$file" "$(llama_type "$type")" >"$file.log" 2>&1 ||
            { tail -5 "$file.log" >&2; exit 1; }
        else
          "$ANELAB" convert "$f16" "$file" --dtype "$type" >&2
        fi
      fi
    fi
    fbytes=$(stat -c %s "$file")
    for t in $THREADS; do
      bw=$(pinned "$t" "$ANELAB" bench memory --threads "$t" --json | sed -n 's/.*"read_gbs":\([0-9.]*\).*/\1/p')
      lpp=() ltg=() app=() atg=() lrss=() arss=() trss=() wgb=()
      for ((r = 0; r < ROUNDS; ++r)); do
        out=$(pinned "$t" /usr/bin/time -f "RSS_KB %M" "$LLAMA/bin/llama-bench" -m "$file" -p "$PP" -n "$TG" -t "$t" -r 1 -o csv 2>&1) ||
          { echo "$out" >&2; exit 1; }
        csv() {  # csv N_PROMPT N_GEN -> avg_ts of that llama-bench test
          echo "$out" | awk -F, -v p="$1" -v g="$2" '{ gsub(/"/, "") } /^build_commit/ { for (i = 1; i <= NF; i++) h[$i] = i; next }
            h["avg_ts"] && $h["n_prompt"] == p && $h["n_gen"] == g { printf "%.2f", $h["avg_ts"] }'
        }
        lpp+=("$(csv "$PP" 0)") ltg+=("$(csv 0 "$TG")") lrss+=("$(echo "$out" | awk '/^RSS_KB/ { print $2 }')")
        # As llama-bench's tests: pp from an empty context, and tg from an empty context (after one prompt
        # token), each in its own process; peak RSS of the larger (the pp run holds the PP-position KV cache).
        out=$(pinned "$t" /usr/bin/time -f "RSS_KB %M" "$ANELAB" infer bench --model "$file" --prompt-len "$PP" \
              --gen-len 1 --threads "$t" --backend cpu --kv-type f16 -q 2>&1) || { echo "$out" >&2; exit 1; }
        app+=("$(echo "$out" | sed -n 's/^prefill pp[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')")
        rss_pp=$(echo "$out" | awk '/^RSS_KB/ { print $2 }')
        kv_pp=$(echo "$out" | sed -n 's/^KV cache .* \([0-9.]*\) MiB at the .*/\1/p')
        out=$(pinned "$t" /usr/bin/time -f "RSS_KB %M" "$ANELAB" infer bench --model "$file" --prompt-len 1 \
              --gen-len "$TG" --threads "$t" --backend cpu --kv-type f16 -q 2>&1) || { echo "$out" >&2; exit 1; }
        atg+=("$(echo "$out" | sed -n 's/^decode tg[0-9]*: \([0-9.]*\) tok\/s.*/\1/p')")
        wgb+=("$(echo "$out" | sed -n 's/^decode.* \([0-9.]*\) GB\/s of weights.*/\1/p')")
        rss_tg=$(echo "$out" | awk '/^RSS_KB/ { print $2 }')
        arss+=("$((rss_pp > rss_tg ? rss_pp : rss_tg))") trss+=("$rss_tg")
        echo "  [$preset $type t=$t round $r] llama pp ${lpp[-1]} tg ${ltg[-1]} | anelab pp ${app[-1]} tg ${atg[-1]} (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      done
      m_lpp=$(printf '%s\n' "${lpp[@]}" | median) m_ltg=$(printf '%s\n' "${ltg[@]}" | median)
      m_app=$(printf '%s\n' "${app[@]}" | median) m_atg=$(printf '%s\n' "${atg[@]}" | median)
      m_wgb=$(printf '%s\n' "${wgb[@]}" | median)
      m_lrss=$(printf '%s\n' "${lrss[@]}" | median | cut -d. -f1) m_arss=$(printf '%s\n' "${arss[@]}" | median | cut -d. -f1)
      m_trss=$(printf '%s\n' "${trss[@]}" | median | cut -d. -f1)
      # The pp run's KV cache (PP + 2 positions, f16 in both programs): part of either program's peak RSS.
      kv_note=$(awk -v k="$kv_pp" -v f="$fbytes" 'BEGIN { if (k != "") printf "; pp run KV cache %.1f MiB = %.2f of the file", k, k * 1048576 / f }')
      # Weight bytes per token: anelab reports GB/s of weights at its tok/s; llama.cpp streams the same bytes.
      l_wgb=$(awk -v g="$m_wgb" -v a="$m_atg" -v l="$m_ltg" 'BEGIN { if (a > 0) printf "%.1f", g / a * l }')
      row "$preset" "$type" "$t" "decode" "$m_atg" "$m_ltg" "$(ratio "$m_atg" "$m_ltg")" \
          "weights GB/s: anelab $m_wgb ($(ratio "$m_wgb" "$bw") of bw), llama.cpp $l_wgb ($(ratio "$l_wgb" "$bw")); read bw $(printf %.1f "$bw") GB/s"
      row "$preset" "$type" "$t" "pp$PP" "$m_app" "$m_lpp" "$(ratio "$m_app" "$m_lpp")" ""
      row "$preset" "$type" "$t" "RSS MiB" "$((m_arss / 1024))" "$((m_lrss / 1024))" "$(ratio "$m_arss" "$m_lrss")" \
          "file $((fbytes >> 20)) MiB; RSS/file anelab $(ratio $((m_arss * 1024)) "$fbytes") (tg$TG run alone $(ratio $((m_trss * 1024)) "$fbytes")), llama.cpp $(ratio $((m_lrss * 1024)) "$fbytes")$kv_note"
    done
  done
done

echo
echo "anelab vs llama.cpp ($LLAMA), same GGUF files (quantizer: $QUANTIZER), KV cache f16 in both, medians of $ROUNDS alternating rounds,"
echo "$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')), pinned: $PIN, $(date -u +%FT%TZ)"
printf '%-13s %-7s %3s %-10s %9s %9s %6s  %s\n' model type thr metric anelab llama.cpp ratio notes
for r in "${ROWS[@]}"; do echo "$r"; done

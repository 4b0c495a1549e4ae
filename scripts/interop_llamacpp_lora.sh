#!/usr/bin/env bash
# llama.cpp runs anelab's GGUF LoRA adapter as anelab does (issue 37): the greedy continuation of
# `llama-completion -m base.gguf --lora adapter.gguf` equals anelab's with the adapter (the GGUF adapter and the PEFT
# directory), and `llama-completion -m fused.gguf` (anelab export --fuse) equals both.
#
#   scripts/interop_llamacpp_lora.sh prepare WORK   anelab only (build/bin/anelab, or $ANELAB): in WORK, a LoRA run on
#       stories260K (../shared/data/llama2c, or $ANELAB_DATA) over the first 140,000 bytes of data/tinytales/corpus.txt
#       (rank 8, alpha 16, lr 1e-3, 40 steps, batch 8 x 128: the train loss goes 1.48 -> 0.87), its exports
#       base.gguf (stories260K with tok512), adapter.gguf, adapter/ (PEFT) and fused.gguf, and anelab's answers
#       anelab-{base,lora,peft,fused}.txt of `infer generate COMMON -q --backend cpu` (plus --lora FILE), and
#       anelab-serve{0,1}.txt: `anelab serve -m base.gguf --lora adapter.gguf --lora adapter --parallel 2` answering
#       POST /completion with the request's "lora": [{"id": I, "scale": 1}] (the adapters at run time, per request;
#       the prompt prepended as infer generate prints it).
#   scripts/interop_llamacpp_lora.sh compare WORK   llama.cpp only (llama-completion in $LLAMA_CPP_BIN, else
#       /tmp/llq/build/bin): llama-{lora,fused,base}.txt of `llama-completion COMMON -no-cnv -nr -ctk f32 -ctv f32
#       -fa off` (plus --lora adapter.gguf), compared byte for byte with anelab's: one AGREE / DIFFER line each;
#       exit 1 when any differs (or when the adapter changes nothing: base and adapter agreeing would prove nothing).
#   scripts/interop_llamacpp_lora.sh check WORK     the comparison alone, of llama-*.txt brought back from the machine
#       that ran compare next to anelab-*.txt.
#   scripts/interop_llamacpp_lora.sh all WORK       prepare and compare, on one machine.
# BASE_MODEL / BASE_TOKENIZER replace stories260K / tok512 (e.g. tests/fixtures/hf/qwen35_bf16, Qwen3.5's Gated
# DeltaNet layers with 2 key and 4 value heads, whose adapters llama.cpp reads in its own value-head order).
# COMMON, one llama.cpp command line given unchanged to both programs: -p "Once upon a time" -n N -t 2 --temp 0
# -c 512 -s 1 (N: $N, default 32). The two halves may run on different machines (WORK copied between them): the
# device machine has llama.cpp, this one the data.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/interop_llamacpp_lora.sh prepare|compare|check|all WORK}
W=${2:?usage: scripts/interop_llamacpp_lora.sh prepare|compare|check|all WORK}
N=${N:-32}
ANELAB=${ANELAB:-build/bin/anelab}
LLAMA=${LLAMA_CPP_BIN:-/tmp/llq/build/bin}
DATA=${ANELAB_DATA:-$PWD/../shared/data}
common=(-p "Once upon a time" -n "$N" -t 2 --temp 0 -c 512 -s 1)
mkdir -p "$W"

prepare() {
  local M=${BASE_MODEL:-$DATA/llama2c/stories260K.bin} T=${BASE_TOKENIZER:-$DATA/llama2c/tok512.bin}
  [ -x "$ANELAB" ] || { echo "[interop_llamacpp_lora] no anelab binary at $ANELAB (set ANELAB)" >&2; exit 2; }
  [ -e "$M" ] || { echo "[interop_llamacpp_lora] no $M (set ANELAB_DATA or BASE_MODEL)" >&2; exit 2; }
  head -c 140000 data/tinytales/corpus.txt >"$W/tt_train.txt"
  "$ANELAB" tokenize --tokenizer "$T" "$W/tt_train.txt" "$W/train.bin" >/dev/null
  rm -rf "$W/run"
  "$ANELAB" train --init "$M" --tokenizer "$T" --data "$W/train.bin" --lora --lora-rank 8 --lora-alpha 16 --lr 1e-3 \
    --steps 40 --weight-decay 0 --batch-size 8 --seq-len 128 --warmup-steps 5 --run-dir "$W/run" >"$W/train.log" 2>&1
  grep -E '^step +(1|40)/' "$W/train.log" | sed 's/^/[interop_llamacpp_lora] /'
  "$ANELAB" export "$M" "$W/base.gguf" --tokenizer "$T" --dtype fp32 >/dev/null  # (a bf16 base would round the merge)
  "$ANELAB" export "$W/run" "$W/adapter.gguf" --adapter >/dev/null
  "$ANELAB" export "$W/run" "$W/adapter" --adapter >/dev/null
  "$ANELAB" export "$W/run" "$W/fused.gguf" --fuse --tokenizer "$T" --dtype fp32 >/dev/null
  local g=("$ANELAB" infer generate "${common[@]}" -q --backend cpu)
  "${g[@]}" -m "$W/base.gguf" >"$W/anelab-base.txt"
  "${g[@]}" -m "$W/base.gguf" --lora "$W/adapter.gguf" >"$W/anelab-lora.txt"
  "${g[@]}" -m "$W/base.gguf" --lora "$W/adapter" >"$W/anelab-peft.txt"
  "${g[@]}" -m "$W/fused.gguf" >"$W/anelab-fused.txt"
  local port=$((20000 + $$ % 20000)) pid
  "$ANELAB" serve -m "$W/base.gguf" --lora "$W/adapter.gguf" --lora "$W/adapter" --parallel 2 --backend cpu \
    --port "$port" >"$W/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
  for id in 0 1; do
    curl -sf "localhost:$port/completion" -d "{\"prompt\": \"Once upon a time\", \"n_predict\": $N, \"temperature\": 0,
      \"lora\": [{\"id\": $id, \"scale\": 1}]}" |
      python3 -c 'import json, sys; print("Once upon a time" + json.load(sys.stdin)["content"])' >"$W/anelab-serve$id.txt"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  for f in base lora peft fused serve0 serve1; do echo "[interop_llamacpp_lora] anelab $f: $(cat "$W/anelab-$f.txt")"; done
}

status=0
# same NAME LLAMA_FILE ANELAB_FILE: one line. Trailing newlines dropped (llama.cpp prints two), and one leading space
# of llama.cpp's: with this SentencePiece vocabulary it prints the prompt's first piece "▁Once" as " Once", anelab
# (as run.c) without the space.
same() {
  local a b
  a="$(cat "$2")" b="$(cat "$3")"
  a="${a# }"
  if [ "$a" == "$b" ]; then
    echo "[interop_llamacpp_lora] $1: AGREE (${#b} characters)"
  else
    echo "[interop_llamacpp_lora] $1: DIFFER: $(cmp "$2" "$3" 2>&1 | head -n1)"
    status=1
  fi
}

compare() {
  [ -x "$LLAMA/llama-completion" ] || { echo "[interop_llamacpp_lora] no llama-completion in $LLAMA (set LLAMA_CPP_BIN)" >&2; exit 2; }
  [ -f "$W/anelab-lora.txt" ] || { echo "[interop_llamacpp_lora] no $W/anelab-lora.txt: run 'prepare $W' first" >&2; exit 2; }
  export LD_LIBRARY_PATH="$LLAMA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local l=("$LLAMA/llama-completion" "${common[@]}" -no-cnv -nr -ctk f32 -ctv f32 -fa off)
  "${l[@]}" -m "$W/base.gguf" --lora "$W/adapter.gguf" >"$W/llama-lora.txt" 2>"$W/llama-lora.log" </dev/null
  "${l[@]}" -m "$W/fused.gguf" >"$W/llama-fused.txt" 2>"$W/llama-fused.log" </dev/null
  "${l[@]}" -m "$W/base.gguf" >"$W/llama-base.txt" 2>"$W/llama-base.log" </dev/null
  check
}

check() {
  for f in lora fused base; do echo "[interop_llamacpp_lora] llama.cpp $f: $(cat "$W/llama-$f.txt")"; done
  same "llama.cpp base+adapter.gguf vs anelab base+adapter.gguf" "$W/llama-lora.txt" "$W/anelab-lora.txt"
  same "llama.cpp base+adapter.gguf vs anelab base+PEFT adapter" "$W/llama-lora.txt" "$W/anelab-peft.txt"
  same "llama.cpp fused.gguf vs anelab base+adapter.gguf" "$W/llama-fused.txt" "$W/anelab-lora.txt"
  same "llama.cpp base+adapter.gguf vs anelab serve, lora id 0 (GGUF)" "$W/llama-lora.txt" "$W/anelab-serve0.txt"
  same "llama.cpp base+adapter.gguf vs anelab serve, lora id 1 (PEFT)" "$W/llama-lora.txt" "$W/anelab-serve1.txt"
  same "llama.cpp base vs anelab base" "$W/llama-base.txt" "$W/anelab-base.txt"
  if [ "$(cat "$W/llama-base.txt")" == "$(cat "$W/llama-lora.txt")" ]; then
    echo "[interop_llamacpp_lora] the adapter changed nothing in llama.cpp's answer: the check proves nothing"
    status=1
  fi
}

case "$mode" in
  prepare) prepare ;;
  compare) compare ;;
  check) check ;;
  all) prepare; compare ;;
  *) echo "[interop_llamacpp_lora] unknown mode $mode (prepare, compare, check, all)" >&2; exit 2 ;;
esac
exit $status

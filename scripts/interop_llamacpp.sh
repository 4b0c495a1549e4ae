#!/usr/bin/env bash
# llama.cpp loads anelab's GGUF exports, and its greedy continuation equals anelab's.
#
#   scripts/interop_llamacpp.sh [options] ARCH...
#     ARCH                  qwen3 | llama3 | gemma3: a small random model of the architecture (below);
#                           qwen3-0.6b | llama3.2-1b | gemma3-1b: the full preset (what llama-bench runs);
#                           gemma3-1b-qwen: gemma3-1b's shape with the Qwen vocabulary (151936 rows) and
#                           llama.cpp's embedding scale (sqrt(1152) in fp32, not the preset's bf16 34)
#     --llama DIR           llama.cpp's bin directory (default: $LLAMA_CPP_BIN, else /tmp/llq/build/bin);
#                           never built or changed here; absent: the script says so and exits 0
#     --anelab BIN          anelab binary (default: build/bin/anelab)
#     --work DIR            where the model files are made (default: a temporary directory, removed)
#     -n N                  tokens to generate (default 24)
#     --dtype D             weights of every model (default: fp32 for the small ones, fp16 for the presets;
#                           llama.cpp's CPU path rounds the activations to fp16 against fp16 weights)
#
# Per ARCH: `anelab convert --random PRESET X.anelab [--shape ...]`, `anelab convert X.anelab X.gguf
# --tokenizer qwen/tokenizer.json` (from $ANELAB_DATA or ../shared/data; the Qwen2.5 BPE, padded to the
# model's vocab with [PAD] tokens), then
#   llama-completion COMMON -no-cnv -nr -ctk f32 -ctv f32 -fa off
#   anelab infer generate COMMON -q --backend cpu --dtype fp32
# with one llama.cpp command line COMMON = -m X.gguf -p "Once upon a time" -n N -t 2 --temp 0 -c 512 -s 1
# --top-k 40 --top-p 0.95 given unchanged to both,
# and compares the generated text byte for byte (both print the prompt, then the continuation; the KV
# cache in f32 so that llama.cpp computes in fp32 as anelab does). Prints one line per model
# (AGREE / DIFFER with the first differing byte) and exits 1 when any differs or fails to load.
# llama3.2-1b's 128256 and gemma3-1b's 262144 rows fit no tokenizer here (Llama 3's and Gemma's are not in
# the data): they are exported without one (llama.cpp's vocabulary "none") and only run through
# `llama-bench -p 16 -n 4` (LOADS / FAILED).
#
# The small random models keep each architecture's features, with the Qwen vocabulary (151936 rows):
#   qwen3   qwen3-0.6b,  dim 128, 2 layers, 4 heads, 2 kv, head_dim 64 (not dim / heads), hidden 384
#   llama3  llama3.2-1b, dim 256, 2 layers, 4 heads, 2 kv, head_dim 64, hidden 512, llama3 RoPE scaling
#           (written as rope_freqs; head_dim 64 has the 2+ blended frequencies anelab's reader fits it from)
#   gemma3  gemma3-1b,   dim 256, 3 layers, 4 heads, 1 kv, head_dim 64, hidden 512, window 8 (< the 28
#           positions), every 3rd layer global, linear RoPE factor 8 on global layers, final soft-cap 30;
#           embedding scale sqrt(256) = 16 and score scale 1 / sqrt(64), the values llama.cpp derives
set -euo pipefail

LLAMA="${LLAMA_CPP_BIN:-/tmp/llq/build/bin}"
ANELAB="build/bin/anelab"
WORK=""
N=24
DTYPE=""
ARCHS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --llama) LLAMA="$2"; shift 2 ;;
    --anelab) ANELAB="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    -n) N="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "interop_llamacpp.sh: unknown option $1" >&2; exit 2 ;;
    *) ARCHS+=("$1"); shift ;;
  esac
done
[ ${#ARCHS[@]} -gt 0 ] || { echo "interop_llamacpp.sh: name at least one ARCH (qwen3 llama3 gemma3 ...)" >&2; exit 2; }
if [ ! -x "$LLAMA/llama-completion" ]; then
  echo "interop_llamacpp.sh: skipped: no llama.cpp build at $LLAMA (llama-completion; set LLAMA_CPP_BIN or --llama)"
  exit 0
fi
[ -x "$ANELAB" ] || { echo "interop_llamacpp.sh: no anelab binary at $ANELAB (build it, or --anelab)" >&2; exit 2; }
DATA="${ANELAB_DATA:-$(cd "$(dirname "$0")/.." && pwd)/../shared/data}"
[ -f "$DATA/qwen/tokenizer.json" ] || { echo "interop_llamacpp.sh: no $DATA/qwen/tokenizer.json (set ANELAB_DATA)" >&2; exit 2; }
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
export LD_LIBRARY_PATH="$LLAMA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PROMPT="Once upon a time"
status=0

for arch in "${ARCHS[@]}"; do
  tok="$DATA/qwen/tokenizer.json" shape="" dtype="fp32"
  case "$arch" in
    qwen3) preset=qwen3-0.6b
      shape='{"dim":128,"hidden_dim":384,"n_layers":2,"n_heads":4,"n_kv_heads":2,"head_dim":64,"max_seq_len":512}' ;;
    llama3) preset=llama3.2-1b
      shape='{"dim":256,"hidden_dim":512,"n_layers":2,"n_heads":4,"n_kv_heads":2,"head_dim":64,"max_seq_len":512,"vocab_size":151936}' ;;
    gemma3) preset=gemma3-1b
      shape='{"dim":256,"hidden_dim":512,"n_layers":3,"n_heads":4,"n_kv_heads":1,"head_dim":64,"max_seq_len":512,'
      shape+='"vocab_size":151936,"embed_scale":16.0,"attn_scale":0.125,"sliding_window":8,"sliding_pattern":3,'
      shape+='"rope_linear_factor":8.0,"logit_softcap":30.0}' ;;
    qwen3-0.6b) preset="$arch" dtype=fp16 ;;
    llama3.2-1b|gemma3-1b) preset="$arch" dtype=fp16 tok="" ;;
    gemma3-1b-qwen) preset=gemma3-1b dtype=fp16 shape='{"vocab_size":151936,"max_seq_len":512,"embed_scale":33.941125497}' ;;
    *) echo "interop_llamacpp.sh: unknown ARCH $arch (qwen3 llama3 gemma3 qwen3-0.6b llama3.2-1b gemma3-1b gemma3-1b-qwen)" >&2
      exit 2 ;;
  esac
  m="$WORK/$arch"
  dtype="${DTYPE:-$dtype}"
  "$ANELAB" convert --random "$preset" "$m.anelab" --dtype "$dtype" ${shape:+--shape "$shape"} >/dev/null
  "$ANELAB" convert "$m.anelab" "$m.gguf" ${tok:+--tokenizer "$tok"} >/dev/null 2>"$m.notes"
  if [ -z "$tok" ]; then
    if "$LLAMA/llama-bench" -m "$m.gguf" -p 16 -n 4 -r 1 -t 2 >"$m.bench.txt" 2>"$m.bench.log" </dev/null; then
      echo "$arch: LOADS (llama-bench: $(grep -cE '\| +(pp|tg)[0-9]+ ' "$m.bench.txt") tests ran; no tokenizer, no text to compare)"
    else
      echo "$arch: llama.cpp FAILED to run it: $(grep -m1 -iE 'error|failed|exception' "$m.bench.log" || tail -n1 "$m.bench.log")"
      status=1
    fi
    continue
  fi
  # One llama-completion command line, given unchanged to both programs (docs/inference.md: the flags mean the same).
  common=(-m "$m.gguf" -p "$PROMPT" -n "$N" -t 2 --temp 0 -c 512 -s 1 --top-k 40 --top-p 0.95)
  if ! "$LLAMA/llama-completion" "${common[@]}" -no-cnv -nr -ctk f32 -ctv f32 -fa off \
      >"$m.llama.txt" 2>"$m.llama.log" </dev/null; then
    echo "$arch: llama.cpp FAILED to run it: $(grep -m1 -iE 'error|failed|exception' "$m.llama.log" || tail -n1 "$m.llama.log")"
    status=1
    continue
  fi
  if ! "$ANELAB" infer generate "${common[@]}" -q --backend cpu --dtype fp32 >"$m.anelab.txt" 2>"$m.anelab.log"; then
    echo "$arch: anelab FAILED to run it: $(tail -n1 "$m.anelab.log")"
    status=1
    continue
  fi
  a="$(cat "$m.llama.txt")" b="$(cat "$m.anelab.txt")"  # trailing newlines dropped (llama.cpp prints two)
  if [ "$a" == "$b" ]; then
    echo "$arch: AGREE ($N tokens, ${#b} characters of text)"
  else
    echo "$arch: DIFFER: $(cmp "$m.llama.txt" "$m.anelab.txt" 2>&1 | head -n1)"
    echo "  llama.cpp: $(od -c "$m.llama.txt" | head -n3 | tr -s ' ' | tr '\n' ' ')"
    echo "  anelab:    $(od -c "$m.anelab.txt" | head -n3 | tr -s ' ' | tr '\n' ' ')"
    status=1
  fi
  [ -s "$m.notes" ] && sed "s/^/  $arch: /" "$m.notes"
done
exit $status

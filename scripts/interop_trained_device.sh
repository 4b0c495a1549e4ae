#!/usr/bin/env bash
# On the device machine, from the repo root: trains the models of the interop tables of docs/benchmarks_history.md on
# the GPU (scripts/train_shaped_model.py: a Stories110M-shaped and a Qwen2.5-0.5B-shaped model on the
# TinyStories text, all paragraphs but the last 40, which are quant_interop.sh's held-out text) while anelab
# and llama.cpp build (scripts/device_build.sh), then runs scripts/quant_interop.sh on both: each quantizer,
# each type, greedy tokens and logits of both programs on the same files.
#
#   stage here:  as scripts/device_build.sh, and .devbin/data/{llama2c/tokenizer.bin,qwen/tokenizer.json,
#                tinystories/tinystories_valid_prefix.txt}
#   on device:   scripts/interop_trained_device.sh OUT [STEPS [quant_interop.sh options...]]
# Environment: PY (/opt/torch/.venv/bin/python3), THREADS (8, for both programs), SHAPES ("stories110m qwen2.5-0.5b").
# OUT receives build.txt, training-SHAPE.{txt,json}, interop.txt and table.md (the models stay in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/interop_trained_device.sh OUT [STEPS [quant_interop.sh options...]]}
steps=${2:-400}
shift $(($# < 2 ? $# : 2))
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PY:-/opt/torch/.venv/bin/python3}
D=$PWD/.devbin/data
A=/tmp/dev-anelab/bin/anelab
W=/tmp/dev-trained
mkdir -p "$W"
scripts/device_build.sh llama-quantize llama-completion llama-perplexity > "$OUT/build.txt" 2>&1 || { cat "$OUT/build.txt"; exit 1; }
cat "$OUT/build.txt"
awk -v RS= -v ORS='\n\n' -v dir="$W" '{ p[NR] = $0 }
  END { for (i = 1; i <= NR; ++i) print p[i] > (dir "/" (i <= NR - 40 ? "train.txt" : "heldout.txt")) }' \
  "$D/tinystories/tinystories_valid_prefix.txt"
specs=()
for shape in ${SHAPES:-stories110m qwen2.5-0.5b}; do
  case $shape in
    stories110m) tok=$D/llama2c/tokenizer.bin json=() spec_tok=$tok ;;
    qwen2.5-0.5b) tok=$D/qwen/tokenizer.json json=(--tokenizer-json "$tok") spec_tok=- ;;
    *) echo "[interop_trained_device] unknown shape $shape" >&2; exit 2 ;;
  esac
  model=$W/$shape
  if [[ ! -s $model/training.json ]]; then
    for part in train heldout; do "$A" tokenize "$W/$part.txt" "$W/$shape-$part.bin" --tokenizer "$tok" > /dev/null; done
    PYTHONUNBUFFERED=1 "$PY" scripts/train_shaped_model.py --shape "$shape" --tokens "$W/$shape-train.bin" \
      --heldout-tokens "$W/$shape-heldout.bin" "${json[@]}" --out "$model" --steps "$steps" 2>&1 |
      grep -v "Writing model shards" | tee "$OUT/training-$shape.txt"
  fi
  cp "$model/training.json" "$OUT/training-$shape.json"
  specs+=(--model "$shape-trained:$model:$spec_tok")
done
ANELAB=$A LLAMA_BIN=/tmp/dev-llama/build/bin ANELAB_DATA="$D" THREADS=${THREADS:-8} \
  scripts/quant_interop.sh "${specs[@]}" "$@" /tmp/dev-interop 2>&1 | tee "$OUT/interop.txt"
cp /tmp/dev-interop/table.md "$OUT/"

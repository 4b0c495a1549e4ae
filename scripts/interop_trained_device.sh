#!/usr/bin/env bash
# On the device machine, from the repo root: trains the Qwen2.5-0.5B-shaped model of docs/quantization.md's
# interop table on the GPU (scripts/train_qwen_shaped.py) while anelab and llama.cpp build
# (scripts/device_build.sh), then runs scripts/quant_interop.sh on it: both quantizers, each type, greedy
# tokens and logits of both programs on the same files.
#
#   stage here:  as scripts/device_build.sh, and .devbin/data/{qwen/tokenizer.json,tinystories/tinystories_valid_prefix.txt}
#   on device:   scripts/interop_trained_device.sh OUT [STEPS [quant_interop.sh options...]]
# Environment: PY (/opt/torch/.venv/bin/python3), THREADS (8, for both programs).
# OUT receives training.txt, training.json, interop.txt and table.md (the trained model stays in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/interop_trained_device.sh OUT [STEPS [quant_interop.sh options...]]}
steps=${2:-400}
shift $(($# < 2 ? $# : 2))
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PY:-/opt/torch/.venv/bin/python3}
model=/tmp/dev-qwen-trained
scripts/device_build.sh llama-quantize llama-completion llama-perplexity > "$OUT/build.txt" 2>&1 & build=$!
if [[ ! -s $model/training.json ]]; then
  PYTHONUNBUFFERED=1 "$PY" scripts/train_qwen_shaped.py --text .devbin/data/tinystories/tinystories_valid_prefix.txt \
    --tokenizer .devbin/data/qwen/tokenizer.json --out "$model" --steps "$steps" 2>&1 | tee "$OUT/training.txt"
fi
cp "$model/training.json" "$OUT/"
wait $build || { cat "$OUT/build.txt"; exit 1; }
cat "$OUT/build.txt"
ANELAB=/tmp/dev-anelab/bin/anelab LLAMA_BIN=/tmp/dev-llama/build/bin ANELAB_DATA="$PWD/.devbin/data" THREADS=${THREADS:-8} \
  scripts/quant_interop.sh --model "qwen2.5-0.5b-trained:$model:-" "$@" /tmp/dev-interop 2>&1 | tee "$OUT/interop.txt"
cp /tmp/dev-interop/table.md "$OUT/"

#!/usr/bin/env bash
# Trains the model of the quality tables of docs/benchmarks_history.md: the stories3m preset (dim 256, hidden 768,
# 4 layers, 8 heads, vocab 512: every matrix row is whole 256-blocks, so q4_k_m really is Q4_K + Q6_K)
# from scratch, fp32 CPU strategy, on the TinyStories validation prefix tokenized with tok512, all
# paragraphs but the last HELDOUT (those are OUT/heldout.txt, the text the quantized models are scored on).
# Then exports OUT/stories3m.gguf (fp32, tokenizer included) and, unless NO_QUALITY=1, runs the quality
# measurement: `anelab perplexity` fp32 base vs q8_0, q4_0, q4_k_m, q5_k_s, q5_k_m (OUT/quality.txt).
#
# Usage: scripts/train_quality_model.sh OUT [STEPS]     (STEPS default 700; best.ckpt, the lowest validation loss, is exported)
# Environment: ANELAB (build/bin/anelab), ANELAB_DATA (../shared/data), HELDOUT (300 paragraphs),
#   BATCH (8), SEQ (128), LR (3e-3), CTX (SEQ: the perplexity chunk, at most the trained length).
# Nothing it writes belongs in the repository: give an OUT outside the checkout. On the 2-core dev box under
# load the defaults took 19 min (1.6 s per step; validation loss 2.41 at step 700, the unigram entropy of
# the training tokens being 4.83 nats); BATCH 16 and SEQ 256 take 6.9 s per step there. A second call with
# the same OUT resumes the run (bit-exact) if it was stopped.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ANELAB=${ANELAB:-$here/build/bin/anelab}
DATA=${ANELAB_DATA:-$here/../shared/data}
HELDOUT=${HELDOUT:-300}
BATCH=${BATCH:-8}
SEQ=${SEQ:-128}
LR=${LR:-3e-3}
CTX=${CTX:-$SEQ}
out=${1:?usage: scripts/train_quality_model.sh OUT [STEPS]}
steps=${2:-700}
tok=$DATA/llama2c/tok512.bin
src=$DATA/tinystories/tinystories_valid_prefix.txt
[ -x "$ANELAB" ] || { echo "[train_quality_model] $ANELAB not found (set ANELAB)" >&2; exit 1; }
mkdir -p "$out"

# Paragraphs are blank-line separated: all but the last HELDOUT train, the last HELDOUT are held out.
awk -v RS= -v ORS='\n\n' -v keep="$HELDOUT" -v dir="$out" '{ p[NR] = $0 }
  END { for (i = 1; i <= NR; ++i) print p[i] > (dir "/" (i <= NR - keep ? "train.txt" : "heldout.txt")) }' "$src"
"$ANELAB" tokenize "$out/train.txt" "$out/train.bin" --tokenizer "$tok"

[ -f "$out/run/last.ckpt" ] && resume=(--resume) || resume=()
time "$ANELAB" train --preset stories3m --data "$out/train.bin" --tokenizer "$tok" --run-dir "$out/run" \
  "${resume[@]}" --steps "$steps" --batch-size "$BATCH" --seq-len "$SEQ" --lr "$LR" --warmup-steps 100 \
  --schedule cosine --weight-decay 0.1 --beta2 0.95 --grad-clip 1 --loss-scale none --strategy cpu --seed 42 \
  --val-frac 0.05 --eval-every 100 --sample-every 500 --checkpoint-every 100
"$ANELAB" export "$out/run" "$out/stories3m.gguf"

[ "${NO_QUALITY:-0}" = 1 ] && exit 0
# Quality: each mix against the fp32 model's logits of the held-out text.
{
  "$ANELAB" perplexity -q -m "$out/stories3m.gguf" --text "$out/heldout.txt" --ctx "$CTX" --save-logits "$out/base.npy"
  for t in q8_0 q4_0 q4_k_m q5_k_s q5_k_m; do
    "$ANELAB" convert "$out/stories3m.gguf" "$out/stories3m-$t.gguf" --dtype "$t" > /dev/null
    echo "== $t ($(wc -c < "$out/stories3m-$t.gguf") bytes)"
    "$ANELAB" perplexity -q -m "$out/stories3m-$t.gguf" --text "$out/heldout.txt" --ctx "$CTX" --kl-base "$out/base.npy"
  done
} | tee "$out/quality.txt"

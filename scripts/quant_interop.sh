#!/usr/bin/env bash
# Quantized GGUF interop between anelab and llama.cpp (docs/benchmarks_history.md, the "interop" entries).
#
# Per model and per type (q8_0, q4_0, q4_k_m, q5_k_s, q5_k_m): the model is written once as an fp32 GGUF and
# quantized by both sides (`anelab convert --dtype T` and `llama-quantize`); the two files' tensors are compared
# byte for byte (scripts/gguf_compare.py: same dtype and bytes per tensor); then on each of the two files
#   * 64 greedy tokens from "Once upon a time" by llama-completion and by `anelab infer generate`, both with
#     --ignore-eos (all 64 tokens, the end-of-text token masked), the texts compared: identical, or the
#     number of leading characters they share;
#   * llama-perplexity saves its log-probabilities of the held-out text (--kl-divergence-base) and
#     `anelab perplexity --kl-base` scores the same tokens: KL(llama.cpp || anelab), top-1 agreement,
#     max |Δ log p| (absolute and relative to the logit range), and whether the text tokenizes alike;
#     then again with `--dtype fp32` (the file's weights dequantized, exact activations): how far llama.cpp
#     itself is from exact arithmetic on these weights, the scale its activation rounding sets.
# One table at the end (also OUT/table.md); outputs already in OUT are reused (delete them to redo). llama.cpp runs with an fp32 KV cache and no flash attention, so
# what differs between the two programs is the activation rounding and the order of the sums.
#
# Usage: scripts/quant_interop.sh [--model NAME:FILE:TOKENIZER]... [--types "q8_0 q4_0 q4_k_m"] OUT (also q5_k_s, q5_k_m)
#   default models: stories110m (random weights, Llama 2 tokenizer.bin) and qwen2.5-0.5b (random weights,
#   Qwen tokenizer.json), written with `anelab convert --random PRESET --seed 1`. FILE may be any model anelab
#   reads (a trained run dir, an .anelab file); TOKENIZER "-" when the file has one.
# Environment: ANELAB (build/bin/anelab), LLAMA_BIN (/tmp/llq/build/bin: llama-completion, llama-quantize,
#   llama-perplexity), ANELAB_DATA (../shared/data), THREADS (2), CTX (128), CHUNKS (4), TOKENS (64).
# Nothing it writes belongs in the repository: give an OUT outside the checkout (or under build/).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ANELAB=${ANELAB:-$here/build/bin/anelab}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llq/build/bin}
DATA=${ANELAB_DATA:-$here/../shared/data}
THREADS=${THREADS:-2}
CTX=${CTX:-128}
CHUNKS=${CHUNKS:-4}
TOKENS=${TOKENS:-64}
PROMPT="Once upon a time"
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# llama.cpp's OpenMP threads spin while they wait: on a loaded machine that made it 10x slower here.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

die() { echo "[quant_interop] $*" >&2; exit 1; }

models=() types="q8_0 q4_0 q4_k_m" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --model) models+=("$2"); shift 2 ;;
    --types) types=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$out" ] || die "one OUT directory, got $out and $1"; out=$1; shift ;;
  esac
done
[ -n "$out" ] || die "usage: scripts/quant_interop.sh [--model NAME:FILE:TOKENIZER]... [--types T] OUT"
[ ${#models[@]} -gt 0 ] || models=("stories110m:random:$DATA/llama2c/tokenizer.bin"
                                   "qwen2.5-0.5b:random:$DATA/qwen/tokenizer.json")
for b in llama-completion llama-quantize llama-perplexity; do
  [ -x "$LLAMA_BIN/$b" ] || die "$LLAMA_BIN/$b not found (set LLAMA_BIN; llama-perplexity: cmake --build BUILD --target llama-perplexity)"
done
[ -x "$ANELAB" ] || die "$ANELAB not found (set ANELAB or build the anelab target)"
mkdir -p "$out"

# Held-out text: the last 40 paragraphs of the TinyStories validation prefix (paragraphs are blank-line separated).
text=$out/heldout.txt
awk -v RS= -v ORS='\n\n' '{ p[NR] = $0 } END { for (i = NR - 39; i <= NR; ++i) print p[i] }' \
  "$DATA/tinystories/tinystories_valid_prefix.txt" > "$text"

llama_type() { case $1 in q8_0) echo Q8_0 ;; q4_0) echo Q4_0 ;; q4_k_m) echo Q4_K_M ;; q5_k_s) echo Q5_K_S ;; q5_k_m) echo Q5_K_M ;; *) die "unknown type $1" ;; esac; }

# The fp32 GGUF both quantizers start from.
make_base() {  # NAME FILE TOKENIZER -> $out/NAME/f32.gguf
  local name=$1 file=$2 tok=$3 dir=$out/$1
  mkdir -p "$dir"
  [ -s "$dir/f32.gguf" ] && return 0
  local tokarg=()
  [ "$tok" = "-" ] || tokarg=(--tokenizer "$tok")
  if [ "$file" = random ]; then
    "$ANELAB" convert --random "$name" "$dir/f32.gguf" --seed 1 --dtype fp32 "${tokarg[@]}" >/dev/null
  else
    "$ANELAB" convert "$file" "$dir/f32.gguf" --dtype fp32 "${tokarg[@]}" >/dev/null
  fi
}

# Greedy text of both programs on one GGUF: "identical (N chars)" or "first N of M chars". Outputs of an
# earlier run in OUT are reused.
greedy() {  # GGUF LOGPREFIX
  local f=$1 p=$2
  [ -s "$p.llama.txt" ] || { "$LLAMA_BIN/llama-completion" -m "$f" -p "$PROMPT" -n "$TOKENS" --temp 0 -no-cnv -nr --ignore-eos \
    -t "$THREADS" -fa off -ctk f32 -ctv f32 --no-warmup --simple-io < /dev/null > "$p.llama.tmp" 2> "$p.llama.log" \
    && mv "$p.llama.tmp" "$p.llama.txt"; } || { echo "llama.cpp failed"; return; }
  [ -s "$p.anelab.txt" ] || { "$ANELAB" infer generate -q -m "$f" -i "$PROMPT" --max-tokens "$TOKENS" --temp 0 --ignore-eos \
    --threads "$THREADS" > "$p.anelab.tmp" 2> "$p.anelab.log" && mv "$p.anelab.tmp" "$p.anelab.txt"; } \
    || { echo "anelab failed: $(tail -1 "$p.anelab.log")"; return; }
  python3 - "$p.llama.txt" "$p.anelab.txt" <<'EOF'
import sys
# llama-completion prints the prompt with SentencePiece's leading space: compare without outer whitespace.
# After a BOS inside the text (a llama2.c-style model ends a story with BOS; --ignore-eos does not mask it)
# anelab drops the next piece's leading space as run.c does and llama.cpp keeps it: "apart from whitespace"
# says the texts differ only there.
a, b = (open(x, encoding="utf-8", errors="replace").read().strip() for x in sys.argv[1:3])
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
squeeze = lambda t: "".join(t.split())
if a == b:
    print(f"identical ({len(a)} chars)")
elif squeeze(a) == squeeze(b):
    print(f"identical apart from whitespace ({len(a)}/{len(b)} chars)")
else:
    print(f"first {n} of {len(a)}/{len(b)} chars")
EOF
}

# "KL top1 dlogp rel" of one `anelab perplexity --kl-base` output.
kl_figures() {
  sed -n 's/.*: mean \([-0-9.e]*\) +\/- [0-9.e]*, top-1 agreement \([0-9.]*\)%, max |dlogp| \([0-9.e+-]*\) (\([0-9.e+-]*\) of.*/\1 \2 \3 \4/p' "$1"
}

# llama-perplexity's base file (kept in OUT, reused), then anelab on the same tokens twice: as it runs the
# file (int8 activations) and with --dtype fp32 (the same dequantized weights, fp32 activations: what
# llama.cpp's own activation rounding costs, with the other ops' differences); then anelab's int8 run
# against its own fp32 run (what anelab's activation rounding costs). Prints "PPL_llama PPL_anelab tokens
# KL top1 dlogp rel fKL ftop1 fdlogp frel sKL stop1 sdlogp srel".
logits() {  # GGUF LOGPREFIX
  local f=$1 p=$2 d
  [ -s "$p.kld" ] || { "$LLAMA_BIN/llama-perplexity" -m "$f" -f "$text" -c "$CTX" --chunks "$CHUNKS" -b "$CTX" -nr \
    -t "$THREADS" -fa off -ctk f32 -ctv f32 --kl-divergence-base "$p.kld.tmp" > "$p.lppl.log" 2>&1 \
    && mv "$p.kld.tmp" "$p.kld"; } || { echo "llama-perplexity failed"; return; }
  for d in auto fp32; do
    [ -s "$p.$d.txt" ] || { "$ANELAB" perplexity -q -m "$f" --text "$text" --kl-base "$p.kld" --threads "$THREADS" \
      --dtype "$d" > "$p.$d.tmp" 2> "$p.$d.log" && mv "$p.$d.tmp" "$p.$d.txt"; } \
      || { echo "anelab failed: $(tail -1 "$p.$d.log")"; return; }
  done
  # anelab's own activation rounding: its int8 run against its fp32 run (the same chunks as llama.cpp's).
  [ -s "$p.self.txt" ] || { "$ANELAB" perplexity -q -m "$f" --text "$text" --ctx "$CTX" --chunks "$CHUNKS" \
    --threads "$THREADS" --dtype fp32 --save-logits "$p.fp32.npy" > /dev/null 2> "$p.self.log" \
    && "$ANELAB" perplexity -q -m "$f" --text "$text" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" \
    --kl-base "$p.fp32.npy" > "$p.self.tmp" 2>> "$p.self.log" && mv "$p.self.tmp" "$p.self.txt" && rm -f "$p.fp32.npy"; } \
    || { echo "anelab failed: $(tail -1 "$p.self.log")"; return; }
  local lppl appl toks
  lppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$p.lppl.log")
  appl=$(sed -n 's/^PPL = \([0-9.]*\).*/\1/p' "$p.auto.txt")
  if grep -q "tokenization DIFFERS" "$p.auto.txt"; then toks=differ; else toks=same; fi
  echo "$lppl $appl $toks $(kl_figures "$p.auto.txt") $(kl_figures "$p.fp32.txt") $(kl_figures "$p.self.txt")"
}

table=$out/table.md
{
  echo "| model | type | file | tensors identical in both quantizers' files | greedy $TOKENS: llama.cpp vs anelab | tokens | PPL llama.cpp / anelab | anelab vs llama.cpp: mean KL, top-1, max abs dlogp (rel. to range) | anelab fp32 acts vs llama.cpp | anelab int8 vs fp32 acts |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$table"
for spec in "${models[@]}"; do
  IFS=: read -r name file tok <<< "$spec"
  echo "== $name: fp32 GGUF" >&2
  make_base "$name" "$file" "$tok"
  dir=$out/$name
  for t in $types; do
    [ -s "$dir/anelab-$t.gguf" ] || "$ANELAB" convert "$dir/f32.gguf" "$dir/anelab-$t.gguf" --dtype "$t" >/dev/null
    [ -s "$dir/llama-$t.gguf" ] || "$LLAMA_BIN/llama-quantize" "$dir/f32.gguf" "$dir/llama-$t.gguf" "$(llama_type "$t")" \
      "$THREADS" > "$dir/llama-$t.quantize.log" 2>&1 || rm -f "$dir/llama-$t.gguf"
    same=""
    [ -s "$dir/anelab-$t.gguf" ] && [ -s "$dir/llama-$t.gguf" ] \
      && same=$(python3 "$here/scripts/gguf_compare.py" "$dir/anelab-$t.gguf" "$dir/llama-$t.gguf" | tee "$dir/compare-$t.txt" | head -1)
    for who in anelab llama; do
      f=$dir/$who-$t.gguf
      if [ ! -s "$f" ]; then
        echo "| $name | $t | $who-quantize | | $who's quantizer failed: $(grep -m1 -i 'fail\|error' "$dir/$who-$t.quantize.log" 2>/dev/null | cut -c1-80) | | | | | |" >> "$table"
        continue
      fi
      echo "== $name $t, $who's file" >&2
      g=$(greedy "$f" "$dir/$who-$t")
      r=$(logits "$f" "$dir/$who-$t")
      read -r lppl appl toks kl top1 dlogp rel fkl ftop1 fdlogp _ skl stop1 sdlogp _ <<< "$r" || true
      if ! [[ $r =~ ^[0-9] ]]; then  # a failure, in words
        echo "| $name | $t | $who-quantize | $same | $g | | $r | | | |" >> "$table"
      else
        echo "| $name | $t | $who-quantize | $same | $g | $toks | $lppl / $appl | $kl, $top1%, $dlogp ($rel) | $fkl, $ftop1%, $fdlogp | $skl, $stop1%, $sdlogp |" >> "$table"
      fi
    done
  done
done
cat "$table"

#!/usr/bin/env bash
# The prompt cache's figure of issue 38 (scripts/serve_prefix_ttft.py): `anelab serve --parallel 8` on a random-weight
# model of Qwen2.5-0.5B's shape (DTYPE, the file scripts/serve_batch_bench.sh writes), a request sharing a PREFIX-token
# prefix with the one before it: its time to first token against the first's (target <= 15 %). Prints the JSON line.
#
#   scripts/serve_prefix_ttft.sh ANELAB TOKENIZER_JSON WORK_DIR [THREADS=8] [DTYPE=q8_0] [PREFIX=1024] [ROUNDS=3]
set -euo pipefail
ANELAB=$1 TOK=$2 WORK=$3 THREADS=${4:-8} DTYPE=${5:-q8_0} PREFIX=${6:-1024} ROUNDS=${7:-3}
mkdir -p "$WORK"
M="$WORK/qwen2.5-0.5b-random-$DTYPE.gguf"
[[ -f $M ]] || "$ANELAB" convert --random qwen2.5-0.5b "$M" --dtype "$DTYPE" --tokenizer "$TOK"
rm -f "$WORK/port-prefix"
"$ANELAB" serve --model "$M" --backend cpu --parallel 8 --threads "$THREADS" --ctx $((PREFIX + 64)) --port 0 \
  --port-file "$WORK/port-prefix" --no-log 2>"$WORK/serve-prefix.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1200); do [[ -s $WORK/port-prefix ]] && break; sleep 0.1; done
[[ -s $WORK/port-prefix ]] || { cat "$WORK/serve-prefix.log"; exit 1; }
python3 "$(dirname "$0")/serve_prefix_ttft.py" --port "$(cat "$WORK/port-prefix")" --prefix "$PREFIX" --rounds "$ROUNDS"

#!/usr/bin/env bash
# Continuous-batching throughput of `anelab serve` (scripts/serve_load_test.py --bench): a random-weight model of
# Qwen2.5-0.5B's shape (or SHAPE_JSON's override, `convert --shape`), served with --parallel 8; one client, then 8
# clients, each sending ROUNDS streamed greedy requests of 128 tokens one after another. Prints the bench's JSON line
# (aggregate decode tok/s per client count, its ratio to one client's, time to first token p50/p99).
#
#   scripts/serve_batch_bench.sh ANELAB TOKENIZER_JSON WORK_DIR [THREADS=8] [DTYPE=q8_0] [SHAPE_JSON] [ROUNDS=2]
set -euo pipefail
ANELAB=$1 TOK=$2 WORK=$3 THREADS=${4:-8} DTYPE=${5:-q8_0} SHAPE=${6:-} ROUNDS=${7:-2}
mkdir -p "$WORK"
M="$WORK/qwen2.5-0.5b-random-$DTYPE.gguf"
[[ -f $M ]] || "$ANELAB" convert --random qwen2.5-0.5b "$M" --dtype "$DTYPE" --tokenizer "$TOK" ${SHAPE:+--shape "$SHAPE"}
rm -f "$WORK/port"
"$ANELAB" serve --model "$M" --backend cpu --parallel 8 --threads "$THREADS" --ctx 1024 --port 0 \
  --port-file "$WORK/port" --no-log 2>"$WORK/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1200); do [[ -s $WORK/port ]] && break; sleep 0.1; done
[[ -s $WORK/port ]] || { cat "$WORK/serve.log"; exit 1; }
python3 "$(dirname "$0")/serve_load_test.py" --port "$(cat "$WORK/port")" --bench 1,8 --max-tokens 128 \
  --bench-rounds "$ROUNDS" --timeout 600

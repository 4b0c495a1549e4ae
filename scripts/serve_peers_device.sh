#!/usr/bin/env bash
# On the device machine (many-core x86, no network), from the repo root: the serving figures of issue 38 in one run.
# Builds anelab and llama.cpp's llama-server (scripts/device_build.sh, the same compiler), then per weight type
# (Q8_0, f16; a random-weight model of Qwen2.5-0.5B's shape, the same GGUF for both programs, THREADS threads):
#   - anelab serve --parallel 8: 1 client, then 8 clients x ROUNDS streamed greedy requests of 128 tokens
#     (scripts/serve_batch_bench.sh: aggregate decode tok/s, ratio to one client's, time to first token p50/p99);
#   - llama-server -np 8 -cb on the same GGUF with the same client script (scripts/serve_load_test.py --bench 1,8;
#     with ignore_eos, so that its answers run to 128 tokens as anelab's do on this model);
#   - the engine's batched step without the server (scripts/gemv_batch_bench/step.cpp);
#   - speculative decoding (prompt lookup, --draft-max 7: 8 rows, one pass of the tile kernel) against plain decoding on a repetitive prompt:
#     `anelab generate` decode tok/s of both and whether the greedy token ids are identical.
#
#   - the prompt cache: a request sharing a 1024-token prefix with the one before it, its time to first token against
#     the first's (scripts/serve_prefix_ttft.sh, target <= 15 %);
#   - speculative decoding with a draft model (--model-draft, --draft-max 4), greedy, token ids against plain decoding:
#     the f16 target drafted by its own random weights in Q8_0 (the same seed: a draft that agrees, half the bytes),
#     the Q8_0 target by a smaller random model of the same vocabulary (dim 256, 4 layers: a draft that disagrees).
# ANELAB=path: a prebuilt anelab (its shared libraries in .devbin/lib), only llama-server is built; STEP=0 skips the
# engine-step bench (it needs an anelab build tree); SERVE_ONLY=1 runs only the two servers' benches.
#
#   stage here:  scripts/bench_ab/stage.sh && rm -rf .devbin/old-src;
#                .devbin/llsrc.tgz = llama.cpp's `git archive HEAD CMakeLists.txt cmake common ggml include licenses src
#                  tools vendor scripts/ui-assets.cmake` (the server's UI target runs that script; no UI is built);
#                .devbin/data/qwen/tokenizer.json
#   on device:   scripts/serve_peers_device.sh OUT_DIR [THREADS=8] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$1 T=${2:-8} ROUNDS=${3:-2}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ANELAB_PREBUILT=${ANELAB:-} LLAMA_SERVER=ON scripts/device_build.sh llama-server 2>&1 | tee "$OUT/build.txt" || true
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)|L3' | sed 's/^/[serve_peers] /' | tee "$OUT/cpu.txt"
A=${ANELAB:-/tmp/dev-anelab/bin/anelab} LS=/tmp/dev-llama/build/bin/llama-server TOK=$PWD/.devbin/data/qwen/tokenizer.json
W=/tmp/serve-peers
mkdir -p "$W"
PORT=18438
llama_bench() {  # llama_bench GGUF LABEL
  [[ -x $LS ]] || { echo "[serve_peers] no llama-server: $(grep -m3 -A3 error /tmp/dev-llama.log 2>/dev/null)"; return 0; }
  "$LS" -m "$1" -np 8 -cb -t "$T" -c 8192 --port "$PORT" --host 127.0.0.1 >"$W/llama-server-$2.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" \
      >/dev/null 2>&1 && break
    sleep 0.2
  done
  python3 scripts/serve_load_test.py --port "$PORT" --bench 1,8 --max-tokens 128 --bench-rounds "$ROUNDS" \
    --timeout 600 --extra-body '{"ignore_eos": true}' || tail -20 "$W/llama-server-$2.log"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
}
PROMPT=$(python3 -c 'print(" ".join(["The river runs past the old stone house, and the green field lies to the north of it."] * 12))')
for D in q8_0 f16; do
  echo "[serve_peers] $D: anelab serve --parallel 8"
  scripts/serve_batch_bench.sh "$A" "$TOK" "$W" "$T" "$D" "" "$ROUNDS" | tee "$OUT/anelab_$D.json"
  M="$W/qwen2.5-0.5b-random-$D.gguf"
  echo "[serve_peers] $D: llama-server -np 8 -cb"
  llama_bench "$M" "$D" | tee "$OUT/llama_server_$D.json"
  if [[ ${STEP:-1} != 0 ]]; then
    echo "[serve_peers] $D: the engine's batched step alone (Engine::decode_batch, B = 1, 2, 4, 8)"
    PROG=step scripts/gemv_batch_bench/run.sh /tmp/dev-anelab "$M" "$T" 2>&1 | tee "$OUT/step_$D.txt"
  fi
  [[ ${SERVE_ONLY:-0} == 0 ]] || continue
  echo "[serve_peers] $D: a request sharing a 1024-token prefix with the one before it"
  scripts/serve_prefix_ttft.sh "$A" "$TOK" "$W" "$T" "$D" 1024 2 | grep '^{' | tee "$OUT/prefix_ttft_$D.json"
  for draft in 0 7; do
    "$A" infer generate --model "$M" --tokenizer "$TOK" --backend cpu --threads "$T" --temp 0 --max-tokens 256 \
      --draft-max "$draft" --print-ids --prompt "$PROMPT" >"$W/spec_${D}_$draft.ids" 2>"$W/spec_${D}_$draft.err" ||
      tail -5 "$W/spec_${D}_$draft.err"
    echo "[serve_peers] $D draft-max $draft: $(grep -E 'decode:|speculative' "$W/spec_${D}_$draft.err" | tr '\n' ' ')" |
      tee -a "$OUT/speculative.txt"
  done
  if cmp -s "$W/spec_${D}_0.ids" "$W/spec_${D}_7.ids"; then same=identical; else same=DIFFERENT; fi
  echo "[serve_peers] $D speculative vs plain token ids: $same ($(wc -w <"$W/spec_${D}_0.ids") ids)" |
    tee -a "$OUT/speculative.txt"
done
[[ ${SERVE_ONLY:-0} == 0 ]] || exit 0
# Speculative decoding with a draft model: greedy, token ids against plain decoding (spec_*_0.ids above).
"$A" convert --random qwen2.5-0.5b "$W/draft-small-q8_0.gguf" --dtype q8_0 --tokenizer "$TOK" \
  --shape '{"dim": 256, "hidden_dim": 1024, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "head_dim": 64}' >/dev/null
for pair in "f16 $W/qwen2.5-0.5b-random-q8_0.gguf own-weights-q8_0" "q8_0 $W/draft-small-q8_0.gguf small-random"; do
  read -r D DM NAME <<<"$pair"
  M="$W/qwen2.5-0.5b-random-$D.gguf"
  "$A" infer generate --model "$M" --tokenizer "$TOK" --backend cpu --threads "$T" --temp 0 --max-tokens 256 \
    --model-draft "$DM" --draft-max 4 --print-ids --prompt "$PROMPT" >"$W/draft_${D}.ids" 2>"$W/draft_${D}.err" ||
    tail -5 "$W/draft_${D}.err"
  if cmp -s "$W/spec_${D}_0.ids" "$W/draft_${D}.ids"; then same=identical; else same=DIFFERENT; fi
  echo "[serve_peers] $D draft model $NAME: $(grep -E 'decode:|speculative' "$W/draft_${D}.err" | tr '\n' ' ') ids vs plain: $same" |
    tee -a "$OUT/speculative.txt"
done

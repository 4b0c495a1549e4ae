#!/usr/bin/env bash
# Quantized models, anelab vs llama.cpp, on a many-core x86 host without dev packages (the device machine),
# from the repo root. Needs in .devbin/ (git-ignored): deps/ and lib/ as scripts/bench_ab/stage.sh stages
# them, llama.tar.gz (a llama.cpp source snapshot: CMake files, ggml with its CPU backend, src, include,
# common, vendor, tools) and tokenizer.bin (llama2.c's 32000-token Llama tokenizer).
#   scripts/bench_quant_peers.sh OUT_DIR [PRESET] [PP] [TG]      (default stories110m, 128, 64)
# Builds llama.cpp (llama-quantize, llama-bench, llama-completion; -DGGML_NATIVE=ON) and anelab (Release,
# -march=native) side by side, makes one random fp16 model of PRESET's shape with the Llama tokenizer, then
#   quantizes it with anelab (`convert --dtype q8_0|q4_0|q4_k_m`) and with llama-quantize (Q8_0, Q4_0, Q4_K_M);
#   greedy 64 tokens from "Once upon a time" with llama-completion and `anelab infer generate` on each file
#   (interop both ways: anelab's files in llama.cpp, llama-quantize's in anelab);
#   llama-bench -p PP -n TG and `anelab infer bench` at 2 and 8 threads on the anelab-made files.
set -uo pipefail
OUT="${1:?OUT_DIR}" PRESET="${2:-stories110m}" PP="${3:-128}" TG="${4:-64}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
J=$(nproc) W=/tmp/qpeers LL=/tmp/llama
mkdir -p "$W" "$LL"
log() { echo "[quant_peers] $*" | tee -a "$OUT/summary.txt"; }
t0=$(date +%s)
tar -xzf .devbin/llama.tar.gz -C "$LL"
( cmake -S "$LL" -B "$LL/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF >"$W/llama.cfg.log" 2>&1 &&
  cmake --build "$LL/build" -j"$J" --target llama-quantize llama-bench llama-completion >"$W/llama.log" 2>&1 ) & p1=$!
( cmake -S . -B /tmp/an -G Ninja -DCMAKE_BUILD_TYPE=Release -DANELAB_BUILD_TESTS=OFF \
    "-DCMAKE_PREFIX_PATH=$PWD/.devbin/deps" >"$W/an.cfg.log" 2>&1 &&
  cmake --build /tmp/an -j"$J" --target anelab >"$W/an.log" 2>&1 ) & p2=$!
wait $p1 || { tail -30 "$W/llama.cfg.log" "$W/llama.log"; exit 1; }
wait $p2 || { tail -30 "$W/an.cfg.log"; grep -m5 -A5 error "$W/an.log"; exit 1; }
A=/tmp/an/bin/anelab B="$LL/build/bin"
log "built both in $(($(date +%s) - t0)) s; $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(c++ --version | head -1)"
cd "$W"
$A convert --random "$PRESET" m.anelab --dtype fp16 >/dev/null
$A convert m.anelab m_f16.gguf --tokenizer "$OLDPWD/.devbin/tokenizer.bin" >/dev/null
declare -A LQ=([q8_0]=Q8_0 [q4_0]=Q4_0 [q4_k_m]=Q4_K_M)
for q in q8_0 q4_0 q4_k_m; do
  s=$(date +%s%N)
  $A convert m.anelab "an_$q.gguf" --dtype "$q" --tokenizer "$OLDPWD/.devbin/tokenizer.bin" >/dev/null
  log "anelab convert --dtype $q: $(stat -c %s an_$q.gguf) bytes in $(( ($(date +%s%N) - s) / 1000000 )) ms"
  s=$(date +%s%N)
  "$B/llama-quantize" m_f16.gguf "ll_$q.gguf" "${LQ[$q]}" "$J" >"ll_$q.quant.log" 2>&1 || tail -5 "ll_$q.quant.log"
  log "llama-quantize ${LQ[$q]}: $(stat -c %s ll_$q.gguf) bytes in $(( ($(date +%s%N) - s) / 1000000 )) ms"
done
$A info ll_q4_k_m.gguf | grep -E "^tensors" | sed 's/^/[quant_peers] llama-quantize Q4_K_M /' | tee -a "$OUT/summary.txt"
$A info an_q4_k_m.gguf | grep -E "^tensors" | sed 's/^/[quant_peers] anelab q4_k_m /' | tee -a "$OUT/summary.txt"
# Greedy tokens, both programs, every file (the ids come back as text through the same Llama vocab).
for f in an_q8_0 an_q4_0 an_q4_k_m ll_q8_0 ll_q4_0 ll_q4_k_m; do
  "$B/llama-completion" -m "$f.gguf" -p "Once upon a time" -n 64 --temp 0 -no-cnv -nr -t 8 --no-warmup \
    --no-display-prompt -s 1 2>"$f.ll.err" >"$f.ll.txt" </dev/null || tail -3 "$f.ll.err"
  $A infer generate -m "$f.gguf" -t 0 --max-tokens 64 -i "Once upon a time" -q --threads 8 2>"$f.an.err" >"$f.an.txt" || tail -3 "$f.an.err"
  python3 - "$f" <<'PY' | tee -a "$OUT/summary.txt"
import sys
f = sys.argv[1]
ll = open(f + ".ll.txt", encoding="utf-8", errors="replace").read().strip()
an = open(f + ".an.txt", encoding="utf-8", errors="replace").read().strip()
an = an[len("Once upon a time"):].strip() if an.startswith("Once upon a time") else an
lw, aw = ll.split(), an.split()
same = 0
for a, b in zip(lw, aw):
    if a != b: break
    same += 1
print(f"[quant_peers] greedy {f}: {'IDENTICAL' if lw == aw else 'differ'}; {same} leading words equal of {len(lw)} (llama.cpp) / {len(aw)} (anelab)")
PY
done
cp ./*.ll.txt ./*.an.txt "$OUT/" 2>/dev/null
tar -czf "$OUT/texts.tar.gz" ./*.ll.txt ./*.an.txt ./*.err 2>/dev/null; rm -f "$OUT"/*.ll.txt "$OUT"/*.an.txt
for th in 2 8; do
  for q in q8_0 q4_k_m q4_0; do
    "$B/llama-bench" -m "an_$q.gguf" -p "$PP" -n "$TG" -t "$th" -r 2 -o md 2>/dev/null | grep -E "pp|tg" | sed "s/^/[quant_peers] llama.cpp $q t$th /" | tee -a "$OUT/summary.txt"
    $A infer bench -m "an_$q.gguf" --threads "$th" --prompt-len "$PP" --gen-len "$TG" --backend cpu -q 2>&1 |
      grep -E "prefill|decode|RSS" | sed "s/^/[quant_peers] anelab $q t$th /" | tee -a "$OUT/summary.txt"
  done
  $A infer bench -m m.anelab --threads "$th" --prompt-len "$PP" --gen-len "$TG" --backend cpu -q 2>&1 |
    grep -E "decode|RSS" | sed "s/^/[quant_peers] anelab fp16 t$th /" | tee -a "$OUT/summary.txt"
done
log "total $(($(date +%s) - t0)) s"

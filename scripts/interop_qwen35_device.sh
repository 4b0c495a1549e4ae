#!/usr/bin/env bash
# Qwen3.5 against llama.cpp on the device machine: anelab's GGUF export of a small random qwen35-shaped model,
# greedy text (llama-completion -nr --temp 0) and KL divergence (llama-perplexity --kl-divergence-base, read back
# by `anelab perplexity --kl-base`). anelab runs here; only llama.cpp runs on the device (CPU, -DGGML_NATIVE=ON).
#
#   scripts/interop_qwen35_device.sh prepare CARRY   (here) model.gguf, text.txt, llsrc.tgz (trimmed llama.cpp
#                                                    source from $LLAMA_SRC_GIT, a git dir) and this script in CARRY
#   scripts/interop_qwen35_device.sh device CARRY    (on the device, from the repo root; $OUT set) builds
#                                                    llama-completion + llama-perplexity, writes per model
#                                                    $OUT/M.{llama.txt, kl_base.bin, completion.log, perplexity.log}
#   scripts/interop_qwen35_device.sh compare CARRY OUTDIR   (here) anelab's greedy text and KL against them
#
# The model: preset qwen3.5-0.8b's kind at dim 64, 4 layers (3 Gated DeltaNet + 1 gated attention), 4 heads / 2 kv
# of 32, linear 2 key heads / 4 value heads of 32 (llama.cpp needs key dim = value dim), hidden 192, the Qwen2.5
# vocabulary (151936 rows; ../shared/data/qwen/tokenizer.json), as model.gguf (f16 matrices) and model_q8_0.gguf
# (Q8_0; the value heads' column permutation of ssm_out works on whole 32-blocks). One llama-completion command line
# COMMON = -m model.gguf -p "Once upon a time" -n 32 -t 4 --temp 0 -c 256 -s 1 given to both programs.
set -euo pipefail
cmd="$1" carry="$2"
COMMON=(-p "Once upon a time" -n 32 -t 4 --temp 0 -c 256 -s 1)
case "$cmd" in
  prepare)
    mkdir -p "$carry"
    A="${ANELAB:-build/bin/anelab}" DATA="${ANELAB_DATA:-../shared/data}"
    shape='{"dim":64,"hidden_dim":192,"n_layers":4,"n_heads":4,"n_kv_heads":2,"head_dim":32,"max_seq_len":512,'
    shape+='"vocab_size":151936,"linear_k_heads":2,"linear_v_heads":4,"linear_k_dim":32,"linear_v_dim":32}'
    "$A" convert --random qwen3.5-0.8b "$carry/model.anelab" --dtype fp16 --shape "$shape" >/dev/null
    "$A" convert "$carry/model.anelab" "$carry/model.gguf" --tokenizer "$DATA/qwen/tokenizer.json" >/dev/null
    "$A" convert "$carry/model.anelab" "$carry/model_q8_0.gguf" --dtype q8_0 --tokenizer "$DATA/qwen/tokenizer.json" \
      >/dev/null
    rm -f "$carry/model.anelab"
    head -c 6000 "$DATA/tinystories/"$(ls "$DATA/tinystories" | grep -m1 -E '\.txt$') >"$carry/text.txt"
    git --git-dir="$LLAMA_SRC_GIT" archive --format=tar HEAD CMakeLists.txt cmake common ggml include licenses src \
      tools vendor | gzip -1 >"$carry/llsrc.tgz"
    cp "$0" "$carry/run.sh"
    du -sh "$carry"
    ;;
  device)
    t0=$(date +%s)
    # (a machine still warm from an earlier call keeps /tmp/ll: then llsrc.tgz need not travel)
    [ -f /tmp/ll/CMakeLists.txt ] || { mkdir -p /tmp/ll && tar -xzf "$carry/llsrc.tgz" -C /tmp/ll; }
    cmake -S /tmp/ll -B /tmp/ll/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_MTMD=OFF >/tmp/ll/cfg.log 2>&1
    cmake --build /tmp/ll/build -j"$(nproc)" --target llama-completion llama-perplexity >/tmp/ll/build.log 2>&1
    echo "built in $(($(date +%s) - t0)) s"
    B=/tmp/ll/build/bin
    for m in model model_q8_0; do
      "$B/llama-completion" -m "$carry/$m.gguf" "${COMMON[@]}" -no-cnv -nr -ctk f32 -ctv f32 -fa off \
        >"$OUT/$m.llama.txt" 2>"$OUT/$m.completion.log" </dev/null || tail -5 "$OUT/$m.completion.log"
      "$B/llama-perplexity" -m "$carry/$m.gguf" -f "$carry/text.txt" -c 96 --chunks 1 -t 4 -ctk f32 -ctv f32 -fa off \
        --kl-divergence-base "$OUT/$m.kl_base.bin" >"$OUT/$m.perplexity.log" 2>&1 || tail -5 "$OUT/$m.perplexity.log"
      grep -E "Final estimate" "$OUT/$m.perplexity.log" | tail -1 || true
    done
    ls -la "$OUT"
    ;;
  compare)
    out="$3" A="${ANELAB:-build/bin/anelab}"
    for m in model model_q8_0; do
      # --dtype auto: fp16 compute for the f16 file, the Q8_0 blocks with int8 dot products for the other
      "$A" infer generate -m "$carry/$m.gguf" "${COMMON[@]}" -q --backend cpu >"$carry/$m.anelab.txt"
      if [ "$(cat "$out/$m.llama.txt")" == "$(cat "$carry/$m.anelab.txt")" ]; then echo "$m: greedy 32 tokens AGREE"
      else echo "$m: greedy 32 tokens DIFFER: $(cmp "$out/$m.llama.txt" "$carry/$m.anelab.txt" | head -1)"; fi
      echo "$m: llama-perplexity $(grep -m1 'Final estimate' "$out/$m.perplexity.log" | sed 's/.*Final/Final/')"
      "$A" perplexity -q -m "$carry/$m.gguf" -f "$carry/text.txt" --kl-base "$out/$m.kl_base.bin" 2>&1 |
        grep -E "PPL|KL" | sed "s/^/$m: anelab /"
    done
    ;;
  *) echo "interop_qwen35_device.sh: prepare | device | compare" >&2; exit 2 ;;
esac

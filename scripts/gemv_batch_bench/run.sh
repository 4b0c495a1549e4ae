#!/usr/bin/env bash
# The batched decode GEMV against single-token GEMVs (main.cpp says what it measures), built against an existing
# build tree's libraries (test_infer's: anelab_infer and its dependencies) with the same flags.
#
#   scripts/gemv_batch_bench/run.sh [BUILD_DIR=build] [THREADS=1] [REPS=20] [ROWS=896] [COLS=4864]
#   PROG=step scripts/gemv_batch_bench/run.sh [BUILD_DIR=build] MODEL.gguf [THREADS=8]   (the engine's step: step.cpp)
#   PROG=split scripts/gemv_batch_bench/run.sh [BUILD_DIR=build] MODEL.gguf [THREADS=8] [REPS=15]   (its time per component)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
shift || true
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
c++ -std=c++20 -O3 -march=native -fno-tree-slp-vectorize -I. "scripts/gemv_batch_bench/${PROG:-main}.cpp" \
  -Wl,--start-group $(ls "$B"/lib/*.a | grep -v -e fake_shim -e cli_probe -e dashboard -e imgui) -Wl,--end-group \
  -lpthread -ldl -o "$out/bench"
"$out/bench" "$@"

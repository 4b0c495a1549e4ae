#!/usr/bin/env bash
# The typed (bf16) training products against the fp32 ones (main.cpp says what it measures): main.cpp and
# train/cpu_linalg.cpp compiled with the build's flags, linked against an existing build tree's libraries below
# anelab_train (models, kernels, core: no MPI or TOML), so the binary runs where anelab's staged libraries are not.
#
#   scripts/typed_products_bench/run.sh [BUILD_DIR=build] [THREADS="2 8"] [REPS=3]
#   KEEP=PATH scripts/typed_products_bench/run.sh ...   (also keeps the binary at PATH, e.g. to stage it elsewhere)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build} THREADS=${2:-2 8} REPS=${3:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
c++ -std=c++20 -O3 -march=native -fno-tree-slp-vectorize -I. -isystem /usr/include/eigen3 \
  scripts/typed_products_bench/main.cpp train/cpu_linalg.cpp \
  -Wl,--start-group $(ls "$B"/lib/*.a | grep -v -e fake_shim -e cli_probe -e dashboard -e imgui -e anelab_train) \
  -Wl,--end-group \
  -lpthread -ldl -o "$out/bench"
[[ -n "${KEEP:-}" ]] && cp "$out/bench" "$KEEP"
for t in $THREADS; do "$out/bench" "$t" "$REPS"; done

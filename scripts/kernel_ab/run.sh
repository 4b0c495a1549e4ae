#!/usr/bin/env bash
# The hot CPU kernels of two source revisions side by side in one process (same compiler, same flags):
# the emulator GEMM on the conv 768->2048 S=256 shape (const A prepacked), the inference fp16 GEMM
# (2304x768 weights, 256 tokens) and 20 fp16 GEMVs of the same matrix, one thread, alternating old/new.
#
#   scripts/kernel_ab/run.sh [OLD_REV] [REPS]     (default: 14b1714, the last commit before the SIMD layer; 31)
#
# The old revision's sources are compiled with `-Danelab=anelab_old` so both live in one binary.
# Min times are the robust figure on a shared machine; pin with taskset on a quiet one.
set -euo pipefail
cd "$(dirname "$0")/../.."
REV="${1:-14b1714}" REPS="${2:-31}"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/old"
git archive "$REV" framework infer | tar -x -C "$W/old"
F=(-std=c++20 -O3 -march=native -fno-tree-slp-vectorize)
SRCS=(framework/emulator/step_common.cpp framework/core/fp16.cpp framework/core/thread_pool.cpp
      framework/core/error.cpp framework/mil/types.cpp infer/cpu_math.cpp)
gemm_src() { [[ -f "$1/framework/emulator/gemm.cpp" ]] && echo gemm.cpp || echo linear.cpp; }  # the GEMM's file at that revision
for f in framework/emulator/GEMM "${SRCS[@]}"; do
  o="${f/GEMM/$(gemm_src "$W/old")}" n="${f/GEMM/$(gemm_src .)}"
  g++ "${F[@]}" -Danelab=anelab_old -I"$W/old" -c "$W/old/$o" -o "$W/old_$(basename "$o").o" &
  g++ "${F[@]}" -I. -c "$n" -o "$W/new_$(basename "$n").o"
  wait
done
[[ -f framework/simd/soft_fp16.cpp ]] && g++ "${F[@]}" -I. -c framework/simd/soft_fp16.cpp -o "$W/new_soft.o"
printf '#define anelab anelab_old\n#include "harness.h"\n%s\n' \
  'double old_conv(void*& s) { if (!s) s = new anelab::Bench; return static_cast<anelab::Bench*>(s)->conv(); }
double old_gemm(void*& s) { if (!s) s = new anelab::Bench; return static_cast<anelab::Bench*>(s)->gemm(); }
double old_gemv(void*& s) { if (!s) s = new anelab::Bench; return static_cast<anelab::Bench*>(s)->gemv(); }' >"$W/old.cpp"
sed '1d; s/old_/new_/g' "$W/old.cpp" >"$W/new.cpp"
g++ "${F[@]}" -I"$W/old" -Iscripts/kernel_ab -c "$W/old.cpp" -o "$W/old.o"
g++ "${F[@]}" -I. -Iscripts/kernel_ab -c "$W/new.cpp" -o "$W/new.o"
g++ -O2 scripts/kernel_ab/main.cpp "$W"/*.o -lpthread -o "$W/kernel_ab"
"$W/kernel_ab" "$REPS"

#!/usr/bin/env bash
# MIL identity of the kernel generators between two checkouts (e.g. main and a refactoring branch), each
# already built in <tree>/build (Release): builds dump_kernels.cpp against each tree's libraries, dumps every
# training and prefill kernel, and compares.
#
#   scripts/mil_identity/run.sh BEFORE_TREE AFTER_TREE [WORK_DIR]
#
# Prints the kernels whose MIL text differs and, for those, whether the multiset of ops is the same (an op
# reorder or renaming) or not; exits 1 when a weight or emulator-output hash differs (numerics changed).
set -euo pipefail
A="${1:?usage: run.sh BEFORE_TREE AFTER_TREE [WORK_DIR]}" B="${2:?usage: run.sh BEFORE_TREE AFTER_TREE [WORK_DIR]}"
WORK="${3:-/tmp/anelab_mil_identity}"
SRC="$(cd "$(dirname "$0")" && pwd)/dump_kernels.cpp"
build() {  # tree out
  local L="$1/build/lib"
  c++ -I"$1" -isystem /usr/include/eigen3 -O2 -std=c++20 "$SRC" -o "$2" "$L/libanelab_infer.a" "$L/libanelab_train.a" \
    "$L/libanelab_kernels.a" "$L/libanelab_backends.a" "$L/libanelab_emulator.a" "$L/libanelab_ane.a" \
    "$L/libanelab_runtime.a" "$L/libanelab_models.a" "$L/libanelab_mil.a" "$L/libanelab_core.a" -lpthread -ldl
}
rm -rf "$WORK" && mkdir -p "$WORK/before" "$WORK/after"
build "$A" "$WORK/dump_before" && build "$B" "$WORK/dump_after"
"$WORK/dump_before" "$WORK/before" && "$WORK/dump_after" "$WORK/after"
ops() { sed 's/.*= \([a-z_]*\)(.*/\1/' "$1" | sort; }
n=0 same_ops=0
for f in "$WORK"/before/*.mil; do
  g="$WORK/after/$(basename "$f")"
  cmp -s "$f" "$g" && continue
  n=$((n + 1))
  if diff -q <(ops "$f") <(ops "$g") >/dev/null; then same_ops=$((same_ops + 1)); echo "reordered/renamed: $(basename "$f")"
  else echo "ops differ:        $(basename "$f") ($(wc -l <"$f") -> $(wc -l <"$g") lines)"; fi
done
echo "$(ls "$WORK"/before/*.mil | wc -l) kernels, $n with different text ($same_ops with the same ops)"
if ! diff -rq --exclude='*.mil' "$WORK/before" "$WORK/after"; then echo "weights or outputs differ"; exit 1; fi
echo "weights and emulator outputs identical"

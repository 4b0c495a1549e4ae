#!/usr/bin/env bash
# MIL identity of the kernel generators between two checkouts (e.g. main and a refactoring branch): every
# training and prefill kernel's MIL text, a hash of its weights and of its emulator output (dump_kernels.cpp).
#
#   scripts/mil_identity/run.sh BEFORE AFTER [WORK_DIR]
#
# BEFORE and AFTER are each a source tree configured in <tree>/build (the script builds its target
# mil_identity_dump there and dumps into WORK_DIR/before or /after) or a directory a dump was written to earlier
# (it holds *.hash files; e.g. WORK_DIR/before of a run on the old code, kept for the comparison after a refactor).
#
# Exits 0 only when both dumps succeed and every kernel's MIL text, weights and output are identical; otherwise
# prints one line per difference (for a MIL text difference, whether the multiset of ops is the same: a reorder
# or a renaming) and a last line naming what differed, and exits 1.
set -euo pipefail
usage="usage: run.sh BEFORE AFTER [WORK_DIR] (each a source tree with build/, or a dump directory)"
A="${1:?$usage}" B="${2:?$usage}"
WORK="${3:-/tmp/anelab_mil_identity}"
die() { echo "mil_identity: $*" >&2; exit 1; }

dump() {  # source-or-dump-dir side -> prints the dump directory
  local src="$1" side="$2"
  if compgen -G "$src/*.hash" >/dev/null; then echo "$src"; return; fi
  [[ -f "$src/build/CMakeCache.txt" ]] || die "$src: neither a dump directory (*.hash) nor a tree configured in build/"
  cmake --build "$src/build" --target mil_identity_dump >&2 ||
    die "$src: building mil_identity_dump failed (a tree older than the target needs it added)"
  rm -rf "${WORK:?}/$side" && mkdir -p "$WORK/$side"
  "$src/build/bin/mil_identity_dump" "$WORK/$side" >&2 || die "$src: the dump failed (kernels named above)"
  echo "$WORK/$side"
}
mkdir -p "$WORK"
DA="$(dump "$A" before)"
DB="$(dump "$B" after)"
n_a=$(ls "$DA"/*.hash | wc -l)
[[ "$n_a" -gt 0 ]] || die "$DA: no kernels dumped"

ops() { sed 's/.*= \([a-z_]*\)(.*/\1/' "$1" | sort; }
bad=0 text=0
# Kernels on one side only.
while read -r f; do
  echo "only in $(dirname "$f" | sed "s|^$DA|before|;s|^$DB|after|"): $(basename "$f")"
  bad=$((bad + 1))
done < <(diff <(cd "$DA" && ls) <(cd "$DB" && ls) | sed -n "s|^< |$DA/|p;s|^> |$DB/|p")
for f in "$DA"/*.mil; do
  g="$DB/$(basename "$f")"
  [[ -f "$g" ]] || continue
  cmp -s "$f" "$g" && continue
  text=$((text + 1))
  if diff -q <(ops "$f") <(ops "$g") >/dev/null; then echo "MIL text differs, same ops: $(basename "$f")"
  else echo "MIL ops differ: $(basename "$f") ($(wc -l <"$f") -> $(wc -l <"$g") lines)"; fi
done
num=0
for f in "$DA"/*.hash; do
  g="$DB/$(basename "$f")"
  [[ -f "$g" ]] || continue
  if ! cmp -s "$f" "$g"; then
    echo "weights or emulator output differ: $(basename "$f" .hash) ($(tr '\n' ' ' <"$f")-> $(tr '\n' ' ' <"$g"))"
    num=$((num + 1))
  fi
done
echo "$n_a kernels: $text with different MIL text, $num with different weights or outputs, $bad on one side only"
if ((text + num + bad > 0)); then
  echo "mil_identity: NOT identical ($DA vs $DB)"
  exit 1
fi
echo "mil_identity: every MIL program, weight blob and emulator output identical"

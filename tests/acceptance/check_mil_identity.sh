#!/usr/bin/env bash
# scripts/mil_identity/run.sh on hand-made dump directories: identical dumps pass; a changed output hash, a changed
# MIL text and a kernel on one side only each exit 1 with a line naming the kernel.
set -uo pipefail
RUN="$1/scripts/mil_identity/run.sh" W="$2"
rm -rf "$W" && mkdir -p "$W/a" "$W/b"
for d in a b; do
  printf 'x = add(a, b)\n' >"$W/$d/k1.mil"; printf 'weights 01\noutput 02\n' >"$W/$d/k1.hash"
  printf 'y = mul(a, b)\n' >"$W/$d/k2.mil"; printf 'weights 03\noutput 04\n' >"$W/$d/k2.hash"
done
fail() { echo "FAIL: $*"; exit 1; }
expect() {  # want_rc pattern
  out="$(bash "$RUN" "$W/a" "$W/b" "$W/work" 2>&1)"; rc=$?
  echo "$out"
  [[ $rc == "$1" ]] || fail "exit $rc, want $1"
  grep -q -- "$2" <<<"$out" || fail "no line matching '$2'"
}
expect 0 "every MIL program, weight blob and emulator output identical"
printf 'weights 01\noutput 05\n' >"$W/b/k1.hash"
expect 1 "weights or emulator output differ: k1"
printf 'weights 01\noutput 02\n' >"$W/b/k1.hash"; printf 'y = mul(b, a)\n' >"$W/b/k2.mil"
expect 1 "MIL text differs, same ops: k2.mil"
printf 'y = mul(a, b)\n' >"$W/b/k2.mil"; rm "$W/b/k2.hash"
expect 1 "only in before: k2.hash"
echo "mil_identity script: passed"

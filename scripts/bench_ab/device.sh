#!/usr/bin/env bash
# On a quiet many-core x86 host (the device machine), from the repo root after scripts/bench_ab/stage.sh:
# builds the old revision (.devbin/old-src) and this tree with the same compiler and flags (-march=native,
# Release, `anelab` only), then runs scripts/bench_compare.sh with both binaries at the same time on two
# disjoint pairs of physical cores, swapped every round (--concurrent), and an A/A control (the old binary
# against a copy of itself) that shows the noise floor of the paired ratios.
#   scripts/bench_ab/device.sh [ROUNDS] [AA_ROUNDS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS="${1:-8}" AA_ROUNDS="${2:-4}" OUT="${3:-/tmp/bench_ab}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
J=$(nproc)
build() {  # build SRC DIR
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANELAB_BUILD_TESTS=OFF \
    "-DCMAKE_PREFIX_PATH=$PWD/.devbin/deps" >"$2.cfg.log" 2>&1 || { tail -20 "$2.cfg.log"; return 1; }
  cmake --build "$2" -j"$J" --target anelab >"$2.log" 2>&1 || { grep -m5 -B2 -A5 'error' "$2.log"; return 1; }
}
t0=$(date +%s)
build .devbin/old-src /tmp/ab-old & p1=$!
build . /tmp/ab-new & p2=$!
wait $p1 && wait $p2
cp /tmp/ab-old/bin/anelab /tmp/ab-old/bin/anelab-copy
echo "[bench_ab] built both in $(($(date +%s) - t0)) s with $(c++ --version | head -1)"
# Two lanes of two physical cores each on NUMA node 0 (first logical CPU of each core).
mapfile -t cpus < <(lscpu -p=CPU,CORE,NODE | grep -v '^#' | awk -F, '$3 == 0 && !seen[$2]++ { print $1 }')
L1="${cpus[0]},${cpus[1]}" L2="${cpus[2]},${cpus[3]}"
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)' | sed 's/^/[bench_ab] /'
echo "[bench_ab] old = $(cat .devbin/old-src/REV), new = $(git rev-parse --short HEAD 2>/dev/null || echo tree); lanes $L1 and $L2"
scripts/bench_compare.sh /tmp/ab-old/bin/anelab /tmp/ab-new/bin/anelab --threads 2 --rounds "$ROUNDS" \
  --concurrent "$L1" "$L2" --work /tmp/ab-work | tee "$OUT/ab.txt"
cp /tmp/ab-work/raw.tsv "$OUT/ab_raw.tsv"
((AA_ROUNDS > 0)) || exit 0
scripts/bench_compare.sh /tmp/ab-old/bin/anelab /tmp/ab-old/bin/anelab-copy --threads 2 --rounds "$AA_ROUNDS" \
  --concurrent "$L1" "$L2" --work /tmp/ab-work | tee "$OUT/aa.txt"
cp /tmp/ab-work/raw.tsv "$OUT/aa_raw.tsv"

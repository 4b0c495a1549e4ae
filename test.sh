#!/usr/bin/env bash
# The test suite: installs what is missing, builds, runs ctest on both cores.
# Extra arguments go to ctest (e.g. ./test.sh -L mil). Prints the time of the build and of ctest.
set -euo pipefail
cd "$(dirname "$0")"
t0=$(date +%s)
scripts/setup.sh
t1=$(date +%s)
rc=0
ctest --test-dir "${ANELAB_BUILD_DIR:-build}" --output-on-failure -j"$(getconf _NPROCESSORS_ONLN)" "$@" || rc=$?
echo "[test] setup + build $((t1 - t0)) s, ctest $(($(date +%s) - t1)) s" >&2
exit "$rc"

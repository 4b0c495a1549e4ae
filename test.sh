#!/usr/bin/env bash
# The test suite: installs what is missing, builds, runs ctest on both cores.
# Extra arguments go to ctest (e.g. ./test.sh -L mil).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
ctest --test-dir "${ANELAB_BUILD_DIR:-build}" --output-on-failure -j"$(getconf _NPROCESSORS_ONLN)" "$@"

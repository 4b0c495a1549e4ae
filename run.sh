#!/usr/bin/env bash
# Main job on the embedded default: installs what is missing, builds, and runs `anelab demo`: train a tiny
# Llama from scratch on the ANE kernels (emulator) on data/tinytales, generate from it, export it.
# Extra arguments are passed to `anelab demo` (see `build/bin/anelab demo --help`; `demo kernel` is the
# single-kernel check against float64).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec "${ANELAB_BUILD_DIR:-build}/bin/anelab" demo "$@"

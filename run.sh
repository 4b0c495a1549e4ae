#!/usr/bin/env bash
# Main job on the embedded default: installs what is missing, builds, and runs `anelab demo`.
# Extra arguments are passed to `anelab demo` (see `build/bin/anelab demo --help`).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec "${ANELAB_BUILD_DIR:-build}/bin/anelab" demo "$@"

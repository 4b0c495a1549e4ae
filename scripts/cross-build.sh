#!/usr/bin/env bash
# Cross builds of anelab: scripts/cross-build.sh TARGET [extra CMake arguments...]
#   aarch64-linux  Debian's g++-aarch64-linux-gnu; tests run under qemu-user (build-aarch64-linux/)
#   aarch64-macos  Zig 0.11's clang for macOS arm64: a Mach-O anelab (build-aarch64-macos/)
# Each target is one script under scripts/cross/ that installs what it needs, configures and builds.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-}"
if [[ -z "$target" || ! -f "scripts/cross/$target.sh" ]]; then
  echo "usage: scripts/cross-build.sh TARGET [cmake args...]; targets:" \
       "$(cd scripts/cross && ls ./*.sh 2>/dev/null | sed 's|^\./||; s|\.sh$||' | tr '\n' ' ')" >&2
  exit 2
fi
shift
exec bash "scripts/cross/$target.sh" "$@"

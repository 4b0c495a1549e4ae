#!/usr/bin/env bash
# Syntax checks of the Objective-C++ ANE shim (framework/ane/shim_apple.mm) on Linux: gobjc++ and
# clang++ (the compiler family of Apple's toolchain), each with GNUstep's Foundation headers and the
# IOSurface stand-in (tests/ane/shim_syntax_check.sh, which the ctests ane_shim_syntax and
# ane_shim_syntax_clang also run). This script installs what the checks need (Debian: gobjc++, clang,
# libgnustep-base-dev) and, unlike the ctests, treats a skipped check as a failure: CI runs it.
# A real compile of the shim needs Apple's SDK (docs/macos.md). --install-only: install, check nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for p in gobjc++ clang libgnustep-base-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[check-objc-shim] installing ${missing[*]}" >&2
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq &&
      "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi
[[ "${1:-}" == --install-only ]] && exit 0
for kind in gcc clang; do
  rc=0
  tests/ane/shim_syntax_check.sh "$PWD" "$kind" || rc=$?
  if ((rc == 77)); then
    echo "[check-objc-shim] error: the $kind syntax check was skipped although ${missing[*]:-its packages} are installed" >&2
    exit 1
  elif ((rc != 0)); then
    echo "[check-objc-shim] error: framework/ane/shim_apple.mm fails the $kind/GNUstep syntax check (above)" >&2
    exit "$rc"
  fi
done
echo "[check-objc-shim] framework/ane/shim_apple.mm: syntax OK (gobjc++ $(g++ -dumpversion) and" \
     "clang++ $(clang++ -dumpversion), GNUstep Foundation)"

#!/usr/bin/env bash
# Syntax-only check of the Apple shim on Linux: gobjc++ with GNUstep's Foundation headers and the
# IOSurface stand-in in tests/ane/standin. Exit 77 (ctest SKIP) when gobjc++ or GNUstep is missing
# (Debian: apt-get install gobjc++ libgnustep-base-dev).
set -euo pipefail
SRC="${1:?usage: shim_syntax_check.sh <source dir>}"
CXX_OBJC="$(command -v g++ || true)"
if ! echo '' | "${CXX_OBJC:-false}" -x objective-c++ -fsyntax-only - 2>/dev/null; then
  echo "SKIP: no Objective-C++ compiler (apt-get install gobjc++)"; exit 77
fi
# GNUstep's defines (runtime, exceptions, constant strings) without its -I/-M/-W/-O flags: its headers
# go in through -isystem so only the shim's own diagnostics are shown (and nothing is written).
FLAGS=""
if command -v gnustep-config >/dev/null 2>&1; then
  for f in $(gnustep-config --objc-flags); do
    case "$f" in -D*|-f*) FLAGS+=" $f" ;; esac
  done
fi
if ! ls /usr/include/GNUstep/Foundation/Foundation.h >/dev/null 2>&1 && [[ -z "$FLAGS" ]]; then
  echo "SKIP: GNUstep Foundation headers missing (apt-get install libgnustep-base-dev)"; exit 77
fi
# shellcheck disable=SC2086
exec "$CXX_OBJC" -x objective-c++ -std=gnu++20 -fsyntax-only -fobjc-exceptions -Wall -Wextra -Wno-unused-parameter -Werror \
  $FLAGS -isystem /usr/include/GNUstep -I"$SRC/tests/ane/standin" -I"$SRC" "$SRC/framework/ane/shim_apple.mm"

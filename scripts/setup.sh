#!/usr/bin/env bash
# Installs the packages anelab needs (only those missing) and builds it into build/: apt on
# Debian/Ubuntu, Homebrew on macOS (docs/macos.md). Used by run.sh, test.sh and .ci/run. Environment:
#   ANELAB_BUILD_DIR  build directory (default: build)
#   ANELAB_CMAKE_ARGS extra CMake arguments
#   ANELAB_NO_APT=1   skip the package step (e.g. without root; on macOS: no brew install)
#   ANELAB_IMGUI_DIR, ANELAB_STB_DIR  macOS: Dear ImGui (v1.86) and stb source trees for the dashboard GUI
#   ANELAB_SETUP_OS   the OS to plan for (default: uname -s)
# scripts/setup.sh --plan: on macOS, print each Homebrew formula, whether it is installed and why it is
# needed, then exit without installing or building (ANELAB_SETUP_OS=Darwin shows it on Linux).
# scripts/setup.sh --packages: install what is missing, build nothing (CI: the packages first, then its other steps'
# packages in the background while this build compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
CMAKE_ARGS=()

OS="${ANELAB_SETUP_OS:-$(uname -s)}"  # ANELAB_SETUP_OS=Darwin: show the macOS plan on another host (--plan)
PLAN=0
[[ "${1:-}" == --plan ]] && PLAN=1  # print what would be installed and why, install and build nothing
PACKAGES_ONLY=0
[[ "${1:-}" == --packages ]] && PACKAGES_ONLY=1

if [[ "$OS" == Darwin ]]; then
  # Homebrew, one formula per line: "formula|why". Written for macOS's bash 3.2 (no associative arrays).
  # No OpenMP: the project's own thread pool does the threading. Homebrew's imgui has neither the
  # GLFW/OpenGL3 backends nor a pkg-config file, so the dashboard GUI is built from source trees when
  # ANELAB_IMGUI_DIR and ANELAB_STB_DIR are set and left out otherwise (`anelab dashboard` then says so).
  BREW_TABLE=(
    "cmake|build system generator (CMakeLists.txt)"
    "ninja|the build tool CMake drives (-G Ninja)"
    "pkg-config|finds GLFW for the dashboard GUI"
    "eigen@3|linear algebra of the CPU training path (train/cpu_model.cpp; the eigen formula is Eigen 5; eigen@3 is keg-only, so its prefix goes to CMake)"
    "cli11|command-line parsing of anelab"
    "nlohmann-json|JSON: configs, events, probe reports, the HTTP server"
    "tomlplusplus|TOML experiment configs (experiments/*.toml)"
    "glfw|window and OpenGL context of the dashboard GUI"
    "googletest|the test suite (ctest)"
    "open-mpi|data-parallel training (mpirun -np N anelab train)"
  )
  echo "[setup] macOS: the compiler is Apple clang from the Xcode Command Line Tools (xcode-select --install);" \
       "the ANE backend dlopens AppleNeuralEngine.framework at run time, nothing to install for it" >&2
  have_brew=1
  command -v brew >/dev/null || have_brew=0
  missing=()
  for row in "${BREW_TABLE[@]}"; do
    p="${row%%|*}" why="${row#*|}" state="missing"
    if ((have_brew)) && brew list --formula "$p" >/dev/null 2>&1; then state="installed"; else missing+=("$p"); fi
    echo "[setup]   $p ($state): $why" >&2
  done
  if ((PLAN)); then
    if ((${#missing[@]})); then echo "[setup] would run: brew install ${missing[*]}" >&2; fi
    exit 0
  fi
  ((have_brew)) || { echo "[setup] Homebrew not found: install it (https://brew.sh) first" >&2; exit 1; }
  if [[ "${ANELAB_NO_APT:-0}" != 1 ]] && ((${#missing[@]})); then
    echo "[setup] brew install ${missing[*]}" >&2
    brew install "${missing[@]}"
  fi
  CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$(brew --prefix eigen@3);$(brew --prefix)")
  if [[ -n "${ANELAB_IMGUI_DIR:-}" ]]; then
    CMAKE_ARGS+=("-DANELAB_IMGUI_DIR=$ANELAB_IMGUI_DIR" "-DANELAB_STB_DIR=${ANELAB_STB_DIR:-}")
  else
    echo "[setup] dashboard GUI left out: set ANELAB_IMGUI_DIR and ANELAB_STB_DIR (docs/macos.md)" >&2
  fi
else
  # Debian/Ubuntu. Build tools and libraries; python3-numpy and python3-torch (Debian, run as
  # /usr/bin/python3) are the independent references of the tests; libopenblas0-openmp keeps torch off
  # the slow reference BLAS. Open MPI: data-parallel training (mpirun -np N anelab train, docs/training.md).
  PKGS=(g++ cmake ninja-build pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
        libgtest-dev libgmock-dev libopenblas-dev libopenblas0-openmp python3 python3-numpy python3-torch curl
        libimgui-dev libglfw3-dev libgl-dev libgl1-mesa-dri xvfb xauth libopenmpi-dev openmpi-bin)

  if ((PLAN)); then
    echo "[setup] Debian/Ubuntu packages: ${PKGS[*]}" >&2
    exit 0
  fi
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
fi

((PACKAGES_ONLY)) && exit 0
BUILD="${ANELAB_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CMAKE_ARGS[@]}" ${ANELAB_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(getconf _NPROCESSORS_ONLN)"

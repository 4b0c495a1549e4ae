#!/usr/bin/env bash
# On the device machine (many-core x86, no Debian dev packages, no network), from the repo root: builds
# anelab (this tree, -march=native, Release) into /tmp/dev-anelab and the given llama.cpp targets (a trimmed
# source archive staged outside the repo) into /tmp/dev-llama/build, with the same compiler, in parallel.
#
#   stage here:  scripts/bench_ab/stage.sh (header-only deps in .devbin/deps, libs in .devbin/lib), then
#                .devbin/llsrc.tgz  (llama.cpp: CMakeLists.txt cmake common ggml include licenses src tools vendor)
#   on device:   scripts/device_build.sh LLAMA_TARGET...   (e.g. llama-bench llama-quantize llama-completion)
#                (LLAMA_SERVER=ON for llama-server: without llama.cpp's scripts/ui-assets.cmake in the archive, a
#                stand-in writes an empty UI table)
# Used by scripts/bench_peers_device.sh and scripts/interop_trained_device.sh; callers set LD_LIBRARY_PATH to
# .devbin/lib for the anelab binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
J=$(nproc)
t0=$(date +%s)
(
  [[ -n ${ANELAB_PREBUILT:-} ]] && exit 0  # a binary built elsewhere is used: only llama.cpp here
  cmake -S . -B /tmp/dev-anelab -G Ninja -DCMAKE_BUILD_TYPE=Release -DANELAB_BUILD_TESTS=OFF \
    "-DCMAKE_PREFIX_PATH=$PWD/.devbin/deps" >/tmp/dev-anelab.cfg.log 2>&1 || { tail -20 /tmp/dev-anelab.cfg.log; exit 1; }
  cmake --build /tmp/dev-anelab -j"$J" --target anelab >/tmp/dev-anelab.log 2>&1 || { grep -m5 -A5 error /tmp/dev-anelab.log; exit 1; }
) & p1=$!
(
  if [[ ! -f /tmp/dev-llama/build/build.ninja ]]; then
    mkdir -p /tmp/dev-llama && tar -xzf .devbin/llsrc.tgz -C /tmp/dev-llama
    # llama-server's UI target runs scripts/ui-assets.cmake, which a trimmed archive may lack: then a stand-in that
    # calls the UI embed tool without an asset directory (its usage: OUT_CPP OUT_H [ASSET_DIR]), an empty UI table.
    if [[ ${LLAMA_SERVER:-OFF} == ON && ! -f /tmp/dev-llama/scripts/ui-assets.cmake ]]; then
      mkdir -p /tmp/dev-llama/scripts
      printf '%s\n' 'execute_process(COMMAND "${LLAMA_UI_EMBED}" "${UI_BINARY_DIR}/ui.cpp" "${UI_BINARY_DIR}/ui.h" RESULT_VARIABLE rc)' \
        'if(NOT rc EQUAL 0)' '  message(FATAL_ERROR "ui-assets stand-in: the embed tool failed: ${rc}")' 'endif()' \
        >/tmp/dev-llama/scripts/ui-assets.cmake
    fi
    cmake -S /tmp/dev-llama -B /tmp/dev-llama/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER="${LLAMA_SERVER:-OFF}" -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_MTMD=OFF >/tmp/dev-llama.cfg.log 2>&1 ||
      { tail -20 /tmp/dev-llama.cfg.log; exit 1; }
  fi
  cmake --build /tmp/dev-llama/build -j"$J" --target "$@" >/tmp/dev-llama.log 2>&1 ||
    { grep -m5 -A5 error /tmp/dev-llama.log; exit 1; }
) & p2=$!
wait $p1 && wait $p2
echo "[device_build] built anelab and llama.cpp ($*) in $(($(date +%s) - t0)) s with $(c++ --version | head -1)"

#!/usr/bin/env bash
# Stages what scripts/bench_ab/device.sh needs on a machine without Debian's dev packages (the device
# machine) into .devbin/ (git-ignored): the header-only dependencies with their CMake package files
# (deps/), an empty lib/ for shared libraries a build may need, and the old revision's sources (old-src/).   scripts/bench_ab/stage.sh [OLD_REV]   (default 14b1714, the last commit before the SIMD layer)
set -euo pipefail
cd "$(dirname "$0")/../.."
REV="${1:-14b1714}" D=.devbin/deps
rm -rf .devbin
mkdir -p "$D/include" "$D/share/cmake" "$D/share/eigen3" "$D/lib/cmake/tomlplusplus" .devbin/lib .devbin/old-src
cp -r /usr/include/eigen3 /usr/include/CLI /usr/include/nlohmann /usr/include/toml++ "$D/include/"
cp -r /usr/share/eigen3/cmake "$D/share/eigen3/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$D/share/cmake/"
cat >"$D/lib/cmake/tomlplusplus/tomlplusplusConfig.cmake" <<'CFG'
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include"
    INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1")
endif()
CFG
git archive "$REV" | tar -x -C .devbin/old-src
echo "$REV" >.devbin/old-src/REV
du -sh .devbin

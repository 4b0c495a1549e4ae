#!/usr/bin/env bash
# Stages what scripts/bench_ab/device.sh needs on a machine without Debian's dev packages (the device
# machine) into .devbin/ (git-ignored): the header-only dependencies with their CMake package files
# (deps/), cpp-httplib's library and the shared libraries it loads (lib/), and the old revision's sources
# (old-src/).   scripts/bench_ab/stage.sh [OLD_REV]   (default 14b1714, the last commit before the SIMD layer)
set -euo pipefail
cd "$(dirname "$0")/../.."
REV="${1:-14b1714}" D=.devbin/deps
rm -rf .devbin
mkdir -p "$D/include" "$D/share/cmake" "$D/share/eigen3" "$D/lib/cmake/tomlplusplus" .devbin/lib .devbin/old-src
cp -r /usr/include/eigen3 /usr/include/CLI /usr/include/nlohmann /usr/include/toml++ /usr/include/httplib.h "$D/include/"
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
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .devbin/lib/
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$D/lib/libcpp-httplib.so"
for l in libssl.so.3 libcrypto.so.3 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" .devbin/lib/
done
git archive "$REV" | tar -x -C .devbin/old-src
echo "$REV" >.devbin/old-src/REV
du -sh .devbin

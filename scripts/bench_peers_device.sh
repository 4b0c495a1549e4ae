#!/usr/bin/env bash
# On the device machine (many-core x86, no Debian dev packages, no network), from the repo root:
# builds anelab (this tree, -march=native, Release) and llama.cpp (a trimmed source archive staged outside
# the repo) with the same compiler, then runs scripts/bench_quant_peers.sh with the given options.
#
#   stage here:  scripts/bench_ab/stage.sh (header-only deps in .devbin/deps, libs in .devbin/lib), then
#                .devbin/llsrc.tgz  (llama.cpp: CMakeLists.txt cmake common ggml include licenses src tools vendor)
#                .devbin/data/{llama2c/tokenizer.bin,qwen/tokenizer.json}
#   on device:   scripts/bench_peers_device.sh OUT_DIR [bench_quant_peers.sh options...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$1"; shift
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
J=$(nproc)
t0=$(date +%s)
(
  cmake -S . -B /tmp/dev-anelab -G Ninja -DCMAKE_BUILD_TYPE=Release -DANELAB_BUILD_TESTS=OFF \
    "-DCMAKE_PREFIX_PATH=$PWD/.devbin/deps" >/tmp/dev-anelab.cfg.log 2>&1 || { tail -20 /tmp/dev-anelab.cfg.log; exit 1; }
  cmake --build /tmp/dev-anelab -j"$J" --target anelab >/tmp/dev-anelab.log 2>&1 || { grep -m5 -A5 error /tmp/dev-anelab.log; exit 1; }
) & p1=$!
(
  [[ -x /tmp/dev-llama/build/bin/llama-bench ]] && exit 0
  mkdir -p /tmp/dev-llama && tar -xzf .devbin/llsrc.tgz -C /tmp/dev-llama
  cmake -S /tmp/dev-llama -B /tmp/dev-llama/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_MTMD=OFF >/tmp/dev-llama.cfg.log 2>&1 ||
    { tail -20 /tmp/dev-llama.cfg.log; exit 1; }
  cmake --build /tmp/dev-llama/build -j"$J" --target llama-bench llama-quantize llama-completion >/tmp/dev-llama.log 2>&1 ||
    { grep -m5 -A5 error /tmp/dev-llama.log; exit 1; }
) & p2=$!
wait $p1 && wait $p2
echo "[bench_peers_device] built anelab and llama.cpp in $(($(date +%s) - t0)) s with $(c++ --version | head -1)"
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)|L3|Flags' | sed -E 's/^(Flags:).*/\1 (avx512_vnni: '"$(grep -c -m1 avx512_vnni /proc/cpuinfo)"', amx_int8: '"$(grep -c -m1 amx_int8 /proc/cpuinfo)"')/' | sed 's/^/[bench_peers_device] /'
ANELAB_DATA="$PWD/.devbin/data" scripts/bench_quant_peers.sh /tmp/dev-llama/build --anelab /tmp/dev-anelab/bin/anelab \
  --work /tmp/dev-bench "$@" | tee "$OUT/bench_quant_peers.txt"

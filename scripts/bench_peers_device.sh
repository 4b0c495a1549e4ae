#!/usr/bin/env bash
# On the device machine (many-core x86, no Debian dev packages, no network), from the repo root:
# builds anelab and llama.cpp with the same compiler (scripts/device_build.sh, which says what to stage),
# then runs scripts/bench_quant_peers.sh with the given options.
#
#   stage here:  as scripts/device_build.sh, and .devbin/data/{llama2c/tokenizer.bin,qwen/tokenizer.json}
#   on device:   scripts/bench_peers_device.sh OUT_DIR [bench_quant_peers.sh options...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$1"; shift
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
scripts/device_build.sh llama-bench llama-quantize llama-completion
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)|L3|Flags' | sed -E 's/^(Flags:).*/\1 (avx512_vnni: '"$(grep -c -m1 avx512_vnni /proc/cpuinfo)"', amx_int8: '"$(grep -c -m1 amx_int8 /proc/cpuinfo)"')/' | sed 's/^/[bench_peers_device] /'
ANELAB_DATA="$PWD/.devbin/data" scripts/bench_quant_peers.sh /tmp/dev-llama/build --anelab /tmp/dev-anelab/bin/anelab \
  --work /tmp/dev-bench "$@" | tee "$OUT/bench_quant_peers.txt"

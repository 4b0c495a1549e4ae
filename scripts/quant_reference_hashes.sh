#!/usr/bin/env bash
# The FNV-1a hashes of llama.cpp's reference quantizers (ggml's quantize_row_*_ref, what llama-quantize runs
# without an importance matrix) on the input of tests/core/quant_golden_input.h: the constants that
# tests/core/test_quant.cpp (QuantBlocks.QuantizersMatchLlamaQuantizeBytes) holds anelab's quantizers to.
#
# Usage: scripts/quant_reference_hashes.sh LLAMA_BUILD_DIR
#   LLAMA_BUILD_DIR: a llama.cpp build (its bin/ holds libggml-base.so); the program is compiled here, in a
#   temporary directory, and linked against that library: nothing of llama.cpp is copied.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/quant_reference_hashes.sh LLAMA_BUILD_DIR}
lib=$(dirname "$(find "$build" -name 'libggml-base.so*' | head -1)")
[ -n "$lib" ] || { echo "[quant_reference_hashes] no libggml-base.so under $build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ref.cpp" <<'CPP'
#include <cinttypes>
#include <cstdio>
#include <vector>
#include "tests/core/quant_golden_input.h"
extern "C" {  // ggml-quants.h (llama.cpp), block sizes in bytes per 32 / 256 values alongside
void quantize_row_q8_0_ref(const float*, void*, int64_t);
void quantize_row_q4_0_ref(const float*, void*, int64_t);
void quantize_row_q5_0_ref(const float*, void*, int64_t);
void quantize_row_q5_1_ref(const float*, void*, int64_t);
void quantize_row_q4_K_ref(const float*, void*, int64_t);
void quantize_row_q5_K_ref(const float*, void*, int64_t);
void quantize_row_q6_K_ref(const float*, void*, int64_t);
}
int main() {
  namespace g = anelab::quant_golden;
  const std::vector<float> x = g::values();
  struct T { const char* name; void (*f)(const float*, void*, int64_t); int64_t values, bytes; };
  const T types[] = {{"q8_0", quantize_row_q8_0_ref, 32, 34},   {"q4_0", quantize_row_q4_0_ref, 32, 18},
                     {"q5_0", quantize_row_q5_0_ref, 32, 22},   {"q5_1", quantize_row_q5_1_ref, 32, 24},
                     {"q4_k", quantize_row_q4_K_ref, 256, 144}, {"q5_k", quantize_row_q5_K_ref, 256, 176},
                     {"q6_k", quantize_row_q6_K_ref, 256, 210}};
  for (const T& t : types) {
    std::vector<uint8_t> q(static_cast<size_t>(g::kValues / t.values * t.bytes));
    t.f(x.data(), q.data(), g::kValues);
    std::printf("%s 0x%016" PRIx64 "\n", t.name, g::fnv1a(q.data(), q.size()));
  }
}
CPP
g++ -std=c++20 -O2 -I"$here" "$tmp/ref.cpp" -L"$lib" -lggml-base -Wl,-rpath,"$lib" -o "$tmp/ref"
"$tmp/ref"

// Model presets: named ModelConfigs of real architectures (for `anelab convert --random`, the trainer
// and benchmarks), and a seeded random-weight model writer.
//
//   stories260k   llama  64/172,   5 layers,  8 heads, 4 kv,  vocab 512,    ctx 512   (tied)
//   stories15m    llama  288/768,  6 layers,  6 heads, 6 kv,  vocab 32000,  ctx 256   (tied)
//   stories42m    llama  512/1376, 8 layers,  8 heads, 8 kv,  vocab 32000,  ctx 1024  (tied)
//   stories110m   llama  768/2048, 12 layers, 12 heads, 12 kv, vocab 32000, ctx 1024  (tied)
//   gpt2-124m     gpt2   768/3072, 12 layers, 12 heads, vocab 50257, ctx 1024, LayerNorm 1e-5, gelu_tanh,
//                        learned positions, tied
//   qwen2.5-0.5b  qwen2  896/4864, 24 layers, 14 heads, 2 kv, head_dim 64, vocab 151936, ctx 32768,
//                        rope 1e6 rotate_half, RMS eps 1e-6, q/k/v bias, tied
//   qwen3-0.6b-shape  qwen2-style 1024/3072, 28 layers, 16 heads, 8 kv, head_dim 128, vocab 151936, ctx 40960,
//                        rope 1e6, RMS eps 1e-6, tied, NO q/k bias — and NO qk-norm (real Qwen3 has per-head
//                        RMSNorm on q and k; this preset only has Qwen3-0.6B's shape).
// llama2.c presets use adjacent-pairs RoPE (theta 10000, RMS eps 1e-5) like run.c.
//
// Random init: normal(0, 0.02) for matrices and embeddings, ones for norm weights, zeros for biases.
// Values come from a counter-based generator (splitmix64 of seed, tensor index and element index, then
// Box-Muller), so the result is independent of threads and chunking.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/formats/anelab_file.h"
#include "models/formats/model.h"

namespace anelab::models {

// The preset registry. preset() throws "[model] unknown preset X (known: a, b, ...)".
const ModelConfig& preset(const std::string& name);
std::vector<std::string> preset_names();

// Fills out[0..count) with the random init of element `begin..` of tensor `spec` (index in canonical order).
void random_init(const TensorSpec& spec, uint64_t seed, size_t tensor_index, int64_t begin, int64_t count, float* out);

// Streams a random-weight model of config c into an anelab file; returns the file size.
int64_t write_random_model(const ModelConfig& c, const std::string& path, uint64_t seed,
                           std::optional<DType> dtype = {}, const ProgressFn& progress = {});
// The same weights as an in-memory Model (small configs; tests).
Model random_model(const ModelConfig& c, uint64_t seed);

}  // namespace anelab::models

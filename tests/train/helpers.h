// Shared helpers of the train tests: token files, events.jsonl readers, the PyTorch reference runner.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/formats/model.h"
#include "train/config.h"
#include "train/cpu_model.h"
#include "train/lora.h"
#include "train/params.h"

namespace anelab::test {

// A llama2.c-style flat uint16 token file of n pseudo-random ids in [0, vocab) with some structure.
std::string write_tokens(const std::string& dir, int64_t n, int64_t vocab, uint64_t seed);
std::vector<int32_t> read_tokens_u16(const std::string& path);
// Every event of the given type from DIR/events.jsonl, in order.
std::vector<nlohmann::json> read_events(const std::string& dir, const std::string& type);
// Writes config.json (model + optim), weights/<name>.npy and batches.npy ([n, B, T+1]) for
// scripts/train_reference.py (or scripts/SCRIPT, e.g. lora_reference.py), then runs it in `mode`; returns false (with
// a message) when python fails.
bool run_torch_reference(const std::string& dir, const train::ParamLayout& layout, const std::vector<float>& w,
                         const std::vector<train::Batch>& batches, const nlohmann::json& optim, const std::string& mode,
                         std::string* log, const std::string& script = "train_reference.py");
// The reference scripts' "optim" object of run config c (AdamW, schedule, accumulation, clipping).
nlohmann::json reference_optim(const train::TrainConfig& c);
// The micro-batches a sequential run of c reads, in order (steps x accum_steps windows of c.data).
std::vector<train::Batch> sequential_batches(const train::TrainConfig& c);
// ||a - b|| / ||b||
double rel_err(const float* a, const float* b, int64_t n);
// gtest expectations: the CPU strategy's loss and every parameter gradient of weights w on batch b against
// scripts/SCRIPT's ("grads" mode): loss to 1e-5 relative, each tensor's gradient to `bound` relative L2 (the
// callers' comments derive their bounds); prints the worst and per-tensor errors under `tag`.
void expect_grads_match_reference(const train::ParamLayout& layout, const std::vector<float>& w, const train::Batch& b,
                                  const std::string& tag, double bound = 1e-4,
                                  const std::string& script = "train_reference.py");
// A small GQA config: rotate-half RoPE (theta 1e6), head_dim != dim / n_heads, untied classifier.
models::ModelConfig gqa_test_config();
// A small Llama 3.x config: GQA, rotate-half RoPE with llama3 frequency scaling whose original context (32) is
// shorter than the test sequences (pair 0 kept, pair 1 blended, pairs 2.. slowed by the factor 8).
models::ModelConfig llama3_test_config();
// A small Qwen3 config: per-head q/k RMSNorm, GQA, head_dim != dim / n_heads, rotate-half RoPE, tied.
models::ModelConfig qwen3_test_config();
// A small Gemma 3 config: (1+w) norms, post norms, q/k norms, GeGLU, embedding and score scales, layer 0 sliding
// (window 8, local RoPE base 1e4) and layer 1 global (base 1e6, linear factor 2), logit soft-cap 0.5 (tight, so the
// cap's curvature shows in the gradients), 1 kv head, tied.
models::ModelConfig gemma3_test_config();
// init_random with every 1-D (norm) weight set to 1 + U(-0.25, 0.25), so a norm weight that is ignored or
// applied twice changes the gradients (all ones would hide it).
std::vector<float> init_with_norm_noise(const train::ParamLayout& layout, uint64_t seed);
// The loss of every step event of DIR/events.jsonl, in order.
std::vector<double> losses(const std::string& dir);
// A 20-step stories260k run of `strategy` on `data` into `dir` (batch 2, 64 tokens, lr 2e-3, 2 warm-up steps, no
// eval, no compile limit), validated.
train::TrainConfig small_run(const std::string& dir, const std::string& data, const std::string& strategy);
// gtest expectations: the last.ckpt of run dirs a and b hold the same step, weights, moments, data and
// loss-scale state, and their step losses are equal bitwise.
void expect_same_state(const std::string& a, const std::string& b);

// A checkpoint file cut at its header, by the layout of train/checkpoint.h read independently of the readers
// under test; join_checkpoint puts it together in the layout of `version` (3: with header_sum as the header
// checksum, or the header's own checksum when none is given; 1 and 2: JSON at 24, no header checksum).
struct CheckpointBytes {
  uint32_t version = 0;
  std::string header;         // the JSON text
  uint64_t header_sum = 0;    // version 3
  std::vector<uint8_t> data;  // weights, adam_m, adam_v
};
CheckpointBytes split_checkpoint(const std::vector<uint8_t>& file);
std::vector<uint8_t> join_checkpoint(uint32_t version, const std::string& header, const std::vector<uint8_t>& data,
                                     std::optional<uint64_t> header_sum = std::nullopt);

// gtest expectations for a --lora run c (validated here): c straight against c stopped after `split` steps and
// resumed (in c.run_dir + "2"): the same last.lora bytes and the same loss at every step.
void expect_lora_resume_bit_exact(const train::TrainConfig& c, int64_t split);

// A random matrix [rows, cols] of U(-0.5, 0.5) (seeded) in `dtype` (a tensor holding its own bytes) and its
// dequantized fp32 values in *deq.
models::Tensor typed_test_matrix(int64_t rows, int64_t cols, models::DType dtype, uint64_t seed,
                                 std::vector<float>* deq);

// A LoRA gradient case: the adapters of ll (train::lora_init seed 3) with every B drawn U(-0.1, 0.1), away from its
// zero init so that dA (= s Bᵀ ...) is not zero, and a batch [B, T + 1] of tokens < vocab, both from one generator
// (seed 17, B first).
struct LoraGradCase {
  std::vector<float> a;
  train::Batch b;
};
LoraGradCase lora_grad_case(const train::LoraLayout& ll, int64_t B, int64_t T, int64_t vocab);

}  // namespace anelab::test

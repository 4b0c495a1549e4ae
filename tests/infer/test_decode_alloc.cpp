// Decode allocates nothing per token: this test binary replaces the global operator new (every form the
// library can call) with a counting one, and counts the allocations of decode steps after warm-up, for the
// weight types and architectures the CPU decode path branches on (fp32, fp16, Q8_0, Q4_K_M and Q5_K_M blocks kept as
// they are; Llama, Qwen2 with biases and GQA, GPT-2 with LayerNorm and a plain MLP, Gemma 3 with sliding
// layers and soft-capping), both KV-cache types and 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "infer/engine.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/counting_new.h"

using anelab::test::g_allocations;
using anelab::test::g_counting;

namespace anelab::infer {
namespace {

// The preset's architecture at a test size (its own norms, activation, biases, tying, GQA ratio kept).
models::ModelConfig small(const std::string& preset) {
  models::ModelConfig c = models::preset(preset);
  const int64_t group = c.n_heads / c.n_kv_heads;
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.head_dim = 64, c.n_heads = 4,
  c.n_kv_heads = std::max<int64_t>(1, 4 / group);
  c.vocab_size = 512, c.max_seq_len = 64;
  if (c.params.contains("sliding_window")) models::set_param_named(&c, "sliding_window", 8);
  if (c.full_attention_interval > 0) c.full_attention_interval = 2;  // one linear-attention and one attention layer
  return c;
}

// Allocations made by `steps` decode steps after a 5-token prefill and two warm-up steps.
int64_t decode_allocations(models::Model m, const EngineOptions& o, int steps) {
  Engine e(std::move(m), o);
  std::vector<int32_t> prompt = {1, 7, 42, 300, 5};
  e.prefill(prompt, 0);
  int64_t pos = static_cast<int64_t>(prompt.size());
  e.decode(11, pos++), e.decode(12, pos++);
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < steps; ++i) e.decode(static_cast<int32_t>((i * 37 + 3) % 512), pos++);
  g_counting = false;
  return g_allocations.load();
}

// The counter sees an allocation made while counting (so a zero below is a measurement).
TEST(DecodeAlloc, CounterSeesAnAllocation) {
  g_allocations = 0;
  g_counting = true;
  auto* v = new std::vector<int>(1000);
  g_counting = false;
  delete v;
  EXPECT_GE(g_allocations.load(), 2);  // the vector and its buffer
}

TEST(DecodeAlloc, DecodeStepsAllocateNothing) {
  for (const char* preset : {"stories15m", "qwen2.5-0.5b", "gpt2-124m", "gemma3-270m", "qwen3.5-0.8b"}) {
    const models::Model base = models::random_model(small(preset), 5);
    struct Case {
      const char* name;
      WType dtype;
      std::optional<models::QuantMix> mix;
      KvType kv;
      int threads;
    };
    for (const Case& k :
         {Case{"fp32", WType::kF32, {}, KvType::kF32, 1}, Case{"fp16", WType::kF16, {}, KvType::kF16, 2},
          Case{"q8_0", WType::kF32, models::QuantMix::kQ8_0, KvType::kF16, 2},
          Case{"q4_k_m", WType::kF32, models::QuantMix::kQ4_K_M, KvType::kF32, 2},
          Case{"q5_k_m", WType::kF32, models::QuantMix::kQ5_K_M, KvType::kF16, 2}}) {
      models::Model m = k.mix ? models::quantize_model(base, *k.mix) : base;
      m.private_memory = true;  // owned bytes: a quantized copy is the engine's alone, so its Q8_0 matrices are tiled
      EngineOptions o;
      o.dtype = k.dtype;
      o.keep_quantized = k.mix.has_value();
      o.kv_type = k.kv;
      o.threads = k.threads;
      o.quiet = true;
      EXPECT_EQ(decode_allocations(std::move(m), o, 8), 0)
          << preset << " " << k.name << ", " << k.threads << " threads";
    }
  }
}

// The batched decode step (Engine::decode_batch) of 3 slots allocates nothing either.
TEST(DecodeAlloc, BatchedStepsAllocateNothing) {
  for (const char* preset : {"qwen2.5-0.5b", "gemma3-270m"}) {
    for (const bool q8 : {false, true}) {
      const models::Model base = models::random_model(small(preset), 5);
      models::Model m = q8 ? models::quantize_model(base, models::QuantMix::kQ8_0) : base;
      EngineOptions o;
      o.keep_quantized = q8;
      o.threads = 2;
      o.quiet = true;
      o.slots = 3;
      Engine e(std::move(m), o);
      const std::vector<int32_t> prompt = {1, 7, 42, 300, 5};
      for (int64_t s = 0; s < 3; ++s) {
        e.use_slot(s);
        e.prefill(std::span<const int32_t>(prompt).first(static_cast<size_t>(3 + s)), 0);
      }
      std::vector<int32_t> tok = {11, 12, 13};
      std::vector<int64_t> pos = {3, 4, 5};
      const std::vector<int64_t> slots = {2, 0, 1};
      auto step = [&] {
        e.decode_batch(tok, pos, slots);
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = (tok[i] * 37 + 3) % 512, ++pos[i];
      };
      step(), step();
      g_allocations = 0;
      g_counting = true;
      for (int i = 0; i < 8; ++i) step();
      g_counting = false;
      EXPECT_EQ(g_allocations.load(), 0) << preset << (q8 ? " q8_0" : " fp16");
    }
  }
}

}  // namespace
}  // namespace anelab::infer

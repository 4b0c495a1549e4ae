// The batched decode step (Engine::decode_batch, the server's continuous batching): B slots at different positions,
// one token each, every weight matrix read once for the B rows. Reference: the same engine's single-sequence decode of
// each slot (Engine::use_slot + decode), on a second engine fed the same tokens. The step computes each row with
// decode's kernels (gemv_batch runs the GEMV's row kernels per token over blocks of rows; norms, RoPE, attention per
// row), so every logit is bit-identical, for fp32, fp16, Q8_0 and Q4_K_M weights and both KV-cache types; and a
// row does not depend on the other rows of its step (slot 0's row in batches of 2 and of 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "infer/engine.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"

namespace anelab::infer {
namespace {

models::ModelConfig batch_test_config(const std::string& preset) {
  models::ModelConfig c = models::preset(preset);
  const int64_t group = c.n_heads / c.n_kv_heads;
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.head_dim = 64, c.n_heads = 4,
  c.n_kv_heads = std::max<int64_t>(1, 4 / group);
  c.vocab_size = 512, c.max_seq_len = 64;
  if (c.arch == "gemma3") models::set_param_named(&c, "sliding_window", 8);  // a window shorter than the positions
  return c;
}

std::vector<int32_t> batch_test_prompt(int64_t slot) {  // slot s: a prompt of 3 + 2 s tokens
  std::vector<int32_t> p;
  for (int64_t i = 0; i < 3 + 2 * slot; ++i) p.push_back(static_cast<int32_t>((slot * 97 + i * 31 + 1) % 512));
  return p;
}

struct BatchCase {
  const char* name;
  WType dtype;
  std::optional<models::QuantMix> mix;
  KvType kv;
};

// For B = 1..9 (past quant::kBatchTokens, the tile kernel's tokens per pass): slots prefilled with prompts of
// different lengths, then three batched steps; each row against the
// single-sequence decode of its slot on a reference engine.
TEST(DecodeBatch, RowsEqualSingleSequenceDecode) {
  for (const char* preset : {"qwen2.5-0.5b", "gpt2-124m", "gemma3-270m"}) {
    const models::Model base = models::random_model(batch_test_config(preset), 7);
    for (const BatchCase& k :
         {BatchCase{"fp32", WType::kF32, {}, KvType::kF32}, BatchCase{"fp16", WType::kF16, {}, KvType::kF16},
          BatchCase{"q8_0", WType::kF32, models::QuantMix::kQ8_0, KvType::kF32},
          BatchCase{"q4_k_m", WType::kF32, models::QuantMix::kQ4_K_M, KvType::kF16}}) {
      const auto own_model = [&] {  // a copy of its own per engine, private: its Q8_0 / Q4_K matrices become row tiles
        models::Model m = k.mix ? models::quantize_model(base, *k.mix) : base;
        m.private_memory = true;
        return m;
      };
      EngineOptions o;
      o.dtype = k.dtype;
      o.keep_quantized = k.mix.has_value();
      o.kv_type = k.kv;
      o.threads = 2;
      o.quiet = true;
      o.slots = 9;
      Engine batched(own_model(), o), ref(own_model(), o);
      if (k.mix) {
        ASSERT_GT(batched.tiled_bytes(), 0);
      }
      const int64_t V = base.config.vocab_size;
      for (int64_t B = 1; B <= 9; ++B) {
        SCOPED_TRACE(std::string(preset) + " " + k.name + " B=" + std::to_string(B));
        std::vector<int32_t> tok(static_cast<size_t>(B));
        std::vector<int64_t> pos(static_cast<size_t>(B)), slots(static_cast<size_t>(B));
        for (int64_t s = 0; s < B; ++s) {
          const std::vector<int32_t> p = batch_test_prompt(s);
          const auto r = static_cast<size_t>(s);
          slots[r] = B - 1 - s;  // rows in another order than the slots
          batched.use_slot(slots[r]);
          batched.prefill(p, 0);
          ref.use_slot(slots[r]);
          ref.prefill(p, 0);
          pos[r] = static_cast<int64_t>(p.size());
          tok[r] = static_cast<int32_t>((s * 13 + 5) % V);
        }
        for (int step = 0; step < 3; ++step) {
          const float* lb = batched.decode_batch(tok, pos, slots);
          std::vector<float> got(lb, lb + B * V);
          for (int64_t i = 0; i < B; ++i) {
            const auto r = static_cast<size_t>(i);
            ref.use_slot(slots[r]);
            const float* lr = ref.decode(tok[r], pos[r]);
            const float* row = got.data() + i * V;
            for (int64_t j = 0; j < V; ++j) ASSERT_EQ(row[j], lr[j]) << "row " << i << " logit " << j;
            tok[r] = static_cast<int32_t>(std::max_element(lr, lr + V) - lr);
            ++pos[r];
          }
        }
      }
    }
  }
}

// A row of a batched step (B >= 2) is the same bits whatever the other rows are: slot 0's step alone in a batch with
// slot 1, then with slots 1..4, on engines holding the same caches.
TEST(DecodeBatch, RowIndependentOfTheOtherRows) {
  const models::Model m =
      models::quantize_model(models::random_model(batch_test_config("qwen2.5-0.5b"), 3), models::QuantMix::kQ8_0);
  EngineOptions o;
  o.dtype = WType::kF16;
  o.keep_quantized = true;
  o.threads = 2;
  o.quiet = true;
  o.slots = 5;
  std::vector<float> first;
  for (int64_t B : {2, 5}) {
    Engine e(m, o);
    std::vector<int32_t> tok;
    std::vector<int64_t> pos, slots;
    for (int64_t s = 0; s < B; ++s) {
      const std::vector<int32_t> p = batch_test_prompt(s);
      e.use_slot(s);
      e.prefill(p, 0);
      tok.push_back(static_cast<int32_t>(s + 9)), pos.push_back(static_cast<int64_t>(p.size())), slots.push_back(s);
    }
    const float* l = e.decode_batch(tok, pos, slots);
    std::vector<float> row0(l, l + m.config.vocab_size);
    if (first.empty())
      first = row0;
    else
      EXPECT_EQ(row0, first);
  }
}

// Bad calls are refused in one line; a model with linear-attention layers refuses several slots.
TEST(DecodeBatch, Refusals) {
  const models::Model m = models::random_model(batch_test_config("qwen2.5-0.5b"), 3);
  EngineOptions o;
  o.threads = 1;
  o.quiet = true;
  o.slots = 2;
  Engine e(m, o);
  const std::vector<int32_t> tok = {1, 2};
  const std::vector<int64_t> pos = {0, 0}, same = {1, 1}, out = {0, 2};
  EXPECT_THROW(e.decode_batch(tok, pos, same), std::exception);
  EXPECT_THROW(e.decode_batch(tok, pos, out), std::exception);
  EXPECT_THROW(e.use_slot(2), std::exception);
  models::ModelConfig c = batch_test_config("qwen3.5-0.8b");
  c.full_attention_interval = 2;
  try {
    Engine lin(models::random_model(c, 3), o);
    ADD_FAILURE() << "several slots accepted for a linear-attention model";
  } catch (const std::exception& ex) {
    EXPECT_NE(std::string(ex.what()).find("linear-attention"), std::string::npos) << ex.what();
  }
}

}  // namespace
}  // namespace anelab::infer

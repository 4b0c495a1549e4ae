// The batched decode step (Engine::decode_batch, the server's continuous batching): B slots at different positions,
// one token each, every weight matrix read once for the B rows. Reference: the same engine's single-sequence decode of
// each slot (Engine::use_slot + decode), on a second engine fed the same tokens. The step computes each row with
// decode's kernels (gemv_batch runs the GEMV's row kernels per token over blocks of rows; norms, RoPE, attention per
// row), so every logit is bit-identical, for fp32, fp16, Q8_0 and Q4_K_M weights and both KV-cache types; and a
// row does not depend on the other rows of its step (slot 0's row in batches of 2 and of 5). The batched prefill
// (Engine::prefill_batch) likewise against Engine::prefill of each chunk alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "infer/batch.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/arch/arch.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/lora_adapter.h"

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
// The weight and KV types the batched tests run.
const BatchCase kBatchCases[] = {BatchCase{"fp32", WType::kF32, {}, KvType::kF32},
                                 BatchCase{"fp16", WType::kF16, {}, KvType::kF16},
                                 BatchCase{"q8_0", WType::kF32, models::QuantMix::kQ8_0, KvType::kF32},
                                 BatchCase{"q4_k_m", WType::kF32, models::QuantMix::kQ4_K_M, KvType::kF16}};
// base as an engine of case k takes it: a copy of its own, quantized by k's mix, private (its Q8_0 / Q4_K matrices
// become row tiles).
models::Model batch_case_model(const models::Model& base, std::optional<models::QuantMix> mix) {
  models::Model m = mix ? models::quantize_model(base, *mix) : base;
  m.private_memory = true;
  return m;
}
// Engine options of the batched tests: 2 threads, quiet, `slots` slots.
EngineOptions batch_case_options(WType dtype, std::optional<models::QuantMix> mix, KvType kv, int64_t slots) {
  EngineOptions o;
  o.dtype = dtype;
  o.keep_quantized = mix.has_value();
  o.kv_type = kv;
  o.threads = 2;
  o.quiet = true;
  o.slots = slots;
  return o;
}

// For B = 1..9 (past quant::kBatchTokens, the tile kernel's tokens per pass): slots prefilled with prompts of
// different lengths, then three batched steps; each row against the
// single-sequence decode of its slot on a reference engine.
TEST(DecodeBatch, RowsEqualSingleSequenceDecode) {
  for (const char* preset : {"qwen2.5-0.5b", "gpt2-124m", "gemma3-270m"}) {
    const models::Model base = models::random_model(batch_test_config(preset), 7);
    for (const BatchCase& k : kBatchCases) {
      const EngineOptions o = batch_case_options(k.dtype, k.mix, k.kv, 9);
      Engine batched(batch_case_model(base, k.mix), o), ref(batch_case_model(base, k.mix), o);
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

// A slot's run of positions (speculative verification, Engine::decode_run) in one batched step, alone and next to
// another slot's row: each row is bit for bit the decode of its token after the earlier ones, at fp16 and Q8_0 (row
// tiles), 1 to 9 rows.
TEST(DecodeBatch, RunEqualsConsecutiveDecodes) {
  const models::Model base = models::random_model(batch_test_config("qwen2.5-0.5b"), 5);
  for (const bool q8 : {false, true}) {
    const std::optional<models::QuantMix> mix = q8 ? std::optional(models::QuantMix::kQ8_0) : std::nullopt;
    const EngineOptions o = batch_case_options(WType::kF16, mix, EngineOptions{}.kv_type, 2);
    Engine batched(batch_case_model(base, mix), o), ref(batch_case_model(base, mix), o);
    const int64_t V = base.config.vocab_size;
    for (int64_t n = 1; n <= 9; ++n) {
      SCOPED_TRACE(std::string(q8 ? "q8_0" : "fp16") + " run of " + std::to_string(n));
      const std::vector<int32_t> p0 = batch_test_prompt(0), p1 = batch_test_prompt(1);
      for (Engine* e : {&batched, &ref}) {
        e->use_slot(0), e->prefill(p0, 0);
        e->use_slot(1), e->prefill(p1, 0);
      }
      std::vector<int32_t> run;
      for (int64_t i = 0; i < n; ++i) run.push_back(static_cast<int32_t>((i * 37 + 11) % V));
      const auto pos0 = static_cast<int64_t>(p0.size()), pos1 = static_cast<int64_t>(p1.size());
      // The run on slot 0 alone, then again (the same positions rewritten) with slot 1's next token as the first row.
      batched.use_slot(0);
      const float* l = batched.decode_run(run, pos0);
      const std::vector<float> alone(l, l + n * V);
      std::vector<int32_t> tok = {7};
      std::vector<int64_t> pos = {pos1}, slots = {1};
      for (int64_t i = 0; i < n; ++i)
        tok.push_back(run[static_cast<size_t>(i)]), pos.push_back(pos0 + i), slots.push_back(0);
      l = batched.decode_batch(tok, pos, slots);
      const std::vector<float> mixed(l, l + (n + 1) * V);
      ref.use_slot(1);
      const float* r1 = ref.decode(7, pos1);
      for (int64_t j = 0; j < V; ++j) ASSERT_EQ(mixed[static_cast<size_t>(j)], r1[j]) << "slot 1 logit " << j;
      ref.use_slot(0);
      for (int64_t i = 0; i < n; ++i) {
        const float* r = ref.decode(run[static_cast<size_t>(i)], pos0 + i);
        for (int64_t j = 0; j < V; ++j) {
          ASSERT_EQ(alone[static_cast<size_t>(i * V + j)], r[j]) << "alone: row " << i << " logit " << j;
          ASSERT_EQ(mixed[static_cast<size_t>((i + 1) * V + j)], r[j]) << "mixed: row " << i << " logit " << j;
        }
      }
    }
  }
}

// Speculative decoding through the Batcher (the server's path: Forward::decode_run puts a slot's token and drafts into
// the step's batch as rows of that slot): slot 0 with drafts next to slot 1 without, at the same time, give the tokens
// and log-probabilities (bits) of each prompt's plain greedy generation on an engine of its own.
TEST(DecodeBatch, SpeculativeThroughTheBatcherEqualsPlainDecoding) {
  models::Model m =
      models::quantize_model(models::random_model(batch_test_config("qwen2.5-0.5b"), 11), models::QuantMix::kQ8_0);
  EngineOptions o;
  o.dtype = WType::kF16;
  o.keep_quantized = true;
  o.threads = 2;
  o.quiet = true;
  std::vector<int32_t> rep;  // a repetitive prompt: drafts found by the lookup
  for (int r = 0; r < 3; ++r)
    for (int32_t t : {5, 77, 301, 12, 9, 140}) rep.push_back(t);
  const std::vector<std::vector<int32_t>> prompts = {rep, batch_test_prompt(3)};
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.sampling.temperature = 0.0f;
  g.sampler = SamplerKind::kGeneral;
  g.logprobs = 1;
  g.echo_prompt = false;
  g.final_newline = false;
  std::vector<GenerateResult> alone;
  {
    Engine e(m, o);
    for (const auto& p : prompts) alone.push_back(generate_tokens(e, nullptr, p, 0, g, {}));
  }
  o.slots = 2;
  Engine e(m, o);
  Batcher b(e, 64);
  std::vector<GenerateResult> together(2);
  std::vector<std::thread> ts;
  for (int64_t s = 0; s < 2; ++s)
    ts.emplace_back([&, s] {
      Batcher::Active active(b, s);
      GenerateOptions gs = g;
      gs.forward = &b.slot(s);
      gs.draft_max = s == 0 ? 4 : 0;
      together[static_cast<size_t>(s)] = generate_tokens(e, nullptr, prompts[static_cast<size_t>(s)], 0, gs, {});
    });
  for (auto& t : ts) t.join();
  EXPECT_GT(together[0].drafted, 0);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(together[s].new_tokens, alone[s].new_tokens) << "slot " << s;
    ASSERT_EQ(together[s].logprobs.size(), alone[s].logprobs.size());
    for (size_t i = 0; i < alone[s].logprobs.size(); ++i)
      EXPECT_EQ(together[s].logprobs[i].logprob, alone[s].logprobs[i].logprob) << "slot " << s << " token " << i;
  }
}

// The batched prefill (Engine::prefill_batch, the server's prompt chunks of several slots in one forward): chunks of
// 2 to 12 tokens (short ones on attention's row path, 8 and more on its blocked path), first chunks and later ones of
// a prompt, in another order than the slots; each chunk's last logits against Engine::prefill of that chunk alone on
// a reference engine, bit for bit, and then a decode step of every slot (the caches the chunks left) bit for bit.
TEST(PrefillBatch, ChunksEqualPrefillAlone) {
  for (const char* preset : {"qwen2.5-0.5b", "gpt2-124m", "gemma3-270m"}) {
    const models::Model base = models::random_model(batch_test_config(preset), 11);
    for (const BatchCase& k : kBatchCases) {
      SCOPED_TRACE(std::string(preset) + " " + k.name);
      const EngineOptions o = batch_case_options(k.dtype, k.mix, k.kv, 5);
      Engine batched(batch_case_model(base, k.mix), o), ref(batch_case_model(base, k.mix), o);
      ASSERT_TRUE(batched.prefill_batch_takes());
      const int64_t V = base.config.vocab_size;
      std::vector<std::vector<int32_t>> prompt(5);
      for (int64_t s = 0; s < 5; ++s)
        for (int64_t i = 0; i < 24; ++i)
          prompt[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 89 + i * 37 + 3) % V));
      // Two rounds of chunks: round 0 from position 0, round 1 continuing each slot's prompt.
      const int64_t len[2][5] = {{2, 9, 5, 12, 3}, {7, 2, 10, 4, 8}};
      std::vector<int64_t> at(5, 0);
      for (int round = 0; round < 2; ++round) {
        std::vector<Engine::PrefillSeg> segs;
        for (int64_t s : {3, 0, 4, 1, 2})
          segs.push_back(
              {s,
               std::span(prompt[static_cast<size_t>(s)])
                   .subspan(static_cast<size_t>(at[static_cast<size_t>(s)]), static_cast<size_t>(len[round][s])),
               at[static_cast<size_t>(s)]});
        const float* lb = batched.prefill_batch(segs);
        const std::vector<float> got(lb, lb + static_cast<int64_t>(segs.size()) * V);
        for (size_t i = 0; i < segs.size(); ++i) {
          ref.use_slot(segs[i].slot);
          const float* lr = ref.prefill(segs[i].tokens, segs[i].pos);
          for (int64_t j = 0; j < V; ++j)
            ASSERT_EQ(got[i * static_cast<size_t>(V) + static_cast<size_t>(j)], lr[j])
                << "round " << round << " slot " << segs[i].slot << " logit " << j;
          at[static_cast<size_t>(segs[i].slot)] += static_cast<int64_t>(segs[i].tokens.size());
        }
      }
      for (int64_t s = 0; s < 5; ++s) {  // the caches: a decode on each slot
        batched.use_slot(s), ref.use_slot(s);
        const float* a = batched.decode(7, at[static_cast<size_t>(s)]);
        const std::vector<float> got(a, a + V);
        const float* r = ref.decode(7, at[static_cast<size_t>(s)]);
        for (int64_t j = 0; j < V; ++j) ASSERT_EQ(got[static_cast<size_t>(j)], r[j]) << "decode on slot " << s;
      }
    }
  }
}

// Slots with runtime LoRA adapters of their own in one batched prefill (each row takes its slot's scales, as prefill
// takes the current slot's): each chunk's logits and the next decode bit for bit prefill alone on that slot.
TEST(PrefillBatch, SlotsWithTheirOwnAdapters) {
  const models::ModelConfig c = batch_test_config("qwen2.5-0.5b");
  const models::Model m = models::random_model(c, 5);
  EngineOptions o;
  o.threads = 2;
  o.quiet = true;
  o.slots = 3;
  Engine batched(m, o), ref(m, o);
  const std::vector<std::vector<float>> scales = {{1.0f, 0.0f}, {0.0f, 0.0f}, {0.5f, -0.75f}};
  for (Engine* e : {&batched, &ref}) {
    e->add_lora(test::seeded_lora_adapter(c, 4, 8.0f, 21, 0.2f));
    e->add_lora(test::seeded_lora_adapter(c, 2, 4.0f, 22, 0.2f));
    for (int64_t s = 0; s < 3; ++s) e->set_lora_scales(s, scales[static_cast<size_t>(s)]);
  }
  std::vector<std::vector<int32_t>> prompt(3);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t i = 0; i < 6 + 3 * s; ++i)
      prompt[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 53 + i * 29 + 7) % c.vocab_size));
  const std::vector<Engine::PrefillSeg> segs = {{2, prompt[2], 0}, {0, prompt[0], 0}, {1, prompt[1], 0}};
  const float* lb = batched.prefill_batch(segs);
  const std::vector<float> got(lb, lb + 3 * c.vocab_size);
  for (size_t i = 0; i < segs.size(); ++i) {
    ref.use_slot(segs[i].slot);
    const float* lr = ref.prefill(segs[i].tokens, 0);
    for (int64_t j = 0; j < c.vocab_size; ++j)
      ASSERT_EQ(got[i * static_cast<size_t>(c.vocab_size) + static_cast<size_t>(j)], lr[j])
          << "slot " << segs[i].slot << " logit " << j;
  }
  for (int64_t s = 0; s < 3; ++s) {
    const auto p = static_cast<int64_t>(prompt[static_cast<size_t>(s)].size());
    batched.use_slot(s), ref.use_slot(s);
    const float* a = batched.decode(3, p);
    const std::vector<float> next(a, a + c.vocab_size);
    const float* r = ref.decode(3, p);
    for (int64_t j = 0; j < c.vocab_size; ++j) ASSERT_EQ(next[static_cast<size_t>(j)], r[j]) << "decode on slot " << s;
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
  EXPECT_THROW(e.decode_batch(tok, pos, same), std::exception);  // a slot's second row must be its next position
  EXPECT_THROW(e.decode_batch(tok, pos, out), std::exception);
  EXPECT_THROW(e.use_slot(2), std::exception);
  const std::vector<int32_t> two = {1, 2};
  const std::vector<Engine::PrefillSeg> one_token = {{0, std::span(two).first(1), 0}},
                                        same_slot = {{1, two, 0}, {1, two, 2}}, outside = {{0, two, 63}};
  EXPECT_THROW(e.prefill_batch(one_token), std::exception);  // one token: decode's kernels, not prefill's
  EXPECT_THROW(e.prefill_batch(same_slot), std::exception);
  EXPECT_THROW(e.prefill_batch(outside), std::exception);  // past the context of 64
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

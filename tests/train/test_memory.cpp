// The memory a training run reports (issue 37): CpuModel::activation_bytes, the activations kept for one
// micro-batch, against what the CPU strategy's first forward_backward actually leaves allocated (the live bytes of
// operator new, counted here: every buffer the model keeps is a std::vector), and against the shapes' formula
// written out below from the model's sizes (llama2.c's forward keeps the same tensors), at several batch sizes and
// sequence lengths; then the run's `memory` event and its peak RSS. Exact equality: these are byte counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <utility>
#include <vector>

#include "models/presets.h"
#include "tests/common/counting_new.h"  // this binary's only operator new: the live bytes
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/frozen_base.h"
#include "train/lora.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

train::Batch mem_test_batch(const models::ModelConfig& c, int64_t B, int64_t T) {
  train::Batch b{B, T, std::vector<int32_t>(size_t(B * (T + 1)))};
  train::Rng rng{uint64_t(B * 1000 + T)};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(c.vocab_size));
  return b;
}

// Bytes a fresh model's first forward_backward leaves allocated (its kept buffers; the step's temporaries are freed).
int64_t mem_kept_by_first_step(const train::ParamLayout& layout, const std::vector<float>& w, const train::Batch& b,
                               const train::LoraStep* lora) {
  std::vector<float> g(w.size(), 0.0f);
  train::CpuModel m(layout);
  m.set_lora(lora);
  test::g_live_bytes = 0;
  test::g_counting = true;
  m.forward_backward(w.data(), b, 1.0f, lora ? nullptr : g.data());
  test::g_counting = false;
  return test::g_live_bytes.load();
}

// The formula, from the sizes of llama3_test_config (a Llama: no q/k or post norms, no soft-cap, one RoPE over the
// whole head): per layer the attention step keeps x, xn [N, D], 1/rms [N], q, att [N, QD], k, v [N, KD] and the
// probabilities [B*H, T, T]; the FFN step x, xn [N, D], 1/rms [N], h1, h3, g [N, F]; the head xL, xf, dxf [N, D],
// 1/rms [N], logits [N, V] and the input ids [N] (int32); the RoPE table cos, sin [T, hd/2]. LoRA adds per
// adapted projection t [N, r], with dropout its mask and x ⊙ mask [N, in], and per step the three per-target lists.
int64_t mem_formula(const models::ModelConfig& c, int64_t B, int64_t T, int64_t r, double dropout) {
  const int64_t N = B * T, D = c.dim, F = c.hidden_dim, QD = c.n_heads * c.head_dim, KD = c.n_kv_heads * c.head_dim;
  int64_t attn = 2 * N * D + N + 2 * N * QD + 2 * N * KD + B * c.n_heads * T * T;
  int64_t ffn = 2 * N * D + N + 3 * N * F;
  int64_t lists = 0;
  if (r > 0) {
    attn += 4 * N * r + (dropout > 0 ? 2 * N * (3 * D + QD) : 0);
    ffn += 3 * N * r + (dropout > 0 ? 2 * N * (2 * D + F) : 0);
    lists = 2 * 3 * train::kLoraTargets * int64_t(sizeof(std::vector<float>));
  }
  const int64_t head = 3 * N * D + N + N * c.vocab_size + N, rope = 2 * T * (c.head_dim / 2);
  return 4 * (c.n_layers * (attn + ffn) + head + rope) + c.n_layers * lists;
}

TEST(TrainMemory, ActivationBytesAreWhatTheStepKeeps) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = train::init_random(layout, 5);
  mem_kept_by_first_step(layout, w, mem_test_batch(cfg, 1, 8), nullptr);  // the thread pool started, not counted
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{2, 16}, {2, 48}, {1, 48}, {3, 8}}) {
    const train::Batch b = mem_test_batch(cfg, B, T);
    train::CpuModel fresh(layout);
    const int64_t reported = fresh.activation_bytes(B, T);
    EXPECT_EQ(reported, mem_kept_by_first_step(layout, w, b, nullptr)) << "B " << B << " T " << T;
    EXPECT_EQ(reported, mem_formula(cfg, B, T, 0, 0)) << "B " << B << " T " << T;
    for (const double dropout : {0.0, 0.1}) {  // every target adapted; dropout keeps its masks too
      train::LoraConfig lc;
      lc.rank = 4, lc.alpha = 8, lc.dropout = dropout;
      lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
      const train::LoraLayout ll(cfg, lc);
      const std::vector<float> a = train::lora_init(ll, 3);
      std::vector<float> ga(a.size(), 0.0f);
      const train::LoraStep st{&ll, a.data(), ga.data(), 0, 0, true};
      train::LoraEngine engine(layout, w, ll, 0);
      const int64_t lora_reported = engine.activation_bytes(B, T);
      EXPECT_EQ(lora_reported, mem_kept_by_first_step(layout, w, b, &st))
          << "LoRA, dropout " << dropout << ", B " << B << " T " << T;
      EXPECT_EQ(lora_reported, mem_formula(cfg, B, T, lc.rank, dropout))
          << "LoRA, dropout " << dropout << ", B " << B << " T " << T;
    }
  }
}

// The run reports its memory at the start (the `memory` event: base, adapters, their AdamW state, activations of
// one micro-batch as the engine counts them) and its peak RSS in every step and in run_end.
TEST(TrainMemory, RunReportsItsMemory) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const auto dir = test::temp_dir("train_memory").string();
  for (const bool lora : {false, true}) {
    train::TrainConfig c;
    c.init = dir + "/init.anelab";
    if (!std::filesystem::exists(c.init)) models::write_random_model(cfg, c.init, 11);
    c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5), c.run_dir = dir + (lora ? "/lora" : "/full");
    c.run = "mem", c.steps = 2, c.batch_size = 3, c.seq_len = 24, c.eval_batches = 0, c.lora = lora;
    c.lora_rank = 4;
    train::validate(c);
    train::run_training(c, {false, false});
    const auto mem = test::read_events(c.run_dir, "memory");
    ASSERT_EQ(mem.size(), 1u);
    const train::ParamLayout layout(cfg);
    const int64_t P = layout.total() * 4;
    train::LoraConfig lc;
    lc.rank = c.lora_rank, lc.alpha = c.lora_alpha, lc.targets = train::parse_lora_targets(c.lora_targets);
    const int64_t A = train::LoraLayout(cfg, lc).total() * 4;
    EXPECT_EQ(mem[0]["base_bytes"].get<int64_t>(), lora ? P : 0);
    EXPECT_EQ(mem[0]["trained_bytes"].get<int64_t>(), lora ? A : P);
    EXPECT_EQ(mem[0]["optimizer_bytes"].get<int64_t>(), 2 * (lora ? A : P));
    EXPECT_EQ(mem[0]["activation_bytes"].get<int64_t>(), mem_formula(cfg, 3, 24, lora ? lc.rank : 0, 0));
    EXPECT_EQ(mem[0]["file_bytes"].get<int64_t>(), int64_t(std::filesystem::file_size(c.init)));
    for (const auto& s : test::read_events(c.run_dir, "step")) EXPECT_GT(s["peak_rss_mb"].get<double>(), 0.0);
    EXPECT_GT(test::read_events(c.run_dir, "run_end").at(0)["peak_rss_mb"].get<double>(), 0.0);
  }
  std::filesystem::remove_all(dir);
}

// A model of config c in memory whose matrices (every 2-D tensor) are in `dtype`, norms fp32, as a file holds them.
models::Model mem_typed_model(const models::ModelConfig& c, models::DType dtype) {
  const train::ParamLayout layout(c);
  const std::vector<float> w = train::init_random(layout, 9);
  models::Model m;
  m.config = c;
  for (const auto& p : layout.params()) {
    const models::DType t = p.shape.size() == 2 ? dtype : models::DType::kF32;
    std::vector<uint8_t> bytes(size_t(models::dtype_nbytes(t, p.numel)));
    models::f32_to_dtype(w.data() + p.offset, t, bytes.data(), p.numel);
    m.add_owned(p.name, t, p.shape, std::move(bytes));
  }
  return m;
}

// The frozen base of a --lora run holds the file's tensor bytes (train/frozen_base.h): its matrices are the loaded
// model's tensors (no copy: what a new FrozenBase allocates is its fp32 norms and its bookkeeping), and held_bytes()
// (the memory event's base_bytes) is the file's tensor bytes. A fp32 copy of the base (what LoraEngine held before)
// allocates 4 bytes per weight and fails both.
TEST(TrainMemory, FrozenBaseHoldsTheFileTensorBytes) {
  models::ModelConfig cfg = test::llama3_test_config();
  cfg.dim = 256, cfg.hidden_dim = 512, cfg.head_dim = 64;  // rows of whole Q4_K blocks (256 values)
  for (const models::DType dt : {models::DType::kBF16, models::DType::kQ8_0, models::DType::kQ4_K}) {
    const models::Model m = mem_typed_model(cfg, dt);
    const train::ParamLayout layout(cfg);
    int64_t file_tensors = 0, norms = 0;
    for (const auto& p : layout.params()) {
      file_tensors += m.tensor(p.name).nbytes;
      if (p.shape.size() == 1) norms += p.numel * 4;
    }
    test::g_live_bytes = 0;
    test::g_counting = true;
    const train::FrozenBase base(layout, m);
    test::g_counting = false;
    const int64_t live = test::g_live_bytes.load();
    EXPECT_EQ(base.held_bytes(), file_tensors) << models::dtype_name(dt);
    // bookkeeping: one entry per tensor (a Tensor view: its name and shape), under 1 KiB each
    EXPECT_GE(live, norms) << models::dtype_name(dt);
    EXPECT_LT(live, norms + 1024 * int64_t(layout.params().size())) << models::dtype_name(dt);
    std::printf("[frozen base] %s: held %lld bytes = the tensors' %lld (fp32: %lld); allocated %lld (norms %lld)\n",
                models::dtype_name(dt), (long long)base.held_bytes(), (long long)file_tensors,
                (long long)(layout.total() * 4), (long long)live, (long long)norms);
  }
}

// The checkpoint of a --lora run merges its weights range by range (train/checkpoint.h WeightSource): any cut, inside
// rows or tensors, gives lora_merge's weights bit for bit.
TEST(TrainMemory, MergeByRangesIsTheWholeMerge) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = train::init_random(layout, 5);
  train::LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
  const train::LoraLayout ll(cfg, lc);
  std::vector<float> a = train::lora_init(ll, 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] += 0.01f * float(i % 7);  // B not zero
  std::vector<float> whole = w;
  train::lora_merge(layout, ll, a.data(), lc.scale(), whole.data());
  for (const int64_t step : {int64_t(1000), int64_t(777), layout.total()}) {
    std::vector<float> ranges(w.size());
    for (int64_t off = 0; off < layout.total(); off += step) {
      const int64_t n = std::min(step, layout.total() - off);
      std::vector<float> chunk(w.begin() + off, w.begin() + off + n);
      train::lora_merge_range(layout, ll, a.data(), lc.scale(), off, n, chunk.data());
      std::copy(chunk.begin(), chunk.end(), ranges.begin() + off);
    }
    EXPECT_EQ(ranges, whole) << "ranges of " << step;
  }
  EXPECT_NE(whole, w);
}

}  // namespace
}  // namespace anelab

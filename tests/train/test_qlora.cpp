// The frozen base of `train --lora --strategy cpu` kept in its file's type (train/frozen_base.h; QLoRA for a
// quantized file): the products on typed tiles against the fp32 products of the dequantized weights, the adapter
// gradients of a bf16 / Q8_0 / Q4_K base against the fp32 path on the dequantized weights and against PyTorch
// (scripts/lora_reference.py given the dequantized weights), and resume of a Q4_K run (the bytes the base holds:
// test_memory.cpp, which counts operator new).
//
// Bounds. One product: the typed path and the fp32 path compute the same fp32 dot products of length K in another
// order (Eigen blocks each tile's product by the tile's sizes; dx adds tile after tile, and its rows split sums the
// threads' partial sums into dx: still one K-term sum, in another order), so each output differs by at most
// 2 γ_K Σ_k |a_k b_k| with γ_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., §3.1: any order of a K-term sum). The model's gradients: the fp32 path is within 1e-4 relative
// L2 of PyTorch's fp64 autograd (test_lora.cpp, the bound; its rounding, fp32 vs fp64, dominates a
// reordering of the same fp32 sums), so the typed path gets the same 1e-4 against PyTorch on the dequantized weights,
// and 2e-4 against the fp32 path (the triangle inequality through the fp64 reference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "framework/core/thread_pool.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/cpu_linalg.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/frozen_base.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

// A Llama whose every matrix row is a whole number of Q4_K's 256-value blocks (dim, q width and FFN width 256 or
// 512), GQA, tied.
models::ModelConfig qlora_test_config() {
  models::ModelConfig c;
  c.arch = "llama";
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64;
  c.vocab_size = 97, c.max_seq_len = 64, c.norm_eps = 1e-5f, c.rope_theta = 10000.0f;
  c.rope_style = models::RopeStyle::kRotateHalf;
  c.tied_embeddings = true;
  return c;
}

// A file of the config's model with its matrices in `dtype` (1-D tensors fp32): an anelab file for bf16, a GGUF
// for the block types (`train --lora --init model.Q4_K.gguf`).
std::string qlora_write_model(const std::string& dir, const models::ModelConfig& c, models::DType dtype) {
  const train::ParamLayout layout(c);
  const models::Model m = train::to_model(layout, test::init_with_norm_noise(layout, 7));
  std::filesystem::create_directories(dir);
  const bool gguf = models::is_block_quantized(dtype);
  const std::string path = dir + "/model." + models::dtype_name(dtype) + (gguf ? ".gguf" : ".anelab");
  models::export_model(m, path, gguf ? models::ExportFormat::kGguf : models::ExportFormat::kAnelab, dtype);
  return path;
}

// Each output of the typed product against the fp32 product of the dequantized W: within 2 γ_K (|a| |b|).
void qlora_expect_within_reordering(const std::vector<float>& got, const std::vector<float>& ref,
                                    const std::vector<float>& abs_ref, int64_t K, const std::string& what) {
  const double u = std::ldexp(1.0, -24), gamma = double(K) * u / (1 - double(K) * u);
  int64_t bad = 0, equal = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += std::abs(double(got[i]) - ref[i]) > 2 * gamma * abs_ref[i];
    equal += got[i] == ref[i];
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("[qlora product] %s: %lld of %zu outputs bit-equal to the fp32 path\n", what.c_str(), (long long)equal,
              got.size());
}

// y = x Wᵀ and dx (+)= dy W with W [20000, 512] bf16 / fp16 / Q8_0 / Q4_K: several converted tiles along each
// side (the tiles are 1 MiB: 512 rows of W for y; for dx at most 16384 rows of a column block), odd row count.
TEST(QLora, TypedProductsAreTheFp32ProductsOfTheDequantizedWeights) {
  const int64_t N = 8, in = 512, out = 20000;
  for (const models::DType dt :
       {models::DType::kBF16, models::DType::kF16, models::DType::kQ8_0, models::DType::kQ4_K}) {
    std::vector<float> wd;
    const models::Tensor W = test::typed_test_matrix(out, in, dt, 3 + uint64_t(dt), &wd);
    std::vector<float> x(size_t(N * in)), dy(size_t(N * out)), wabs(wd.size());
    train::Rng rng{11};
    for (float& v : x) v = float(double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1);
    for (float& v : dy) v = float(double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1);
    for (size_t i = 0; i < wd.size(); ++i) wabs[i] = std::abs(wd[i]);
    std::vector<float> xabs(x.size()), dyabs(dy.size());
    for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::abs(x[i]);
    for (size_t i = 0; i < dy.size(); ++i) dyabs[i] = std::abs(dy[i]);
    const std::string name = models::dtype_name(dt);

    std::vector<float> y(size_t(N * out)), yref(y.size()), yabs(y.size());
    train::matmul_wt(x.data(), W, y.data(), N, in, out);
    train::matmul_wt(x.data(), wd.data(), yref.data(), N, in, out);
    train::matmul_wt(xabs.data(), wabs.data(), yabs.data(), N, in, out);
    qlora_expect_within_reordering(y, yref, yabs, in, name + " y = x W^T");

    for (const bool add : {false, true}) {
      std::vector<float> dx(size_t(N * in), 0.5f), dxref(dx), dxabs(dx.size());
      train::matmul_dx(dy.data(), W, dx.data(), N, in, out, add);
      train::matmul_dx(dy.data(), wd.data(), dxref.data(), N, in, out, add);
      train::matmul_dx(dyabs.data(), wabs.data(), dxabs.data(), N, in, out, false);
      if (add)
        for (float& v : dxabs) v += 0.5f;
      qlora_expect_within_reordering(dx, dxref, dxabs, out + (add ? 1 : 0),
                                     name + (add ? " dx += dy W" : " dx = dy W"));
    }
  }
}

// dx (+)= dy W [out, in] in `dt` with each split in `splits`, add false and true, against the fp32 product of the
// dequantized W: within the reordering bound. dx starts at values of 1 to 4 either sign, above the bound 2 γ_K Σ
// |dy| |W| (about 0.54 for K 6000 of these operands), so a product that drops it (add ignored) fails.
void qlora_check_dx_splits(int64_t N, int64_t in, int64_t out, models::DType dt,
                           const std::vector<std::pair<train::TypedDxSplit, std::string>>& splits) {
  std::vector<float> wd;
  const models::Tensor W = test::typed_test_matrix(out, in, dt, 5 + uint64_t(dt), &wd);
  std::vector<float> dy(size_t(N * out)), dyabs(dy.size()), wabs(wd.size());
  train::Rng rng{23};
  for (float& v : dy) v = float(double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1);
  for (size_t i = 0; i < dy.size(); ++i) dyabs[i] = std::abs(dy[i]);
  for (size_t i = 0; i < wd.size(); ++i) wabs[i] = std::abs(wd[i]);
  std::vector<float> dx0(size_t(N * in)), prod_abs(dx0.size());
  for (float& v : dx0) v = float((1 + 3 * double(rng.next() >> 11) * 0x1.0p-53) * (rng.next() & 1 ? 1 : -1));
  train::matmul_dx(dyabs.data(), wabs.data(), prod_abs.data(), N, in, out, false);
  for (const bool add : {false, true}) {
    std::vector<float> dxref(dx0), dxabs(prod_abs);
    train::matmul_dx(dy.data(), wd.data(), dxref.data(), N, in, out, add);
    if (add)
      for (size_t i = 0; i < dxabs.size(); ++i) dxabs[i] += std::abs(dx0[i]);
    for (const auto& [split, sname] : splits) {
      std::vector<float> dx(dx0);
      train::matmul_dx(dy.data(), W, dx.data(), N, in, out, add, split);
      qlora_expect_within_reordering(dx, dxref, dxabs, out + (add ? 1 : 0),
                                     std::string(models::dtype_name(dt)) + " N " + std::to_string(N) + " [" +
                                         std::to_string(out) + ", " + std::to_string(in) + "] " + sname +
                                         (add ? " dx += dy W" : " dx = dy W"));
    }
  }
}

// Each split of the typed dx (train::TypedDxSplit: rows of W with per-thread partials summed into dx, columns of dx,
// and kAuto's pick), for a shape with out >= in (the head, gate, up) and one with in > out (down), W bf16 / Q8_0 /
// Q4_K. On a pool of P > 1 threads the rows split sums P - 1 partials into the part chunk 0 wrote into dx (a
// reduction that drops or doubles a partial is off by whole dot products, far outside the bound).
TEST(QLora, TypedDxSplitsAreTheFp32ProductOfTheDequantizedWeights) {
  std::printf("[qlora dx splits] pool of %d threads\n", ThreadPool::global().size());
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{512, 6000}, std::pair<int64_t, int64_t>{2048, 272}})
    for (const models::DType dt : {models::DType::kBF16, models::DType::kQ8_0, models::DType::kQ4_K})
      qlora_check_dx_splits(16, in, out, dt,
                            {{train::TypedDxSplit::kAuto, "auto"},
                             {train::TypedDxSplit::kRows, "rows"},
                             {train::TypedDxSplit::kColumns, "columns"}});
}

// The rows split's partials hold at most 2^22 floats (16 MiB): 2056 tokens of 2048 columns (4.2M values of dx) go
// through in blocks of tokens (2048 and 8 on a pool of 2 threads, more blocks on a larger pool).
TEST(QLora, TypedDxRowSplitGoesInBlocksOfTokens) {
  if (ThreadPool::global().size() == 1) GTEST_SKIP() << "a pool of 1 thread has no partials";
  qlora_check_dx_splits(2056, 2048, 64, models::DType::kBF16, {{train::TypedDxSplit::kRows, "rows"}});
}

// What a CpuModel computes for the adapters on a batch: the loss and d(loss)/d(adapters).
struct QloraGrads {
  double loss = 0;
  std::vector<float> g;
};

QloraGrads qlora_grads(const train::ParamLayout& layout, const train::FrozenBase* base, const std::vector<float>* w,
                       const train::LoraLayout& ll, const std::vector<float>& a, const train::Batch& b) {
  train::CpuModel model(layout);
  model.set_base(base);
  QloraGrads r;
  r.g.assign(a.size(), 0.0f);
  const train::LoraStep st{&ll, a.data(), r.g.data(), 0, 0, true};
  model.set_lora(&st);
  r.loss = model.forward_backward(w ? w->data() : nullptr, b, 1.0f, nullptr);
  return r;
}

// The adapter gradients with the base held in bf16 (anelab file), Q8_0 and Q4_K (GGUF): against the fp32 path run
// on the dequantized weights, and against PyTorch given the dequantized weights.
TEST(QLora, GradientsOfATypedBaseMatchTheFp32PathAndTorch) {
  const auto dir = test::temp_dir("qlora_grads").string();
  for (const models::DType dt : {models::DType::kBF16, models::DType::kQ8_0, models::DType::kQ4_K}) {
    const std::string name = models::dtype_name(dt);
    const models::Model m = models::load_any_model(qlora_write_model(dir, qlora_test_config(), dt));
    const train::ParamLayout layout(m.config);
    const train::FrozenBase base(layout, m);
    std::printf("[qlora %s] %s, rope %s\n", name.c_str(), m.source_format.c_str(),
                m.config.rope_style == models::RopeStyle::kRotateHalf ? "rotate-half" : "adjacent pairs");
    ASSERT_EQ(base.dense_data(), nullptr) << name;
    ASSERT_NE(base.typed(layout.find("layers.0.wq").offset), nullptr) << name;
    EXPECT_EQ(base.typed(layout.find("layers.0.wq").offset)->dtype, dt) << name;
    const std::vector<float> wd = train::init_from_model(layout, m);  // the dequantized weights
    EXPECT_EQ(base.to_f32(), wd) << name;

    train::LoraConfig lc;
    lc.rank = 4, lc.alpha = 8, lc.targets = train::parse_lora_targets("q,k,v,o,gate,up,down");
    const train::LoraLayout ll(m.config, lc);
    const auto [a, b] = test::lora_grad_case(ll, 2, 32, m.config.vocab_size);

    const QloraGrads typed = qlora_grads(layout, &base, nullptr, ll, a, b);
    const QloraGrads fp32 = qlora_grads(layout, nullptr, &wd, ll, a, b);
    EXPECT_NEAR(typed.loss, fp32.loss, 1e-5 * fp32.loss) << name;

    const std::string rd = dir + "/ref_" + name;
    std::filesystem::create_directories(rd + "/lora");
    for (const auto& p : ll.params()) write_npy(rd + "/lora/" + p.name + ".npy", p.shape, a.data() + p.offset);
    std::string log;
    ASSERT_TRUE(test::run_torch_reference(rd, layout, wd, {b}, {{"lora", {{"rank", lc.rank}, {"alpha", lc.alpha}}}},
                                          "grads", &log, "lora_reference.py"))
        << log;
    EXPECT_NEAR(typed.loss, read_npy(rd + "/out/loss.npy").data.at(0), 1e-5 * fp32.loss) << name;
    double worst_fp32 = 0, worst_torch = 0;
    bool equal = true;
    for (const auto& p : ll.params()) {
      const double e = test::rel_err(typed.g.data() + p.offset, fp32.g.data() + p.offset, p.numel);
      const NpyArray ref = read_npy(rd + "/out/grad." + p.name + ".npy");
      ASSERT_EQ(ref.numel(), p.numel) << p.name;
      const double et = test::rel_err(typed.g.data() + p.offset, ref.data.data(), p.numel);
      EXPECT_LT(e, 2e-4) << name << " " << p.name;
      EXPECT_LT(et, 1e-4) << name << " " << p.name;
      worst_fp32 = std::max(worst_fp32, e), worst_torch = std::max(worst_torch, et);
      equal = equal &&
              std::equal(typed.g.begin() + p.offset, typed.g.begin() + p.offset + p.numel, fp32.g.begin() + p.offset);
    }
    std::printf(
        "[qlora %s] base %lld bytes (%s) for %lld fp32; worst relative L2 vs the fp32 path %.2e (%s), vs torch "
        "%.2e\n",
        name.c_str(), (long long)base.held_bytes(), base.types().c_str(), (long long)(layout.total() * 4), worst_fp32,
        equal ? "bit-equal" : "reordered", worst_torch);
  }
  std::filesystem::remove_all(dir);
}

// `train --lora --init model.q4_k.gguf`: 4 steps == 2 + --resume + 2, bit for bit; the memory event reports the
// base as held (the file's tensor bytes, q4_k); the checkpoint is the dequantized base with the adapters merged.
TEST(QLora, Q4KRunResumesBitExact) {
  const models::ModelConfig cfg = qlora_test_config();
  const auto dir = test::temp_dir("qlora_resume").string();
  train::TrainConfig c;
  c.init = qlora_write_model(dir, cfg, models::DType::kQ4_K);
  c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5), c.run_dir = dir + "/run", c.run = "qlora";
  c.steps = 4, c.batch_size = 2, c.seq_len = 32, c.accum_steps = 2, c.lr = 2e-3, c.warmup_steps = 2;
  c.grad_clip = 1.0, c.batching = "random", c.eval_batches = 0;
  c.lora = true, c.lora_rank = 4, c.lora_alpha = 8, c.lora_dropout = 0.1;
  test::expect_lora_resume_bit_exact(c, 2);

  const models::Model m = models::load_any_model(c.init);
  const train::ParamLayout layout(m.config);
  int64_t file_tensors = 0;
  for (const auto& p : layout.params()) file_tensors += m.tensor(p.name).nbytes;
  const auto mem = test::read_events(c.run_dir, "memory");
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(mem[0]["base_bytes"].get<int64_t>(), file_tensors);
  EXPECT_EQ(mem[0]["base_types"].get<std::string>().rfind("q4_k", 0), 0u) << mem[0]["base_types"];
  EXPECT_LT(file_tensors, layout.total() * 4 / 5);  // 4.5 bits a weight in Q4_K

  train::LoraConfig lc;
  lc.rank = c.lora_rank, lc.alpha = c.lora_alpha, lc.targets = train::parse_lora_targets(c.lora_targets);
  const train::LoraLayout ll(m.config, lc);
  std::vector<float> aw, am, av;
  train::read_lora_state(c.run_dir + "/last.lora", ll, &aw, &am, &av);
  std::vector<float> merged = train::init_from_model(layout, m);
  train::lora_merge(layout, ll, aw.data(), lc.scale(), merged.data());
  EXPECT_EQ(train::read_checkpoint(c.run_dir + "/last.ckpt").weights, merged);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anelab

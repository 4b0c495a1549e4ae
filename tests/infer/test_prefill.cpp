// MIL prefill (emulator backend) against the CPU reference path: logits of every position, the KV
// cache it leaves behind (checked through the next decode step), every bucket boundary, and run.c.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/ane/ane_backend.h"
#include "framework/core/thread_pool.h"
#include "framework/mil/printer.h"
#include "infer/engine.h"
#include "infer/prefill_mil.h"
#include "models/arch/arch.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/errors.h"
#include "tests/common/test_data.h"
#include "tests/support/fake_shim.h"

namespace anelab::infer {
namespace {

using test::rel_err;

Engine make(const std::string& backend, WType dt = WType::kF32, int budget = -1) {
  EngineOptions o;
  o.compile_budget = budget;
  o.backend = backend;
  o.dtype = dt;
  o.quiet = true;
  return Engine(models::load_any_model(test::data_path("llama2c/stories260K.bin")), o);
}

// Issue 40 item 2: every bucket is a multiple of 64 fp16 columns, rows of 128 bytes (the alignment M5
// reports, maderix/ANE PR #35), for every preset's context and every prompt length.
TEST(InferPrefill, Buckets) {
  EXPECT_EQ(prefill_bucket(1, 512), 64);
  EXPECT_EQ(prefill_bucket(32, 512), 64);
  EXPECT_EQ(prefill_bucket(64, 512), 64);
  EXPECT_EQ(prefill_bucket(65, 512), 128);
  // a context that is not a multiple of 64: the last bucket is padded to whole 128-byte device rows
  // (the device's row-stride rule); the causal mask keeps the padding out of every real row
  EXPECT_EQ(prefill_bucket(300, 300), 320);
  EXPECT_EQ(prefill_bucket(257, 300), 320);
  EXPECT_EQ(prefill_bucket(3, 20), 64);
  std::vector<int64_t> contexts = {20, 100, 300, 512, 1000};
  for (const auto& name : models::preset_names()) contexts.push_back(models::preset(name).max_seq_len);
  for (int64_t ctx : contexts)
    for (int64_t n = 1; n <= std::min<int64_t>(ctx, 70000); n += n < 4096 ? 1 : 61)
      ASSERT_EQ(prefill_bucket(n, ctx) * 2 % 128, 0) << n << " / " << ctx;
}

// Issue 35 item 3: an engine owns one thread pool, and the emulator it drives runs on it: making the engine
// and its first MIL prefill start the pool's workers and no other thread. Before, the emulator backend made
// a second pool of --threads workers. Threads are counted in /proc/self/task (Linux; skipped elsewhere).
TEST(InferPrefill, EmulatorRunsOnTheEnginesPool) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  auto thread_count = [] {
    std::error_code ec;
    int64_t n = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != end(it); it.increment(ec))
      ++n;
    return ec ? int64_t(-1) : n;
  };
  if (thread_count() <= 0) GTEST_SKIP() << "no /proc/self/task on this OS";
  ThreadPool::global();  // created first, in case anything below asks for it
  models::Model m = models::load_any_model(test::data_path("llama2c/stories260K.bin"));
  EngineOptions o;
  o.backend = "emulator";
  o.threads = 3;
  o.quiet = true;
  const int64_t before = thread_count();
  Engine e(std::move(m), o);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8};
  e.prefill(toks, 0);
  ASSERT_EQ(e.last_prefill().path, "emulator");
  ASSERT_EQ(e.pool().size(), 3);
  EXPECT_EQ(thread_count() - before, e.pool().size() - 1)
      << "threads started beside the engine pool's " << e.pool().size() - 1 << " workers";
}

TEST(InferPrefill, EmulatorMatchesCpuAtBucketBoundaries) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  Engine cpu = make("cpu"), emu = make("emulator");
  const int64_t V = cpu.config().vocab_size;
  for (int64_t n : {1, 31, 32, 33, 63, 64, 65, 127, 128, 129}) {
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % V);
    toks[0] = 1;
    std::vector<float> a, b;
    cpu.prefill(toks, 0, &a);
    emu.prefill(toks, 0, &b);
    ASSERT_EQ(emu.last_prefill().bucket, prefill_bucket(n, 512)) << n;
    ASSERT_EQ(a.size(), b.size());
    for (int64_t t = 0; t < n; ++t)
      EXPECT_LT(rel_err(b.data() + t * V, a.data() + t * V, static_cast<size_t>(V)), 2e-2) << "n=" << n << " pos " << t;
    // The KV cache the kernels filled must serve the next decode step like the CPU one.
    const float* la = cpu.decode(5, n);
    std::vector<float> la_copy(la, la + V);
    const float* lb = emu.decode(5, n);
    EXPECT_LT(rel_err(lb, la_copy.data(), static_cast<size_t>(V)), 2e-2) << "decode after prefill n=" << n;
  }
}

TEST(InferPrefill, EmulatorLogitsMatchRunc) {
  ANELAB_REQUIRE_DATA("reference/runc_260K_greedy64_logits.json");
  std::ifstream f(test::data_path("reference/runc_260K_greedy64_logits.json"));
  const auto j = nlohmann::json::parse(f);
  Engine emu = make("emulator", WType::kF16);
  const auto prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> all;
  emu.prefill(prompt, 0, &all);
  for (const auto& st : j["steps"]) {
    const int64_t pos = st["pos"].get<int64_t>();
    if (pos >= static_cast<int64_t>(prompt.size())) break;
    const auto ref = st["logits"].get<std::vector<float>>();
    // fp16 activations + fp16 weights through 5 layers: ~1e-2 relative to the largest logit.
    EXPECT_LT(rel_err(all.data() + pos * 512, ref.data(), ref.size()), 2e-2) << "pos " << pos;
  }
}

TEST(InferPrefill, CompileBudgetFallsBackToCpu) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  Engine emu = make("emulator");
  std::vector<int32_t> toks{1, 403, 407, 261, 378};
  emu.prefill(toks, 0);
  EXPECT_EQ(emu.last_prefill().path, "emulator");
  // A prefill that does not start at position 0 always uses the CPU path.
  emu.prefill(std::vector<int32_t>{5, 6}, 5);
  EXPECT_EQ(emu.last_prefill().path, "cpu");
  // 5 layers need 5 compiles per bucket: with a budget of 7 the second bucket cannot be compiled.
  Engine small = make("emulator", WType::kF32, 7);
  small.prefill(toks, 0);
  EXPECT_EQ(small.last_prefill().path, "emulator");
  std::vector<int32_t> longer(70, 5);  // the 128 bucket (5 tokens use the 64 one)
  std::vector<float> a, b;
  small.prefill(longer, 0, &a);
  EXPECT_EQ(small.last_prefill().path, "cpu");
  Engine cpu = make("cpu");
  cpu.prefill(longer, 0, &b);
  EXPECT_EQ(a, b);
}

// Issue 40 item 2: the prefill on the "ane" backend over a FakeShim whose device starts I/O rows every 64
// bytes, 128 bytes or packs them densely (1) gives the emulator's logits, bit for bit (the fake evaluates
// the same program on the emulator): every bucket's rows are whole 128-byte rows.
TEST(InferPrefill, FakeAneEqualsTheEmulatorAtEveryRowAlignment) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const std::string dir = ::testing::TempDir() + "anelab-prefill-rows";
  ::setenv("ANELAB_ANE_SHIM", "fake", 1);
  ::setenv("ANELAB_FAKE_ANE_DIR", dir.c_str(), 1);
  ane::install_fake_shim(&ane::fake_shim_for_backend);
  Engine emu = make("emulator");
  for (const char* align : {"64", "128", "1"}) {
    ::setenv("ANELAB_FAKE_ANE_ROW_ALIGN", align, 1);
    Engine fake = make("ane");
    for (int64_t n : {5, 100}) {
      std::vector<int32_t> toks(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % 512);
      toks[0] = 1;
      std::vector<float> want, got;
      emu.prefill(toks, 0, &want);
      fake.prefill(toks, 0, &got);
      EXPECT_EQ(fake.last_prefill().path, "ane") << align;
      EXPECT_EQ(got, want) << "n=" << n << " at fake rows of " << align << " bytes";
    }
  }
  ::unsetenv("ANELAB_FAKE_ANE_ROW_ALIGN");
  ::unsetenv("ANELAB_ANE_SHIM");
  ane::install_fake_shim(nullptr);
}

// Issue 40 item 4: on the ANE (the fake shim with a planted layout error: outputs one row further down, no error)
// the self-check before the first prefill says so in one line (chip, kernel, max rel diff) and writes its
// report; the prefill, this one and every later one, runs on the CPU and gives the CPU engine's logits.
TEST(InferPrefill, AneSelfCheckSendsThePrefillToTheCpuOnAPlantedLayoutError) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const std::string dir = ::testing::TempDir() + "anelab-prefill-selfcheck";
  ::setenv("ANELAB_ANE_SHIM", "fake", 1);
  ::setenv("ANELAB_FAKE_ANE_DIR", dir.c_str(), 1);
  ::setenv("ANELAB_FAKE_ANE_LAYOUT_ERROR", "1", 1);
  ane::install_fake_shim(&ane::fake_shim_for_backend);
  const std::string report = (std::filesystem::temp_directory_path() / "anelab-self-check.json").string();
  std::filesystem::remove(report);
  Engine cpu = make("cpu"), fake = make("ane");
  const std::vector<int32_t> toks{1, 403, 407, 261, 378};
  std::vector<float> want, got;
  cpu.prefill(toks, 0, &want);
  ::testing::internal::CaptureStderr();
  fake.prefill(toks, 0, &got);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(fake.last_prefill().path, "cpu");
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  for (const char* part : {"[self-check] ane m4 prefill layer S=64", "DIFFERS from the emulator", "max rel diff",
                           "prefill runs on the CPU", "anelab probe"})
    EXPECT_NE(err.find(part), std::string::npos) << part << " in: " << err;
  EXPECT_TRUE(std::filesystem::exists(report));
  ::testing::internal::CaptureStderr();
  fake.prefill(std::vector<int32_t>(70, 5), 0, &got);  // another bucket: no second check, still the CPU
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(fake.last_prefill().path, "cpu");
  ::unsetenv("ANELAB_FAKE_ANE_LAYOUT_ERROR");
  ::unsetenv("ANELAB_ANE_SHIM");
  ane::install_fake_shim(nullptr);
}

// The MIL prefill takes its kernel parameters from the model description and refuses, in one line naming the
// layer, the step and itself, what its layer kernel lacks: descriptions edited as a future architecture would
// write them. (Before, a LayerNorm q/k norm was built as an RMSNorm without a word.)
TEST(InferPrefill, UnsupportedStepsOfTheDescriptionAreNamed) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const Engine e = make("cpu");
  const models::ModelDesc base = e.desc();
  auto refusal_of = [&](const std::function<void(models::ModelDesc&)>& edit, int64_t layer) {
    models::ModelDesc d = base;
    edit(d);
    try {
      build_layer_kernel(d, e.layer(layer), 64, mil::Dialect::kIos18, layer);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal_of([](models::ModelDesc&) {}, 1), "accepted");
  const std::string ex = " is not supported by the MIL prefill";
  EXPECT_EQ(refusal_of([](models::ModelDesc& d) { d.layers[1].steps[0].attn.score_softcap = 50.0f; }, 1),
            "[infer] layer 1 attention: score soft-capping (cap 50)" + ex);
  EXPECT_EQ(refusal_of(
                [](models::ModelDesc& d) {
                  models::NormDesc n;
                  n.kind = models::NormType::kLayer;
                  d.layers[2].steps[0].attn.q_norm = d.layers[2].steps[0].attn.k_norm = n;
                },
                2),
            "[infer] layer 2 attention: a q/k norm other than RMSNorm" + ex);
  EXPECT_EQ(refusal_of([](models::ModelDesc& d) { d.layers[0].steps[1].residual_scale = 0.5f; }, 0),
            "[infer] layer 0 ffn: residual scale 0.5" + ex);
  EXPECT_EQ(refusal_of([](models::ModelDesc& d) { d.layers[3].steps[1].pre_norm.reset(); }, 3),
            "[infer] layer 3 ffn: a step without a pre-norm" + ex);
}

// Each norm of the layer kernel takes its own eps from the description: changing the q norm's (or the k norm's,
// or the FFN pre-norm's) eps changes the program, and each its own part of it. (Before, every norm of the kernel
// took the attention pre-norm's eps.)
TEST(InferPrefill, EachNormTakesItsOwnEpsFromTheDescription) {
  models::ModelConfig c = models::preset("qwen3-0.6b");
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 1, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 64, c.max_seq_len = 64;
  const int64_t D = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), H = c.hidden_dim;
  std::vector<std::vector<float>> keep;
  auto values = [&](int64_t n) -> std::span<const float> {
    keep.emplace_back(static_cast<size_t>(n), 0.5f);
    return keep.back();
  };
  keep.reserve(16);  // the spans point into keep: no reallocation
  auto mat = [&](int64_t rows, int64_t cols) { return quant::Mat::f32(values(rows * cols), rows, cols); };
  LayerWeights L;
  L.wq = mat(QD, D), L.wk = mat(KVD, D), L.wv = mat(KVD, D), L.wo = mat(D, QD);
  L.w1 = mat(H, D), L.w3 = mat(H, D), L.w2 = mat(D, H);
  const models::ModelDesc base = models::describe_model(c);
  ASSERT_TRUE(base.layers[0].steps[0].attn.q_norm && base.layers[0].steps[0].attn.k_norm);
  const models::Step& at = base.layers[0].steps[0];
  L.set_norm(at.pre_norm->weight, values(D)), L.set_norm(base.layers[0].steps[1].pre_norm->weight, values(D));
  L.set_norm(at.attn.q_norm->weight, values(c.head_dim)), L.set_norm(at.attn.k_norm->weight, values(c.head_dim));
  auto text = [&](const std::function<void(models::ModelDesc&)>& edit) {
    models::ModelDesc d = base;
    edit(d);
    return mil::print(build_layer_kernel(d, L, 64, mil::Dialect::kIos18).program, mil::Dialect::kIos18);
  };
  const std::string same = text([](models::ModelDesc&) {});
  const std::string q = text([](models::ModelDesc& d) { d.layers[0].steps[0].attn.q_norm->eps = 0.25f; });
  const std::string k = text([](models::ModelDesc& d) { d.layers[0].steps[0].attn.k_norm->eps = 0.25f; });
  const std::string f = text([](models::ModelDesc& d) { d.layers[0].steps[1].pre_norm->eps = 0.25f; });
  // (EXPECT_TRUE, not EXPECT_NE: a failure names the case without printing two whole programs)
  EXPECT_TRUE(same == text([](models::ModelDesc&) {})) << "the same description gave another program";
  EXPECT_TRUE(q != same) << "the q norm's eps did not reach the program";
  EXPECT_TRUE(k != same) << "the k norm's eps did not reach the program";
  EXPECT_TRUE(f != same) << "the FFN pre-norm's eps did not reach the program";
  EXPECT_TRUE(q != k && q != f) << "two norms' eps changed the same part of the program";
}

}  // namespace
}  // namespace anelab::infer

namespace anelab::infer {
namespace {

// A residual stream whose RMS passes sqrt(65504 / dim) (here about 100 against 32 at dim 64, as in trained models):
// the norms' mean of squares must not overflow fp16 in the MIL layer, where it once went inf and zeroed the norm
// (logits off by 10-30 % of their range). RMSNorm (stories260K's shape) and LayerNorm (GPT-2's).
TEST(InferPrefill, NormsOfALargeResidualStreamDoNotOverflowFp16) {
  for (const char* preset : {"stories260k", "gpt2-124m"}) {
    models::ModelConfig c = models::preset(preset);
    c.dim = 64, c.hidden_dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 16;
    c.vocab_size = 96, c.max_seq_len = 64;
    models::Model src = models::random_model(c, 5);
    models::Model m;
    m.config = c;
    for (const models::Tensor& t : src.tensors()) {
      std::vector<float> v = t.to_f32();
      // N(0, 0.02) -> RMS 100: the embeddings, and the branches' output projections, so that every step's output is
      // as large as the stream it adds to (a norm that outputs 0 then changes the logits)
      const bool big =
          t.name == "tok_embeddings" || t.name.ends_with(".wo") || t.name.ends_with(".w2") || t.name.ends_with(".proj");
      if (big)
        for (float& x : v) x *= 5000.0f;
      std::vector<uint8_t> bytes(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());
      m.add_owned(t.name, models::DType::kF32, t.shape, std::move(bytes));
    }
    EngineOptions o;
    o.quiet = true;
    o.backend = "cpu";
    Engine cpu(m, o);
    o.backend = "emulator";
    Engine emu(m, o);
    std::vector<int32_t> toks(20);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 29 + 3) % 96);
    std::vector<float> a, b;
    cpu.prefill(toks, 0, &a);
    emu.prefill(toks, 0, &b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < toks.size(); ++t)
      EXPECT_LT(rel_err(b.data() + t * 96, a.data() + t * 96, 96), 2e-2) << preset << " pos " << t;
  }
}

}  // namespace
}  // namespace anelab::infer

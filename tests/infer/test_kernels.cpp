// CPU kernels of the inference engine against a double-precision reference: GEMV (fused outputs) and
// GEMM (packed panels, MR-token micro-kernels) over shapes that hit every tail (rows not a multiple of
// 32 or 4, columns not a multiple of 32/16/256, token counts not a multiple of 12), fp16 and fp32
// weights, 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "framework/core/fp16.h"
#include "infer/cpu_math.h"
#include "infer/engine.h"
#include "models/arch/arch.h"
#include "models/presets.h"

namespace anelab::infer {
namespace {

struct Weights {
  std::vector<float> f32;  // [rows, cols]; values exactly representable in fp16
  std::vector<half_bits> f16;
  Mat mat(WType t, int64_t rows, int64_t cols) const {
    return Mat{t, rows, cols, t == WType::kF16 ? static_cast<const void*>(f16.data()) : f32.data()};
  }
};

Weights make_weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Weights w;
  w.f32.resize(static_cast<size_t>(rows * cols));
  for (auto& v : w.f32) v = nd(rng);
  w.f16.resize(w.f32.size());
  float_to_half(w.f32.data(), w.f16.data(), w.f32.size());
  half_to_float(w.f16.data(), w.f32.data(), w.f32.size());
  return w;
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// |got - ref| <= tol * sum_k |w x| (fp32 accumulation error bound scaled by the dot's magnitude).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= 1e-5 * mag[i] + 1e-6) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", reference " << ref[i];
  EXPECT_EQ(bad, 0) << what;
}

void reference(const Weights& w, const std::vector<float>& bias, const std::vector<float>& x, int64_t n_tok,
               int64_t rows, int64_t cols, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(static_cast<size_t>(n_tok * rows), 0.0);
  mag.assign(ref.size(), 0.0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(r)], m = std::fabs(s);
      for (int64_t k = 0; k < cols; ++k) {
        const double p =
            static_cast<double>(w.f32[static_cast<size_t>(r * cols + k)]) * x[static_cast<size_t>(t * cols + k)];
        s += p;
        m += std::fabs(p);
      }
      ref[static_cast<size_t>(t * rows + r)] = s;
      mag[static_cast<size_t>(t * rows + r)] = m;
    }
}

TEST(InferKernels, GemmMatchesReferenceOnTailShapes) {
  struct Shape {
    int64_t rows, cols, n_tok;
  };
  const Shape shapes[] = {{32, 256, 12}, {37, 300, 13}, {5, 17, 2}, {64, 513, 25}, {100, 64, 1}, {33, 31, 11}};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Shape& s : shapes)
      for (WType t : {WType::kF16, WType::kF32})
        for (bool with_bias : {false, true}) {
          const Weights w = make_weights(s.rows, s.cols, static_cast<uint32_t>(s.rows * 7 + s.cols));
          const auto x = random_vec(static_cast<size_t>(s.n_tok * s.cols), 3);
          const auto bias = with_bias ? random_vec(static_cast<size_t>(s.rows), 4) : std::vector<float>{};
          std::vector<float> y(static_cast<size_t>(s.n_tok * s.rows), NAN);
          gemm(pool, w.mat(t, s.rows, s.cols), with_bias ? bias.data() : nullptr, x.data(), s.n_tok, y.data());
          std::vector<double> ref, mag;
          reference(w, bias, x, s.n_tok, s.rows, s.cols, ref, mag);
          const std::string what = "gemm " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                                   " n=" + std::to_string(s.n_tok) + (t == WType::kF16 ? " f16" : " f32") +
                                   (with_bias ? " bias" : "") + " threads=" + std::to_string(threads);
          expect_close(y, ref, mag, what.c_str());
        }
  }
}

TEST(InferKernels, FusedGemvMatchesReference) {
  ThreadPool pool(2);
  for (WType t : {WType::kF16, WType::kF32})
    for (int64_t cols : {int64_t{896}, int64_t{100}, int64_t{4864 + 16}}) {
      const int64_t r1 = 131, r2 = 64;  // 131: 4-row blocks plus a 3-row tail
      const Weights w1 = make_weights(r1, cols, 1), w2 = make_weights(r2, cols, 2);
      const auto x = random_vec(static_cast<size_t>(cols), 5);
      const auto b1 = random_vec(static_cast<size_t>(r1), 6);
      const Mat m1 = w1.mat(t, r1, cols), m2 = w2.mat(t, r2, cols);
      std::vector<float> y1(static_cast<size_t>(r1)), y2(static_cast<size_t>(r2));
      gemv(pool, {{&m1, b1.data(), y1.data()}, {&m2, nullptr, y2.data()}}, x.data());
      std::vector<double> ref, mag;
      reference(w1, b1, x, 1, r1, cols, ref, mag);
      expect_close(y1, ref, mag, "gemv out 1");
      reference(w2, {}, x, 1, r2, cols, ref, mag);
      expect_close(y2, ref, mag, "gemv out 2");
    }
}

// gemv_batch (decode's batched GEMV: register tiles of rows x tokens over column blocks) against gemv of each token
// alone: the same bits for 1 to 17 tokens (token tiles and blocks with remainders), fp16 and fp32 weights, fused
// outputs (37 rows: a 1-row tail), columns with a partial column block and a tail of less than one vector, 1 and 2
// threads.
TEST(InferKernels, GemvBatchEqualsGemvOfEachToken) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (WType t : {WType::kF16, WType::kF32})
      for (int64_t cols : {int64_t{2100}, int64_t{100}}) {  // 2100: two whole column blocks, a partial one, a tail
        const int64_t r1 = 72, r2 = 37, max_tok = 17;
        const Weights w1 = make_weights(r1, cols, 11), w2 = make_weights(r2, cols, 12);
        const auto x = random_vec(static_cast<size_t>(max_tok * cols), 13);
        const auto b1 = random_vec(static_cast<size_t>(r1), 14);
        const Mat m1 = w1.mat(t, r1, cols), m2 = w2.mat(t, r2, cols);
        for (int64_t n = 1; n <= max_tok; ++n) {
          std::vector<float> y1(static_cast<size_t>(n * r1)), y2(static_cast<size_t>(n * r2));
          gemv_batch(pool, {{&m1, b1.data(), y1.data()}, {&m2, nullptr, y2.data()}}, x.data(), n);
          for (int64_t k = 0; k < n; ++k) {
            std::vector<float> o1(static_cast<size_t>(r1)), o2(static_cast<size_t>(r2));
            gemv(pool, {{&m1, b1.data(), o1.data()}, {&m2, nullptr, o2.data()}}, x.data() + k * cols);
            for (int64_t r = 0; r < r1; ++r)
              ASSERT_EQ(y1[static_cast<size_t>(k * r1 + r)], o1[static_cast<size_t>(r)])
                  << (t == WType::kF16 ? "f16" : "f32") << " cols " << cols << " threads " << threads << " " << n
                  << " tokens: token " << k << " out 1 row " << r;
            for (int64_t r = 0; r < r2; ++r)
              ASSERT_EQ(y2[static_cast<size_t>(k * r2 + r)], o2[static_cast<size_t>(r)])
                  << (t == WType::kF16 ? "f16" : "f32") << " cols " << cols << " threads " << threads << " " << n
                  << " tokens: token " << k << " out 2 row " << r;
          }
        }
      }
  }
}

TEST(InferKernels, VectorExpSiluGelu) {
  std::vector<float> x;
  for (float v = -90.0f; v <= 88.0f; v += 0.37f) x.push_back(v);
  std::vector<float> e = x, s = x, g = x, ones(x.size(), 1.0f);
  exp_inplace(e.data(), static_cast<int64_t>(e.size()));
  silu_mul(s.data(), ones.data(), static_cast<int64_t>(s.size()));
  gelu_tanh_inplace(g.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i], ref = std::exp(xd);
    EXPECT_NEAR(e[i], ref, 3e-7 * ref + 1e-37) << x[i];
    EXPECT_NEAR(s[i], xd / (1.0 + std::exp(-xd)), 1e-6 * std::fabs(xd) + 1e-30) << x[i];
    const double gr = 0.5 * xd * (1.0 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
    EXPECT_NEAR(g[i], gr, 1e-6 * std::fabs(xd) + 1e-30) << x[i];
  }
}

// Prefill (GEMM, batched transposed-key attention, pooled elementwise ops, chunks continuing at pos > 0)
// against token-by-token decode (GEMV, per-position attention) on random models with head_dim 64; the
// gemma3 one has a sliding window of 7 on layer 0 (layer 1 global), crossing the chunk boundaries.
TEST(InferKernels, PrefillMatchesTokenByTokenDecode) {
  for (const char* preset : {"qwen2.5-0.5b", "gpt2-124m", "gemma3-270m"}) {
    models::ModelConfig c = models::preset(preset);
    c.dim = 128, c.hidden_dim = 256, c.n_layers = 2, c.n_heads = 2, c.head_dim = 64, c.vocab_size = 300;
    c.n_kv_heads = c.arch == "gpt2" ? 2 : 1;
    c.max_seq_len = 128;
    if (c.params.contains("sliding_window"))
      models::set_param_named(&c, "sliding_window", 7), models::set_param_named(&c, "sliding_pattern", 2);
    EngineOptions o;
    o.dtype = WType::kF32;
    o.prefill_chunk = 24;  // 53 tokens: chunks of 24, 24, 5 (the last on the per-position path)
    o.quiet = true;
    Engine pre(models::random_model(c, 9), o), dec(models::random_model(c, 9), o);
    std::vector<int32_t> toks(53);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 37 + 11) % 300);
    std::vector<float> all;
    pre.prefill(toks, 0, &all);
    ASSERT_EQ(all.size(), toks.size() * 300);
    for (size_t t = 0; t < toks.size(); ++t) {
      const float* lg = dec.decode(toks[t], static_cast<int64_t>(t));
      double num = 0, den = 0;
      for (int v = 0; v < 300; ++v) {
        num += std::pow(lg[v] - all[t * 300 + v], 2.0);
        den += std::pow(lg[v], 2.0);
      }
      EXPECT_LT(std::sqrt(num / den), 1e-5) << preset << " position " << t;
    }
  }
}

}  // namespace
}  // namespace anelab::infer

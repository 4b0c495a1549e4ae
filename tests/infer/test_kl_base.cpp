// The base files of `anelab perplexity --kl-base` (infer/kl_base.h): llama-perplexity's
// --kl-divergence-base file written here by hand (tests/infer/kl_base_file.h) reads back as its tokens and
// log-probabilities within the format's rounding; compare_with_base is shift-invariant, counts top-1 changes
// and gives the KL of two known distributions; every malformed file is refused in one line naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "infer/kl_base.h"
#include "infer/perplexity.h"
#include "tests/common/test_data.h"
#include "tests/infer/kl_base_file.h"

namespace anelab {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kCtx = 8, kVocab = 5, kChunks = 2;
constexpr int64_t kRows = kChunks * (kCtx - 1 - kCtx / 2);  // 6 scored positions

struct Fixture {
  std::vector<int32_t> tokens;  // [kChunks * kCtx]
  std::vector<float> logits;    // [kRows, kVocab]
};

// Logits with a spread of ~10 and, in row 2, one 30 below the top (clamped in the file).
Fixture fixture() {
  Fixture f;
  for (int32_t i = 0; i < kCtx * kChunks; ++i) f.tokens.push_back((i * 3 + 1) % kVocab);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int64_t i = 0; i < kRows * kVocab; ++i) f.logits.push_back(nd(rng));
  f.logits[2 * kVocab + 4] = f.logits[2 * kVocab] - 30.f;
  for (int i = 1; i < 4; ++i) f.logits[2 * kVocab + i] = f.logits[2 * kVocab] - 1.f * i;
  return f;
}

std::vector<uint8_t> bytes_of(const Fixture& f) {
  return test::llama_kl_base_bytes(kCtx, kVocab, kChunks, f.tokens, f.logits);
}

void log_softmax(const float* x, int64_t n, double* out) {
  double mx = x[0], s = 0;
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mx - std::log(s);
}

TEST(KlBase, LlamaFileReadsBackTokensAndLogProbs) {
  const Fixture f = fixture();
  const std::vector<uint8_t> b = bytes_of(f);
  // 20 header bytes, 64 tokens, 6 records of (5 rounded up to 6) + 4 u16.
  ASSERT_EQ(b.size(), 20u + 4u * kCtx * kChunks + 2u * kRows * 10u);
  const infer::KlBase base = infer::parse_llama_kl_base(b.data(), b.size(), "hand.kld");
  EXPECT_EQ(base.kind, infer::KlBase::Kind::kLlamaCpp);
  EXPECT_EQ(base.ctx, kCtx);
  EXPECT_EQ(base.chunks, kChunks);
  EXPECT_EQ(base.n, kRows);
  EXPECT_EQ(base.vocab, kVocab);
  EXPECT_EQ(base.tokens, f.tokens);
  std::vector<double> lp(kVocab);
  double want[kVocab];
  for (int64_t t = 0; t < kRows; ++t) {
    const double clamp = base.log_probs(t, lp.data());
    log_softmax(f.logits.data() + t * kVocab, kVocab, want);
    // The stored step is (max - lo) / 65535 with max - lo <= 16; fp32 adds a few ulp of values below 32.
    const double h = base.half_step(t), tol = h + 8 * std::numeric_limits<float>::epsilon() * 32;
    EXPECT_GT(h, 0.0);
    EXPECT_LE(h, 16.0 / 65535 / 2 * (1 + 1e-5));
    for (int i = 0; i < kVocab; ++i) {
      if (t == 2 && i == 4) {
        EXPECT_EQ(lp[i], clamp) << "the logit 30 below the top is stored as the clamp level";
        EXPECT_NEAR(clamp, want[0] - 16, tol);
        continue;
      }
      EXPECT_NEAR(lp[i], want[i], tol) << "row " << t << " entry " << i;
    }
  }
}

TEST(KlBase, CompareIsShiftInvariantAndCountsTopOneChanges) {
  const Fixture f = fixture();
  const std::vector<uint8_t> b = bytes_of(f);
  const infer::KlBase base = infer::parse_llama_kl_base(b.data(), b.size(), "hand.kld");
  std::vector<float> run = f.logits;
  for (int64_t t = 0; t < kRows; ++t)
    for (int i = 0; i < kVocab; ++i) run[t * kVocab + i] += 3.5f * static_cast<float>(t);  // a shift per row
  infer::KlResult k = infer::compare_with_base(base, run.data());
  // Identical distributions up to the file's rounding h: |Δ log p| <= h, so |KL| <= h (1 + h).
  EXPECT_EQ(k.top1, 1.0);
  EXPECT_LE(k.max_dlogp, k.base_step + 1e-5);
  EXPECT_LE(std::fabs(k.mean_kl), 1.001 * k.base_step + 1e-5);
  EXPECT_NEAR(k.base_step, 16.0 / 65535 / 2, 16.0 / 65535 / 2);

  // Row 4: the runner-up raised above the top: top-1 5 of 6; the KL of that row as computed here.
  float* r4 = run.data() + 4 * kVocab;
  const int64_t top = std::max_element(r4, r4 + kVocab) - r4;
  const int64_t second = top == 0 ? 1 : 0;
  r4[second] = r4[top] + 1.f;
  k = infer::compare_with_base(base, run.data());
  EXPECT_NEAR(k.top1, 5.0 / 6.0, 1e-12);
  double pb[kVocab], pr[kVocab], kl4 = 0;
  log_softmax(f.logits.data() + 4 * kVocab, kVocab, pb);
  log_softmax(r4, kVocab, pr);
  for (int i = 0; i < kVocab; ++i) kl4 += std::exp(pb[i]) * (pb[i] - pr[i]);
  EXPECT_GT(kl4, 0.1);
  // The mean over 6 rows; the other rows and the rounding of row 4 add at most (1 + KL) h each.
  EXPECT_NEAR(k.mean_kl, kl4 / 6, 2 * k.base_step);
  EXPECT_GT(k.max_rel, 0.0);
  EXPECT_LT(k.max_rel, 1.0);
}

TEST(KlBase, NpyLogitsAreExact) {
  const Fixture f = fixture();
  const fs::path dir = test::temp_dir("kl_base_npy");
  const std::string path = (dir / "base.npy").string();
  write_npy(path, {kRows, kVocab}, f.logits.data());
  const infer::KlBase base = infer::read_kl_base(path);
  EXPECT_EQ(base.kind, infer::KlBase::Kind::kNpyLogits);
  const infer::KlResult k = infer::compare_with_base(base, f.logits.data());
  EXPECT_EQ(k.mean_kl, 0.0);
  EXPECT_EQ(k.max_dlogp, 0.0);
  EXPECT_EQ(k.base_step, 0.0);
  EXPECT_EQ(k.top1, 1.0);
  fs::remove_all(dir);
}

// Each corruption of the hand-written file and the one-line error that names it.
struct Corruption {
  const char* what;
  void (*edit)(std::vector<uint8_t>&);
  const char* error;
};

void put_i32(std::vector<uint8_t>& b, size_t at, int32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_f32(std::vector<uint8_t>& b, size_t at, float v) { std::memcpy(b.data() + at, &v, 4); }
constexpr size_t kRecords = 20 + 4 * kCtx * kChunks;

TEST(KlBase, MalformedFilesAreRefusedInOneLine) {
  const Corruption cases[] = {
      {"magic", [](std::vector<uint8_t>& b) { b[0] = 'X'; }, "neither a .npy of logits"},
      {"short header", [](std::vector<uint8_t>& b) { b.resize(12); }, "no \"_logits_\" header of 20 bytes"},
      {"n_ctx", [](std::vector<uint8_t>& b) { put_i32(b, 8, 2); }, "n_ctx 2 is out of range"},
      {"n_vocab", [](std::vector<uint8_t>& b) { put_i32(b, 12, -5); }, "n_vocab -5 is out of range"},
      {"n_chunk", [](std::vector<uint8_t>& b) { put_i32(b, 16, 0); }, "n_chunk 0 is not positive"},
      {"in tokens", [](std::vector<uint8_t>& b) { b.resize(40); }, "ends inside its tokens (40 bytes;"},
      {"in chunk 1", [](std::vector<uint8_t>& b) { b.resize(b.size() - 10); },
       "(it ends inside chunk 1's log-probabilities)"},
      {"trailing", [](std::vector<uint8_t>& b) { b.push_back(0); }, "(trailing bytes)"},
      {"token", [](std::vector<uint8_t>& b) { put_i32(b, 20 + 4 * 9, 5); },
       "token 9 is 5, outside the vocabulary of 5"},
      {"scale", [](std::vector<uint8_t>& b) { put_f32(b, kRecords + 20 * 3, -1.f); }, "scored position 3 has scale -1"},
      {"min_log_prob", [](std::vector<uint8_t>& b) { put_f32(b, kRecords + 4, NAN); }, "scored position 0 has scale"},
  };
  const fs::path dir = test::temp_dir("kl_base_bad");
  for (const Corruption& c : cases) {
    std::vector<uint8_t> b = bytes_of(fixture());
    c.edit(b);
    const std::string path = (dir / "bad.kld").string();
    write_file_atomic(path, b.data(), b.size());
    try {
      (void)infer::read_kl_base(path);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("[perplexity] " + path + ": ", 0), 0u) << c.what << ": " << m;
      EXPECT_NE(m.find(c.error), std::string::npos) << c.what << ": " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab

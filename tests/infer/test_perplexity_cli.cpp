// `anelab perplexity` on stories260K (../shared/data) and held-out TinyStories text: its PPL, error
// estimate and mean NLL equal what this test computes itself from `anelab infer logits` of the same
// chunks (llama-perplexity's rule: the text tokenized with BOS first, chunks of --ctx tokens, each with BOS
// first, the second half scored); a run compared with its own saved logits has KL 0, top-1 agreement 100 %
// and max |dlogp| 0; a base file of another run's shape is refused in one line; a llama-perplexity
// --kl-divergence-base file of the run's own logits (written here, tests/infer/kl_base_file.h) agrees to
// within the file's rounding, its tokens are checked against the text's, and a changed token is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_data.h"
#include "tests/infer/kl_base_file.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab {
namespace {

namespace fs = std::filesystem;
using test::anelab;

constexpr int64_t kCtx = 64, kChunks = 4;

class PerplexityCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
    ANELAB_REQUIRE_DATA("tinystories/tinystories_valid_prefix.txt");
    dir_ = test::temp_dir("perplexity_cli");
    text_ = (dir_ / "text.txt").string();
    write_file_atomic(text_,
                      read_file_text(test::data_path("tinystories/tinystories_valid_prefix.txt")).substr(0, 4000));
    model_ = test::data_path("llama2c/stories260K.bin");
    tok_ = test::data_path("llama2c/tok512.bin");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string base_args(int64_t ctx = kCtx) const {
    return "perplexity -q -m " + model_ + " --tokenizer " + tok_ + " --text " + text_ + " --ctx " +
           std::to_string(ctx) + " --chunks " + std::to_string(kChunks);
  }
  // The text as llama-perplexity tokenizes it: BOS first (SentencePiece).
  std::vector<int32_t> text_ids() const {
    tok::EncodeOptions eo;
    eo.add_bos = true;
    return tok::load_tokenizer(tok_)->encode(read_file_text(text_), eo);
  }
  fs::path dir_;
  std::string text_, model_, tok_;
};

double number_after(const std::string& text, const std::string& re) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, std::regex(re))) << re << " not in:\n" << text;
  return m.size() > 1 ? std::stod(m[1].str()) : NAN;
}

TEST_F(PerplexityCli, PplIsExpOfTheMeanNllOfInferLogits) {
  const auto r = anelab(base_args());
  ASSERT_EQ(r.rc, 0) << r.err;
  const double ppl = number_after(r.out, R"(PPL = ([0-9.]+) \+/-)");
  const double err = number_after(r.out, R"(PPL = [0-9.]+ \+/- ([0-9.]+))");
  const double mean_nll = number_after(r.out, R"(mean NLL ([0-9.]+))");

  // The same chunks, scored here from `infer logits` (fp32 weights: llama2.c files compute in fp32).
  const auto tk = tok::load_tokenizer(tok_);
  const std::vector<int32_t> ids = text_ids();
  ASSERT_GE(static_cast<int64_t>(ids.size()), kCtx * kChunks);
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  for (int64_t c = 0; c < kChunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * kCtx, ids.begin() + (c + 1) * kCtx);
    chunk[0] = tk->bos_id();
    std::string list;
    for (int32_t id : chunk) list += std::to_string(id) + " ";
    const std::string out = (dir_ / ("chunk" + std::to_string(c) + ".npy")).string();
    const auto lr = anelab("infer logits -q -m " + model_ + " --ids '" + list + "' --out " + out);
    ASSERT_EQ(lr.rc, 0) << lr.err;
    const NpyArray a = read_npy(out);
    const int64_t V = a.shape[1];
    for (int64_t j = kCtx / 2; j < kCtx - 1; ++j) {
      const float* row = a.data.data() + j * V;
      double mx = row[0], s = 0;
      for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(row[i]));
      for (int64_t i = 0; i < V; ++i) s += std::exp(row[i] - mx);
      const double nll = mx + std::log(s) - row[chunk[static_cast<size_t>(j + 1)]];
      sum += nll, sum2 += nll * nll, ++n;
    }
  }
  ASSERT_EQ(n, kChunks * (kCtx - 1 - kCtx / 2));
  const double want_nll = sum / double(n), want_ppl = std::exp(want_nll);
  const double want_err = want_ppl * std::sqrt((sum2 / double(n) - want_nll * want_nll) / double(n - 1));
  // Same logits on both sides; what differs is the printing: 8 decimals of the NLL, 6 of PPL and error.
  EXPECT_NEAR(mean_nll, want_nll, 1e-8);
  EXPECT_NEAR(ppl, want_ppl, 1e-6);
  EXPECT_NEAR(err, want_err, 1e-6);
  EXPECT_NEAR(ppl, std::exp(mean_nll), 1e-6 * ppl);
  std::printf("stories260K: PPL %.6f +/- %.6f over %lld scored tokens\n", ppl, err, static_cast<long long>(n));
}

TEST_F(PerplexityCli, KlOfARunAgainstItselfIsZero) {
  const std::string base = (dir_ / "base.npy").string();
  auto r = anelab(base_args() + " --save-logits " + base);
  ASSERT_EQ(r.rc, 0) << r.err;
  const NpyArray a = read_npy(base);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{kChunks * (kCtx - 1 - kCtx / 2), 512}));
  r = anelab(base_args() + " --kl-base " + base);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("mean 0.000000 +/- 0.000000, top-1 agreement 100.000%, max |dlogp| 0 (0 of the logit range; "
                       "the base's own rounding 0)\n"),
            std::string::npos)
      << r.out;
  // fp16 weights against the fp32 base: a small, non-zero divergence.
  r = anelab(base_args() + " --dtype fp16 --kl-base " + base);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(number_after(r.out, R"(max \|dlogp\| ([0-9.e-]+))"), 0.0);
  // Another --ctx scores other positions: refused, naming both shapes.
  r = anelab(base_args(32) + " --kl-base " + base);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("[perplexity] --kl-base " + base + ": shape [124, 512] is not this run's [60, 512]"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(PerplexityCli, LlamaCppBaseFileOfItsOwnLogitsAgreesToItsRounding) {
  const std::string npy = (dir_ / "base.npy").string(), kld = (dir_ / "base.kld").string();
  auto r = anelab(base_args() + " --save-logits " + npy);
  ASSERT_EQ(r.rc, 0) << r.err;
  const NpyArray logits = read_npy(npy);
  std::vector<int32_t> ids = text_ids();
  ASSERT_GE(ids.size(), static_cast<size_t>(kCtx * kChunks));
  const size_t n_text = ids.size();
  ids.resize(kCtx * kChunks);
  std::vector<uint8_t> file = test::llama_kl_base_bytes(kCtx, 512, kChunks, ids, logits.data);
  write_file_atomic(kld, file.data(), file.size());

  // --ctx and --chunks come from the file; --text is only compared with its tokens.
  const std::string plain = "perplexity -q -m " + model_ + " --tokenizer " + tok_;
  r = anelab(plain + " --text " + text_ + " --kl-base " + kld);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(
      r.out.find("tokenization: the text's first 256 ids (of " + std::to_string(n_text) + ") are the base file's"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("top-1 agreement 100.000%"), std::string::npos) << r.out;
  // The file holds log-probabilities to within half a step of (range <= 16) / 65535: |dlogp| and |KL| below it.
  const double step = number_after(r.out, R"(the base's own rounding ([0-9.e-]+)\))");
  EXPECT_GT(step, 0.0);
  EXPECT_LE(step, 16.0 / 65535 / 2 * 1.01);
  EXPECT_LE(number_after(r.out, R"(max \|dlogp\| ([0-9.e-]+))"), step * 1.01 + 1e-5);
  EXPECT_LE(std::fabs(number_after(r.out, R"(KL divergence vs \S+: mean (-?[0-9.]+))")), step * 1.01 + 1e-5);
  const double ppl = number_after(r.out, R"(PPL = ([0-9.]+))");
  r = anelab(plain + " --kl-base " + kld);  // no --text: the file's tokens alone
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(number_after(r.out, R"(PPL = ([0-9.]+))"), ppl);
  EXPECT_EQ(r.out.find("tokenization"), std::string::npos) << r.out;

  // A token of chunk 1's first half changed in the file: named, and the scored logits move.
  const size_t at = kCtx + 6;
  const int32_t was = ids[at], now = was == 7 ? 8 : 7;
  std::memcpy(file.data() + 20 + 4 * at, &now, 4);
  write_file_atomic(kld, file.data(), file.size());
  r = anelab(plain + " --text " + text_ + " --kl-base " + kld);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("tokenization DIFFERS from the base file's at id 70 of 256: here " + std::to_string(was) +
                       ", there " + std::to_string(now)),
            std::string::npos)
      << r.out;
  EXPECT_GT(number_after(r.out, R"(max \|dlogp\| ([0-9.e-]+))"), 10 * step);

  r = anelab(plain + " --ctx 32 --kl-base " + kld);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("[perplexity] --ctx 32 differs from the n_ctx 64 of --kl-base " + kld), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = anelab(plain);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("[perplexity] --text is required"), std::string::npos) << r.err;
  // A base of another vocabulary (600 tokens, zero logits) is refused naming both sizes.
  file = test::llama_kl_base_bytes(kCtx, 600, kChunks, ids,
                                   std::vector<float>(static_cast<size_t>(logits.shape[0]) * 600, 0.0f));
  write_file_atomic(kld, file.data(), file.size());
  r = anelab(plain + " --kl-base " + kld);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("[perplexity] --kl-base " + kld + ": n_vocab 600 is not the model's 512"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace anelab

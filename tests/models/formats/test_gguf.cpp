// GGUF: the two real vocab-only files (cross-checked against encoder.json / vocab.bpe and llama2.c's
// tokenizer.bin), and small models written with GgufWriter (f32, f16, q8_0, fused gpt2 qkv) read back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/llama2c.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

TEST(Gguf, Gpt2VocabOnly) {
  ANELAB_REQUIRE_DATA("tokenizer-vectors/ggml-vocab-gpt-2.gguf");
  ANELAB_REQUIRE_DATA("gpt2/encoder.json");
  const GgufFile g = read_gguf_file(test::data_path("tokenizer-vectors/ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(g.version, 3u);
  EXPECT_TRUE(g.tensors.empty());
  const tok::VocabData v = gguf_vocab(g, "gpt2");
  EXPECT_EQ(v.kind, tok::TokenizerKind::kByteBpe);
  ASSERT_EQ(v.tokens.size(), 50257u);
  EXPECT_EQ(v.merges.size(), 50000u);
  EXPECT_EQ(v.pre, "gpt-2");
  EXPECT_EQ(v.eos_id, 50256);
  EXPECT_EQ(v.tokens[50256], "<|endoftext|>");
  // Every token id matches encoder.json.
  const auto enc = nlohmann::json::parse(read_file_text(test::data_path("gpt2/encoder.json")));
  ASSERT_EQ(enc.size(), 50257u);
  int mismatches = 0;
  for (auto& [tokstr, id] : enc.items()) mismatches += v.tokens.at(id.get<size_t>()) != tokstr;
  EXPECT_EQ(mismatches, 0);
  // Merges in rank order match vocab.bpe (first line is a #version comment).
  std::ifstream bpe(test::data_path("gpt2/vocab.bpe"));
  std::string line;
  std::getline(bpe, line);
  size_t i = 0;
  mismatches = 0;
  while (std::getline(bpe, line))
    if (!line.empty()) mismatches += i < v.merges.size() && v.merges[i++] != line;
  EXPECT_EQ(i, 50000u);
  EXPECT_EQ(mismatches, 0);
  // Vocab-only: gguf_to_model refuses with a message saying so.
  try {
    gguf_to_model(g, "gpt2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab-only"), std::string::npos);
  }
}

TEST(Gguf, LlamaSpmVocabOnlyMatchesTokenizerBin) {
  ANELAB_REQUIRE_DATA("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  const GgufFile g = read_gguf_file(test::data_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf"));
  const tok::VocabData v = gguf_vocab(g, "spm");
  EXPECT_EQ(v.kind, tok::TokenizerKind::kSentencePiece);
  ASSERT_EQ(v.tokens.size(), 32000u);
  ASSERT_EQ(v.scores.size(), 32000u);
  ASSERT_EQ(v.types.size(), 32000u);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.types[3], tok::TokenType::kByte);
  EXPECT_EQ(v.types[1], tok::TokenType::kControl);
  // llama2.c tokenizer.bin: i32 max_len, then per token f32 score, i32 len, bytes ("▁" shown as ' ').
  const auto tb = read_file_bytes(test::data_path("llama2c/tokenizer.bin"));
  size_t off = 4;
  int score_mismatch = 0, text_mismatch = 0;
  for (int i = 0; i < 32000; ++i) {
    float s;
    int32_t len;
    std::memcpy(&s, &tb[off], 4);
    std::memcpy(&len, &tb[off + 4], 4);
    std::string t(reinterpret_cast<const char*>(&tb[off + 8]), static_cast<size_t>(len));
    off += 8 + static_cast<size_t>(len);
    score_mismatch += s != v.scores[i];
    std::string g_text = v.tokens[i];
    for (size_t p; (p = g_text.find("\xe2\x96\x81")) != std::string::npos;) g_text.replace(p, 3, " ");
    if (i >= 3) text_mismatch += g_text != t;
  }
  EXPECT_EQ(off, tb.size());
  EXPECT_EQ(score_mismatch, 0);
  EXPECT_EQ(text_mismatch, 0);
}

void expect_same_tensors(const Model& a, const Model& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const Tensor& t : a.tensors()) {
    const Tensor& u = b.tensor(t.name);
    EXPECT_EQ(u.shape, t.shape) << t.name;
    EXPECT_EQ(u.dtype, t.dtype) << t.name;
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
}

Model from_image(const std::vector<uint8_t>& img) {
  auto owner = std::make_shared<std::vector<uint8_t>>(img);
  return gguf_to_model(parse_gguf(owner->data(), owner->size(), owner, "mem"), "mem");
}

TEST(Gguf, WriterRoundTripLlamaWithVocab) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  Model m = read_llama2c(test::data_path("llama2c/stories260K.bin"));
  m.vocab = gguf_vocab(read_gguf_file(test::data_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf")), "spm");
  const Model b = from_image(model_to_gguf(m));
  EXPECT_EQ(b.config, m.config);
  EXPECT_EQ(b.config.rope_style, RopeStyle::kAdjacentPairs);
  expect_same_tensors(m, b);
  ASSERT_TRUE(b.vocab);
  EXPECT_EQ(b.vocab->tokens, m.vocab->tokens);
  EXPECT_EQ(b.vocab->scores, m.vocab->scores);
}

TEST(Gguf, WriterRoundTripQ8_0AndF16) {
  const Model src = random_model(preset("stories260k"), 11);
  const auto dir = test::temp_dir("gq");
  for (DType dt : {DType::kQ8_0, DType::kF16}) {
    const std::string p = (dir / "m.anelab").string();
    save_model(src, p, dt);
    const Model q = read_anelab_file(p);
    const std::string gp = (dir / "m.gguf").string();
    const auto img = model_to_gguf(q);
    write_file_atomic(gp, img.data(), img.size());
    const Model b = load_any_model(gp);
    expect_same_tensors(q, b);
  }
}

TEST(Gguf, Gpt2FusedQkvAndQwen2) {
  const Model g2 = load_any_model(test::source_path("tests/fixtures/hf/gpt2"));
  // Hand-build a llama.cpp-style gpt2 GGUF with fused attn_qkv.
  GgufWriter w;
  const ModelConfig& c = g2.config;
  w.add_str("general.architecture", "gpt2");
  w.add_u32("gpt2.context_length", uint32_t(c.max_seq_len));
  w.add_u32("gpt2.embedding_length", uint32_t(c.dim));
  w.add_u32("gpt2.block_count", uint32_t(c.n_layers));
  w.add_u32("gpt2.feed_forward_length", uint32_t(c.hidden_dim));
  w.add_u32("gpt2.attention.head_count", uint32_t(c.n_heads));
  w.add_f32("gpt2.attention.layer_norm_epsilon", c.norm_eps);
  auto bytes = [&](const std::string& n) {
    const Tensor& t = g2.tensor(n);
    return std::vector<uint8_t>(t.data, t.data + t.nbytes);
  };
  auto ne = [&](const std::string& n) {
    const auto& s = g2.tensor(n).shape;
    return std::vector<int64_t>(s.rbegin(), s.rend());
  };
  w.add_tensor("token_embd.weight", kGgmlF32, ne("tok_embeddings"), bytes("tok_embeddings"));
  w.add_tensor("position_embd.weight", kGgmlF32, ne("pos_embeddings"), bytes("pos_embeddings"));
  w.add_tensor("output_norm.weight", kGgmlF32, ne("norm"), bytes("norm"));
  w.add_tensor("output_norm.bias", kGgmlF32, ne("norm_bias"), bytes("norm_bias"));
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    std::vector<uint8_t> qkv, bqkv;
    for (const char* n : {"wq", "wk", "wv"}) {
      auto x = bytes(p + n);
      qkv.insert(qkv.end(), x.begin(), x.end());
    }
    for (const char* n : {"bq", "bk", "bv"}) {
      auto x = bytes(p + n);
      bqkv.insert(bqkv.end(), x.begin(), x.end());
    }
    w.add_tensor(b + "attn_qkv.weight", kGgmlF32, {c.dim, 3 * c.dim}, qkv);
    w.add_tensor(b + "attn_qkv.bias", kGgmlF32, {3 * c.dim}, bqkv);
    for (auto [cn, gn] : std::vector<std::pair<std::string, std::string>>{{"attn_norm", "attn_norm.weight"},
                                                                          {"attn_norm_bias", "attn_norm.bias"},
                                                                          {"wo", "attn_output.weight"},
                                                                          {"bo", "attn_output.bias"},
                                                                          {"ffn_norm", "ffn_norm.weight"},
                                                                          {"ffn_norm_bias", "ffn_norm.bias"},
                                                                          {"fc", "ffn_up.weight"},
                                                                          {"fc_bias", "ffn_up.bias"},
                                                                          {"proj", "ffn_down.weight"},
                                                                          {"proj_bias", "ffn_down.bias"}})
      w.add_tensor(b + gn, kGgmlF32, ne(p + cn), bytes(p + cn));
  }
  const Model b = from_image(w.build(64));
  EXPECT_EQ(b.config, c);
  expect_same_tensors(g2, b);
  // qwen2 through model_to_gguf keeps rotate_half and the q/k/v biases.
  const Model q = load_any_model(test::source_path("tests/fixtures/hf/qwen2"));
  const Model qb = from_image(model_to_gguf(q));
  EXPECT_EQ(qb.config, q.config);
  expect_same_tensors(q, qb);
}

// A preset's architecture at toy width, with the real vocab size (so a real tokenizer fits).
ModelConfig toy(const std::string& name, int64_t vocab) {
  ModelConfig c = preset(name);
  c.dim = 64, c.hidden_dim = 128, c.n_layers = 2, c.n_heads = 2, c.head_dim = 32, c.max_seq_len = 64;
  c.n_kv_heads = c.arch == "gpt2" ? 2 : 1;
  c.vocab_size = vocab;
  return c;
}

// The llama.cpp-loadable export: written to disk with write_gguf_model (f16 matrices via an anelab file,
// as `anelab convert OUT.gguf` does), checked field by field, and read back through our reader.
TEST(Gguf, Gpt2ExportForLlamaCpp) {
  ANELAB_REQUIRE_DATA("gpt2/encoder.json");
  const auto dir = test::temp_dir("g2x");
  save_model(random_model(toy("gpt2-124m", 50304), 5), (dir / "m.anelab").string(), DType::kF16);
  Model m = read_anelab_file((dir / "m.anelab").string());
  m.vocab = tok::load_vocab_file(test::data_path("gpt2"));
  const std::string gp = (dir / "m.gguf").string();
  write_gguf_model(m, gp);
  const GgufFile g = read_gguf_file(gp);
  std::map<std::string, const GgufTensorInfo*> by_name;
  for (const auto& t : g.tensors) by_name[t.name] = &t;
  ASSERT_TRUE(by_name.count("blk.1.attn_qkv.weight") && by_name.count("blk.1.attn_qkv.bias"));
  EXPECT_FALSE(by_name.count("blk.0.attn_q.weight"));
  EXPECT_EQ(by_name["blk.1.attn_qkv.weight"]->ne, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(by_name["blk.1.attn_qkv.weight"]->ggml_type, kGgmlF16);
  ASSERT_TRUE(by_name.count("output.weight"));  // tied head written out for llama.cpp
  EXPECT_EQ(g.get_str("tokenizer.ggml.pre", "t"), "gpt-2");
  EXPECT_EQ(g.get_int("general.file_type", int64_t{-1}), 1);  // llama.cpp's MOSTLY_F16
  const tok::VocabData v = gguf_vocab(g, "t");
  ASSERT_EQ(v.tokens.size(), 50304u);
  for (size_t i = 0; i < m.vocab->tokens.size(); ++i) ASSERT_EQ(v.tokens[i], m.vocab->tokens[i]) << i;
  EXPECT_EQ(v.tokens[50257], "[PAD50257]");
  EXPECT_EQ(v.types[50303], tok::TokenType::kUnused);
  EXPECT_EQ(v.types[100], tok::TokenType::kNormal);
  EXPECT_EQ(v.merges, m.vocab->merges);
  EXPECT_EQ(v.eos_id, m.vocab->eos_id);
  // Weights: q/k/v split back bit-exactly; output equals the tied embedding.
  const Model b = read_gguf(gp);
  for (const Tensor& t : m.tensors()) {
    const Tensor& u = b.tensor(t.name);
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(std::memcmp(b.tensor("output").data, m.tensor("tok_embeddings").data, b.tensor("output").nbytes), 0);
  // The padded vocab still tokenizes like the source tokenizer.
  const auto t0 = tok::make_tokenizer(*m.vocab), t1 = tok::make_tokenizer(*b.vocab);
  const std::string text = "Hello world, it's 2024!\n  indented";
  EXPECT_EQ(t0->encode(text), t1->encode(text));
  EXPECT_FALSE(t0->encode(text).empty());
}

TEST(Gguf, Qwen2ExportPadsVocabAndKeepsPre) {
  ANELAB_REQUIRE_DATA("qwen/tokenizer.json");
  Model m = random_model(toy("qwen2.5-0.5b", 151936), 3);
  m.vocab = tok::load_vocab_file(test::data_path("qwen/tokenizer.json"));
  const size_t real = m.vocab->tokens.size();
  ASSERT_LT(real, 151936u);
  const auto img = model_to_gguf(m);
  auto owner = std::make_shared<std::vector<uint8_t>>(img);
  const GgufFile g = parse_gguf(owner->data(), owner->size(), owner, "mem");
  EXPECT_EQ(g.get_str("tokenizer.ggml.pre", "q"), "qwen2");
  EXPECT_EQ(g.get_str("general.architecture", "q"), "qwen2");
  const Model b = gguf_to_model(g, "mem");
  EXPECT_EQ(b.config, m.config);  // tied head stays tied for qwen2 (llama.cpp duplicates token_embd)
  expect_same_tensors(m, b);
  ASSERT_TRUE(b.vocab);
  ASSERT_EQ(b.vocab->tokens.size(), 151936u);
  EXPECT_EQ(b.vocab->tokens[real], "[PAD" + std::to_string(real) + "]");
  EXPECT_EQ(b.vocab->types[real - 1], m.vocab->types[real - 1]);  // <|...|> control tokens keep their type
  const std::string text = "Hello, 世界! 12345 <|im_start|>";
  EXPECT_EQ(tok::make_tokenizer(*m.vocab)->encode(text), tok::make_tokenizer(*b.vocab)->encode(text));
  // A tokenizer larger than the model's vocab is written unpadded.
  Model small = random_model(toy("qwen2.5-0.5b", 1000), 3);
  small.vocab = m.vocab;
  const Model sb = from_image(model_to_gguf(small));
  EXPECT_EQ(sb.vocab->tokens, m.vocab->tokens);
}

// Exporting a model that carries llama2.c's tokenizer.bin (spaces stored as ' ') to GGUF writes the pieces
// as llama.cpp's own Llama GGUF has them (U+2581 spaces, same scores, types and special ids), and the
// exported vocab tokenizes "Once upon a time" and a TinyStories paragraph into SentencePiece's ids
// (reference/tinystories_prefix_ids_llama2_32k.txt, made with llama2.c run.c's encoder).
TEST(Gguf, SpmExportSpellsSpacesLikeLlamaCpp) {
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  ANELAB_REQUIRE_DATA("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  ANELAB_REQUIRE_DATA("reference/tinystories_prefix_ids_llama2_32k.txt");
  Model m = random_model(toy("stories260k", 32000), 9);
  m.vocab = tok::load_vocab_file(test::data_path("llama2c/tokenizer.bin"));
  const auto dir = test::temp_dir("spmx");
  const std::string gp = (dir / "m.gguf").string();
  export_model(m, gp, ExportFormat::kGguf, DType::kF32);
  const GgufFile g = read_gguf_file(gp);
  const tok::VocabData ours = gguf_vocab(g, gp);
  const tok::VocabData ref =
      gguf_vocab(read_gguf_file(test::data_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf")), "spm");
  ASSERT_EQ(ours.tokens.size(), ref.tokens.size());
  int text_mismatch = 0;
  for (size_t i = 0; i < ref.tokens.size(); ++i) text_mismatch += ours.tokens[i] != ref.tokens[i];
  EXPECT_EQ(text_mismatch, 0);
  EXPECT_EQ(ours.tokens[2501], "\xE2\x96\x81upon");
  EXPECT_EQ(ours.scores, ref.scores);
  EXPECT_EQ(ours.types, ref.types);
  EXPECT_EQ(ours.unk_id, ref.unk_id);
  EXPECT_EQ(ours.bos_id, ref.bos_id);
  EXPECT_EQ(ours.eos_id, ref.eos_id);
  EXPECT_EQ(ours.add_bos, ref.add_bos);
  EXPECT_EQ(ours.add_space_prefix, ref.add_space_prefix);
  // The third TinyStories paragraph starts "Once upon a time"; its reference ids have no BOS.
  std::ifstream text_file(test::data_path("tinystories/tinystories_valid_prefix.txt"));
  std::ifstream ids_file(test::data_path("reference/tinystories_prefix_ids_llama2_32k.txt"));
  std::string para, line, ids_line;
  for (int n = 0; n < 3;) {
    ASSERT_TRUE(std::getline(text_file, line));
    if (!line.empty()) para = line, ++n;
  }
  for (int n = 0; n < 3; ++n) ASSERT_TRUE(std::getline(ids_file, ids_line));
  std::vector<int32_t> want;
  std::istringstream is(ids_line);
  for (int32_t id; is >> id;) want.push_back(id);
  ASSERT_EQ(para.substr(0, 16), "Once upon a time");
  const auto t = tok::make_tokenizer(ours);
  tok::EncodeOptions raw;
  raw.add_bos = false;
  EXPECT_EQ(t->encode(para, raw), want);
  EXPECT_EQ(t->encode("Once upon a time", raw), std::vector<int32_t>(want.begin(), want.begin() + 4));
}

// llama3 RoPE scaling goes to GGUF as llama.cpp's converter writes it: rope_freqs.weight [HD/2] holding
// plain / scaled frequency (1 for the fast ones, `factor` for the slow ones, blended between). On read the
// parameters are fitted back when two or more frequencies are blended (Llama 3.x's shapes: 3 of 32); divisors
// that do not determine them are refused, not ignored (all ones change nothing and are accepted).
// m's GGUF as llama.cpp's converter writes llama3 RoPE scaling: rope_freqs.weight alone, without the
// anelab.rope_scaling.* keys of anelab's export.
std::vector<uint8_t> without_scaling_keys(const Model& m) {
  const auto full = std::make_shared<std::vector<uint8_t>>(model_to_gguf(m));
  const GgufFile g = parse_gguf(full->data(), full->size(), full, "mem");
  Model plain = copy_header(m);
  plain.config.rope_scaling = {};
  for (const Tensor& t : m.tensors()) plain.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
  GgufWriter w = gguf_writer_for(plain);
  for (const auto& t : g.tensors)
    if (t.name == "rope_freqs.weight") w.add_tensor(t.name, t.ggml_type, t.ne, {t.data, t.data + t.nbytes});
  return w.build();
}

TEST(Gguf, Llama3RopeFreqsWrittenAsLlamaCppDoesAndFittedBackOnRead) {
  ModelConfig c = preset("stories260k");  // head_dim 8, theta 10000: wavelengths 6.3, 63, 628, 6283
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 128};  // kept < 32 < blended < 128 < divided by 8
  const auto img = model_to_gguf(random_model(c, 5));
  auto owner = std::make_shared<std::vector<uint8_t>>(img);
  const GgufFile g = parse_gguf(owner->data(), owner->size(), owner, "mem");
  const GgufTensorInfo* f = nullptr;
  for (const auto& t : g.tensors) f = t.name == "rope_freqs.weight" ? &t : f;
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->ne, std::vector<int64_t>{4});
  std::vector<float> div(4);
  std::memcpy(div.data(), f->data, 16);
  EXPECT_EQ(div[0], 1.0f);
  EXPECT_EQ(div[2], 8.0f);
  EXPECT_EQ(div[3], 8.0f);
  // pair 1 (wavelength 62.8) as llama.cpp's convert_hf_to_gguf.py blends it: 1 / ((1 - smooth) / factor + smooth)
  const double smooth = (128 / (2 * std::numbers::pi * 10) - 1) / (4 - 1);
  EXPECT_NEAR(div[1], 1 / ((1 - smooth) / 8 + smooth), 1e-6);
  const Model plain = random_model(preset("stories260k"), 5);
  const int64_t half = plain.config.head_dim / 2;
  EXPECT_THROW(from_image(without_scaling_keys(random_model(c, 5))), Error);  // one blended frequency: no fit
  EXPECT_EQ(from_image(img).config, c);                                       // anelab's keys hold the parameters

  ModelConfig l3 = c;  // Llama 3.2's RoPE (head_dim 64, theta 500000, factor 32, low 1, high 4, 8192) at a tiny width
  l3.dim = 128, l3.hidden_dim = 256, l3.n_layers = 1, l3.n_heads = 2, l3.n_kv_heads = 1, l3.head_dim = 64;
  l3.vocab_size = 64, l3.rope_theta = 500000.0f;
  l3.rope_scaling = {RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  EXPECT_EQ(from_image(without_scaling_keys(random_model(l3, 6))).config, l3);
  l3.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 2.0f, 8.0f, 16384};  // the same divisors as (8, 1, 4, 8192)
  EXPECT_EQ(from_image(without_scaling_keys(random_model(l3, 6))).config.rope_scaling,
            (RopeScaling{RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192}));
  EXPECT_EQ(from_image(model_to_gguf(random_model(l3, 6))).config.rope_scaling, l3.rope_scaling);
  for (const float d : {1.0f, 8.0f}) {
    GgufWriter w = gguf_writer_for(plain);
    std::vector<float> divisors(size_t(half), 1.0f);  // [HD/2]: the slowest frequency divided by d
    divisors.back() = d;
    std::vector<uint8_t> factors(divisors.size() * 4);
    std::memcpy(factors.data(), divisors.data(), factors.size());
    w.add_tensor("rope_freqs.weight", kGgmlF32, {half}, std::move(factors));
    if (d == 1.0f) {
      EXPECT_EQ(from_image(w.build()).config, plain.config);
      continue;
    }
    try {
      from_image(w.build());
      ADD_FAILURE() << "a GGUF with rope_freqs.weight read as unscaled";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find("[model] mem: rope_freqs.weight is not llama3 RoPE scaling anelab can recover"),
          std::string::npos)
          << e.what();
    }
  }
}

// A gemma3 GGUF holding what anelab cannot run is refused in one line naming the key.
TEST(Gguf, Gemma3KeysAnelabCannotRunAreNamed) {
  ModelConfig c = preset("gemma3-1b");
  c.dim = 32, c.hidden_dim = 64, c.n_layers = 2, c.head_dim = 8, c.vocab_size = 40, c.max_seq_len = 16;
  set_param_named(&c, "sliding_window", 0);  // no pattern key written: the cases add their own
  set_param_named(&c, "sliding_pattern", 0);
  const Model m = random_model(c, 7);
  EXPECT_EQ(from_image(model_to_gguf(m)).config, c);
  const struct {
    void (*add)(GgufWriter&);
    std::string want;
  } cases[] = {
      {[](GgufWriter& w) { w.add_str("gemma3.rope.scaling.type", "yarn"); },
       "[model] mem: gemma3.rope.scaling.type 'yarn' is not supported for gemma3 (none, linear)"},
      {[](GgufWriter& w) {
         w.add_i32_array("gemma3.attention.sliding_window_pattern", {1, 0});
       },
       "[model] mem: gemma3.attention.sliding_window_pattern must be an integer (every Nth layer global)"},
      {[](GgufWriter& w) { w.add_f32("gemma3.rope.scaling.factor", -2.0f); },
       "[model] mem: gemma3.rope.scaling.factor must be positive, got -2"},
  };
  for (const auto& k : cases) {
    GgufWriter w = gguf_writer_for(m);
    k.add(w);
    try {
      from_image(w.build());
      ADD_FAILURE() << "accepted: " << k.want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// ---- qwen35 (models/arch/qwen35.cpp) ----

const Model& q35_fixture() {
  static const Model m = load_any_model(test::source_path("tests/fixtures/hf/qwen35_bf16"));
  return m;
}

// The keys and tensors llama.cpp's converter (conversion/qwen.py Qwen3_5TextModel on its base TextModel) writes for
// the fixture's config.json (hidden 64, 4 layers with the 4th full, 4 heads / 2 kv of 32, partial_rotary_factor
// 0.25, linear 2 key heads and 4 value heads of 16, conv 4, intermediate 64, vocab 512, tied), written out by
// hand: name -> (ggml ne, ggml type; 1-D tensors, norms and ssm_conv1d F32, matrices as stored: BF16).
TEST(Gguf, Qwen35ExportHasLlamaCppsKeysTensorNamesAndShapes) {
  const GgufFile g = [] {
    auto img = std::make_shared<std::vector<uint8_t>>(model_to_gguf(q35_fixture()));
    return parse_gguf(img->data(), img->size(), img, "mem");
  }();
  const std::map<std::string, double> keys = {{"qwen35.context_length", 256},
                                              {"qwen35.embedding_length", 64},
                                              {"qwen35.block_count", 4},
                                              {"qwen35.feed_forward_length", 64},
                                              {"qwen35.attention.head_count", 4},
                                              {"qwen35.attention.head_count_kv", 2},
                                              {"qwen35.attention.key_length", 32},
                                              {"qwen35.attention.value_length", 32},
                                              {"qwen35.rope.freq_base", 1e7},
                                              {"qwen35.rope.dimension_count", 8},
                                              {"qwen35.full_attention_interval", 4},
                                              {"qwen35.ssm.conv_kernel", 4},
                                              {"qwen35.ssm.state_size", 16},
                                              {"qwen35.ssm.group_count", 2},
                                              {"qwen35.ssm.time_step_rank", 4},
                                              {"qwen35.ssm.inner_size", 64},
                                              {"qwen35.vocab_size", 512}};
  for (const auto& [k, v] : keys) {
    ASSERT_TRUE(g.find(k)) << k;
    EXPECT_EQ(g.find(k)->num, v) << k;
  }
  EXPECT_NEAR(g.find("qwen35.attention.layer_norm_rms_epsilon")->num, 1e-6, 1e-12);
  EXPECT_EQ(g.get_str("general.architecture", "mem"), "qwen35");
  // rope.dimension_sections: the converter's default (no mrope_section in the config's rope_parameters)
  EXPECT_EQ(g.find("qwen35.rope.dimension_sections")->nums, (std::vector<double>{11, 11, 10, 0}));
  for (const auto& [k, v] : g.kv) {
    if (k.starts_with("qwen35.")) {
      EXPECT_TRUE(keys.count(k) || k.ends_with("epsilon") || k.ends_with("sections")) << k;
    }
  }

  constexpr uint32_t F32 = kGgmlF32, BF16 = kGgmlBF16;
  std::map<std::string, std::pair<std::vector<int64_t>, uint32_t>> want = {{"token_embd.weight", {{64, 512}, BF16}},
                                                                           {"output_norm.weight", {{64}, F32}}};
  for (int l = 0; l < 4; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    want[b + "attn_norm.weight"] = {{64}, F32};
    want[b + "post_attention_norm.weight"] = {{64}, F32};
    want[b + "ffn_gate.weight"] = {{64, 64}, BF16};
    want[b + "ffn_up.weight"] = {{64, 64}, BF16};
    want[b + "ffn_down.weight"] = {{64, 64}, BF16};
    if (l == 3) {
      want[b + "attn_q.weight"] = {{64, 256}, BF16};  // per head [q | gate] of 32
      want[b + "attn_k.weight"] = {{64, 64}, BF16};
      want[b + "attn_v.weight"] = {{64, 64}, BF16};
      want[b + "attn_output.weight"] = {{128, 64}, BF16};
      want[b + "attn_q_norm.weight"] = {{32}, F32};
      want[b + "attn_k_norm.weight"] = {{32}, F32};
      continue;
    }
    want[b + "attn_qkv.weight"] = {{64, 128}, BF16};  // q 32, k 32, v 64
    want[b + "attn_gate.weight"] = {{64, 64}, BF16};
    want[b + "ssm_beta.weight"] = {{64, 4}, BF16};
    want[b + "ssm_alpha.weight"] = {{64, 4}, BF16};
    want[b + "ssm_conv1d.weight"] = {{4, 128}, F32};
    want[b + "ssm_a"] = {{4}, F32};
    want[b + "ssm_dt.bias"] = {{4}, F32};
    want[b + "ssm_norm.weight"] = {{16}, F32};
    want[b + "ssm_out.weight"] = {{64, 64}, BF16};
  }
  std::map<std::string, std::pair<std::vector<int64_t>, uint32_t>> got;
  for (const auto& t : g.tensors) got[t.name] = {t.ne, t.ggml_type};
  EXPECT_EQ(got, want);
}

// The values llama.cpp's converter stores, from the fixture's own: norms 1 + w, ssm_a = -exp(A_log), the value heads
// tiled (HF's head g * 2 + j of key head g at j * 2 + g: heads 0 1 2 3 -> 0 2 1 3), conv1d squeezed.
TEST(Gguf, Qwen35ExportValuesAreLlamaCpps) {
  const Model& m = q35_fixture();
  auto img = std::make_shared<std::vector<uint8_t>>(model_to_gguf(m));
  const GgufFile g = parse_gguf(img->data(), img->size(), img, "mem");
  const auto stored = [&](const std::string& name) {
    for (const auto& t : g.tensors)
      if (t.name == name) {
        Tensor x;
        x.name = name, x.dtype = *dtype_of_ggml(t.ggml_type), x.shape = {t.ne.rbegin(), t.ne.rend()};
        x.data = t.data, x.nbytes = t.nbytes;
        return x.to_f32();
      }
    ADD_FAILURE() << "no " << name;
    return std::vector<float>{};
  };
  const std::vector<float> norm = m.tensor("layers.3.ffn_norm").to_f32(),
                           post = stored("blk.3.post_attention_norm.weight");
  for (size_t i = 0; i < norm.size(); ++i) EXPECT_EQ(post[i], norm[i] + 1.0f) << i;
  const std::vector<float> ssm_norm = m.tensor("layers.0.ssm_norm").to_f32();
  EXPECT_EQ(stored("blk.0.ssm_norm.weight"), ssm_norm);  // the gated norm: no + 1
  const int perm[4] = {0, 2, 1, 3};                      // tiled position -> HF head
  const std::vector<float> a_log = m.tensor("layers.1.ssm_a_log").to_f32(), a = stored("blk.1.ssm_a");
  const std::vector<float> dt = m.tensor("layers.1.ssm_dt_bias").to_f32(), sdt = stored("blk.1.ssm_dt.bias");
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(a[size_t(p)], -std::exp(a_log[size_t(perm[p])])) << p;
    EXPECT_EQ(sdt[size_t(p)], dt[size_t(perm[p])]) << p;
  }
  // attn_qkv rows: q and k (64 rows) as they are, then v heads of 16 rows in tiled order.
  const std::vector<float> qkv = m.tensor("layers.2.ssm_qkv").to_f32(), sq = stored("blk.2.attn_qkv.weight");
  for (int64_t r = 0; r < 128; ++r) {
    const int64_t src = r < 64 ? r : 64 + perm[(r - 64) / 16] * 16 + (r - 64) % 16;
    for (int64_t c = 0; c < 64; ++c) ASSERT_EQ(sq[size_t(r * 64 + c)], qkv[size_t(src * 64 + c)]) << r << " " << c;
  }
  // ssm_out columns: value heads of 16 in tiled order.
  const std::vector<float> out = m.tensor("layers.0.ssm_out").to_f32(), so = stored("blk.0.ssm_out.weight");
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 64; ++c)
      ASSERT_EQ(so[size_t(r * 64 + c)], out[size_t(r * 64 + perm[c / 16] * 16 + c % 16)]) << r << " " << c;
}

// Three value heads per key head (grouped g * 3 + j, tiled j * 2 + g): the direction of the permutation shows.
TEST(Gguf, Qwen35ValueHeadsTiledWithThreePerKeyHead) {
  ModelConfig c = q35_fixture().config;
  c.linear_v_heads = 6;
  const Model m = random_model(c, 5);
  auto img = std::make_shared<std::vector<uint8_t>>(model_to_gguf(m));
  const GgufFile g = parse_gguf(img->data(), img->size(), img, "mem");
  const std::vector<float> dt = m.tensor("layers.0.ssm_dt_bias").to_f32();
  for (const auto& t : g.tensors)
    if (t.name == "blk.0.ssm_dt.bias") {
      ASSERT_EQ(t.ggml_type, kGgmlF32);
      std::vector<float> got(6);
      std::memcpy(got.data(), t.data, 24);
      for (int gk = 0; gk < 2; ++gk)
        for (int j = 0; j < 3; ++j) EXPECT_EQ(got[size_t(j * 2 + gk)], dt[size_t(gk * 3 + j)]) << gk << " " << j;
    }
  const Model b = from_image(*img);
  EXPECT_EQ(b.config, m.config);
  for (const Tensor& t : m.tensors()) {
    if (t.name.ends_with("ssm_a_log")) continue;
    EXPECT_EQ(b.tensor(t.name).to_f32(), t.to_f32()) << t.name;
  }
}

// GGUF -> anelab restores every tensor's values (the HF fixture's bf16 as written, A_log as the float whose -exp is
// the stored A) and the config.
TEST(Gguf, Qwen35RoundTripRestoresConfigAndValues) {
  const Model& m = q35_fixture();
  const Model b = from_image(model_to_gguf(m));
  EXPECT_EQ(b.config, m.config);
  ASSERT_EQ(b.tensors().size(), m.tensors().size());
  for (const Tensor& t : m.tensors()) {
    const std::vector<float> want = t.to_f32(), got = b.tensor(t.name).to_f32();
    ASSERT_EQ(got.size(), want.size()) << t.name;
    for (size_t i = 0; i < want.size(); ++i)
      if (t.name.ends_with("ssm_a_log"))
        EXPECT_EQ(-std::exp(got[i]), -std::exp(want[i])) << t.name << " " << i;
      else
        EXPECT_EQ(got[i], want[i]) << t.name << " " << i;
  }
}

// A qwen35 GGUF missing a key llama.cpp requires, or holding what anelab cannot run, is refused in one line naming it.
TEST(Gguf, Qwen35MissingOrBadKeysAreNamed) {
  const std::vector<uint8_t> img = model_to_gguf(q35_fixture());
  const struct {
    std::string key;
    std::optional<GgufValue> value;  // nullopt: removed
    std::string want;
  } cases[] = {
      {"qwen35.ssm.conv_kernel", std::nullopt, "[model] mem: GGUF metadata qwen35.ssm.conv_kernel is missing"},
      {"qwen35.ssm.state_size", std::nullopt, "[model] mem: GGUF metadata qwen35.ssm.state_size is missing"},
      {"qwen35.ssm.group_count", std::nullopt, "[model] mem: GGUF metadata qwen35.ssm.group_count is missing"},
      {"qwen35.ssm.time_step_rank", std::nullopt, "[model] mem: GGUF metadata qwen35.ssm.time_step_rank is missing"},
      {"qwen35.ssm.inner_size", std::nullopt, "[model] mem: GGUF metadata qwen35.ssm.inner_size is missing"},
      {"qwen35.attention.layer_norm_rms_epsilon", std::nullopt,
       "[model] mem: GGUF metadata qwen35.attention.layer_norm_rms_epsilon is missing"},
      {"qwen35.rope.dimension_sections", std::nullopt,
       "[model] mem: GGUF metadata qwen35.rope.dimension_sections is missing or not 4 integers"},
      {"qwen35.ssm.inner_size", GgufValue{GgufType::kU32, GgufType::kU32, 66},
       "[model] mem: qwen35.ssm.inner_size (66) must be a positive multiple of qwen35.ssm.time_step_rank (4)"},
      {"qwen35.rope.dimension_count", GgufValue{GgufType::kU32, GgufType::kU32, 7},
       "[model] mem: qwen35.rope.dimension_count 7 must be even and in (0, key_length 32]"},
  };
  for (const auto& k : cases) {
    auto owner = std::make_shared<std::vector<uint8_t>>(img);
    GgufFile g = parse_gguf(owner->data(), owner->size(), owner, "mem");
    if (k.value)
      g.kv[k.key] = *k.value;
    else
      ASSERT_EQ(g.kv.erase(k.key), 1u) << k.key;
    try {
      gguf_to_model(g, "mem");
      ADD_FAILURE() << "accepted: " << k.want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  // A positive stored A (llama.cpp's -exp(A_log) is negative) is named with its tensor.
  auto owner = std::make_shared<std::vector<uint8_t>>(img);
  GgufFile g = parse_gguf(owner->data(), owner->size(), owner, "mem");
  for (auto& t : g.tensors)
    if (t.name == "blk.0.ssm_a") {
      const float one = 1.0f;
      std::memcpy(owner->data() + (t.data - owner->data()), &one, 4);
    }
  try {
    gguf_to_model(g, "mem");
    ADD_FAILURE() << "accepted a positive ssm_a";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[model] mem: GGUF tensor layers.0 ssm_a holds 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace anelab::models

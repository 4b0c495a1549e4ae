// Quantized models in files: llama-quantize's per-tensor mix (models/quant/quant_mix.h), GGUF and anelab files
// holding Q8_0 / Q4_0 / Q4_K / Q6_K tensors read back as views of the mapping (no dequantization), and
// corrupt quantized tensors rejected with errors naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/quant/types.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/anelab_versions.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// llama.cpp's Q4_K_M on a 12-layer model (stories110m's shape): Q6_K for the tied embedding (= output) and, by
// use_more_bits(i, 12) (i < 1, i >= 10, (i - 1) % 3 == 2), for attn_v / ffn_down of layers 0, 3, 6, 9, 10, 11.
TEST(QuantMix, Q4_K_MFollowsLlamaQuantize) {
  const ModelConfig c = preset("stories110m");
  const std::vector<int64_t> mat{768, 768}, down{768, 2048};
  const std::set<int64_t> more = {0, 3, 6, 9, 10, 11};
  EXPECT_EQ(mix_dtype(c, "tok_embeddings", {32000, 768}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ6_K);
  // Q5_K_M: the same with Q5_K for Q4_K.
  for (const auto& [mix, base] :
       {std::pair{QuantMix::kQ4_K_M, DType::kQ4_K}, std::pair{QuantMix::kQ5_K_M, DType::kQ5_K}})
    for (int64_t l = 0; l < 12; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const DType want = more.count(l) ? DType::kQ6_K : base;
      EXPECT_EQ(mix_dtype(c, p + "wv", mat, DType::kF32, mix), want) << l;
      EXPECT_EQ(mix_dtype(c, p + "w2", down, DType::kF32, mix), want) << l;
      EXPECT_EQ(mix_dtype(c, p + "wq", mat, DType::kF32, mix), base) << l;
      EXPECT_EQ(mix_dtype(c, p + "w1", {2048, 768}, DType::kF32, mix), base) << l;
      EXPECT_EQ(mix_dtype(c, p + "attn_norm", {768}, DType::kF32, mix), DType::kF32) << l;
    }
  // Q4_0: the head gets Q6_K; Q8_0: everything Q8_0. Rows that are not whole blocks fall back.
  EXPECT_EQ(mix_dtype(c, "tok_embeddings", {32000, 768}, DType::kF32, QuantMix::kQ4_0), DType::kQ6_K);
  EXPECT_EQ(mix_dtype(c, "layers.0.wv", mat, DType::kF32, QuantMix::kQ4_0), DType::kQ4_0);
  EXPECT_EQ(mix_dtype(c, "tok_embeddings", {32000, 768}, DType::kF32, QuantMix::kQ8_0), DType::kQ8_0);
  // 896 % 256 != 0: llama-quantize's fallbacks, Q4_K -> Q5_0 and Q6_K -> Q8_0.
  EXPECT_EQ(mix_dtype(c, "layers.1.wq", {896, 896}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ5_0);
  EXPECT_EQ(mix_dtype(c, "layers.0.wv", {128, 896}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ8_0);
  EXPECT_EQ(mix_dtype(c, "layers.0.w1", {4864, 864}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ5_0);
  EXPECT_EQ(mix_dtype(c, "layers.0.w1", {4864, 872}, DType::kF32, QuantMix::kQ4_K_M), DType::kF16);
  EXPECT_EQ(mix_dtype(c, "layers.1.wq", {64, 64}, DType::kF32, QuantMix::kQ4_0), DType::kQ4_0);
  EXPECT_EQ(mix_dtype(c, "layers.1.wq", {64, 48}, DType::kF32, QuantMix::kQ4_0), DType::kF16);
  EXPECT_EQ(parse_quant_mix("Q4_K_M"), QuantMix::kQ4_K_M);
  EXPECT_FALSE(parse_quant_mix("q3_k_m"));
}

// Q5_K_S: Q5_K everywhere but the head (Q5_K_M's layers are checked with Q4_K_M's above). A fused attn_qkv (gpt2)
// is an attn_v to llama-quantize: Q6_K in the use_more_bits layers, else the base type, for q, k and v alike. Rows
// that are not whole super-blocks fall back Q5_K -> Q5_1 (then fp16).
TEST(QuantMix, Q5_K_MAndFusedQkvFollowLlamaQuantize) {
  const ModelConfig c = preset("stories110m");
  const std::vector<int64_t> mat{768, 768}, down{768, 2048};
  EXPECT_EQ(parse_quant_mix("q5_k_m"), QuantMix::kQ5_K_M);
  EXPECT_EQ(parse_quant_mix("Q5_K_S"), QuantMix::kQ5_K_S);
  EXPECT_EQ(mix_dtype(c, "tok_embeddings", {32000, 768}, DType::kF32, QuantMix::kQ5_K_M), DType::kQ6_K);
  EXPECT_EQ(mix_dtype(c, "tok_embeddings", {32000, 768}, DType::kF32, QuantMix::kQ5_K_S), DType::kQ6_K);
  for (int64_t l = 0; l < 12; ++l) {
    EXPECT_EQ(mix_dtype(c, "layers." + std::to_string(l) + ".wv", mat, DType::kF32, QuantMix::kQ5_K_S), DType::kQ5_K);
    EXPECT_EQ(mix_dtype(c, "layers." + std::to_string(l) + ".w2", down, DType::kF32, QuantMix::kQ5_K_S), DType::kQ5_K);
  }
  EXPECT_EQ(mix_dtype(c, "layers.1.wq", {896, 896}, DType::kF32, QuantMix::kQ5_K_M), DType::kQ5_1);
  EXPECT_EQ(mix_dtype(c, "layers.1.wq", {896, 872}, DType::kF32, QuantMix::kQ5_K_M), DType::kF16);
  const ModelConfig g = preset("gpt2-124m");
  for (const char* leaf : {"wq", "wk", "wv"}) {
    EXPECT_EQ(mix_dtype(g, std::string("layers.4.") + leaf, {768, 768}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ4_K);
    EXPECT_EQ(mix_dtype(g, std::string("layers.4.") + leaf, {768, 768}, DType::kF32, QuantMix::kQ5_K_M), DType::kQ5_K);
    EXPECT_EQ(mix_dtype(g, std::string("layers.3.") + leaf, {768, 768}, DType::kF32, QuantMix::kQ4_K_M), DType::kQ6_K);
    EXPECT_EQ(mix_dtype(g, std::string("layers.3.") + leaf, {768, 768}, DType::kF32, QuantMix::kQ5_K_M), DType::kQ6_K);
  }
  EXPECT_EQ(mix_dtype(c, "layers.3.wq", mat, DType::kF32, QuantMix::kQ4_K_M), DType::kQ4_K);  // not fused: q stays
}

ModelConfig toy_llama() {  // whole Q4_K super-blocks in every row
  ModelConfig c = preset("stories15m");
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 64;
  c.vocab_size = 300, c.max_seq_len = 32;
  return c;
}

TEST(QuantFormats, GgufKeepsBlockTypesAsViews) {
  const Model src = random_model(toy_llama(), 4);
  for (QuantMix mix : {QuantMix::kQ8_0, QuantMix::kQ4_0, QuantMix::kQ4_K_M, QuantMix::kQ5_K_S, QuantMix::kQ5_K_M}) {
    const Model q = quantize_model(src, mix);
    const auto dir = test::temp_dir("qg");
    const std::string path = (dir / "m.gguf").string();
    write_gguf_model(q, path);
    const GgufFile g = read_gguf_file(path);
    const Model b = gguf_to_model(g, path);
    std::map<std::string, const uint8_t*> in_file;
    for (const auto& t : g.tensors) in_file[t.name] = t.data;
    const int64_t ftype = mix == QuantMix::kQ8_0     ? 7
                          : mix == QuantMix::kQ4_0   ? 2
                          : mix == QuantMix::kQ4_K_M ? 15
                          : mix == QuantMix::kQ5_K_S ? 16
                                                     : 17;
    EXPECT_EQ(g.get_int("general.file_type", int64_t{-1}), ftype);
    for (const Tensor& t : q.tensors()) {
      const Tensor& u = b.tensor(t.name);
      EXPECT_EQ(u.dtype, t.dtype) << t.name;
      ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
      EXPECT_EQ(std::memcmp(u.data, t.data, static_cast<size_t>(t.nbytes)), 0) << t.name;
    }
    EXPECT_EQ(b.tensor("layers.0.wq").data, in_file.at("blk.0.attn_q.weight"));  // a view of the mapping
    if (mix == QuantMix::kQ4_K_M) {
      EXPECT_EQ(b.tensor("layers.0.wq").dtype, DType::kQ4_K);
      EXPECT_EQ(b.tensor("layers.0.wv").dtype, DType::kQ4_K);  // use_more_bits(0, 2) is false
      EXPECT_EQ(b.tensor("layers.1.wv").dtype, DType::kQ6_K);  // 1 >= 7 * 2 / 8
      EXPECT_EQ(b.tensor("tok_embeddings").dtype, DType::kQ6_K);
    }
  }
}

TEST(QuantFormats, AnelabFileHoldsBlockTypes) {
  const Model src = random_model(toy_llama(), 5);
  const auto dir = test::temp_dir("qa");
  const Model q = quantize_model(src, QuantMix::kQ4_K_M);
  const std::string p = (dir / "m.anelab").string();
  save_model(q, p);
  const auto bytes = read_file_bytes(p);
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, kAnelabVersion);  // every file is written as version 5 (checksums), whatever its dtypes
  const Model b = read_anelab_file(p);
  for (const Tensor& t : q.tensors()) {
    const Tensor& u = b.tensor(t.name);
    EXPECT_EQ(u.dtype, t.dtype) << t.name;
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, static_cast<size_t>(t.nbytes)), 0) << t.name;
  }
  const Model q5 = quantize_model(src, QuantMix::kQ5_K_M);
  save_model(q5, p);
  const auto bytes5 = read_file_bytes(p);
  const Model b5 = read_anelab_file(p);
  EXPECT_EQ(b5.tensor("layers.0.wq").dtype, DType::kQ5_K);
  for (const Tensor& t : q5.tensors())
    EXPECT_EQ(std::memcmp(b5.tensor(t.name).data, t.data, static_cast<size_t>(t.nbytes)), 0) << t.name;
  // Older versions are still read, each with the dtypes it had: Q5_K in version 4, not in version 3.
  auto v4 = std::make_shared<std::vector<uint8_t>>(test::anelab_as_version(bytes5, 4));
  ASSERT_FALSE(v4->empty());
  EXPECT_EQ(parse_anelab(v4->data(), v4->size(), v4, "v4.anelab").tensor("layers.0.wq").dtype, DType::kQ5_K);
  auto owner3 = std::make_shared<std::vector<uint8_t>>(test::anelab_as_version(bytes5, 3));
  ASSERT_FALSE(owner3->empty());
  const std::string e3 = error_of([&] { parse_anelab(owner3->data(), owner3->size(), owner3, "v3.anelab"); });
  EXPECT_NE(e3.find("dtype q5_k needs format version 4 (the file says 3)"), std::string::npos) << e3;
  // A version-2 file that claims a 4-bit tensor is rejected naming it.
  auto owner = std::make_shared<std::vector<uint8_t>>(test::anelab_as_version(bytes, 2));
  ASSERT_FALSE(owner->empty());
  const std::string e = error_of([&] { parse_anelab(owner->data(), owner->size(), owner, "v2.anelab"); });
  EXPECT_NE(e.find("needs format version 3"), std::string::npos) << e;
}

TEST(QuantFormats, CorruptQuantizedTensorsNameTheTensor) {
  // Row length that is not whole Q4_K blocks.
  GgufWriter w;
  w.add_str("general.architecture", "llama");
  w.add_tensor("blk.0.attn_q.weight", quant::traits(quant::BlockType::kQ4_K).ggml_type, {100, 2},
               std::vector<uint8_t>(288));
  const auto img = w.build();
  std::string e = error_of([&] { parse_gguf(img.data(), img.size(), nullptr, "bad.gguf"); });
  EXPECT_NE(e.find("blk.0.attn_q.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not a multiple of 256"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // Truncated data of a quantized model.
  const Model q = quantize_model(random_model(toy_llama(), 6), QuantMix::kQ4_K_M);
  auto full = model_to_gguf(q);
  full.resize(full.size() - 2100);  // the last tensors: blk.1.ffn_up.weight (Q4_K), output_norm.weight (1 KiB f32)
  e = error_of([&] { parse_gguf(full.data(), full.size(), nullptr, "cut.gguf"); });
  EXPECT_NE(e.find("blk.1.ffn_up.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // Byte count that does not match the shape (an anelab view of a Q6_K tensor one block short).
  Model m;
  e = error_of([&] {
    m.add_owned("layers.0.w2", DType::kQ6_K, {256, 512}, std::vector<uint8_t>(256 * 2 * 210 - 210));
  });
  EXPECT_NE(e.find("layers.0.w2"), std::string::npos) << e;
  EXPECT_NE(e.find("q6_k"), std::string::npos) << e;
}

// Every row of the type table (framework/quant/types.h) converts to a DType and back, keeps its name, GGUF id and
// block geometry through the formats' functions, and the float dtypes are no row.
TEST(QuantFormats, EveryTableTypeConvertsThroughDType) {
  for (const quant::TypeTraits& r : quant::kTypes) {
    SCOPED_TRACE(r.name);
    const DType d = dtype_of(r.type);
    EXPECT_EQ(block_type_of(d), r.type);
    EXPECT_TRUE(is_block_quantized(d));
    EXPECT_STREQ(dtype_name(d), r.name);
    EXPECT_EQ(parse_dtype(r.name), d);
    EXPECT_EQ(dtype_block(d), r.block_values);
    EXPECT_EQ(dtype_nbytes(d, 3 * r.block_values), 3 * r.block_bytes);
    EXPECT_EQ(dtype_nbytes(d, r.block_values + 1), -1);
    EXPECT_EQ(dtype_of_ggml(r.ggml_type), d);
    EXPECT_EQ(ggml_type_of(d), r.ggml_type);
    EXPECT_GE(dtype_min_version(d), 1u);
  }
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(block_type_of(d), std::nullopt) << dtype_name(d);
    EXPECT_EQ(dtype_of_ggml(ggml_type_of(d)), d) << dtype_name(d);
    EXPECT_EQ(dtype_block(d), 1);
  }
  const std::string e = error_of([] { parse_dtype("q3_k"); });
  for (const quant::TypeTraits& r : quant::kTypes) EXPECT_NE(e.find(r.name), std::string::npos) << e;
}

}  // namespace
}  // namespace anelab::models

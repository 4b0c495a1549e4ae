// anelab model file: round trips (with and without an embedded tokenizer), dtype conversion, alignment.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/quant/blocks.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

tok::VocabData sample_vocab() {
  tok::VocabData v;
  v.kind = tok::TokenizerKind::kByteBpe;
  v.pre = "qwen2";
  v.pre_regex = "(?i:'s|'t)";
  v.nfc_normalize = true;
  v.tokens = {"a", "b", "ab", std::string("\xff\x00z", 3), "<|endoftext|>"};
  v.types = {tok::TokenType::kNormal, tok::TokenType::kNormal, tok::TokenType::kNormal, tok::TokenType::kByte,
             tok::TokenType::kControl};
  v.merges = {"a b"};
  v.bos_id = -1;
  v.eos_id = 4;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

bool same_vocab(const tok::VocabData& a, const tok::VocabData& b) {
  return a.kind == b.kind && a.pre == b.pre && a.pre_regex == b.pre_regex && a.nfc_normalize == b.nfc_normalize &&
         a.tokens == b.tokens && a.scores == b.scores && a.types == b.types && a.merges == b.merges &&
         a.bos_id == b.bos_id && a.eos_id == b.eos_id && a.unk_id == b.unk_id && a.pad_id == b.pad_id &&
         a.add_bos == b.add_bos && a.add_space_prefix == b.add_space_prefix;
}

TEST(AnelabFile, RoundTripWithVocab) {
  Model m = random_model(preset("stories260k"), 7);
  m.vocab = sample_vocab();
  m.tokenizer_path = "/some/tok512.bin";
  const auto dir = test::temp_dir("af");
  const std::string p = (dir / "m.anelab").string();
  save_model(m, p);
  const Model b = load_any_model(p);
  EXPECT_EQ(b.source_format, "anelab");
  EXPECT_EQ(b.config, m.config);
  ASSERT_TRUE(b.vocab.has_value());
  EXPECT_TRUE(same_vocab(*b.vocab, *m.vocab));
  EXPECT_EQ(b.tokenizer_path, "/some/tok512.bin");
  for (const Tensor& t : m.tensors()) {
    const Tensor& u = b.tensor(t.name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u.data) % 64, 0u);
    ASSERT_EQ(u.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
  // No temp files left behind.
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file();
  EXPECT_EQ(n, 1);
}

TEST(AnelabFile, DtypeConversions) {
  const Model m = random_model(preset("stories260k"), 3);
  const auto dir = test::temp_dir("afd");
  for (DType dt : {DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const std::string p = (dir / (std::string(dtype_name(dt)) + ".anelab")).string();
    save_model(m, p, dt);
    const Model b = read_anelab_file(p);
    for (const Tensor& t : m.tensors()) {
      const Tensor& u = b.tensor(t.name);
      const DType want = t.shape.size() == 1 ? DType::kF32 : (dt == DType::kQ8_0 && t.shape[1] % 32) ? DType::kF16 : dt;
      EXPECT_EQ(u.dtype, want) << t.name << " " << dtype_name(dt);
      const auto a = t.to_f32(), c = u.to_f32();
      // Independent per-element reference of the rounding each dtype allows.
      for (size_t i = 0; i < a.size(); ++i) {
        float tol = 0;
        if (want == DType::kF16) tol = std::fabs(a[i]) * 0x1p-11f + 1e-7f;
        if (want == DType::kBF16) tol = std::fabs(a[i]) * 0x1p-8f;
        if (want == DType::kQ8_0) {
          float amax = 0;
          for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(a[j]));
          tol = amax / 127.0f * 0.5f * 1.01f + amax * 1e-3f;
        }
        ASSERT_LE(std::fabs(a[i] - c[i]), tol) << t.name << "[" << i << "] " << dtype_name(want);
      }
    }
  }
}

TEST(AnelabFile, Q8_0BlockLayout) {
  // ggml Q8_0: fp16 scale d = amax/127, then 32 int8 round(x/d).
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = (i < 32 ? 1.0f : -3.0f) * static_cast<float>(i % 32 - 5) / 26.0f;
  std::vector<uint8_t> q(68);
  f32_to_dtype(x.data(), DType::kQ8_0, q.data(), 64);
  uint16_t d0;
  std::memcpy(&d0, q.data(), 2);
  EXPECT_EQ(half_to_float(d0), round_fp16(1.0f / 127.0f));
  EXPECT_EQ(static_cast<int8_t>(q[2 + 31]), 127);  // x[31] = 26/26 = amax
  EXPECT_EQ(static_cast<int8_t>(q[34 + 2 + 31]), -127);
  std::vector<float> y(64);
  quant::dequantize(quant::BlockType::kQ8_0, q.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[i], x[i], 3.0f / 127.0f);
}

TEST(AnelabFile, ConfigValidationNamesField) {
  ModelConfig c = preset("stories260k");
  c.n_kv_heads = 3;
  try {
    validate_config(c, "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads"), std::string::npos) << e.what();
  }
}

// The size check every reader shares: a config whose parameter count exceeds kMaxParams (here ~4.4e13 in
// the layers alone, each size within its own range) is refused before anything is sized from it.
TEST(ModelConfigCheck, ParameterCountIsBoundedBeforeSizesAreUsed) {
  EXPECT_EQ(checked_parameter_count(preset("stories260k"), "x"), parameter_count(preset("stories260k")));
  ModelConfig c = preset("stories260k");
  c.dim = 1 << 16, c.hidden_dim = 1 << 18, c.n_layers = 1024;
  try {
    checked_parameter_count(c, "big.bin");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parameters"), std::string::npos) << e.what();
  }
  c = preset("stories260k");
  c.rope_theta = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(checked_parameter_count(c, "x"), Error);
}

}  // namespace
}  // namespace anelab::models

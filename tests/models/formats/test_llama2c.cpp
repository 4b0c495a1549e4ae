// llama2.c checkpoints: stories260K must load bit-exactly (tensor bytes compared against the bytes at
// independently computed offsets of the source file), and a hand-written export-v1 file must read back.
#include <gtest/gtest.h>

#include <cstring>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/llama2c.h"
#include "models/io/export.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

TEST(Llama2c, Stories260KHeaderAndConfig) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const Model m = read_llama2c(test::data_path("llama2c/stories260K.bin"));
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_EQ(m.parameter_count(), 260032);
  EXPECT_EQ(m.tensor("layers.2.wk").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_FALSE(m.has("output"));
}

// Offsets computed here from the legacy layout, independently of the reader's code path.
TEST(Llama2c, Stories260KBitExact) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const std::string path = test::data_path("llama2c/stories260K.bin");
  const auto raw = read_file_bytes(path);
  int32_t hdr[7];
  std::memcpy(hdr, raw.data(), 28);
  const int64_t dim = hdr[0], hid = hdr[1], L = hdr[2], nh = hdr[3], nkv = hdr[4], V = hdr[5], seq = hdr[6];
  const int64_t hs = dim / nh, kv = nkv * hs;
  struct Block {
    const char* name;
    int64_t per_layer;
    bool layered;
  };
  const Block order[] = {{"tok_embeddings", V * dim, false},
                         {"attn_norm", dim, true},
                         {"wq", dim * dim, true},
                         {"wk", kv * dim, true},
                         {"wv", kv * dim, true},
                         {"wo", dim * dim, true},
                         {"ffn_norm", dim, true},
                         {"w1", hid * dim, true},
                         {"w2", dim * hid, true},
                         {"w3", hid * dim, true},
                         {"norm", dim, false}};
  const Model m = read_llama2c(path);
  int64_t off = 28, checked = 0;
  for (const Block& b : order) {
    for (int64_t i = 0; i < (b.layered ? L : 1); ++i) {
      const std::string name = b.layered ? "layers." + std::to_string(i) + "." + b.name : b.name;
      const Tensor& t = m.tensor(name);
      ASSERT_EQ(t.nbytes, b.per_layer * 4) << name;
      EXPECT_EQ(std::memcmp(t.data, raw.data() + off, t.nbytes), 0) << name;
      off += b.per_layer * 4;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int64_t>(m.tensors().size()));
  // Trailing freq_cis tables (real + imag, seq * hs/2 floats each) account for the rest exactly.
  EXPECT_EQ(off + 2 * seq * (hs / 2) * 4, static_cast<int64_t>(raw.size()));
}

TEST(Llama2c, Stories260KConvertsToAnelabBitExact) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const Model src = read_llama2c(test::data_path("llama2c/stories260K.bin"));
  const auto dir = test::temp_dir("l2c");
  const std::string out = (dir / "s.anelab").string();
  save_model(src, out);
  const Model back = read_anelab_file(out);
  EXPECT_EQ(back.config, src.config);
  ASSERT_EQ(back.tensors().size(), src.tensors().size());
  for (const Tensor& t : src.tensors()) {
    const Tensor& u = back.tensor(t.name);
    EXPECT_EQ(u.shape, t.shape);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u.data) % 64, 0u) << t.name;
    ASSERT_EQ(u.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
}

// Writes a llama2.c export-v1 file by hand from stories260K's tensors and checks it reads the same.
TEST(Llama2c, ExportVersion1) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  const Model src = read_llama2c(test::data_path("llama2c/stories260K.bin"));
  const ModelConfig& c = src.config;
  std::vector<uint8_t> f(256, 0);
  const uint32_t magic = 0x616b3432;
  const int32_t ver = 1;
  const int32_t hdr[7] = {int32_t(c.dim),        int32_t(c.hidden_dim), int32_t(c.n_layers),   int32_t(c.n_heads),
                          int32_t(c.n_kv_heads), int32_t(c.vocab_size), int32_t(c.max_seq_len)};
  std::memcpy(f.data(), &magic, 4);
  std::memcpy(f.data() + 4, &ver, 4);
  std::memcpy(f.data() + 8, hdr, 28);
  f[36] = 0;  // not shared: append a distinct classifier
  auto put = [&](const std::string& name) {
    const Tensor& t = src.tensor(name);
    f.insert(f.end(), t.data, t.data + t.nbytes);
  };
  auto put_layers = [&](const char* n) {
    for (int i = 0; i < c.n_layers; ++i) put("layers." + std::to_string(i) + "." + n);
  };
  put_layers("attn_norm");
  put_layers("ffn_norm");
  put("norm");
  put("tok_embeddings");
  for (const char* n : {"wq", "wk", "wv", "wo", "w1", "w2", "w3"}) put_layers(n);
  std::vector<float> cls(c.vocab_size * c.dim);
  for (size_t i = 0; i < cls.size(); ++i) cls[i] = float(i % 97) * 0.01f;
  f.insert(f.end(), reinterpret_cast<uint8_t*>(cls.data()), reinterpret_cast<uint8_t*>(cls.data() + cls.size()));
  auto owner = std::make_shared<std::vector<uint8_t>>(f);
  const Model m = parse_llama2c(owner->data(), owner->size(), owner, "v1");
  EXPECT_FALSE(m.config.tied_embeddings);
  for (const Tensor& t : src.tensors()) EXPECT_EQ(std::memcmp(m.tensor(t.name).data, t.data, t.nbytes), 0) << t.name;
  EXPECT_EQ(m.tensor("output").to_f32(), cls);
  // Version 2 is refused with a clear message.
  (*owner)[4] = 2;
  try {
    parse_llama2c(owner->data(), owner->size(), owner, "v2");
    FAIL() << "version 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("version 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anelab::models

// Corrupt, truncated and mismatched inputs for every reader: specific hand-made defects must be rejected
// with an anelab::Error naming the problem, and a few thousand random mutations of valid files must
// never crash or throw anything else (the fuzz_read_* entry points swallow only anelab::Error).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/byte_reader.h"
#include "models/formats/checkpoint_header.h"
#include "models/formats/gguf.h"
#include "models/formats/llama2c.h"
#include "models/formats/safetensors.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/io/hf_model.h"
#include "models/presets.h"
#include "tests/common/anelab_versions.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {
using Bytes = std::vector<uint8_t>;

ModelConfig tiny_qwen() {  // the size of the tiny configs inside fuzz_read_safetensors
  ModelConfig c = preset("qwen2.5-0.5b");
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.vocab_size = 16;
  c.max_seq_len = 32;
  c.rope_theta = 10000.0f;
  return c;
}
ModelConfig tiny_llama() {
  ModelConfig c = preset("stories260k");
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 32;
  c.max_seq_len = 8;
  return c;
}

Bytes anelab_image() {
  const auto dir = test::temp_dir("ci");
  Model m = random_model(tiny_llama(), 1);
  m.vocab = tok::VocabData{};
  m.vocab->tokens = {"a", "b"};
  m.vocab->scores = {0.5f, 0.25f};
  save_model(m, (dir / "m.anelab").string());
  return read_file_bytes((dir / "m.anelab").string());
}

Bytes llama2c_image() {
  const Model m = random_model(tiny_llama(), 2);
  const ModelConfig& c = m.config;
  const int32_t h[7] = {int32_t(c.dim),        int32_t(c.hidden_dim), int32_t(c.n_layers),   int32_t(c.n_heads),
                        int32_t(c.n_kv_heads), int32_t(c.vocab_size), int32_t(c.max_seq_len)};
  Bytes b(reinterpret_cast<const uint8_t*>(h), reinterpret_cast<const uint8_t*>(h) + 28);
  auto put = [&](const std::string& n) {
    const Tensor& t = m.tensor(n);
    b.insert(b.end(), t.data, t.data + t.nbytes);
  };
  put("tok_embeddings");
  for (const char* n : {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"})
    for (int i = 0; i < c.n_layers; ++i) put("layers." + std::to_string(i) + "." + n);
  put("norm");
  b.resize(b.size() + c.max_seq_len * c.head_dim * 4, 0);
  return b;
}

Bytes safetensors_image() {
  const Model m = random_model(tiny_qwen(), 3);
  std::vector<StWrite> w;
  auto add = [&](const std::string& hf, const std::string& cn) {
    const Tensor& t = m.tensor(cn);
    w.push_back({hf, "F32", t.shape, Bytes(t.data, t.data + t.nbytes)});
  };
  add("model.embed_tokens.weight", "tok_embeddings");
  add("model.norm.weight", "norm");
  for (auto [hf, cn] : std::vector<std::pair<std::string, std::string>>{{"input_layernorm.weight", "attn_norm"},
                                                                        {"post_attention_layernorm.weight", "ffn_norm"},
                                                                        {"self_attn.q_proj.weight", "wq"},
                                                                        {"self_attn.k_proj.weight", "wk"},
                                                                        {"self_attn.v_proj.weight", "wv"},
                                                                        {"self_attn.o_proj.weight", "wo"},
                                                                        {"self_attn.q_proj.bias", "bq"},
                                                                        {"self_attn.k_proj.bias", "bk"},
                                                                        {"self_attn.v_proj.bias", "bv"},
                                                                        {"mlp.gate_proj.weight", "w1"},
                                                                        {"mlp.down_proj.weight", "w2"},
                                                                        {"mlp.up_proj.weight", "w3"}})
    add("model.layers.0." + hf, "layers.0." + cn);
  return build_safetensors(w);
}

Bytes gguf_image() {
  Model m = random_model(tiny_llama(), 4);
  m.vocab = tok::VocabData{};
  m.vocab->tokens = {"<unk>", "<s>", "</s>", "a"};
  m.vocab->scores = {0, 0, 0, -1};
  m.vocab->bos_id = 1;
  return model_to_gguf(m);
}

struct Reader {
  const char* name;
  std::function<Bytes()> image;
  std::function<void(const Bytes&)> parse;  // throws on invalid input
  int (*fuzz)(const uint8_t*, size_t);
};

// Images are built once (writing an anelab file fsyncs, which is slow on a busy disk).
template <Bytes (*F)()>
Bytes cached() {
  static const Bytes b = F();
  return b;
}

std::vector<Reader> readers() {
  return {
      {"anelab", cached<anelab_image>,
       [](const Bytes& b) {  // the reader, then the loader's checks (load_any_model)
         const Model m = parse_anelab(b.data(), b.size(), nullptr, "t");
         validate_config(m.config, "t");
         check_complete(m, "t");
       },
       fuzz_read_anelab},
      {"llama2c", cached<llama2c_image>, [](const Bytes& b) { parse_llama2c(b.data(), b.size(), nullptr, "t"); },
       fuzz_read_llama2c},
      {"safetensors", cached<safetensors_image>,
       [](const Bytes& b) {
         hf_to_model(R"({"model_type":"qwen2","hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
           "num_attention_heads":2,"num_key_value_heads":1,"vocab_size":16,"max_position_embeddings":32})",
                     parse_safetensors(b.data(), b.size(), nullptr, "t"), "t");
       },
       fuzz_read_safetensors},
      {"gguf", cached<gguf_image>,
       [](const Bytes& b) {
         const GgufFile g = parse_gguf(b.data(), b.size(), nullptr, "t");
         gguf_vocab(g, "t");
         gguf_to_model(g, "t");
       },
       fuzz_read_gguf},
  };
}

std::string error_of(const Reader& r, const Bytes& b) {
  try {
    r.parse(b);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Corrupt, ValidImagesParse) {
  for (const Reader& r : readers()) EXPECT_EQ(error_of(r, r.image()), "") << r.name;
}

TEST(Corrupt, EveryTruncationRejected) {
  for (const Reader& r : readers()) {
    const Bytes full = r.image();
    // Every length up to 600 bytes (headers), then a stride through the data, then size-1.
    std::vector<size_t> lens;
    for (size_t n = 0; n < std::min<size_t>(full.size(), 600); ++n) lens.push_back(n);
    for (size_t n = 600; n < full.size(); n += 997) lens.push_back(n);
    lens.push_back(full.size() - 1);
    for (size_t n : lens) {
      const Bytes b(full.begin(), full.begin() + static_cast<long>(n));
      EXPECT_NE(error_of(r, b), "") << r.name << " truncated to " << n << " bytes was accepted";
    }
  }
}

void expect_error(const Reader& r, const Bytes& b, const std::string& needle, const char* what) {
  const std::string e = error_of(r, b);
  EXPECT_NE(e.find(needle), std::string::npos) << r.name << " / " << what << ": got '" << e << "'";
}

// Version 5 keeps an FNV-1a checksum of its JSON header at offset 24 (length at 16, JSON at 40): recomputed
// here so that a test can reach the field checks behind it.
void reseal_anelab_header(Bytes& b) {
  uint64_t hlen = 0;
  std::memcpy(&hlen, &b[16], 8);
  const uint64_t sum = fnv1a64(kFnvOffset, &b[40], hlen);
  std::memcpy(&b[24], &sum, 8);
}

TEST(Corrupt, AnelabChecksums) {
  const Reader an = readers()[0];
  const Bytes good = an.image();
  uint32_t version = 0;
  std::memcpy(&version, &good[8], 4);
  EXPECT_EQ(version, kAnelabVersion);
  Bytes b = good;
  b[b.size() - 1] ^= 0x01;  // the last weight byte: no field check can see it
  expect_error(an, b, "data checksum mismatch", "anelab data bit flip");
  b = good;
  {  // a byte of the JSON header that every parser accepts (inside the "source" string)
    std::string s(b.begin(), b.end());
    const size_t p = s.find("\"source\":\"");
    ASSERT_NE(p, std::string::npos);
    b[p + 10] = b[p + 10] == 'x' ? 'y' : 'x';
    expect_error(an, b, "header checksum mismatch", "anelab header byte");
  }
  // Version 4 (no checksums) is still read, to the same tensors.
  const Bytes v4 = test::anelab_as_version(good, 4);
  ASSERT_FALSE(v4.empty());
  const Model m4 = parse_anelab(v4.data(), v4.size(), nullptr, "v4");
  const Model m5 = parse_anelab(good.data(), good.size(), nullptr, "v5");
  ASSERT_EQ(m4.tensors().size(), m5.tensors().size());
  for (const Tensor& t : m5.tensors()) {
    const Tensor& u = m4.tensor(t.name);
    ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u.data, t.data, static_cast<size_t>(t.nbytes)), 0) << t.name;
  }
  Bytes v4_flipped = v4;
  v4_flipped.back() ^= 0x01;  // no checksum in version 4: still read (the reason for version 5)
  EXPECT_EQ(error_of(an, v4_flipped), "");
}

TEST(Corrupt, AnelabChecksumOverSeveralBlocks) {
  // The data checksum hashes 1 MiB blocks (on several threads when reading): a file of 2-3 blocks round-trips, and
  // a bit flipped in its middle block is found.
  ModelConfig c = tiny_llama();
  c.vocab_size = 8192;  // embeddings 8192 x 32 fp32 = 1 MiB: with the layers about 1.1 MiB, two blocks
  c.dim = 32, c.head_dim = 8;
  const auto dir = test::temp_dir("ck_blocks");
  const std::string path = (dir / "m.anelab").string();
  const Model m = random_model(c, 9);
  save_model(m, path);
  Bytes b = read_file_bytes(path);
  ASSERT_GT(b.size(), size_t{1} << 20);
  const Model back = parse_anelab(b.data(), b.size(), nullptr, "blocks");
  for (const Tensor& t : m.tensors())
    EXPECT_EQ(std::memcmp(back.tensor(t.name).data, t.data, size_t(t.nbytes)), 0) << t.name;
  b[(size_t{1} << 20) + 4096] ^= 0x10;
  const Reader an = readers()[0];
  expect_error(an, b, "data checksum mismatch", "anelab bit flip past the first block");
}

TEST(Corrupt, OverlappingTensorsRefused) {
  const Reader gg = readers()[3], st = readers()[2];
  {  // GGUF: two F32 [8] tensors, the second's offset moved onto the first's bytes
    GgufWriter w;
    w.add_tensor("first.weight", ggml_type_of(DType::kF32), {8}, Bytes(32, 1));
    w.add_tensor("second.weight", ggml_type_of(DType::kF32), {8}, Bytes(32, 2));
    Bytes b = w.build();
    EXPECT_NO_THROW(parse_gguf(b.data(), b.size(), nullptr, "t"));
    const std::string s(b.begin(), b.end());
    const size_t p = s.find("second.weight");
    ASSERT_NE(p, std::string::npos);
    const size_t off_at = p + 13 + 4 + 8 + 4;  // name, n_dims, one dim, type: then the u64 offset
    uint64_t off = 0;
    std::memcpy(&off, &b[off_at], 8);
    ASSERT_EQ(off, 32u);
    off = 0;
    std::memcpy(&b[off_at], &off, 8);
    try {
      parse_gguf(b.data(), b.size(), nullptr, "crafted.gguf");
      ADD_FAILURE() << "overlapping GGUF tensors accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("crafted.gguf: tensor second.weight (bytes 0-32 of the data section) "
                                           "overlaps tensor first.weight"),
                std::string::npos)
          << e.what();
    }
  }
  {  // safetensors: the second tensor's data_offsets made those of the first (same size, so they fit its shape)
    Bytes b = build_safetensors({{"a.weight", "F32", {4}, Bytes(16, 1)}, {"b.weight", "F32", {4}, Bytes(16, 2)}});
    std::string s(b.begin(), b.end());
    const size_t p = s.find("[16,32]");
    ASSERT_NE(p, std::string::npos);
    s.replace(p, 7, "[0,16] ");
    b.assign(s.begin(), s.end());
    try {
      parse_safetensors(b.data(), b.size(), nullptr, "crafted.safetensors");
      ADD_FAILURE() << "overlapping safetensors tensors accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("crafted.safetensors: tensor "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("overlaps tensor a.weight"), std::string::npos) << e.what();
    }
  }
  (void)gg, (void)st;
}

TEST(Corrupt, HandMadeDefects) {
  const auto rs = readers();
  const Reader &an = rs[0], &l2 = rs[1], &st = rs[2], &gg = rs[3];
  Bytes b = an.image();
  b[0] = 'X';
  expect_error(an, b, "magic", "anelab bad magic");
  b = an.image();
  b[8] = 9;
  expect_error(an, b, "version 9", "anelab version");
  b = an.image();
  b.push_back(0);
  expect_error(an, b, "trailing", "anelab trailing byte");
  b = an.image();
  std::memset(&b[16], 0x7f, 8);
  expect_error(an, b, "header_len", "anelab huge header");
  b = an.image();
  {  // change a tensor shape inside the JSON without changing the length (and seal the header again)
    std::string s(b.begin(), b.end());
    const size_t p = s.find("[32,16]");
    ASSERT_NE(p, std::string::npos);
    s.replace(p, 7, "[16,32]");
    b.assign(s.begin(), s.end());
    expect_error(an, b, "header checksum mismatch", "anelab header edited");
    reseal_anelab_header(b);
    expect_error(an, b, "tok_embeddings", "anelab shape mismatch");
  }

  b = l2.image();
  int32_t dim = 1 << 30;
  std::memcpy(&b[0], &dim, 4);
  expect_error(l2, b, "dim", "llama2c absurd dim");
  b = l2.image();
  b.resize(b.size() - 4);
  expect_error(l2, b, "bytes", "llama2c size");
  b = l2.image();
  const uint32_t magic = kLlama2cMagic;
  std::memcpy(&b[0], &magic, 4);
  b[4] = 7;
  expect_error(l2, b, "version 7", "llama2c v7");

  b = st.image();
  std::memset(&b[0], 0xff, 8);
  expect_error(st, b, "header length", "safetensors huge header");
  b = st.image();
  {
    std::string s(b.begin(), b.end());
    const size_t p = s.find("\"F32\"");
    s.replace(p, 5, "\"I64\"");
    b.assign(s.begin(), s.end());
    expect_error(st, b, "I64", "safetensors dtype");
  }
  b = st.image();
  b.resize(b.size() - 8);
  expect_error(st, b, "outside the data buffer", "safetensors offsets past EOF");

  b = gg.image();
  b[1] = 'X';
  expect_error(gg, b, "GGUF", "gguf magic");
  b = gg.image();
  b[4] = 1;
  expect_error(gg, b, "version 1", "gguf version");
  b = gg.image();
  std::memset(&b[8], 0x7f, 8);
  expect_error(gg, b, "tensor_count", "gguf absurd count");
  b = gg.image();
  {  // the first key's length (u64 at offset 24) made huge
    std::memset(&b[24], 0x7f, 8);
    expect_error(gg, b, "length", "gguf huge string");
  }
  b = gg.image();
  b.resize(b.size() - 64);
  expect_error(gg, b, "past the end", "gguf data past EOF");
}

TEST(Corrupt, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(20240611);
  for (const Reader& r : readers()) {
    const Bytes base = r.image();
    int accepted = 0;
    for (int it = 0; it < 1000; ++it) {
      Bytes b = base;
      const int n = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < n; ++k) {
        // Mostly the header region, sometimes anywhere; sometimes an extreme value.
        const size_t span = (rng() % 4) ? std::min<size_t>(b.size(), 512) : b.size();
        const size_t pos = rng() % span;
        b[pos] = (rng() % 3) ? static_cast<uint8_t>(rng()) : ((rng() & 1) ? 0xff : 0x00);
      }
      if (rng() % 10 == 0) b.resize(rng() % b.size());
      ASSERT_NO_THROW(r.fuzz(b.data(), b.size())) << r.name << " iteration " << it;
      accepted += error_of(r, b).empty();
    }
    RecordProperty(std::string(r.name) + "_accepted", accepted);
  }
}

}  // namespace
}  // namespace anelab::models

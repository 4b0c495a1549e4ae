// Palettes (lut4 / lut6, issue 39): the k-means tables of framework/quant/palette.h, palettize_model
// (models/quant/quant_mix.h) and the anelab file's palettes section (format version 6, anelab_file.h):
//   - values drawn from 16 (64) fp16 levels are reproduced exactly by a 4-bit (6-bit) palette: k-means seeded at the
//     quantiles finds every level; grouped tables differ per group; more bits, smaller error;
//   - palettize_model turns each layer matrix into fp16 holding exactly its palette's values, and nothing else;
//   - the file round-trips the palettes (version 6; without palettes version 5 as before) and every reader that
//     ignores them sees the same numbers;
//   - a short table, an index past the table and a tensor that disagrees with its palette are each refused in one
//     line naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/quant/palette.h"
#include "models/formats/anelab_file.h"
#include "models/formats/byte_reader.h"
#include "models/formats/checkpoint_header.h"
#include "models/io/export.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "tests/common/test_data.h"

namespace anelab::models {
namespace {

// levels fp16 values spread over [-1, 1], each value of a [rows, cols] matrix one of them (seeded).
std::vector<float> on_levels(int levels, int64_t rows, int64_t cols, unsigned seed, float scale = 1.0f) {
  std::vector<float> lv(static_cast<size_t>(levels));
  for (int i = 0; i < levels; ++i)
    lv[static_cast<size_t>(i)] = round_fp16(scale * (-1.0f + 2.0f * static_cast<float>(i) / (levels - 1)));
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::mt19937 g(seed);
  for (size_t i = 0; i < w.size(); ++i) w[i] = lv[i < lv.size() ? i : g() % lv.size()];  // every level present
  return w;
}

TEST(Palette, KMeansFindsEveryLevel) {
  for (const int bits : {4, 6}) {
    const std::vector<float> w = on_levels(1 << bits, 32, 64, 5);
    const quant::Palette p = quant::palettize(w, 32, 64, bits, 0);
    EXPECT_EQ(p.tables(), 1);
    EXPECT_EQ(quant::palette_values(p), w) << bits << " bits";
    EXPECT_EQ(quant::palettize(w, 32, 64, bits, 0).indices, p.indices) << "not deterministic";
  }
}

TEST(Palette, GroupsHaveTheirOwnTablesAndMoreBitsLessError) {
  // Rows 0..15 on 16 levels of [-1, 1], rows 16..31 on 16 levels of [-0.01, 0.01]: one table per 16 rows is exact,
  // one table for the tensor is not.
  std::vector<float> w = on_levels(16, 16, 64, 7);
  const std::vector<float> small = on_levels(16, 16, 64, 8, 0.01f);
  w.insert(w.end(), small.begin(), small.end());
  const quant::Palette grouped = quant::palettize(w, 32, 64, 4, 16);
  EXPECT_EQ(grouped.tables(), 2);
  EXPECT_EQ(quant::palette_values(grouped), w);
  EXPECT_NE(quant::palette_values(quant::palettize(w, 32, 64, 4, 0)), w);
  // Gaussian weights: the squared error of 6 bits is well below that of 4 (k-means: about 2^-2(6-4) = 1/16 of it).
  std::vector<float> gw(64 * 64);
  std::mt19937 g(9);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& v : gw) v = nd(g);
  auto sq_err = [&](int bits) {
    const std::vector<float> d = quant::palette_values(quant::palettize(gw, 64, 64, bits, 0));
    double e = 0;
    for (size_t i = 0; i < d.size(); ++i) e += (d[i] - gw[i]) * (d[i] - gw[i]);
    return e;
  };
  EXPECT_LT(sq_err(6), sq_err(4) / 8);
  EXPECT_THROW(quant::palettize(gw, 64, 64, 5, 0), Error);
  EXPECT_THROW(quant::palettize(gw, 64, 64, 4, 48), Error);
}

// Tables per 16 rows fit at least as well as one per tensor (each group's k-means has the tensor's table as one
// candidate, and Lloyd from good seeds finds better): Gaussian rows whose scale varies with the row.
TEST(Palette, GroupedTablesFitAtLeastAsWellAsOnePerTensor) {
  const int64_t R = 64, C = 64;
  std::vector<float> w(static_cast<size_t>(R * C));
  std::mt19937 g(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) w[static_cast<size_t>(r * C + c)] = 0.01f * static_cast<float>(1 + r % 4) * nd(g);
  auto sq_err = [&](int bits, int64_t group) {
    const std::vector<float> d = quant::palette_values(quant::palettize(w, R, C, bits, group));
    double e = 0;
    for (size_t i = 0; i < d.size(); ++i) e += (d[i] - w[i]) * (d[i] - w[i]);
    return e;
  };
  for (const int bits : {4, 6}) EXPECT_LE(sq_err(bits, 16), sq_err(bits, 0)) << bits << " bits";
}

ModelConfig pal_config() {
  ModelConfig c = preset("stories260k");
  c.dim = 32, c.hidden_dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8;
  c.vocab_size = 32, c.max_seq_len = 16;
  return c;
}

TEST(Palette, PalettizeModelAndTheFileRoundTrip) {
  const Model src = random_model(pal_config(), 3);
  const Model m = palettize_model(src, 6, 16);
  EXPECT_EQ(m.palettes.size(), 14u);  // 7 matrices x 2 layers
  for (const Tensor& t : m.tensors()) {
    const auto it = m.palettes.find(t.name);
    if (it == m.palettes.end()) {
      EXPECT_EQ(t.data, src.tensor(t.name).data) << t.name << " changed";
      continue;
    }
    EXPECT_EQ(t.dtype, DType::kF16) << t.name;
    EXPECT_EQ(it->second->bits, 6);
    EXPECT_EQ(it->second->group, 16) << t.name;
    EXPECT_EQ(t.to_f32(), quant::palette_values(*it->second)) << t.name;
  }
  const auto dir = test::temp_dir("palette");
  const std::string path = (dir / "m.anelab").string();
  save_model(m, path, DType::kQ8_0);  // a target dtype leaves the palettized tensors as they are
  const std::vector<uint8_t> b = read_file_bytes(path);
  uint32_t version = 0;
  std::memcpy(&version, &b[8], 4);
  EXPECT_EQ(version, kAnelabPaletteVersion);
  const Model r = read_anelab_file(path);
  ASSERT_EQ(r.palettes.size(), m.palettes.size());
  for (const auto& [name, p] : m.palettes) {
    const quant::Palette& q = *r.palettes.at(name);
    EXPECT_EQ(q.indices, p->indices) << name;
    EXPECT_EQ(q.lut, p->lut) << name;
    EXPECT_EQ(q.group, p->group) << name;
    EXPECT_EQ(r.tensor(name).to_f32(), m.tensor(name).to_f32()) << name;
  }
  EXPECT_EQ(r.tensor("layers.0.attn_norm").to_f32(), src.tensor("layers.0.attn_norm").to_f32());
}

// The file's checksums (anelab_file.h) recomputed after an edit, so that the palette checks behind them are reached:
// the header's FNV-1a, and the data's FNV-1a of the 1 MiB blocks' digests (these files are one block).
void reseal(std::vector<uint8_t>& b) {
  uint64_t hlen = 0;
  std::memcpy(&hlen, &b[16], 8);
  const uint64_t hs = fnv1a64(kFnvOffset, &b[40], hlen);
  std::memcpy(&b[24], &hs, 8);
  const int64_t data_off = round_up(40 + static_cast<int64_t>(hlen), kAnelabAlign);
  const auto n = static_cast<int64_t>(b.size()) - data_off;
  ASSERT_LE(n, int64_t{1} << 20);
  const uint64_t block = fnv1a64(kFnvOffset, &b[static_cast<size_t>(data_off)], static_cast<size_t>(n));
  const uint64_t ds = fnv1a64(kFnvOffset, &block, 8);
  std::memcpy(&b[32], &ds, 8);
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    parse_anelab(b.data(), b.size(), nullptr, "edited.anelab");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Palette, CorruptPaletteDataIsRefusedNamingTheTensor) {
  const Model m = palettize_model(random_model(pal_config(), 4), 4, 0);
  const auto dir = test::temp_dir("palette_bad");
  const std::string path = (dir / "m.anelab").string();
  save_model(m, path);
  const std::vector<uint8_t> good = read_file_bytes(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, &good[16], 8);
  const std::string header(good.begin() + 40, good.begin() + 40 + static_cast<long>(hlen));
  const nlohmann::json h = nlohmann::json::parse(header);
  const nlohmann::json& e = h["palettes"][0];
  const std::string name = e["name"];
  const int64_t data_off = round_up(40 + static_cast<int64_t>(hlen), kAnelabAlign);

  std::vector<uint8_t> b = good;  // an index past the 16-entry table
  b[static_cast<size_t>(data_off + e["indices"]["offset"].get<int64_t>() + 3)] = 16;
  reseal(b);
  std::string err = parse_error(b);
  EXPECT_NE(err.find("palette of tensor " + name + ": index 16 at element 3"), std::string::npos) << err;

  b = good;  // a table entry changed: the tensor no longer holds the palette's values
  b[static_cast<size_t>(data_off + e["lut"]["offset"].get<int64_t>() + 1)] ^= 0x40;
  reseal(b);
  err = parse_error(b);
  EXPECT_NE(err.find("palette of tensor " + name + ": element"), std::string::npos) << err;

  b = good;  // a short table: the header promises 2 bytes less
  const std::string nb = "\"nbytes\":" + std::to_string(e["lut"]["nbytes"].get<int64_t>());
  std::string edited = header;
  const size_t at = edited.find(nb, edited.find("\"palettes\""));
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, nb.size(), "\"nbytes\":" + std::to_string(e["lut"]["nbytes"].get<int64_t>() - 2));
  edited.resize(header.size(), ' ');  // the same length (JSON ignores the trailing space)
  std::memcpy(&b[40], edited.data(), edited.size());
  reseal(b);
  err = parse_error(b);
  EXPECT_NE(err.find("palette of tensor " + name + ": indices"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << "not one line: " << err;
}

}  // namespace
}  // namespace anelab::models

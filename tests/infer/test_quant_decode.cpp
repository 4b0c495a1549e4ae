// Quantized decode: the GEMV over block-quantized weights (int8 activations, framework/quant/qdot.h) on the
// thread pool against the fp32 GEMV of the dequantized weights (the prefill GEMM as well), an engine running a
// Q4_K_M model in its blocks against the same engine on the dequantized model, and its prefill against its decode;
// Q8_0 and Q4_K row tiles (the decode layout) against the rows they were made from, in the kernels and in an engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "framework/core/error.h"
#include "framework/quant/qdot.h"
#include "framework/quant/qgemm.h"
#include "framework/quant/types.h"
#include "framework/simd/simd.h"
#include "infer/cpu_math.h"
#include "infer/engine.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"

namespace anelab::infer {
namespace {

struct QMat {
  Mat q, f;                     // the block matrix and its dequantized fp32 copy
  std::vector<uint8_t> blocks;  // [rows, cols / values * bytes]
  std::vector<float> deq;       // [rows, cols]
};

QMat make_qmat(WType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = g(rng);
  QMat m;
  const quant::BlockType bt = block_type(t);
  const quant::BlockInfo bi = quant::block_info(bt);
  m.blocks.resize(static_cast<size_t>(rows * cols / bi.values * bi.bytes));
  m.deq.resize(w.size());
  quant::quantize(bt, w.data(), m.blocks.data(), rows * cols);
  quant::dequantize(bt, m.blocks.data(), m.deq.data(), rows * cols);
  m.q = Mat{t, rows, cols, m.blocks.data()};
  m.f = Mat{WType::kF32, rows, cols, m.deq.data()};
  return m;
}

// Per row, the quantized GEMV differs from the fp32 GEMV of the dequantized weights by the activation rounding,
// at most sum_i |w_i| e_i (e_i: quant::acts_rounding_bound of the type's activation form), plus fp32 rounding of
// both sums (cols 2^-24 sum |w x| each).
TEST(QuantGemv, MatchesDequantizedGemvOnThePool) {
  ThreadPool pool(4);
  const int64_t cols = 1024;
  std::vector<float> x(static_cast<size_t>(cols)), bias(300);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  for (float& v : bias) v = g(rng);
  quant::Q8Acts acts;
  quant::quantize_acts(x.data(), cols, acts);
  for (const quant::TypeTraits& tr : quant::kTypes) {  // every row of the type table
    const WType t = quant::wtype_of(tr.type);
    const QMat a = make_qmat(t, 300, cols, 1), b = make_qmat(t, 200, cols, 2);
    std::vector<float> ya(300), yb(200), ra(300), rb(200);
    gemv(pool, {GemvOut{&a.q, bias.data(), ya.data()}, GemvOut{&b.q, nullptr, yb.data()}}, x.data());
    gemv(pool, {GemvOut{&a.f, bias.data(), ra.data()}, GemvOut{&b.f, nullptr, rb.data()}}, x.data());
    // x's own quantization acts_x (acts for x itself) read in the activation form of type `form`, y / ref: the
    // results with m's blocks / dequantized rows.
    auto check = [&](const QMat& m, const float* xv, const quant::Q8Acts& acts_x, quant::BlockType form, const float* y,
                     const float* ref, int64_t r) {
      double bound = 0, mag = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double w = m.deq[static_cast<size_t>(r * cols + i)];
        bound += std::fabs(w) * quant::acts_rounding_bound(acts_x, form, i);
        mag += std::fabs(w * xv[i]);
      }
      if (form ==
          quant::BlockType::kQ5_1)  // the GEMV's offsets m s_a: s_a = fp16((amax / 127) sum q), 2^-10 d_a sum |q|
        for (int64_t bk = 0; bk < cols / 32; ++bk) {
          const auto* blk = reinterpret_cast<const quant::BlockQ5_1*>(m.blocks.data()) + r * (cols / 32) + bk;
          double sq = 0;
          for (int64_t i = 32 * bk; i < 32 * bk + 32; ++i) sq += std::abs(acts_x.q[static_cast<size_t>(i)]);
          bound += std::fabs(double(simd::soft_h2f(blk->m))) * 0x1p-10 * (1.0 + 0x1p-10) *
                   acts_x.d[static_cast<size_t>(bk)] * sq;
        }
      ASSERT_LE(std::fabs(double(y[r]) - double(ref[r])), bound + 2.0 * cols * 0x1p-24 * (mag + 1.0))
          << static_cast<int>(t) << " row " << r;
    };
    for (int64_t r = 0; r < 300; ++r) check(a, x.data(), acts, block_type(t), ya.data(), ra.data(), r);
    for (int64_t r = 0; r < 200; ++r) check(b, x.data(), acts, block_type(t), yb.data(), rb.data(), r);
    // The GEMM over a block matrix (the prefill's int8 micro-kernel) obeys the same bound token by token for
    // the activation form it reads, the Q8_0 one (blocks of 32, fp16 scales) for every weight type: exact
    // integer block products folded in fp32.
    std::vector<float> x3(static_cast<size_t>(3 * cols)), y3(900), r3(900);
    for (float& v : x3) v = g(rng);
    gemm(pool, a.q, bias.data(), x3.data(), 3, y3.data());
    gemm(pool, a.f, bias.data(), x3.data(), 3, r3.data());
    for (int64_t tk = 0; tk < 3; ++tk) {
      quant::Q8Acts acts_t;
      quant::quantize_acts(x3.data() + tk * cols, cols, acts_t);
      for (int64_t r = 0; r < 300; ++r)
        check(a, x3.data() + tk * cols, acts_t, quant::BlockType::kQ8_0, y3.data() + tk * 300, r3.data() + tk * 300, r);
    }
    // Embedding rows come back dequantized.
    std::vector<float> row(static_cast<size_t>(cols));
    mat_row(a.q, 7, row.data());
    for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(row[static_cast<size_t>(i)], a.deq[static_cast<size_t>(7 * cols + i)]);
  }
}

// Greedy decode of `steps` tokens from `first` in both engines: the same token at every position (a failure
// otherwise), and the largest relative rms difference of their logits.
double greedy_decode_rel(Engine& a, Engine& b, int32_t first, int64_t steps) {
  const int64_t V = a.config().vocab_size;
  double max_rel = 0;
  int32_t ta = first, tb = first;
  for (int64_t pos = 0; pos < steps; ++pos) {
    const float* la = a.decode(ta, pos);
    const float* lb = b.decode(tb, pos);
    double num = 0, den = 0;
    for (int64_t v = 0; v < V; ++v) num += (la[v] - lb[v]) * (la[v] - lb[v]), den += lb[v] * lb[v];
    max_rel = std::max(max_rel, std::sqrt(num / den));
    ta = static_cast<int32_t>(std::max_element(la, la + V) - la);
    tb = static_cast<int32_t>(std::max_element(lb, lb + V) - lb);
    EXPECT_EQ(ta, tb) << "position " << pos;
    if (ta != tb) break;
  }
  return max_rel;
}

// Row tiles (Q8_0, Q4_K) hold the same blocks: every row reads back as its bytes and bit for bit as values; the
// prefill GEMM copies their groups into the panels the row-major unpacker builds (Q4_K's split into nibbles, the
// same scale and min products), so its result is the same bits. The tiled GEMV forms the row kernel's fp32 terms
// (Q8_0: t_b = float(isum_b) d_w d_a per block; Q4_K: S_b d d_a and M_b dmin d_a per super-block, S_b and M_b
// exact int32 that the kernels convert to fp32 in different pieces) and differs from the row GEMV by summation order
// and those conversions only: at most 2 n 2^-24 sum |t| per row with n the terms and conversions along one sum
// (Q8_0: nb; Q4_K: 2 nb + 4, the row kernel's 8 lanes reduced in 3 steps, plus one conversion) and sum |t| <=
// sum_i m_i |x_i| (m_i = |w_i| for Q8_0, |d sc q_i| + |dmin m| for Q4_K; x as quantized).
// 300 and 200 rows: 18 and 12 tiles and 12 and 8 rows of blocks after them; on 4 threads the second matrix starts
// mid-tile in the pool's 16-row chunks, so partial tiles are taken too.
void check_row_tiles(WType wt) {
  ThreadPool pool(4);
  const int64_t cols = 1024;
  const quant::BlockType qt = block_type(wt);
  const quant::BlockInfo bi = quant::block_info(qt);
  const int64_t nb = cols / bi.values, row_bytes = nb * bi.bytes;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols)), bias(300);
  for (float& v : x) v = g(rng);
  for (float& v : bias) v = g(rng);
  quant::Q8Acts acts;
  quant::quantize_acts(x.data(), cols, acts);
  std::vector<double> xq(static_cast<size_t>(cols));  // |the activations as quantized|
  for (int64_t i = 0; i < cols; ++i) {
    const auto u = static_cast<size_t>(i);
    xq[u] = std::fabs(qt == quant::BlockType::kQ8_0 ? double(acts.d[u / 32]) * acts.q[u]
                                                    : double(acts.dk[u / 256]) * acts.qk[u]);
  }
  const QMat a = make_qmat(wt, 300, cols, 1), b = make_qmat(wt, 200, cols, 2);
  std::vector<uint8_t> ta = a.blocks, tb = b.blocks;
  quant::tile_rows(qt, ta.data(), 300 / 16, cols);
  quant::tile_rows(qt, tb.data(), 200 / 16, cols);
  ASSERT_NE(ta, a.blocks);
  EXPECT_TRUE(std::equal(ta.begin() + 288 * row_bytes, ta.end(), a.blocks.begin() + 288 * row_bytes));  // rows after
  Mat at = a.q, bt = b.q;
  at.data = ta.data(), at.tiled_rows = 288;
  bt.data = tb.data(), bt.tiled_rows = 192;
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> blocks(static_cast<size_t>(row_bytes));
  for (int64_t r = 0; r < 300; ++r) {
    if (r < 288) {
      quant::tile_row(qt, at.tile(r / 16), cols, static_cast<int>(r % 16), blocks.data());
      ASSERT_TRUE(std::equal(blocks.begin(), blocks.end(), a.blocks.begin() + r * row_bytes)) << "row " << r;
    }
    at.row_values(r, row.data());
    for (int64_t i = 0; i < cols; ++i)
      ASSERT_EQ(row[static_cast<size_t>(i)], a.deq[static_cast<size_t>(r * cols + i)]) << r;
  }
  EXPECT_THROW(at.row_blocks(287), Error);

  std::vector<float> ya(300), yb(200), ra(300), rb(200);
  gemv(pool, {GemvOut{&at, bias.data(), ya.data()}, GemvOut{&bt, nullptr, yb.data()}}, x.data());
  gemv(pool, {GemvOut{&a.q, bias.data(), ra.data()}, GemvOut{&b.q, nullptr, rb.data()}}, x.data());
  const double n_terms = qt == quant::BlockType::kQ8_0 ? double(nb) : 2.0 * nb + 4;
  const auto check = [&](const QMat& m, const std::vector<float>& y, const std::vector<float>& ref, int64_t r,
                         float bs) {
    double terms = 0;
    for (int64_t i = 0; i < cols; ++i) {
      double mag = std::fabs(double(m.deq[static_cast<size_t>(r * cols + i)]));
      if (qt == quant::BlockType::kQ4_K) {
        const auto& k = reinterpret_cast<const quant::BlockQ4_K*>(m.blocks.data() + r * row_bytes)[i / 256];
        int sc, mn;
        quant::q4k_scale_min(static_cast<int>(i % 256 / 32), k.scales, sc, mn);
        const double dm = double(simd::soft_h2f(k.dmin)) * mn;
        mag = std::fabs(double(m.deq[static_cast<size_t>(r * cols + i)]) + dm) + dm;  // |d sc q| + |dmin m|
      }
      terms += mag * xq[static_cast<size_t>(i)];
    }
    const double bound = 2.0 * n_terms * 0x1p-24 * terms * 1.01 + 0x1p-24 * std::fabs(double(bs));
    EXPECT_LE(std::fabs(double(y[static_cast<size_t>(r)]) - ref[static_cast<size_t>(r)]), bound) << "row " << r;
  };
  for (int64_t r = 0; r < 300; ++r) check(a, ya, ra, r, bias[static_cast<size_t>(r)]);
  for (int64_t r = 0; r < 200; ++r) check(b, yb, rb, r, 0.0f);

  const int64_t n_tok = 7;
  std::vector<float> xs(static_cast<size_t>(n_tok * cols)), gt(static_cast<size_t>(n_tok * 300)), gr(gt.size());
  for (float& v : xs) v = g(rng);
  quant::gemm(pool, qt, ta.data(), 300, cols, bias.data(), xs.data(), n_tok, gt.data(), 288);
  quant::gemm(pool, qt, a.blocks.data(), 300, cols, bias.data(), xs.data(), n_tok, gr.data());
  EXPECT_EQ(gt, gr);
}
TEST(QuantGemv, Q8_0TilesMatchTheirRows) { check_row_tiles(WType::kQ8_0); }
TEST(QuantGemv, Q4_KTilesMatchTheirRows) { check_row_tiles(WType::kQ4_K); }

// An engine tiles the Q8_0 / Q4_K matrices of a model in private memory that it alone holds (not a copy another
// model shares, not with row_tiles off); its prefill gives the untiled engine's bits, its decode the same greedy
// tokens with logits within the summation-order differences above (and the int8 flips they may cause, as in the
// tests above: < 5 % relative rms). The q4_k_m mix keeps its Q6_K matrices as rows.
void check_engine_tiles(models::QuantMix mix, WType tiled) {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 64;
  c.vocab_size = 512, c.max_seq_len = 64;
  // Quantized once (Q4_K_M's scale search is most of this test's time, 30 s under qemu when it ran per engine);
  // each engine gets its own copy of the bytes, as a freshly quantized model would have.
  const models::Model base = models::quantize_model(models::random_model(c, 11), mix);
  const auto qm = [&] {
    models::Model m;
    m.config = base.config;
    for (const models::Tensor& t : base.tensors())
      m.add_owned(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    m.private_memory = true;
    return m;
  };
  EngineOptions o;
  o.dtype = WType::kF32;
  o.keep_quantized = true;
  EngineOptions off = o;
  off.row_tiles = false;
  Engine et(qm(), o), eu(qm(), off);
  ASSERT_EQ(et.layer(0).wq.type, tiled);
  ASSERT_EQ(et.layer(0).w1.type, tiled);
  EXPECT_EQ(et.layer(0).wq.tiled_rows, c.dim);
  EXPECT_EQ(et.layer(0).w1.tiled_rows, c.hidden_dim);
  if (mix == models::QuantMix::kQ4_K_M) {  // the last layer's ffn_down is Q6_K (use_more_bits)
    ASSERT_EQ(et.layer(1).w2.type, WType::kQ6_K);
    EXPECT_EQ(et.layer(1).w2.tiled_rows, 0);
  }
  EXPECT_EQ(eu.layer(0).w1.tiled_rows, 0);
  const models::Model shared = qm();
  Engine es(shared, o);  // `shared` still holds the bytes
  EXPECT_EQ(es.layer(0).w1.tiled_rows, 0);
  models::Model mapped = qm();
  mapped.private_memory = false;
  Engine em(std::move(mapped), o);
  EXPECT_EQ(em.layer(0).w1.tiled_rows, 0);

  std::vector<int32_t> toks(13);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 53 + 7) % 512);
  std::vector<float> pt, pu;
  et.prefill(toks, 0, &pt);
  eu.prefill(toks, 0, &pu);
  EXPECT_EQ(pt, pu);
  Engine dt(qm(), o), du(qm(), off);
  EXPECT_LT(greedy_decode_rel(dt, du, 3, 16), 0.05);
}
TEST(QuantGemv, EngineTilesQ8_0WhereItMay) { check_engine_tiles(models::QuantMix::kQ8_0, WType::kQ8_0); }
TEST(QuantGemv, EngineTilesQ4_KWhereItMay) { check_engine_tiles(models::QuantMix::kQ4_K_M, WType::kQ4_K); }

models::Model dequantized(const models::Model& q) {
  models::Model r;
  r.config = q.config;
  for (const models::Tensor& t : q.tensors()) {
    const std::vector<float> f = t.to_f32();
    std::vector<uint8_t> b(f.size() * 4);
    std::memcpy(b.data(), f.data(), b.size());
    r.add_owned(t.name, models::DType::kF32, t.shape, std::move(b));
  }
  return r;
}

// A Q4_K_M model decoded in its blocks and the same weights dequantized to fp32 give the same greedy tokens;
// their logits differ by the activation rounding only (int8 activations: relative error ~ 1/254 per matrix).
TEST(QuantGemv, EngineDecodesQ4_K_MInItsBlocks) {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 64;
  c.vocab_size = 512, c.max_seq_len = 64;
  const models::Model q = models::quantize_model(models::random_model(c, 8), models::QuantMix::kQ4_K_M);
  ASSERT_EQ(q.tensor("layers.0.wq").dtype, models::DType::kQ4_K);
  EngineOptions qo;
  qo.dtype = WType::kF32;
  qo.keep_quantized = true;
  EngineOptions fo = qo;
  fo.keep_quantized = false;
  Engine eq(q, qo), ef(dequantized(q), fo);
  EXPECT_LT(eq.weight_bytes(), ef.weight_bytes() / 5);  // 4.5-6.6 bits per weight instead of 32
  // Each of the ~8 matrices on the path adds int8 rounding of its input (rms ~ d_a / sqrt(12) = amax / 440):
  // a few percent of relative rms at most over two layers.
  EXPECT_LT(greedy_decode_rel(eq, ef, 1, 16), 0.05);
}

// Prefill (the int8 GEMM micro-kernel over all tokens) and decode (the GEMV per token) of the same Q4_K_M
// model: both use the same activation quantization and exact integer block products, so their logits differ
// by fp32 summation order, plus where a last-bit difference moves a later layer's activation across an int8
// rounding boundary (one step d_a of one value): within the int8-activation bound of the test above.
TEST(QuantGemv, PrefillMatchesDecodeOnQ4_K_M) {
  models::ModelConfig c = models::preset("stories15m");
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 64;
  c.vocab_size = 512, c.max_seq_len = 64;
  const models::Model q = models::quantize_model(models::random_model(c, 9), models::QuantMix::kQ4_K_M);
  EngineOptions o;
  o.dtype = WType::kF32;
  o.keep_quantized = true;
  Engine ep(q, o), ed(q, o);
  std::vector<int32_t> toks(19);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 37 + 5) % 512);
  std::vector<float> all;
  ep.prefill(toks, 0, &all);
  double max_rel = 0;
  for (size_t pos = 0; pos < toks.size(); ++pos) {
    const float* ld = ed.decode(toks[pos], static_cast<int64_t>(pos));
    const float* lp = all.data() + pos * static_cast<size_t>(c.vocab_size);
    double num = 0, den = 0;
    for (int64_t v = 0; v < c.vocab_size; ++v) num += (lp[v] - ld[v]) * (lp[v] - ld[v]), den += ld[v] * ld[v];
    max_rel = std::max(max_rel, std::sqrt(num / den));
    ASSERT_EQ(std::max_element(lp, lp + c.vocab_size) - lp, std::max_element(ld, ld + c.vocab_size) - ld) << pos;
  }
  EXPECT_LT(max_rel, 0.05);
}

// Every row of the type table is a WType and back; fp32 / fp16 are no block type, and asking for their block
// type is an error naming the type (it was Q8_0's, silently).
TEST(QuantGemv, WeightTypesConvertThroughTheTable) {
  for (const quant::TypeTraits& r : quant::kTypes) {
    const WType t = quant::wtype_of(r.type);
    EXPECT_TRUE(is_quantized(t)) << r.name;
    EXPECT_EQ(block_type(t), r.type) << r.name;
    EXPECT_STREQ(quant::wtype_name(t), r.name);
  }
  for (WType t : {WType::kF32, WType::kF16}) {
    EXPECT_FALSE(is_quantized(t));
    try {
      block_type(t);
      ADD_FAILURE() << "block_type(" << quant::wtype_name(t) << ") returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(quant::wtype_name(t)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace anelab::infer

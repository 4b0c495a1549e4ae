// The nn functions of a transformer as MIL compositions (see nn.h).
#include "framework/kernels/nn.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "framework/core/error.h"
#include "framework/kernels/cpu_ops.h"
#include "framework/kernels/w8.h"
#include "framework/mil/blob.h"
#include "framework/quant/blocks.h"
#include "framework/quant/mat.h"
#include "framework/quant/palette.h"
#include "framework/quant/qdot.h"
#include "framework/runtime/device_profile.h"

namespace anelab::kern {

using mil::DType;
using mil::Shape;

mil::TensorType act_type(int64_t channels, int64_t seq, DType dt) {
  return mil::tensor_type(dt, {1, channels, 1, seq});
}

// ---- BlobSet --------------------------------------------------------------------------------------

Value BlobSet::tensor(FunctionBuilder& b, const std::string& stem, const mil::TensorType& t,
                      std::span<const float> values) {
  ANELAB_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "kernels", "blob '", stem, "': ", values.size(),
               " values for ", t.str());
  const std::string path = "@model_path/weights/" + stem + ".bin";
  auto key = std::make_pair(static_cast<const FunctionBuilder*>(&b), stem);
  if (auto it = made_.find(key); it != made_.end()) {
    ANELAB_CHECK(it->second.type == t, "kernels", "blob '", stem, "' added twice with types ", it->second.type.str(),
                 " and ", t.str());
    return it->second;
  }
  mil::BlobWriter w;
  const uint64_t off = w.add_fp16(values);
  add_file(stem, path, w.take());
  Value v = b.named(stem).const_blob(t, path, off);
  made_[key] = v;
  return v;
}

Value BlobSet::matrix(FunctionBuilder& b, const std::string& stem, std::span<const float> w, int64_t out, int64_t in,
                      bool transposed) {
  ANELAB_CHECK(static_cast<int64_t>(w.size()) == out * in, "kernels", "matrix '", stem, "': ", w.size(),
               " values for [", out, ", ", in, "]");
  if (!transposed) return tensor(b, stem, mil::tensor_type(DType::kFp16, {out, in, 1, 1}), w);
  std::vector<float> t(w.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t[static_cast<size_t>(i * out + o)] = w[static_cast<size_t>(o * in + i)];
  return tensor(b, stem, mil::tensor_type(DType::kFp16, {in, out, 1, 1}), t);
}

Value BlobSet::int8_matrix(FunctionBuilder& b, const std::string& stem, const W8Matrix& m) {
  ANELAB_CHECK(static_cast<int64_t>(m.q.size()) == m.rows * m.cols && static_cast<int64_t>(m.scale.size()) == m.rows,
               "kernels", "int8 matrix '", stem, "': ", m.q.size(), " values and ", m.scale.size(), " scales for [",
               m.rows, ", ", m.cols, "]");
  const std::string path = "@model_path/weights/" + stem + ".bin";
  const mil::TensorType qt = mil::tensor_type(DType::kInt8, {m.rows, m.cols, 1, 1});
  auto key = std::make_pair(static_cast<const FunctionBuilder*>(&b), stem);
  ANELAB_CHECK(!made_.count(key), "kernels", "int8 matrix '", stem, "' added twice");
  mil::BlobWriter w;
  const uint64_t off = w.add_int8(m.q);
  add_file(stem, path, w.take());
  std::vector<double> scale(m.scale.begin(), m.scale.end());  // [out] fp16 values, along axis 0
  Value v = b.named(stem).constexpr_affine_dequantize(
      mil::ConstValue::blobfile(qt, path, off),
      mil::ConstValue::floats(mil::tensor_type(DType::kFp16, {m.rows}), std::move(scale)), mil::ConstValue::int8(0), 0);
  made_[key] = v;
  return v;
}

namespace {

// Row r of m as blocks of type t (cols / 32 of them): the matrix's own blocks when it is of type t (a row held in a
// row tile copied out of it), else its values quantized to t (quant::quantize, ggml's reference quantizer).
const uint8_t* row_as_blocks(const quant::Mat& m, int64_t r, quant::BlockType t, std::vector<uint8_t>& scratch,
                             std::vector<float>& values) {
  const auto own = quant::block_type_of(m.type);
  if (own == t && r >= m.tiled_rows) return m.row_blocks(r);
  scratch.resize(static_cast<size_t>(m.cols / 32 * quant::traits(t).block_bytes));
  if (own == t) {
    quant::tile_row(t, m.tile(r / quant::kTileRows), m.cols, static_cast<int>(r % quant::kTileRows), scratch.data());
    return scratch.data();
  }
  values.resize(static_cast<size_t>(m.cols));
  m.row_values(r, values.data());
  quant::quantize(t, values.data(), scratch.data(), m.cols);
  return scratch.data();
}

}  // namespace

namespace {
// The 32-wide blocks of every row of m as Block (row_as_blocks: other types quantized to it): each block's fp16
// scale into d [R, C/32] and its 32 values, unpacked by unpack(block, q + r*C + g*32), into q [R, C].
template <class Block, class Q, class Unpack>
void split_blocks(const quant::Mat& m, quant::BlockType t, Q* q, half_bits* d, Unpack unpack) {
  const int64_t C = m.cols, G = C / 32;
  std::vector<uint8_t> scratch;
  std::vector<float> values;
  for (int64_t r = 0; r < m.rows; ++r) {
    const uint8_t* blocks = row_as_blocks(m, r, t, scratch, values);
    for (int64_t g = 0; g < G; ++g) {
      Block blk;
      std::memcpy(&blk, blocks + g * static_cast<int64_t>(sizeof blk), sizeof blk);
      d[r * G + g] = blk.d;
      unpack(blk, q + r * C + g * 32);
    }
  }
}
}  // namespace

Value BlobSet::q4_matrix(FunctionBuilder& b, const std::string& stem, const quant::Mat& m) {
  const int64_t R = m.rows, C = m.cols, G = C / 32;
  ANELAB_CHECK(C % 32 == 0, "kernels", "q4 matrix '", stem, "' [", R, ", ", C, "]: ", C,
               " input channels are not a multiple of 32 (the blocks of Q4_0)");
  auto key = std::make_pair(static_cast<const FunctionBuilder*>(&b), stem);
  ANELAB_CHECK(!made_.count(key), "kernels", "q4 matrix '", stem, "' added twice");
  std::vector<uint8_t> q(static_cast<size_t>(R * C));    // [R, C] nibbles
  std::vector<half_bits> d(static_cast<size_t>(R * G));  // [R, G] block scales
  split_blocks<quant::BlockQ4_0>(m, quant::BlockType::kQ4_0, q.data(), d.data(),
                                 [](const quant::BlockQ4_0& blk, uint8_t* qr) {
                                   for (int j = 0; j < 16; ++j)
                                     qr[j] = blk.qs[j] & 15, qr[16 + j] = static_cast<uint8_t>(blk.qs[j] >> 4);
                                 });
  const std::string path = "@model_path/weights/" + stem + ".bin";
  mil::BlobWriter w;
  const uint64_t q_off = w.add_uint4(q);
  const uint64_t d_off = w.add_fp16_bits(d);
  const uint64_t o_off = w.add_uint4(std::vector<uint8_t>(static_cast<size_t>(R * G), 8));
  add_file(stem, path, w.take());
  const mil::Shape blocks_shape = {R, G, 1, 1};
  Value v = b.named(stem).constexpr_blockwise_shift_scale(
      mil::ConstValue::blobfile(mil::tensor_type(DType::kUint4, {R, C, 1, 1}), path, q_off),
      mil::ConstValue::blobfile(mil::tensor_type(DType::kFp16, blocks_shape), path, d_off),
      mil::ConstValue::blobfile(mil::tensor_type(DType::kUint4, blocks_shape), path, o_off));
  made_[key] = v;
  return v;
}

Value BlobSet::q8_matrix(FunctionBuilder& b, const std::string& stem, const quant::Mat& m) {
  const int64_t R = m.rows, C = m.cols, G = C / 32;
  ANELAB_CHECK(C % 32 == 0, "kernels", "q8 matrix '", stem, "' [", R, ", ", C, "]: ", C,
               " input channels are not a multiple of 32 (the blocks of Q8_0)");
  auto key = std::make_pair(static_cast<const FunctionBuilder*>(&b), stem);
  ANELAB_CHECK(!made_.count(key), "kernels", "q8 matrix '", stem, "' added twice");
  std::vector<int8_t> q(static_cast<size_t>(R * C));     // [R, C] int8
  std::vector<half_bits> d(static_cast<size_t>(R * G));  // [R, G] block scales
  split_blocks<quant::BlockQ8_0>(m, quant::BlockType::kQ8_0, q.data(), d.data(),
                                 [](const quant::BlockQ8_0& blk, int8_t* qr) { std::memcpy(qr, blk.qs, 32); });
  const std::string path = "@model_path/weights/" + stem + ".bin";
  mil::BlobWriter w;
  const uint64_t q_off = w.add_int8(q);
  const uint64_t d_off = w.add_fp16_bits(d);
  add_file(stem, path, w.take());
  Value v = b.named(stem).constexpr_blockwise_shift_scale(
      mil::ConstValue::blobfile(mil::tensor_type(DType::kInt8, {R, C, 1, 1}), path, q_off),
      mil::ConstValue::blobfile(mil::tensor_type(DType::kFp16, {R, G, 1, 1}), path, d_off));
  made_[key] = v;
  return v;
}

Value BlobSet::lut_matrix(FunctionBuilder& b, const std::string& stem, const quant::Palette& p) {
  quant::check_palette(p, stem);
  auto key = std::make_pair(static_cast<const FunctionBuilder*>(&b), stem);
  ANELAB_CHECK(!made_.count(key), "kernels", "lut matrix '", stem, "' added twice");
  const std::string path = "@model_path/weights/" + stem + ".bin";
  mil::BlobWriter w;
  const uint64_t ix_off = p.bits == 4 ? w.add_uint4(p.indices) : w.add_uint6(p.indices);
  const uint64_t lut_off = w.add_fp16_bits(p.lut);
  add_file(stem, path, w.take());
  Value v = b.named(stem).constexpr_lut_to_dense(
      mil::ConstValue::blobfile(mil::tensor_type(p.bits == 4 ? DType::kUint4 : DType::kUint6, {p.rows, p.cols, 1, 1}),
                                path, ix_off),
      mil::ConstValue::blobfile(mil::tensor_type(DType::kFp16, {p.tables(), 1, 1, 1, p.entries(), 1}), path, lut_off));
  made_[key] = v;
  return v;
}

void BlobSet::add_file(const std::string& stem, const std::string& path, std::vector<uint8_t> bytes) {
  auto blob = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  if (auto it = weights_.find(path); it != weights_.end())
    ANELAB_CHECK(*it->second == *blob, "kernels", "blob '", stem, "' added twice with different contents");
  else
    weights_[path] = blob;
}

Value BlobSet::vector(FunctionBuilder& b, const std::string& stem, std::span<const float> v) {
  return tensor(b, stem, mil::tensor_type(DType::kFp16, {1, static_cast<int64_t>(v.size()), 1, 1}), v);
}

// ---- tables ---------------------------------------------------------------------------------------

std::vector<float> causal_mask(int64_t seq, int64_t window) {
  std::vector<float> m(static_cast<size_t>(seq * seq), 0.0f);
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j)
      if (j > i || (window > 0 && i - j >= window)) m[static_cast<size_t>(i * seq + j)] = -65504.0f;
  return m;
}

RopeTables rope_tables(int64_t seq, int64_t hd, double theta, RopeStyle style, int64_t pos0, const RopeScaling& scaling,
                       double linear) {
  ANELAB_CHECK(hd > 0 && hd % 2 == 0, "kernels", "rope: head_dim ", hd, " must be even");
  const int64_t half = hd / 2;
  std::vector<float> ch(static_cast<size_t>(seq * half)), sh(ch.size());  // [S, HD/2]
  cpu::rope_half_tables(seq, hd, theta, pos0, cpu::Numerics::kReference, ch.data(), sh.data(), scaling, linear);
  RopeTables t;
  t.cos.resize(static_cast<size_t>(seq * hd));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const int64_t bb = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
      const size_t k = static_cast<size_t>(p * half + i);
      t.cos[static_cast<size_t>(p * hd + a)] = t.cos[static_cast<size_t>(p * hd + bb)] = ch[k];
      t.sin[static_cast<size_t>(p * hd + a)] = t.sin[static_cast<size_t>(p * hd + bb)] = sh[k];
    }
  return t;
}

// ---- norms ----------------------------------------------------------------------------------------

Value rms_rrms(FunctionBuilder& b, const Value& x, double eps) {
  ANELAB_CHECK(x.rank() == 4, "kernels", "rms_norm: x ", mil::shape_str(x.shape()), " is not [1, D, 1, S]");
  // mean(x^2) as the sum of (x / sqrt(D))^2: the fp16 sum of x^2 itself passes 65504 once the stream's RMS passes
  // sqrt(65504 / D) (16 at D = 256, common in trained models), and inf here zeroes the norm's output.
  Value xs = b.mul(x, 1.0 / std::sqrt(static_cast<double>(x.dim(1))));
  Value ms = b.reduce_sum(b.mul(xs, xs), {1}, true);
  return b.pow(b.add(ms, eps), -0.5);
}

Value rms_norm(FunctionBuilder& b, const Value& x, const Value& w, double eps) {
  return b.mul(b.mul(x, rms_rrms(b, x, eps)), w);
}

Value layer_norm(FunctionBuilder& b, const Value& x, const Value& gamma, const std::optional<Value>& beta, double eps) {
  const double inv_d = 1.0 / static_cast<double>(x.dim(1));
  Value mean = b.mul(b.reduce_sum(x, {1}, true), inv_d);
  Value xc = b.sub(x, mean);
  Value xcs = b.mul(xc, std::sqrt(inv_d));  // the variance as a sum of (xc / sqrt(D))^2: no fp16 overflow (rms_rrms)
  Value var = b.reduce_sum(b.mul(xcs, xcs), {1}, true);
  Value y = b.mul(b.mul(xc, b.pow(b.add(var, eps), -0.5)), gamma);
  return beta ? b.add(y, *beta) : y;
}

// ---- linear ---------------------------------------------------------------------------------------

Value linear(FunctionBuilder& b, const Value& x, const Value& w, const std::optional<Value>& bias) {
  Value y = b.conv(x, w);
  return bias ? b.add(y, *bias) : y;
}

Value linear_runtime_t(FunctionBuilder& b, const Value& x, const Value& a) {
  const int64_t ic = x.dim(1), s = x.dim(3), oc = a.dim(3);
  ANELAB_CHECK(a.dim(1) == ic, "kernels", "linear_runtime_t: matrix ", mil::shape_str(a.shape()), " has ", a.dim(1),
               " rows, x ", mil::shape_str(x.shape()), " has ", ic, " channels");
  Value y = b.matmul(b.reshape(a, {1, 1, ic, oc}), b.reshape(x, {1, 1, ic, s}), true, false);
  return b.reshape(y, {1, oc, 1, s});
}

Value linear_runtime(FunctionBuilder& b, const Value& x, const Value& m) {
  const int64_t ic = x.dim(1), s = x.dim(3), oc = m.dim(1);
  ANELAB_CHECK(m.dim(3) == ic, "kernels", "linear_runtime: matrix ", mil::shape_str(m.shape()), " has ", m.dim(3),
               " columns, x ", mil::shape_str(x.shape()), " has ", ic, " channels");
  Value y = b.matmul(b.reshape(m, {1, 1, oc, ic}), b.reshape(x, {1, 1, ic, s}), false, false);
  return b.reshape(y, {1, oc, 1, s});
}

// ---- activations ----------------------------------------------------------------------------------

Value silu(FunctionBuilder& b, const Value& x) { return b.mul(x, b.sigmoid(x)); }

Value gelu_tanh(FunctionBuilder& b, const Value& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Value inner = b.mul(x, b.add(b.mul(b.mul(x, x), 0.044715), 1.0));
  Value t = b.tanh(b.mul(inner, k));
  return b.mul(b.mul(x, 0.5), b.add(t, 1.0));
}

// ---- heads ----------------------------------------------------------------------------------------

Value split_heads(FunctionBuilder& b, const Value& x, int64_t heads) {
  const int64_t c = x.dim(1), s = x.dim(3);
  ANELAB_CHECK(x.rank() == 4 && x.dim(2) == 1 && heads > 0 && c % heads == 0, "kernels", "split_heads: x ",
               mil::shape_str(x.shape()), " cannot be split into ", heads, " heads");
  return b.transpose(b.reshape(x, {1, heads, c / heads, s}), {0, 1, 3, 2});
}

Value merge_heads(FunctionBuilder& b, const Value& x) {
  const int64_t h = x.dim(1), s = x.dim(2), hd = x.dim(3);
  return b.reshape(b.transpose(x, {0, 1, 3, 2}), {1, h * hd, 1, s});
}

// ---- RoPE -----------------------------------------------------------------------------------------

Value rope(FunctionBuilder& b, const Value& x, const Value& cos, const Value& sin, RopeStyle style) {
  const int64_t h = x.dim(1), s = x.dim(2), hd = x.dim(3);
  ANELAB_CHECK(hd % 2 == 0, "kernels", "rope: head_dim ", hd, " is odd");
  Value rot;
  if (style == RopeStyle::kAdjacentPairs) {
    // pairs (x[2i], x[2i+1]) as [1, H, S*HD/2, 2], or [H, S, HD/2, 2] when S*HD/2 would pass the cap
    const bool flat = s * hd / 2 <= rt::max_dim_all_profiles();
    const std::vector<int64_t> ps =
        flat ? std::vector<int64_t>{1, h, s * hd / 2, 2} : std::vector<int64_t>{h, s, hd / 2, 2};
    Value p = b.reshape(x, ps);
    std::vector<int64_t> half = ps;
    half[3] = 1;
    Value even = b.slice_by_size(p, {0, 0, 0, 0}, half);
    Value odd = b.slice_by_size(p, {0, 0, 0, 1}, half);
    rot = b.reshape(b.concat({b.mul(odd, -1.0), even}, 3), {1, h, s, hd});
  } else {
    Value x1 = b.slice_by_size(x, {0, 0, 0, 0}, {1, h, s, hd / 2});
    Value x2 = b.slice_by_size(x, {0, 0, 0, hd / 2}, {1, h, s, hd / 2});
    rot = b.concat({b.mul(x2, -1.0), x1}, 3);
  }
  return b.add(b.mul(x, cos), b.mul(rot, sin));
}

// ---- GQA ------------------------------------------------------------------------------------------

namespace {
// Reshapes keep every dimension within the device's cap (65536 taken as exclusive, device_profile.h).
int64_t max_dim() { return rt::max_dim_all_profiles(); }
}  // namespace

Value gqa_expand(FunctionBuilder& b, const Value& kv, int64_t n_rep) {
  if (n_rep == 1) return kv;
  const int64_t kvh = kv.dim(1), s = kv.dim(2), hd = kv.dim(3);
  std::vector<Value> copies;
  Value rep;
  if (s * hd <= max_dim()) {  // [1, KVH, 1, S*HD] x n_rep on axis 2 -> [1, KVH, n_rep, S*HD]
    Value flat = b.reshape(kv, {1, kvh, 1, s * hd});
    copies.assign(static_cast<size_t>(n_rep), flat);
    rep = b.concat(copies, 2);
  } else {  // keep every dim small: [KVH, 1, S, HD] x n_rep on axis 1
    Value bat = b.reshape(kv, {kvh, 1, s, hd});
    copies.assign(static_cast<size_t>(n_rep), bat);
    rep = b.concat(copies, 1);
  }
  return b.reshape(rep, {1, kvh * n_rep, s, hd});
}

Value gqa_reduce(FunctionBuilder& b, const Value& g, int64_t n_rep) {
  if (n_rep == 1) return g;
  const int64_t h = g.dim(1), s = g.dim(2), hd = g.dim(3);
  ANELAB_CHECK(h % n_rep == 0, "kernels", "gqa_reduce: ", h, " heads not divisible by n_rep ", n_rep);
  Value r;
  if (s * hd <= max_dim())
    r = b.reduce_sum(b.reshape(g, {1, h / n_rep, n_rep, s * hd}), {2}, true);
  else
    r = b.reduce_sum(b.reshape(g, {h / n_rep, n_rep, s, hd}), {1}, true);
  return b.reshape(r, {1, h / n_rep, s, hd});
}

// ---- attention ------------------------------------------------------------------------------------

Value attention_probs(FunctionBuilder& b, const Value& q, const Value& k, const Value& mask, double scale) {
  ANELAB_CHECK(q.shape() == k.shape(), "kernels", "attention: q ", mil::shape_str(q.shape()), " and k ",
               mil::shape_str(k.shape()), " differ (expand GQA kv heads first)");
  Value sc = b.mul(b.matmul(q, k, false, true), scale);
  return b.softmax(b.add(sc, mask), -1);
}

Value causal_attention(FunctionBuilder& b, const Value& q, const Value& k, const Value& v, const Value& mask,
                       double scale) {
  return b.matmul(attention_probs(b, q, k, mask, scale), v);
}

}  // namespace anelab::kern

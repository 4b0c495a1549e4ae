#include "framework/kernels/workloads.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "framework/core/fp16.h"
#include "framework/kernels/nn.h"
#include "framework/kernels/w8.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/quant/palette.h"

namespace anelab::kern {

std::vector<float> random_normal(size_t n, uint32_t seed, float sd, float mean) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

Workload conv1x1_workload(int64_t cin, int64_t cout, int64_t seq) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  auto x = b.input("x", act_type(cin, seq));
  const auto w = random_normal(static_cast<size_t>(cin * cout), 7, 1.0f / std::sqrt(float(cin)));
  b.output(b.conv(x, blobs.tensor(b, "w", mil::tensor_type(mil::DType::kFp16, {cout, cin, 1, 1}), w)));
  return {"conv", pb.build(), blobs.weights(), 2.0 * double(cin) * double(cout) * double(seq)};
}

Workload conv1x1_int8_workload(int64_t cin, int64_t cout, int64_t seq, bool w8a8) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  auto x = b.input("x", act_type(cin, seq));
  const auto w = random_normal(static_cast<size_t>(cin * cout), 7, 1.0f / std::sqrt(float(cin)));
  auto xi = w8a8 ? quant_dequant(b, x, 1.0f / 16) : x;
  b.output(b.conv(xi, blobs.int8_matrix(b, "w", quantize_w8(w, cout, cin))));
  return {w8a8 ? "conv_w8a8" : "conv_w8", pb.build(), blobs.weights(), 2.0 * double(cin) * double(cout) * double(seq)};
}

Workload conv1x1_4bit_workload(int64_t cin, int64_t cout, int64_t seq, FourBitForm form) {
  ANELAB_CHECK(cin % 32 == 0, "kernels", "4-bit conv: cin ", cin, " is not a multiple of the 32-channel block");
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  auto x = b.input("x", act_type(cin, seq));
  const auto w = random_normal(static_cast<size_t>(cin * cout), 7, 1.0f / std::sqrt(float(cin)));
  const int64_t group = form == FourBitForm::kBlock32 ? 32 : cin;  // inputs sharing one scale / LUT
  const int64_t groups = cin / group;
  std::vector<uint8_t> q(w.size());
  std::vector<double> par;  // fp16 scales [cout, groups] or LUTs [cout, 16]
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t g = 0; g < groups; ++g) {
      const float* row = w.data() + o * cin + g * group;
      float lo = row[0], hi = row[0], amax = 0;
      for (int64_t i = 0; i < group; ++i)
        lo = std::min(lo, row[i]), hi = std::max(hi, row[i]), amax = std::max(amax, std::fabs(row[i]));
      uint8_t* qr = q.data() + o * cin + g * group;
      if (form == FourBitForm::kLut4) {
        const double step = (double(hi) - lo) / 15;
        for (int k = 0; k < 16; ++k) par.push_back(double(round_fp16(static_cast<float>(lo + step * k))));
        const double* lut = par.data() + par.size() - 16;
        for (int64_t i = 0; i < group; ++i) {
          int best = 0;
          for (int k = 1; k < 16; ++k)
            if (std::fabs(lut[k] - row[i]) < std::fabs(lut[best] - row[i])) best = k;
          qr[i] = static_cast<uint8_t>(best);
        }
      } else {
        const float scale = round_fp16(amax > 0 ? amax / 7 : 1.0f);
        par.push_back(scale);
        for (int64_t i = 0; i < group; ++i)
          qr[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(row[i] / scale) + 8.0f, 0.0f, 15.0f));
      }
    }
  const std::string path = "@model_path/weights/w4.bin";
  mil::BlobWriter bw;
  const auto data =
      mil::ConstValue::blobfile(mil::tensor_type(mil::DType::kUint4, {cout, cin, 1, 1}), path, bw.add_uint4(q));
  const auto u4 = [](mil::Shape s, int64_t v) {
    return mil::ConstValue{mil::tensor_type(mil::DType::kUint4, s),
                           {},
                           std::vector<int64_t>(size_t(mil::TensorType{mil::DType::kUint4, s}.numel()), v),
                           {},
                           {}};
  };
  mil::Value wv;
  const char* name = "conv_uint4";
  if (form == FourBitForm::kUint4) {
    wv = b.named("w").constexpr_affine_dequantize(
        data, mil::ConstValue::floats(mil::tensor_type(mil::DType::kFp16, {cout}), par),
        mil::ConstValue{mil::scalar_type(mil::DType::kUint4), {}, {8}, {}, {}}, 0);
  } else if (form == FourBitForm::kBlock32) {
    name = "conv_q4_block32";
    wv = b.named("w").constexpr_blockwise_shift_scale(
        data, mil::ConstValue::floats(mil::tensor_type(mil::DType::kFp16, {cout, groups, 1, 1}), par),
        u4({cout, groups, 1, 1}, 8));
  } else {
    name = "conv_lut4";
    wv = b.named("w").constexpr_lut_to_dense(
        data, mil::ConstValue::floats(mil::tensor_type(mil::DType::kFp16, {cout, 1, 1, 1, 16, 1}), par));
  }
  b.output(b.conv(x, wv));
  rt::Weights weights;
  weights[path] = std::make_shared<const std::vector<uint8_t>>(bw.take());
  return {name, pb.build(), weights, 2.0 * double(cin) * double(cout) * double(seq)};
}

Workload conv1x1_lut6_workload(int64_t cin, int64_t cout, int64_t seq) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  auto x = b.input("x", act_type(cin, seq));
  const auto w = random_normal(static_cast<size_t>(cin * cout), 7, 1.0f / std::sqrt(float(cin)));
  b.output(b.conv(x, blobs.lut_matrix(b, "w", quant::palettize(w, cout, cin, 6, 1))));
  return {"conv_lut6", pb.build(), blobs.weights(), 2.0 * double(cin) * double(cout) * double(seq)};
}

Workload attention_core_workload(int64_t heads, int64_t seq, int64_t head_dim) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  const auto t = mil::tensor_type(mil::DType::kFp16, {1, heads, seq, head_dim});
  auto q = b.input("q", t), k = b.input("k", t), v = b.input("v", t);
  auto mask = blobs.tensor(b, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, seq, seq}), causal_mask(seq));
  b.output(causal_attention(b, q, k, v, mask, 1.0 / std::sqrt(double(head_dim))));
  const double S = double(seq);
  return {"attention_core", pb.build(), blobs.weights(), 2.0 * 2.0 * double(heads) * S * S * double(head_dim)};
}

Workload attention_block_workload(int64_t dim, int64_t heads, int64_t seq) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  auto x = b.input("x", act_type(dim, seq));
  const float sd = 1.0f / std::sqrt(float(dim));
  auto proj = [&](const char* stem, uint32_t seed, const mil::Value& in) {
    const auto m = random_normal(static_cast<size_t>(dim * dim), seed, sd);
    return linear(b, in, blobs.matrix(b, stem, m, dim, dim));
  };
  auto q = split_heads(b, proj("wq", 11, x), heads);
  auto k = split_heads(b, proj("wk", 12, x), heads);
  auto v = split_heads(b, proj("wv", 13, x), heads);
  auto mask = blobs.tensor(b, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, seq, seq}), causal_mask(seq));
  auto a = causal_attention(b, q, k, v, mask, 1.0 / std::sqrt(double(dim / heads)));
  b.output(proj("wo", 14, merge_heads(b, a)));
  const double D = double(dim), S = double(seq);
  return {"attention", pb.build(), blobs.weights(), 4 * 2.0 * D * D * S + 2 * 2.0 * S * S * D};
}

Workload dispatch_workload() {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  const int64_t w = rt::dense_width_multiple(mil::DType::kFp16);  // the narrowest dense rows
  b.output(b.identity(b.input("x", act_type(32, w))));
  return {"dispatch", pb.build(), {}, 0};
}

RandomLayer::RandomLayer(const TrainShape& s, uint32_t seed) {
  const int64_t d = s.dim, qd = s.q_dim(), kvd = s.kv_dim(), h = s.hidden;
  auto mat = [&](int64_t rows, int64_t fan_in, uint32_t k) {
    return random_normal(static_cast<size_t>(rows * fan_in), seed * 16 + k, 1.0f / std::sqrt(float(fan_in)));
  };
  wq = mat(qd, d, 1), wk = mat(kvd, d, 2), wv = mat(kvd, d, 3), wo = mat(d, qd, 4);
  w1 = mat(h, d, 5), w3 = mat(h, d, 6), w2 = mat(d, h, 7);
  rms_att = random_normal(static_cast<size_t>(d), seed * 16 + 8, 0.1f, 1.0f);
  rms_ffn = random_normal(static_cast<size_t>(d), seed * 16 + 9, 0.1f, 1.0f);
  w = train_weights(s, wq, wk, wv, wo, w1, w3, w2, rms_att, rms_ffn);
}

TrainShape probe_layer_shape() {
  TrainShape s;
  s.dim = 256, s.hidden = 768, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64, s.seq = 64;
  return s;
}

Workload conv_chain_workload(int64_t channels, int64_t seq, int n) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSet blobs;
  mil::Value y = b.input("x", act_type(channels, seq));
  const auto wt = mil::tensor_type(mil::DType::kFp16, {channels, channels, 1, 1});
  for (int i = 0; i < n; ++i) {
    const auto w = random_normal(static_cast<size_t>(channels * channels), 100 + static_cast<uint32_t>(i),
                                 1.0f / std::sqrt(float(channels)));
    y = b.conv(y, blobs.tensor(b, "w" + std::to_string(i), wt, w));
  }
  b.output(y);
  return {"conv_chain", pb.build(), blobs.weights(),
          2.0 * double(n) * double(channels) * double(channels) * double(seq)};
}

double kernel_flops(KernelKind k, const TrainShape& s) {
  const double D = double(s.dim), H = double(s.hidden), S = double(s.seq);
  const double QD = double(s.q_dim()), KVD = double(s.kv_dim());
  switch (k) {
    case KernelKind::kAttnFwd:
      return 2 * S * D * (2 * QD + 2 * KVD) + 4 * S * S * QD;
    case KernelKind::kFfnFwd:
    case KernelKind::kFfnBwd:
      return 2 * S * 3 * D * H;
    case KernelKind::kWoBwd:
      return 2 * S * D * QD;
    case KernelKind::kSdpaBwd1:
      return 6 * S * S * QD;
    case KernelKind::kSdpaBwd2:
      return 4 * S * S * QD;
    case KernelKind::kQkvBwd:
      return 2 * S * D * (QD + 2 * KVD);
    default:
      return 0;
  }
}

std::vector<Workload> probe_workloads() {
  std::vector<Workload> v;
  v.push_back(conv1x1_workload(768, 2048, 256));
  v.push_back(conv1x1_int8_workload(768, 2048, 256, false));
  v.push_back(conv1x1_int8_workload(768, 2048, 256, true));
  v.push_back(attention_block_workload(768, 12, 256));
  v.push_back(dispatch_workload());
  v.push_back(conv_chain_workload(1024, 64, 2));  // the sram section's program (n up to 32: the same ops)
  const TrainShape s = probe_layer_shape();
  for (KernelKind kind : kAllKernelKinds) {
    KernelSpec k = build_kernel(kind, s, Strategy::kDynamic);
    v.push_back({"train_layer " + k.name, std::move(k.program), std::move(k.weights), kernel_flops(kind, s)});
  }
  return v;
}

void fill_random_inputs(std::vector<rt::Surface>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto v = random_normal(static_cast<size_t>(inputs[i].numel()), 1000 + static_cast<uint32_t>(i), 1.0f);
    inputs[i].write(v.data());
  }
}

}  // namespace anelab::kern

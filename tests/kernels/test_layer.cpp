// The one transformer-layer generator (framework/kernels/layer.h): the whole layer the inference prefill
// runs is the attention half and the FFN half the training forward kernels run, joined by the residual
// adds; taps come back in the order asked; a tap a block cannot give is named with the ones it can.
#include <gtest/gtest.h>

#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/kernels/layer.h"
#include "tests/kernels/train_fixture.h"

namespace anelab::test {
namespace {

// Static weights from the fixture's layer (as the prefill bakes them); the input is the function input x.
class BlobSource : public kern::LayerSource {
 public:
  BlobSource(mil::FunctionBuilder& b, const LayerData& L) : b_(b), L_(L), s_(L.shape) {
    x_ = b.input("x", kern::act_type(s_.dim, s_.seq));
  }
  mil::Value input(const std::string&) override { return x_; }
  mil::Value project(const std::string& w, const mil::Value& x) override {
    const quant::Mat& m = weights_.matrix(w);
    return kern::linear(b_, x, bs_.matrix(b_, w, {m.f32(), size_t(m.rows * m.cols)}, m.rows, m.cols));
  }
  mil::Value norm_weight(const std::string& n, const models::NormDesc&) override {
    return bs_.vector(b_, n, n == "attn_norm" ? L_.rms_att : L_.rms_ffn);
  }
  std::optional<mil::Value> norm_bias(const std::string&, const models::NormDesc&) override { return std::nullopt; }
  mil::Value mask(int64_t window) override {
    return bs_.tensor(b_, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, s_.seq, s_.seq}),
                      kern::causal_mask(s_.seq, window));
  }
  mil::Value rope_table(const std::string& which) override {
    const kern::RopeTables t = kern::rope_tables(s_.seq, s_.head_dim, s_.rope_theta, s_.rope);
    return bs_.tensor(b_, "rope_" + which, mil::tensor_type(mil::DType::kFp16, {1, 1, s_.seq, s_.head_dim}),
                      which == "cos" ? t.cos : t.sin);
  }
  const rt::Weights& weights() const { return bs_.weights(); }

 private:
  mil::FunctionBuilder& b_;
  const LayerData& L_;
  kern::TrainShape s_;
  kern::LayerWeights weights_ = L_.weights();
  kern::BlobSet bs_;
  mil::Value x_;
};

std::vector<std::string> names(const kern::Taps& t) {
  std::vector<std::string> n;
  for (const auto& [name, v] : t) n.push_back(name);
  return n;
}

void whole_layer_case(const kern::TrainShape& s) {
  const LayerData L = make_layer(s, 300);
  const int64_t D = s.dim, KVD = s.kv_dim(), S = s.seq;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSource p(b, L);
  const models::LayerDesc ld = kern::layer_steps(s);
  const kern::Taps t = kern::build_layer(b, {ld.steps[0], ld.steps[1]}, p, {"k_rope", "v"});
  ASSERT_EQ(names(t), (std::vector<std::string>{"out", "k_rope", "v"}));
  b.output(b.named("out").concat({t[0].second, t[1].second, t[2].second}, 1));
  const F32 got = eval_program(pb.build(mil::Dialect::kIos18), p.weights(), {L.x}).at(0);  // [D + 2 KVD, S]

  // out: the attention half (o: 48 roundings, test_train_kernels.cpp) then the FFN half on the fp16 x2 (y: 24 + 1);
  // |out| >= |x2| >= |o| through the residuals, so the sum of both limits bounds the whole layer.
  const F32 out(got.begin(), got.begin() + D * S);
  EXPECT_LT(nmse(out, L.fwd.out), fp16_nmse(48 + 25)) << s.str();

  // k_rope and v: the same ops on the same values as the training attn_fwd kernel, so the same bits.
  auto be = rt::create_backend("emulator");
  kern::KernelCache cache(*be, s, kern::Strategy::kStatic);
  kern::LayerRunner r(cache);
  r.set_weights(L.weights());
  kern::AttnTaps at;
  r.attn_forward(L.x.data(), at);
  EXPECT_EQ(F32(got.begin() + D * S, got.begin() + (D + KVD) * S), at.k_rope) << s.str();
  EXPECT_EQ(F32(got.begin() + (D + KVD) * S, got.end()), at.v) << s.str();
}

TEST(LayerBlock, WholeLayerIsTheTrainingHalvesJoinedByTheResiduals) {
  whole_layer_case(gqa_shape());
  whole_layer_case(mha_shape());
}

TEST(LayerBlock, TapsComeInTheOrderAskedAndUnknownOnesAreNamed) {
  const kern::TrainShape s = gqa_shape();
  const LayerData L = make_layer(s, 301);
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  BlobSource p(b, L);
  models::LayerDesc d = kern::layer_steps(s);
  EXPECT_EQ(names(kern::build_attention(b, d.steps[0], p, {"v", "xnorm", "o"})),
            (std::vector<std::string>{"v", "xnorm", "o"}));
  try {
    kern::build_attention(b, d.steps[0], p, {"qkv"});
    ADD_FAILURE() << "tap qkv accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown tap 'qkv' (known: o attn q_rope k_rope q k v xnorm)"),
              std::string::npos)
        << e.what();
  }
  d.steps[1].ffn.activation = Activation::kGeluTanh;  // a GELU MLP has no h3
  try {
    kern::build_ffn(b, d.steps[1], p, {"y", "h3"});
    ADD_FAILURE() << "tap h3 accepted for a GELU MLP";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown tap 'h3' (known: y h1 gate xnorm)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anelab::test

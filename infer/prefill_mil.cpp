#include "infer/prefill_mil.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/kernels/layer.h"
#include "framework/kernels/self_check.h"
#include "framework/kernels/w8.h"
#include "models/arch/arch.h"

namespace anelab::infer {

namespace {

using mil::Value;

// Layer `layer` of d as the MIL layer kernel takes it (kern::check_layer refuses what it lacks, naming the layer, the
// step and this executor).
kern::LayerSteps mil_layer(const models::ModelDesc& d, int64_t layer) {
  ANELAB_CHECK(layer >= 0 && layer < static_cast<int64_t>(d.layers.size()), "infer", "MIL prefill: layer ", layer,
               " of a model of ", d.layers.size(), " layers");
  return kern::check_layer(d.layers[static_cast<size_t>(layer)], layer, "infer", "the MIL prefill");
}

std::optional<Value> opt_vec(mil::FunctionBuilder& b, kern::BlobSet& bs, const std::string& stem,
                             std::span<const float> v) {
  if (v.empty()) return std::nullopt;
  return bs.vector(b, stem, v);
}

// The prefill's layer source: every weight a BLOBFILE const of the layer's kernel, named by the
// model's tensor (wq, wq_bias, attn_norm, attn_norm_b, ...); the input is the residual stream x. Weight
// matrices are fp16 consts, or int8 (W8 / W8A8, kern::quantize_w8) with W8A8's conv inputs through
// quantize/dequantize at the layer's calibrated scales (each input once, shared by its projections).
// With `record` set, each conv input is recorded once under its kern::act_input_of name (calibration).
class PrefillSource : public kern::LayerSource {
 public:
  PrefillSource(mil::FunctionBuilder& b, int64_t dim, const models::AttnDesc& a, const LayerWeights& L, int64_t S,
                int64_t layer, const KernelWeights& kw, mil::Dialect dialect, kern::Taps* record = nullptr)
      : b_(b),
        a_(a),
        L_(L),
        S_(S),
        layer_(layer),
        kw_(kw),
        dialect_(dialect),
        record_(record),
        x_(b.input("x", kern::act_type(dim, S))) {}
  Value input(const std::string&) override { return x_; }
  Value project(const std::string& w, const Value& x) override {
    const quant::Mat& m = L_.matrix(w);
    const std::string in = kern::act_input_of(w);
    if (record_ && recorded_.insert(in).second) record_->emplace_back(in, x);
    const rt::WeightPath path = kw_.ffn && (w == "w1" || w == "w2" || w == "w3") ? *kw_.ffn : kw_.path;
    if (path == rt::WeightPath::kLut4 || path == rt::WeightPath::kLut6)
      return kern::linear(b_, x, bs_.lut_matrix(b_, w, palette(w, path)), opt_vec(b_, bs_, w + "_bias", bias(w)));
    // q4: the file's Q4_0 bits (others quantized to Q4_0); a row that is not whole blocks of 32 stays fp16 (as
    // llama-quantize falls back for such rows).
    if (path == rt::WeightPath::kQ4 && m.cols % 32 == 0)
      return kern::linear(b_, x, bs_.q4_matrix(b_, w, m), opt_vec(b_, bs_, w + "_bias", bias(w)));
    // int8 of a Q8_0 matrix on an ios18 program: the file's own bits as blockwise int8 (block 32, fp16 d, no
    // offset); other types, and every type on ios16 (no constexpr_blockwise_shift_scale), per-channel int8 below.
    if (path == rt::WeightPath::kW8 && m.type == quant::WType::kQ8_0 && m.cols % 32 == 0 &&
        dialect_ != mil::Dialect::kIos16)
      return kern::linear(b_, x, bs_.q8_matrix(b_, w, m), opt_vec(b_, bs_, w + "_bias", bias(w)));
    const std::vector<float> v = kern::mat_values(m);
    if (path == rt::WeightPath::kFp16 || path == rt::WeightPath::kQ4)
      return kern::linear(b_, x, bs_.matrix(b_, w, v, m.rows, m.cols), opt_vec(b_, bs_, w + "_bias", bias(w)));
    Value wq = bs_.int8_matrix(b_, w, kern::quantize_w8(v, m.rows, m.cols));
    return kern::linear(b_, path == rt::WeightPath::kW8A8 ? act_input(in, x) : x, wq,
                        opt_vec(b_, bs_, w + "_bias", bias(w)));
  }
  Value norm_weight(const std::string& name, const models::NormDesc& n) override {  // (offset + w) already
    return bs_.vector(b_, name, L_.norm(n.weight));
  }
  std::optional<Value> norm_bias(const std::string& name, const models::NormDesc& n) override {
    return opt_vec(b_, bs_, name + "_b", L_.norm(n.bias));
  }
  Value mask(int64_t window) override {
    return bs_.tensor(b_, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, S_, S_}), kern::causal_mask(S_, window));
  }
  Value rope_table(const std::string& which) override {
    const int64_t rd = a_.rope.dims > 0 ? a_.rope.dims : a_.head_dim;  // the rotated dims (partial RoPE)
    if (!rope_)
      rope_ = kern::rope_tables(S_, rd, a_.rope.theta, rope_style(a_.rope), 0, a_.rope.scaling, a_.rope.linear_factor);
    return bs_.tensor(b_, "rope_" + which, mil::tensor_type(mil::DType::kFp16, {1, 1, S_, rd}),
                      which == "cos" ? rope_->cos : rope_->sin);
  }
  const rt::Weights& weights() const { return bs_.weights(); }
  kern::BlobSet& blobs() { return bs_; }  // the kernel's weights dictionary (the DeltaNet mixer's consts join it)

  static kern::RopeStyle rope_style(const models::RopeDesc& r) {  // kNone (no RoPE) never asks for a table
    return r.style == models::RopeStyle::kAdjacentPairs ? kern::RopeStyle::kAdjacentPairs
                                                        : kern::RopeStyle::kRotateHalf;
  }

 private:
  // x through quantize/dequantize at the calibrated scale of input `in` (emitted once per input).
  Value act_input(const std::string& in, const Value& x) {
    if (auto it = quantized_.find(in); it != quantized_.end()) return it->second;
    ANELAB_CHECK(kw_.act_scales && kw_.act_scales->count(in), "infer", "w8a8 kernel of layer ", layer_,
                 ": no calibrated scale for its input '", in, "'");
    return quantized_[in] = kern::quant_dequant(b_, x, kw_.act_scales->at(in));
  }
  // The model file's palette of matrix w with the path's bits; refused in one line when the file has none.
  const quant::Palette& palette(const std::string& w, rt::WeightPath path) const {
    const int bits = path == rt::WeightPath::kLut4 ? 4 : 6;
    const quant::Palette* p = L_.palette(w);
    ANELAB_CHECK(p && p->bits == bits, "infer", "--ane-weights ", rt::weight_path_name(path), ": layer ", layer_, "'s ",
                 w, " has ", p ? "a " + std::to_string(p->bits) + "-bit palette" : std::string("no palette"),
                 " in the model file; palettize it once with `anelab convert IN OUT --palettize ",
                 rt::weight_path_name(path), "`");
    return *p;
  }
  std::span<const float> bias(const std::string& w) const {
    if (w == "wq") return L_.bq;
    if (w == "wk") return L_.bk;
    if (w == "wv") return L_.bv;
    if (w == "wo") return L_.bo;
    if (w == "w1") return L_.b1;
    if (w == "w2") return L_.b2;
    return {};
  }
  mil::FunctionBuilder& b_;
  const models::AttnDesc& a_;  // the layer's attention (its RoPE tables)
  const LayerWeights& L_;
  int64_t S_;
  int64_t layer_;
  const KernelWeights& kw_;
  mil::Dialect dialect_;  // of the program (ios16 has no blockwise int8)
  kern::Taps* record_;
  std::set<std::string> recorded_;
  std::map<std::string, Value> quantized_;  // W8A8 conv inputs by act_input_of name
  kern::BlobSet bs_;
  Value x_;
  std::optional<kern::RopeTables> rope_;
};

// A LayerSource whose input is `x` (a value of the kernel), everything else from `base`: the FFN step of a DeltaNet
// layer kernel reads the residual stream after the mixer.
class InputOf : public kern::LayerSource {
 public:
  InputOf(kern::LayerSource& base, Value x) : base_(base), x_(std::move(x)) {}
  Value input(const std::string&) override { return x_; }
  Value project(const std::string& w, const Value& x) override { return base_.project(w, x); }
  Value norm_weight(const std::string& name, const models::NormDesc& n) override { return base_.norm_weight(name, n); }
  std::optional<Value> norm_bias(const std::string& name, const models::NormDesc& n) override {
    return base_.norm_bias(name, n);
  }
  Value mask(int64_t window) override { return base_.mask(window); }
  Value rope_table(const std::string& which) override { return base_.rope_table(which); }

 private:
  kern::LayerSource& base_;
  Value x_;
};

// Layer `layer` of d as the DeltaNet layer kernel takes it: a linear-attention step then an FFN step, each pre-normed,
// no post-norm on the mixer, residual scales 1 (models::unsupported names what else it meets).
struct DeltaLayerSteps {
  const models::Step& mixer;
  const models::Step& ffn;
};
DeltaLayerSteps deltanet_layer(const models::ModelDesc& d, int64_t layer) {
  ANELAB_CHECK(layer >= 0 && layer < static_cast<int64_t>(d.layers.size()), "infer", "MIL prefill: layer ", layer,
               " of a model of ", d.layers.size(), " layers");
  const auto& steps = d.layers[static_cast<size_t>(layer)].steps;
  const models::StepKind order[2] = {models::StepKind::kLinearAttention, models::StepKind::kFfn};
  for (size_t i = 0; i < steps.size(); ++i) {
    const models::Step& s = steps[i];
    auto refuse = [&](const std::string& what) {
      models::unsupported("infer", "the MIL prefill", layer, s.kind, what);
    };
    if (i >= 2 || s.kind != order[i])
      refuse(cat("step ", i, " of a linear-attention layer (the kernel is the DeltaNet mixer then ffn)"));
    if (!s.pre_norm) refuse("a step without a pre-norm");
    if (i == 0 && s.post_norm) refuse("a post-norm of the DeltaNet mixer");
    if (s.post_norm && !s.post_norm->bias.empty()) refuse("a post-norm with a bias");
    if (s.residual_scale != 1.0f) refuse(cat("residual scale ", s.residual_scale));
  }
  ANELAB_CHECK(steps.size() == 2, "infer", "layer ", layer, ": ", steps.size(),
               " steps are not supported by the MIL prefill (the DeltaNet mixer then ffn)");
  return {steps[0], steps[1]};
}

}  // namespace

bool is_deltanet_layer(const models::ModelDesc& d, int64_t layer) {
  const auto& steps = d.layers.at(static_cast<size_t>(layer)).steps;
  return !steps.empty() && steps[0].kind == models::StepKind::kLinearAttention;
}

LayerKernelSource build_deltanet_layer_kernel(const models::ModelDesc& md, const LayerWeights& L,
                                              const kern::DeltaNetWeights& W, int64_t S, mil::Dialect dialect,
                                              int64_t layer, const KernelWeights& kw) {
  const DeltaLayerSteps st = deltanet_layer(md, layer);
  const models::DeltaNetDesc& d = st.mixer.deltanet;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  Value valid = b.input("valid", kern::act_type(1, S));  // first: the smaller input (M1's ascending input sizes)
  static const models::AttnDesc kNoAttention;
  PrefillSource p(b, md.dim, kNoAttention, L, S, layer, kw, dialect);
  Value x = p.input("x");
  const models::NormDesc& pn = *st.mixer.pre_norm;
  Value nw = p.norm_weight("attn_norm", pn);
  std::optional<Value> nb = pn.kind == NormType::kLayer ? p.norm_bias("attn_norm", pn) : std::nullopt;
  Value xn = pn.kind == NormType::kRms ? kern::rms_norm(b, x, nw, pn.eps) : kern::layer_norm(b, x, nw, nb, pn.eps);
  const kern::DeltaNetTaps t = kern::build_deltanet(b, d, W, p.blobs(), xn, valid);
  Value x2 = b.add(x, t.out);
  InputOf fp(p, x2);
  const kern::Taps f = kern::build_ffn(b, st.ffn, fp, {"y"});
  Value out = b.add(x2, f[0].second);
  Value rows = kern::state_rows(b, t.state, S);
  b.output(b.named("out").concat({out, t.qkv, rows}, 1));
  LayerKernelSource src;
  src.program = pb.build(dialect);
  src.weights = p.weights();
  return src;
}

int64_t prefill_bucket(int64_t n, int64_t context) {
  const int64_t m = rt::dense_width_multiple(mil::DType::kFp16);  // whole device rows (row-stride rule)
  const int64_t cap = (context + m - 1) / m * m;
  int64_t s = m;
  while (s < n && s < cap) s *= 2;
  return std::min(s, cap);
}

LayerKernelSource build_layer_kernel(const PrefillHost& e, int64_t layer, int64_t S, const KernelWeights& kw) {
  if (is_deltanet_layer(e.desc(), layer))
    return build_deltanet_layer_kernel(e.desc(), e.layer(layer), e.deltanet(layer), S, e.backend_dialect(), layer, kw);
  return build_layer_kernel(e.desc(), e.layer(layer), S, e.backend_dialect(), layer, kw);
}

LayerKernelSource build_layer_kernel(const models::ModelConfig& c, const LayerWeights& L, int64_t S,
                                     mil::Dialect dialect, int64_t layer, const KernelWeights& kw) {
  return build_layer_kernel(models::describe_model(c), L, S, dialect, layer, kw);
}

LayerKernelSource build_layer_kernel(const models::ModelDesc& md, const LayerWeights& L, int64_t S,
                                     mil::Dialect dialect, int64_t layer, const KernelWeights& kw) {
  const kern::LayerSteps ml = mil_layer(md, layer);
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  PrefillSource p(b, md.dim, ml.attn.attn, L, S, layer, kw, dialect);
  const kern::Taps t = kern::build_layer(b, ml, p, {"k_rope", "v"});  // out, k_rope, v
  b.output(b.named("out").concat({t[0].second, t[1].second, t[2].second}, 1));
  LayerKernelSource src;
  src.program = pb.build(dialect);
  src.weights = p.weights();
  return src;
}

MatrixBytes matrix_bytes(const LayerKernelSource& src, const LayerWeights& L) {
  MatrixBytes m;
  for (const char* w : {"wq", "wk", "wv", "wo", "w1", "w2", "w3"}) {
    const auto it = src.weights.find(std::string("@model_path/weights/") + w + ".bin");
    if (it == src.weights.end()) continue;
    m.bytes += static_cast<int64_t>(it->second->size());
    m.weights += L.matrix(w).rows * L.matrix(w).cols;
  }
  return m;
}

namespace {

// The embeddings of tokens (positions 0..n-1) channel-major, zero-padded to S: [D, S].
std::vector<float> stage_embeddings(PrefillHost& e, std::span<const int32_t> tokens, int64_t S) {
  const int64_t n = static_cast<int64_t>(tokens.size()), D = e.config().dim;
  std::vector<float> xt(static_cast<size_t>(n * D)), xs(static_cast<size_t>(D * S), 0.0f);
  e.embed(tokens, 0, xt.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) xs[static_cast<size_t>(d * S + t)] = xt[static_cast<size_t>(t * D + d)];
  return xs;
}

// The fp16 layer kernel with its conv inputs recorded: out [1, D + sum C_in, 1, S] = [ x + attn + ffn ; inputs ].
struct CalibKernel {
  LayerKernelSource src;
  std::vector<std::pair<std::string, int64_t>> inputs;  // act_input_of name, channels (in output order)
};

CalibKernel build_calib_kernel(const PrefillHost& e, int64_t layer, int64_t S) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::Taps rec;
  const KernelWeights fp16;
  const kern::LayerSteps ml = mil_layer(e.desc(), layer);
  PrefillSource p(b, e.desc().dim, ml.attn.attn, e.layer(layer), S, layer, fp16, e.backend_dialect(), &rec);
  const kern::Taps t = kern::build_layer(b, ml, p, {});
  CalibKernel k;
  std::vector<Value> outs{t[0].second};
  for (const auto& [name, v] : rec) {
    k.inputs.emplace_back(name, v.dim(1));
    outs.push_back(v);
  }
  b.output(b.named("out").concat(outs, 1));
  k.src.program = pb.build(e.backend_dialect());
  k.src.weights = p.weights();
  return k;
}

}  // namespace

ActScales calibrate_act_scales(PrefillHost& e, std::span<const int32_t> tokens, rt::Backend& be) {
  const auto& c = e.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), D = c.dim;
  ANELAB_CHECK(n > 0 && n <= e.context(), "infer", "w8a8 calibration: ", n, " tokens for a context of ", e.context());
  const int64_t S = prefill_bucket(n, e.context());
  std::vector<float> xs = stage_embeddings(e, tokens, S);
  ActScales scales(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    CalibKernel k = build_calib_kernel(e, l, S);
    auto r = be.compile(k.src.program, k.src.weights);
    ANELAB_CHECK(r.is_ok(), "infer", "w8a8 calibration: compile of layer ", l, " failed: ", r.status().message());
    std::vector<rt::Surface> in = r.value()->make_inputs(0, be.profile()),
                             out = r.value()->make_outputs(0, be.profile());
    in[0].write(xs.data());
    rt::Surface* ip[1] = {&in[0]};
    rt::Surface* op[1] = {&out[0]};
    be.evaluate(*r.value(), 0, ip, op).throw_if_error();
    std::vector<float> o(static_cast<size_t>(out[0].type().numel()));
    out[0].read(o.data());
    int64_t ch = D;
    for (const auto& [name, C] : k.inputs) {  // max |x| over the real positions t < n
      float amax = 0.0f;
      for (int64_t j = ch; j < ch + C; ++j)
        for (int64_t t = 0; t < n; ++t) amax = std::max(amax, std::abs(o[static_cast<size_t>(j * S + t)]));
      scales[static_cast<size_t>(l)][name] = kern::act_scale(amax);
      ch += C;
    }
    std::copy(o.begin(), o.begin() + D * S, xs.begin());  // the residual stream feeds the next layer
  }
  return scales;
}

MilPrefill::MilPrefill(PrefillHost& e, const std::string& backend, const std::string& device,
                       const std::string& ane_weights, bool quiet)
    : e_(e), quiet_(quiet) {
  rt::BackendOptions bo;
  bo.device = device;
  bo.pool = &e.pool();  // one pool per engine: the emulator's kernels run on the engine's threads
  bo.compile_budget = e.options().compile_budget;
  backend_ = rt::create_backend(backend, bo);
  weights_ = rt::parse_weight_path(ane_weights, backend_->profile());
  // w8a8 calibrates its activation scales through the transformer layer kernel, which a DeltaNet layer is not: refused
  // when asked for, int8 weights instead when auto chose it.
  for (int64_t l = 0; l < static_cast<int64_t>(e_.desc().layers.size()) && weights_ == rt::WeightPath::kW8A8; ++l) {
    if (!is_deltanet_layer(e_.desc(), l)) continue;
    ANELAB_CHECK(ane_weights == "auto", "infer", "--ane-weights w8a8: layer ", l,
                 " is a Gated DeltaNet layer, whose MIL kernel has no w8a8 calibration; use fp16 or int8");
    weights_ = rt::WeightPath::kW8;
  }
  if (ane_weights == "auto" && backend_->profile().auto_ffn_4bit) {
    // auto's FFN class (rt::DeviceProfile::auto_ffn_4bit): 4 bits where every FFN matrix has them as the numbers the
    // CPU reads (the file's 4-bit palettes, else Q4_0 blocks); otherwise the attention's path.
    bool lut4 = true, q4 = true;
    for (int64_t l = 0; l < static_cast<int64_t>(e_.desc().layers.size()); ++l)
      for (const char* w : {"w1", "w2", "w3"}) {
        const LayerWeights& L = e_.layer(l);
        if (L.matrix(w).empty()) continue;
        const quant::Palette* p = L.palette(w);
        lut4 = lut4 && p && p->bits == 4;
        q4 = q4 && L.matrix(w).type == quant::WType::kQ4_0;
      }
    if (lut4 || q4) ffn_weights_ = lut4 ? rt::WeightPath::kLut4 : rt::WeightPath::kQ4;
    if (!quiet_)
      std::fprintf(stderr,
                   "[infer] --ane-weights auto on %s: attention %s, ffn %s%s, head on the CPU (the prefill's)\n",
                   backend_->profile().name.c_str(), rt::weight_path_name(weights_),
                   rt::weight_path_name(ffn_weights_.value_or(weights_)),
                   lut4 ? " (the file's 4-bit palettes)"
                   : q4 ? " (the file's Q4_0 blocks)"
                        : " (the file has no 4-bit FFN: anelab convert --palettize lut4)");
  }
}

std::string MilPrefill::weights_name() const {
  std::string n = rt::weight_path_name(weights_);
  if (ffn_weights_) n += std::string(" (ffn ") + rt::weight_path_name(*ffn_weights_) + ")";
  return n;
}

void MilPrefill::calibrate(std::span<const int32_t> prompt) {
  const std::vector<int32_t>& given = e_.options().calibration_tokens;
  std::span<const int32_t> toks = given.empty() ? prompt : std::span<const int32_t>(given);
  toks = toks.first(static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(toks.size()), e_.context())));
  if (!quiet_)
    std::fprintf(stderr,
                 "[infer] w8a8: calibrating activation scales on %zu tokens (%s) through the fp16 emulator ...\n",
                 toks.size(), given.empty() ? "the first prompt" : "the calibration prompt");
  rt::BackendOptions bo;
  bo.device = backend_->profile().name;
  bo.pool = &e_.pool();
  auto emu = rt::create_backend("emulator", bo);
  act_ = calibrate_act_scales(e_, toks, *emu);
}
MilPrefill::~MilPrefill() = default;

bool MilPrefill::self_check(const mil::Program& layer, int64_t S) {
  if (self_checked_ || backend_->name() != "ane") return true;
  self_checked_ = true;
  const mil::Function& f = layer.functions.at(0);
  kern::SelfCheck c;
  try {
    const auto& x = f.inputs.back();  // the residual stream x (a DeltaNet layer's valid comes before it)
    c = kern::run_self_check(*backend_, cat("prefill layer S=", S), x.second, *f.type_of(f.outputs.at(0)));
  } catch (const Error& e) {  // a compile or evaluation that fails outright: no MIL prefill either
    self_check_failed_ = true;
    std::fprintf(stderr, "%s; prefill runs on the CPU (run `anelab probe`, docs/macos.md)\n", e.what());
    return false;
  }
  if (c.ok()) return true;
  self_check_failed_ = true;
  const std::string path = (std::filesystem::temp_directory_path() / "anelab-self-check.json").string();
  const bool written = kern::write_self_check_report(c, path);
  std::fprintf(stderr, "%s; report %s; prefill runs on the CPU (run `anelab probe`, docs/macos.md)\n", c.line().c_str(),
               written ? path.c_str() : "not written");
  return false;
}

bool MilPrefill::ensure_bucket(int64_t S, PrefillStats& stats) {
  if (kernels_.count(S)) return true;
  const int64_t L = e_.config().n_layers;
  const int64_t need = L + (self_checked_ || backend_->name() != "ane" ? 0 : 1);  // + the self-check's compile
  if (backend_->compiles_left() < need) {
    if (!quiet_ && !warned_)
      std::fprintf(stderr, "[infer] %s: %d compiles left, bucket %lld needs %lld: prefill falls back to the CPU\n",
                   backend_->name().c_str(), backend_->compiles_left(), static_cast<long long>(S),
                   static_cast<long long>(need));
    warned_ = true;
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!quiet_)  // compiles take seconds: say what is happening (the CLI's -q turns this off)
    std::fprintf(
        stderr, "[infer] compiling %lld %s prefill kernels (%s weights) for prompts of up to %lld tokens ...\n",
        static_cast<long long>(L), backend_->name().c_str(), weights_name().c_str(), static_cast<long long>(S));
  std::vector<std::unique_ptr<rt::Kernel>> ks;
  MatrixBytes mb;
  for (int64_t l = 0; l < L; ++l) {
    KernelWeights kw{weights_, act_.empty() ? nullptr : &act_[static_cast<size_t>(l)], ffn_weights_};
    LayerKernelSource src = build_layer_kernel(e_, l, S, kw);
    const MatrixBytes lb = matrix_bytes(src, e_.layer(l));
    mb.bytes += lb.bytes, mb.weights += lb.weights;
    if (l == 0 && !self_check(src.program, S)) return false;
    auto r = backend_->compile(src.program, src.weights);
    if (!r) {
      if (!quiet_)
        std::fprintf(stderr, "[infer] compile of layer %lld at bucket %lld failed: %s; prefill falls back to the CPU\n",
                     static_cast<long long>(l), static_cast<long long>(S), r.status().message().c_str());
      return false;
    }
    ks.push_back(std::move(r.value()));
  }
  kernels_[S] = std::move(ks);
  matrix_bytes_per_weight_ = mb.weights > 0 ? static_cast<double>(mb.bytes) / static_cast<double>(mb.weights) : 0.0;
  stats.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet_)
    std::fprintf(stderr, "[infer] compiled in %.1f s (%s weight matrices: %.4f bytes per weight)\n",
                 stats.compile_ms / 1e3, weights_name().c_str(), matrix_bytes_per_weight_);
  return true;
}

bool MilPrefill::run(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits,
                     PrefillStats& stats) {
  const auto& c = e_.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), D = c.dim, kvd = c.kv_dim();
  if (pos != 0 || n > e_.context() || self_check_failed_) return false;
  const int64_t S = prefill_bucket(n, e_.context());
  if (weights_ == rt::WeightPath::kW8A8 && act_.empty()) calibrate(tokens);
  if (!ensure_bucket(S, stats)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  auto& ks = kernels_[S];
  const auto& prof = backend_->profile();
  const models::ModelDesc& md = e_.desc();
  std::vector<float> xt(static_cast<size_t>(n * D));
  std::vector<float> o;
  std::vector<float> kr(static_cast<size_t>(n * kvd)), vr(static_cast<size_t>(n * kvd));  // [n, kv_dim]
  std::vector<float> valid(static_cast<size_t>(S), 0.0f);  // DeltaNet layers: 1 at the prompt's positions
  std::fill(valid.begin(), valid.begin() + n, 1.0f);
  std::vector<float> xs = stage_embeddings(e_, tokens, S);  // [D, S], the residual stream between the layers
  std::vector<float> dstate, cstate;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    rt::Kernel& k = *ks[static_cast<size_t>(l)];
    std::vector<rt::Surface> in = k.make_inputs(0, prof), out = k.make_outputs(0, prof);
    const bool delta = is_deltanet_layer(md, l);
    if (delta) in[0].write(valid.data());
    in[delta ? 1 : 0].write(xs.data());
    std::vector<rt::Surface*> ip, op;
    for (auto& s : in) ip.push_back(&s);
    for (auto& s : out) op.push_back(&s);
    backend_->evaluate(k, 0, ip, op).throw_if_error();
    o.resize(static_cast<size_t>(out[0].numel()));
    out[0].read(o.data());
    if (delta) {  // taps [conv_dim, S] then the state rows -> the engine's recurrent states
      const models::DeltaNetDesc& dd = md.layers[static_cast<size_t>(l)].steps[0].deltanet;
      const int64_t C = dd.conv_dim(), K = dd.conv_kernel, ns = dd.n_v_heads * dd.k_dim * dd.v_dim;
      dstate.assign(o.begin() + (D + C) * S, o.begin() + (D + C) * S + ns);
      cstate.assign(static_cast<size_t>((K - 1) * C), 0.0f);
      for (int64_t r = 0; r < K - 1; ++r) {  // row r: position n - (K - 1) + r, zeros before position 0
        const int64_t t = n - (K - 1) + r;
        if (t < 0) continue;
        for (int64_t j = 0; j < C; ++j)
          cstate[static_cast<size_t>(r * C + j)] = o[static_cast<size_t>((D + j) * S + t)];
      }
      e_.store_state(l, dstate.data(), cstate.data(), n);
    } else {
      for (int64_t t = 0; t < n; ++t)  // taps [kv_dim, S] -> token-major rows -> KV cache
        for (int64_t j = 0; j < kvd; ++j) {
          kr[static_cast<size_t>(t * kvd + j)] = o[static_cast<size_t>((D + j) * S + t)];
          vr[static_cast<size_t>(t * kvd + j)] = o[static_cast<size_t>((D + kvd + j) * S + t)];
        }
      e_.store_kv(l, 0, kr.data(), vr.data(), n);
    }
    // the residual stream (first D channels, fp16 values as they are) becomes the next layer's input
    std::copy(o.begin(), o.begin() + D * S, xs.begin());
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) xt[static_cast<size_t>(t * D + d)] = o[static_cast<size_t>(d * S + t)];
  stats.path = backend_->name();
  stats.weights = weights_name();
  stats.matrix_bytes_per_weight = matrix_bytes_per_weight_;
  stats.bucket = S;
  const int64_t chunk = e_.options().prefill_chunk;
  if (all_logits) {
    for (int64_t b0 = 0; b0 < n; b0 += chunk) e_.head(xt.data() + b0 * D, std::min(chunk, n - b0), true, all_logits);
  } else {
    e_.head(xt.data() + (n - 1) * D, 1, false, nullptr);
  }
  stats.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

}  // namespace anelab::infer

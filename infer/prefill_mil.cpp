#include "infer/prefill_mil.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "framework/core/error.h"
#include "framework/kernels/blocks.h"
#include "infer/engine.h"

namespace anelab::infer {

namespace {

using mil::Value;

std::vector<float> mat_f32(const Mat& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  if (m.type == WType::kF16)
    half_to_float(m.f16(), out.data(), out.size());
  else
    std::memcpy(out.data(), m.f32(), out.size() * 4);
  return out;
}

std::optional<Value> opt_vec(mil::FunctionBuilder& b, kern::BlobSet& bs, const std::string& stem, const std::vector<float>& v) {
  if (v.empty()) return std::nullopt;
  return bs.vector(b, stem, v);
}

Value norm(mil::FunctionBuilder& b, kern::BlobSet& bs, const models::ModelConfig& c, const Value& x, const std::string& stem,
           const std::vector<float>& w, const std::vector<float>& bias) {
  Value g = bs.vector(b, stem, w);
  if (c.norm == models::NormType::kRms) return kern::rms_norm(b, x, g, c.norm_eps);
  return kern::layer_norm(b, x, g, opt_vec(b, bs, stem + "_b", bias), c.norm_eps);
}

Value proj(mil::FunctionBuilder& b, kern::BlobSet& bs, const std::string& stem, const Mat& w, const std::vector<float>& bias,
           const Value& x) {
  return kern::linear(b, x, bs.matrix(b, stem, mat_f32(w), w.rows, w.cols), opt_vec(b, bs, stem + "_bias", bias));
}

}  // namespace

int64_t prefill_bucket(int64_t n, int64_t context) {
  const int64_t m = rt::dense_width_multiple(mil::DType::kFp16);  // whole device rows (row-stride rule)
  const int64_t cap = (context + m - 1) / m * m;
  int64_t s = 32;
  while (s < n && s < cap) s *= 2;
  return std::min(s, cap);
}

LayerKernelSource build_layer_kernel(const Engine& e, int64_t layer, int64_t S) {
  return build_layer_kernel(e.config(), e.layer(layer), S, e.backend_dialect());
}

LayerKernelSource build_layer_kernel(const models::ModelConfig& c, const LayerWeights& L, int64_t S, mil::Dialect dialect) {
  const int64_t D = c.dim, hd = c.head_dim, kvd = c.kv_dim();
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  kern::BlobSet bs;
  Value x = b.input("x", kern::act_type(D, S));

  // attention
  Value xn = norm(b, bs, c, x, "attn_norm", L.attn_norm, L.attn_norm_b);
  Value q = kern::split_heads(b, proj(b, bs, "wq", L.wq, L.bq, xn), c.n_heads);
  Value k = kern::split_heads(b, proj(b, bs, "wk", L.wk, L.bk, xn), c.n_kv_heads);
  Value v = proj(b, bs, "wv", L.wv, L.bv, xn);
  if (c.rope_style != models::RopeStyle::kNone) {
    const auto style = c.rope_style;
    const kern::RopeTables t = kern::rope_tables(S, hd, c.rope_theta, style);
    const auto tt = mil::tensor_type(mil::DType::kFp16, {1, 1, S, hd});
    Value cs = bs.tensor(b, "rope_cos", tt, t.cos), sn = bs.tensor(b, "rope_sin", tt, t.sin);
    q = kern::rope(b, q, cs, sn, style);
    k = kern::rope(b, k, cs, sn, style);
  }
  Value k_tap = kern::merge_heads(b, k);  // [1, kvd, 1, S]
  const int64_t rep = c.n_heads / c.n_kv_heads;
  Value kh = rep > 1 ? kern::gqa_expand(b, k, rep) : k;
  Value vh = kern::split_heads(b, v, c.n_kv_heads);
  if (rep > 1) vh = kern::gqa_expand(b, vh, rep);
  Value mask = bs.tensor(b, "mask", mil::tensor_type(mil::DType::kFp16, {1, 1, S, S}), kern::causal_mask(S));
  Value a = kern::causal_attention(b, q, kh, vh, mask, 1.0 / std::sqrt(static_cast<double>(hd)));
  Value o = proj(b, bs, "wo", L.wo, L.bo, kern::merge_heads(b, a));
  Value x2 = b.add(x, o);

  // feed-forward
  Value xn2 = norm(b, bs, c, x2, "ffn_norm", L.ffn_norm, L.ffn_norm_b);
  Value y;
  if (c.activation == models::Activation::kSilu) {
    Value h1 = proj(b, bs, "w1", L.w1, {}, xn2);
    Value h3 = proj(b, bs, "w3", L.w3, {}, xn2);
    y = proj(b, bs, "w2", L.w2, {}, b.mul(kern::silu(b, h1), h3));
  } else {
    y = proj(b, bs, "w2", L.w2, L.b2, kern::gelu_tanh(b, proj(b, bs, "w1", L.w1, L.b1, xn2)));
  }
  Value x3 = b.add(x2, y);
  (void)kvd;
  b.output(b.named("out").concat({x3, k_tap, v}, 1));
  LayerKernelSource src;
  src.program = pb.build(dialect);
  src.weights = bs.weights();
  return src;
}

MilPrefill::MilPrefill(Engine& e, const std::string& backend, const std::string& device, bool quiet) : e_(e), quiet_(quiet) {
  rt::BackendOptions bo;
  bo.device = device;
  bo.threads = e.options().threads;
  bo.compile_budget = e.options().compile_budget;
  backend_ = rt::create_backend(backend, bo);
}
MilPrefill::~MilPrefill() = default;

bool MilPrefill::ensure_bucket(int64_t S, PrefillStats& stats) {
  if (kernels_.count(S)) return true;
  const int64_t L = e_.config().n_layers;
  if (backend_->compiles_left() < L) {
    if (!quiet_ && !warned_)
      std::fprintf(stderr, "[infer] %s: %d compiles left, bucket %lld needs %lld: prefill falls back to the CPU\n",
                   backend_->name().c_str(), backend_->compiles_left(), static_cast<long long>(S), static_cast<long long>(L));
    warned_ = true;
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!quiet_)  // compiles take seconds: say what is happening (the CLI's -q turns this off)
    std::fprintf(stderr, "[infer] compiling %lld %s prefill kernels for prompts of up to %lld tokens ...\n",
                 static_cast<long long>(L), backend_->name().c_str(), static_cast<long long>(S));
  std::vector<std::unique_ptr<rt::Kernel>> ks;
  for (int64_t l = 0; l < L; ++l) {
    LayerKernelSource src = build_layer_kernel(e_, l, S);
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
  stats.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet_) std::fprintf(stderr, "[infer] compiled in %.1f s\n", stats.compile_ms / 1e3);
  return true;
}

bool MilPrefill::run(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits, PrefillStats& stats) {
  const auto& c = e_.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), D = c.dim, kvd = c.kv_dim();
  if (pos != 0 || n > e_.context()) return false;
  const int64_t S = prefill_bucket(n, e_.context());
  if (!ensure_bucket(S, stats)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  auto& ks = kernels_[S];
  const auto& prof = backend_->profile();
  std::vector<rt::Surface> in = ks[0]->make_inputs(0, prof), out = ks[0]->make_outputs(0, prof);
  // stage the embeddings channel-major, zero-padded to S
  std::vector<float> xt(static_cast<size_t>(n * D)), xs(static_cast<size_t>(D * S), 0.0f);
  e_.embed(tokens, 0, xt.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) xs[static_cast<size_t>(d * S + t)] = xt[static_cast<size_t>(t * D + d)];
  in[0].write(xs.data());
  std::vector<float> o(static_cast<size_t>((D + 2 * kvd) * S));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    rt::Surface* ip[1] = {&in[0]};
    rt::Surface* op[1] = {&out[0]};
    backend_->evaluate(*ks[static_cast<size_t>(l)], 0, ip, op).throw_if_error();
    out[0].read(o.data());
    for (int64_t t = 0; t < n; ++t) {  // taps -> KV cache (token-major)
      float* kc = e_.k_cache(l, t);
      float* vc = e_.v_cache(l, t);
      for (int64_t j = 0; j < kvd; ++j) {
        kc[j] = o[static_cast<size_t>((D + j) * S + t)];
        vc[j] = o[static_cast<size_t>((D + kvd + j) * S + t)];
      }
    }
    // residual stream (first D channels) becomes the next layer's input, fp16 bits copied as they are
    std::memcpy(in[0].data(), out[0].data(), static_cast<size_t>(D * S) * mil::dtype_bytes(in[0].dtype()));
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) xt[static_cast<size_t>(t * D + d)] = o[static_cast<size_t>(d * S + t)];
  stats.path = backend_->name();
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

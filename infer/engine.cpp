#include "infer/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>

#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/kernels/cpu_ops.h"
#include "framework/quant/qdot.h"
#include "framework/runtime/backend.h"
#include "infer/prefill_mil.h"

namespace anelab::infer {

using models::DType;

WType parse_wtype(const std::string& s) {
  if (s == "fp16" || s == "f16" || s == "float16") return WType::kF16;
  if (s == "fp32" || s == "f32" || s == "float32") return WType::kF32;
  fail("infer", "unknown --dtype '", s,
       "' (use auto, fp16 or fp32; auto keeps q8_0/q4_0/q5_0/q5_1/q4_k/q5_k/q6_k matrices in their "
       "blocks, fp16/fp32 convert every matrix)");
}

WType auto_wtype(const models::Model& m) {
  for (const models::Tensor& t : m.tensors())
    if (t.shape.size() >= 2 && t.dtype != models::DType::kF32) return WType::kF16;
  return WType::kF32;
}

std::string resolve_prefill_backend(const std::string& name) {
  if (name == "auto") {
    for (const auto& b : rt::backends())
      if (std::string why; b.name == "ane" && b.available(&why)) return "ane";
    return "cpu";
  }
  for (const char* b : kPrefillBackends)
    if (name == b) return name;
  fail("infer", "unknown backend '", name, "' (choices: auto, cpu, emulator, ane)");
}

std::string kv_cache_refusal(int64_t positions, int64_t bytes_per_position, KvType kv_type, int64_t n_layers,
                             int64_t max_seq_len, const platform::Reading<platform::MachineMemory>& available) {
  if (!available) return "";  // unknown: nothing to compare with (the allocation itself still says what failed)
  const double need_mib = static_cast<double>(positions) * static_cast<double>(bytes_per_position) / (1 << 20);
  if (need_mib <= available->available_mb) return "";
  const auto fits = static_cast<int64_t>(available->available_mb * (1 << 20) / static_cast<double>(bytes_per_position));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "the KV cache of %lld positions x %lld bytes (keys and values of %lld layers, %s) = %.0f MiB does not "
                "fit in the %.0f MiB of available memory: --ctx %lld or less fits%s (--ctx 0 means the model's %lld "
                "positions)",
                static_cast<long long>(positions), static_cast<long long>(bytes_per_position),
                static_cast<long long>(n_layers), kv_type_name(kv_type), need_mib, available->available_mb,
                static_cast<long long>(fits), kv_type == KvType::kF16 ? "" : "; --kv-type f16 halves the cache",
                static_cast<long long>(max_seq_len));
  return buf;
}

Engine::Engine(models::Model model, const EngineOptions& opt)
    : model_(std::move(model)), opt_(opt), pool_(std::max(1, opt.threads)) {
  opt_.backend = resolve_prefill_backend(opt_.backend);
  const auto& c = model_.config;
  models::validate_config(c, "infer");
  ctx_ = opt.context > 0 ? std::min(opt.context, c.max_seq_len) : c.max_seq_len;
  chunk_ = std::max<int64_t>(1, std::min(opt.prefill_chunk, ctx_));
  try {
    load_weights();
  } catch (const std::bad_alloc&) {
    fail("infer", "out of memory preparing the model weights (", model_.total_bytes() >> 20, " MiB in the file, ",
         opt_.dtype == WType::kF32 ? "converted to fp32" : "fp16 or kept in their blocks",
         "): --dtype fp16 halves converted fp32 matrices; --mmap on maps the file instead of reading it into memory; "
         "or use a smaller or more quantized model");
  }
  // The cache is reserved whole (its pages become resident only when written), so a context that could never
  // be filled is refused here, in one line, rather than by the OS in the middle of a long generation.
  const std::string refusal = kv_cache_refusal(ctx_, kv_bytes_per_position(), opt_.kv_type, c.n_layers, c.max_seq_len,
                                               platform::machine_memory());
  if (!refusal.empty()) fail("infer", refusal);
  const int64_t kv = ctx_ * kv_bytes_per_position() / 2;
  try {
    kcache_.grow(kv);
    vcache_.grow(kv);
  } catch (const std::bad_alloc&) {
    fail("infer", "out of memory reserving the KV cache of ", ctx_, " positions x ", kv_bytes_per_position(),
         " bytes = ", (ctx_ * kv_bytes_per_position()) >> 20, " MiB: a smaller --ctx shrinks it",
         opt_.kv_type == KvType::kF16 ? "" : ", --kv-type f16 halves it");
  }
  const auto n = static_cast<size_t>(chunk_);
  x_.grow(n * c.dim);
  xb_.grow(n * std::max(c.dim, c.q_dim()));
  q_.grow(n * c.q_dim());
  k_.grow(n * c.kv_dim());
  v_.grow(n * c.kv_dim());
  att_.grow(n * c.q_dim());
  h1_.grow(n * c.hidden_dim);
  h3_.grow(n * c.hidden_dim);
  attn_.reserve(pool_.size(), ctx_);
  if (c.rope_style != models::RopeStyle::kNone) {  // run.c / HF: frequencies and angles in fp32
    rope_freq_ = kern::cpu::rope_freqs(c.head_dim, c.rope_theta, kern::cpu::Numerics::kRunc, c.rope_scaling,
                                       c.rope_linear_factor);
    if (c.sliding_window > 0)
      rope_freq_local_ = kern::cpu::rope_freqs(
          c.head_dim, c.rope_local_theta > 0.0f ? c.rope_local_theta : c.rope_theta, kern::cpu::Numerics::kRunc);
  }
  rope_cos_.resize(n * (c.head_dim / 2));
  rope_sin_.resize(n * (c.head_dim / 2));
  if (c.sliding_window > 0) {
    rope_cos_local_.resize(n * (c.head_dim / 2));
    rope_sin_local_.resize(n * (c.head_dim / 2));
  }
  logits_.resize(static_cast<size_t>(c.vocab_size));
  if (opt_.backend != "cpu")
    mil_ = std::make_unique<MilPrefill>(*this, opt_.backend, opt_.device, opt_.ane_weights, opt_.quiet);
}

Engine::~Engine() = default;

int64_t Engine::kv_bytes_per_position() const {
  return 2 * config().n_layers * config().kv_dim() * kv_type_bytes(opt_.kv_type);
}

KvView Engine::kv_rows(int64_t l) const {
  const int64_t off = l * ctx_ * config().kv_dim() * kv_type_bytes(opt_.kv_type);
  return {kcache_.data() + off, vcache_.data() + off, opt_.kv_type};
}

void Engine::store_kv(int64_t l, int64_t pos, const float* k, const float* v, int64_t n) {
  const int64_t kvd = config().kv_dim(), count = n * kvd, off = (l * ctx_ + pos) * kvd;
  if (opt_.kv_type == KvType::kF16) {
    float_to_half(k, reinterpret_cast<half_bits*>(kcache_.data()) + off, static_cast<size_t>(count));
    float_to_half(v, reinterpret_cast<half_bits*>(vcache_.data()) + off, static_cast<size_t>(count));
  } else {
    std::memcpy(reinterpret_cast<float*>(kcache_.data()) + off, k, static_cast<size_t>(count) * sizeof(float));
    std::memcpy(reinterpret_cast<float*>(vcache_.data()) + off, v, static_cast<size_t>(count) * sizeof(float));
  }
}

mil::Dialect Engine::backend_dialect() const { return mil_ ? mil_->backend().profile().dialect : mil::Dialect::kIos18; }

namespace {
// The engine's weight type of a block-quantized tensor (the type table's row, quant/types.h).
WType block_wtype(const models::Tensor& t) {
  const std::optional<quant::BlockType> b = models::block_type_of(t.dtype);
  ANELAB_CHECK(b.has_value(), "engine", "tensor ", t.name, " is ", models::dtype_name(t.dtype), ", not a block type");
  return quant::wtype_of(*b);
}
}  // namespace

// The rows of Q8_0 / Q4_K tensor t held as row tiles (quant::tile_rows, the decode GEMV's layout:
// docs/quantization.md): its whole tiles of 16 rows, rewritten in place the first time, when options().row_tiles and
// the engine may write the bytes: the model's memory is private (read, not mapped: a mapping is the file's pages), no
// other copy of the model shares them (the owner's use count is this model's tensors on it) and no other tensor views
// them. Otherwise 0, the rows as they are.
int64_t Engine::tiled_rows(const models::Tensor& t) {
  if (const auto it = tiled_.find(t.name); it != tiled_.end()) return it->second;
  int64_t holders = 0;
  bool aliased = false;  // another tensor of the model views some of these bytes
  for (const models::Tensor& o : model_.tensors()) {
    holders += o.owner == t.owner;
    aliased |= &o != &t && o.data < t.data + t.nbytes && t.data < o.data + o.nbytes;
  }
  const bool sole = t.owner && t.owner.use_count() == holders && !aliased;
  const quant::BlockType bt = block_type(block_wtype(t));
  const int64_t tiles = opt_.row_tiles && model_.private_memory && sole ? t.rows() / quant::kTileRows : 0;
  uint8_t* const rows = const_cast<uint8_t*>(t.data);  // private, sole-held memory: see above
  const int64_t tile_bytes = quant::kTileRows * (t.cols() / quant::block_info(bt).values * quant::block_info(bt).bytes);
  pool_.parallel_for(tiles, 1,
                     [&](int64_t b, int64_t e) { quant::tile_rows(bt, rows + b * tile_bytes, e - b, t.cols()); });
  tiled_bytes_ += tiles * tile_bytes;
  return tiled_[t.name] = tiles * quant::kTileRows;
}

Mat Engine::matrix(const std::string& name) {
  const models::Tensor& t = model_.tensor(name);
  Mat m;
  m.type = opt_.dtype;
  m.rows = t.rows();
  m.cols = t.cols();
  if (opt_.keep_quantized && models::is_block_quantized(t.dtype)) {  // used in place: a view of the mapping
    m.type = block_wtype(t);
    ANELAB_CHECK(quant::takes(block_type(m.type), quant::kExecCpuBlocks), "engine", "tensor ", name, " is ",
                 models::dtype_name(t.dtype), ", which the CPU engine does not compute on (quant/types.h)");
    m.data = t.data;
    if (quant::has_row_tiles(block_type(m.type))) m.tiled_rows = tiled_rows(t);
    weight_bytes_ += m.nbytes();
    return m;
  }
  weight_bytes_ += m.nbytes();
  if ((t.dtype == DType::kF16 && opt_.dtype == WType::kF16) || (t.dtype == DType::kF32 && opt_.dtype == WType::kF32)) {
    m.data = t.data;
    return m;
  }
  // Convert row blocks (bounded temporary) into an owned buffer of the compute dtype.
  const int64_t n = m.rows * m.cols;
  std::shared_ptr<void> buf(opt_.dtype == WType::kF16 ? static_cast<void*>(new half_bits[static_cast<size_t>(n)])
                                                      : static_cast<void*>(new float[static_cast<size_t>(n)]),
                            [t16 = opt_.dtype == WType::kF16](void* p) {
                              if (t16)
                                delete[] static_cast<half_bits*>(p);
                              else
                                delete[] static_cast<float*>(p);
                            });
  const int64_t rows_per = std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, m.cols));
  std::vector<float> tmp(static_cast<size_t>(rows_per * m.cols));
  for (int64_t r = 0; r < m.rows; r += rows_per) {
    const int64_t cnt = std::min(rows_per, m.rows - r) * m.cols;
    t.to_f32(r * m.cols, cnt, tmp.data());
    if (opt_.dtype == WType::kF16)
      float_to_half(tmp.data(), static_cast<half_bits*>(buf.get()) + r * m.cols, static_cast<size_t>(cnt));
    else
      std::memcpy(static_cast<float*>(buf.get()) + r * m.cols, tmp.data(), static_cast<size_t>(cnt) * 4);
  }
  m.data = buf.get();
  owned_.push_back(std::move(buf));
  return m;
}

std::span<const float> Engine::vec(const std::string& name, bool optional) {
  const models::Tensor* t = model_.find(name);
  if (!t) {
    ANELAB_CHECK(optional, "infer", model_.source_path, ": model has no tensor ", name);
    return {};
  }
  return vecs_.emplace_back(t->to_f32());
}

// A norm weight as the kernels multiply by: (norm_offset + w), added in fp32 (Gemma: 1 + w).
std::span<const float> Engine::norm_vec(const std::string& name, bool optional) {
  const std::span<const float> v = vec(name, optional);
  const float off = model_.config.norm_offset;
  if (off == 0.0f || v.empty()) return v;
  std::vector<float>& w = vecs_.back();
  for (float& x : w) x += off;
  return w;
}

void Engine::load_weights() {
  const auto& c = model_.config;
  tok_emb_ = matrix("tok_embeddings");
  weight_bytes_ -= tok_emb_.nbytes();  // one row per token
  if (c.learned_pos) pos_emb_ = matrix("pos_embeddings");
  out_ = c.tied_embeddings ? tok_emb_ : matrix("output");
  if (c.tied_embeddings) weight_bytes_ += out_.nbytes();
  norm_ = norm_vec("norm", false);
  norm_b_ = vec("norm_bias", true);
  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights& L = layers_[static_cast<size_t>(l)];
    L.wq = matrix(p + "wq");
    L.wk = matrix(p + "wk");
    L.wv = matrix(p + "wv");
    L.wo = matrix(p + "wo");
    if (gated_mlp(c.activation)) {
      L.w1 = matrix(p + "w1");
      L.w2 = matrix(p + "w2");
      L.w3 = matrix(p + "w3");
    } else {
      L.w1 = matrix(p + "fc");
      L.w2 = matrix(p + "proj");
      L.b1 = vec(p + "fc_bias", true);
      L.b2 = vec(p + "proj_bias", true);
    }
    L.attn_norm = norm_vec(p + "attn_norm", false);
    L.attn_norm_b = vec(p + "attn_norm_bias", true);
    L.ffn_norm = norm_vec(p + "ffn_norm", false);
    L.ffn_norm_b = vec(p + "ffn_norm_bias", true);
    L.bq = vec(p + "bq", true);
    L.bk = vec(p + "bk", true);
    L.bv = vec(p + "bv", true);
    L.bo = vec(p + "bo", true);
    L.q_norm = norm_vec(p + "q_norm", true);
    L.k_norm = norm_vec(p + "k_norm", true);
    L.attn_post_norm = norm_vec(p + "attn_post_norm", true);
    L.ffn_post_norm = norm_vec(p + "ffn_post_norm", true);
  }
}

namespace {
const float* opt_ptr(std::span<const float> v) { return v.empty() ? nullptr : v.data(); }
}  // namespace

void Engine::embed(std::span<const int32_t> tokens, int64_t pos, float* x) {
  const auto& c = model_.config;
  float* row = xb_.data();  // [dim] the position's embedding row (xb_ is free until the first norm)
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    ANELAB_CHECK(t >= 0 && t < c.vocab_size, "infer", "token id ", t, " out of range [0, ", c.vocab_size, ")");
    float* xi = x + static_cast<int64_t>(i) * c.dim;
    mat_row(tok_emb_, t, xi);
    if (c.learned_pos) {
      mat_row(pos_emb_, pos + static_cast<int64_t>(i), row);
      for (int64_t d = 0; d < c.dim; ++d) xi[d] += row[d];
    }
    if (c.embed_scale != 1.0f)
      for (int64_t d = 0; d < c.dim; ++d) xi[d] *= c.embed_scale;
  }
}

void Engine::norm_rows(const float* x, std::span<const float> w, std::span<const float> b, int64_t n, float* out) {
  const auto& c = model_.config;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      if (c.norm == models::NormType::kRms)
        kern::cpu::rms_norm(x + i * c.dim, w.data(), c.norm_eps, c.dim, out + i * c.dim, kern::cpu::Numerics::kRunc);
      else
        kern::cpu::layer_norm(x + i * c.dim, w.data(), opt_ptr(b), c.norm_eps, c.dim, out + i * c.dim);
    }
  };
  if (n * c.dim >= (1 << 14))
    pool_.parallel_for(n, 1, rows);
  else
    rows(0, n);
}

// fn(begin, end) over [0, count) in 16-aligned pieces, on the pool when the batch is large.
void Engine::elementwise(int64_t count, FunctionRef<void(int64_t, int64_t)> fn) {
  if (count >= (1 << 14))
    pool_.parallel_for(count, 16, fn);
  else
    fn(0, count);
}

// Rotates q or k rows [n, heads*head_dim] by the tables forward_cpu filled (local: the sliding layers').
void Engine::rope_rows(float* x, int64_t n, int64_t heads, bool local) {
  const auto& c = model_.config;
  const int64_t half = c.head_dim / 2;
  const auto style = c.rope_style == models::RopeStyle::kAdjacentPairs ? kern::RopeStyle::kAdjacentPairs
                                                                       : kern::RopeStyle::kRotateHalf;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      kern::cpu::rope_row(x + i * heads * c.head_dim, heads, c.head_dim, style,
                          (local ? rope_cos_local_ : rope_cos_).data() + i * half,
                          (local ? rope_sin_local_ : rope_sin_).data() + i * half, kern::cpu::Numerics::kRunc);
  };
  if (n * heads * c.head_dim >= (1 << 14))
    pool_.parallel_for(n, 1, rows);
  else
    rows(0, n);
}

// RMSNorm of rows of head_dim in place (Qwen3 / Gemma 3 q and k norms), on the pool when the batch is large.
void Engine::head_norm_rows(float* v, const float* w, int64_t rows) {
  const auto& c = model_.config;
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kern::cpu::rms_norm(v + r * c.head_dim, w, c.norm_eps, c.head_dim, v + r * c.head_dim,
                          kern::cpu::Numerics::kRunc);
  };
  if (rows * c.head_dim >= (1 << 14))
    pool_.parallel_for(rows, 8, body);
  else
    body(0, rows);
}

// x += y over count values (the residual adds), on the pool when the batch is large.
void Engine::add_rows(float* x, const float* y, int64_t count) {
  elementwise(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] += y[i];
  });
}

namespace {
// The score scale: the config's (Gemma: query_pre_attn_scalar^-0.5) or 1 / sqrt(head_dim).
float score_scale(const models::ModelConfig& c) {
  return c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}
}  // namespace

// Causal attention of the n new tokens (positions pos..pos+n-1) over the cache (on sliding layers only
// the last sliding_window positions); att_ [n, q_dim]. Kernels: infer/cpu_attention.h (register-tiled
// blocked path for prefill batches of >= 8 tokens, head_dim 64/128/192/256; one query at a time otherwise).
void Engine::attention(int64_t l, int64_t pos, int64_t n) {
  const auto& c = model_.config;
  const int64_t window = c.sliding_layer(l) ? c.sliding_window : 0;
  const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, score_scale(c), window};
  attn_.run(pool_, s, q_.data(), kv_rows(l), pos, n, att_.data());
}

void Engine::forward_cpu(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) {
  const auto& c = model_.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t D = c.dim, H = c.hidden_dim;
  float* x = x_.data();
  embed(tokens, pos, x);
  if (c.rope_style != models::RopeStyle::kNone) {
    kern::cpu::rope_half_tables(n, rope_freq_, pos, kern::cpu::Numerics::kRunc, rope_cos_.data(), rope_sin_.data());
    if (c.sliding_window > 0)
      kern::cpu::rope_half_tables(n, rope_freq_local_, pos, kern::cpu::Numerics::kRunc, rope_cos_local_.data(),
                                  rope_sin_local_.data());
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = layers_[static_cast<size_t>(l)];
    norm_rows(x, L.attn_norm, L.attn_norm_b, n, xb_.data());
    if (n == 1) {
      gemv(pool_,
           {{&L.wq, opt_ptr(L.bq), q_.data()}, {&L.wk, opt_ptr(L.bk), k_.data()}, {&L.wv, opt_ptr(L.bv), v_.data()}},
           xb_.data());
    } else {
      gemm(pool_, L.wq, opt_ptr(L.bq), xb_.data(), n, q_.data());
      gemm(pool_, L.wk, opt_ptr(L.bk), xb_.data(), n, k_.data());
      gemm(pool_, L.wv, opt_ptr(L.bv), xb_.data(), n, v_.data());
    }
    if (c.qk_norm) {  // per-head RMSNorm of q and k (rows of head_dim), before RoPE
      head_norm_rows(q_.data(), L.q_norm.data(), n * c.n_heads);
      head_norm_rows(k_.data(), L.k_norm.data(), n * c.n_kv_heads);
    }
    if (c.rope_style != models::RopeStyle::kNone) {
      rope_rows(q_.data(), n, c.n_heads, c.sliding_layer(l));
      rope_rows(k_.data(), n, c.n_kv_heads, c.sliding_layer(l));
    }
    store_kv(l, pos, k_.data(), v_.data(), n);
    attention(l, pos, n);
    gemm(pool_, L.wo, opt_ptr(L.bo), att_.data(), n, xb_.data());
    if (!L.attn_post_norm.empty()) norm_rows(xb_.data(), L.attn_post_norm, {}, n, xb_.data());
    add_rows(x, xb_.data(), n * D);

    norm_rows(x, L.ffn_norm, L.ffn_norm_b, n, xb_.data());
    if (gated_mlp(c.activation)) {
      if (n == 1)
        gemv(pool_, {{&L.w1, nullptr, h1_.data()}, {&L.w3, nullptr, h3_.data()}}, xb_.data());
      else {
        gemm(pool_, L.w1, nullptr, xb_.data(), n, h1_.data());
        gemm(pool_, L.w3, nullptr, xb_.data(), n, h3_.data());
      }
      if (c.activation == models::Activation::kSilu)
        elementwise(n * H, [&](int64_t b, int64_t e) { silu_mul(h1_.data() + b, h3_.data() + b, e - b); });
      else  // GeGLU: gelu_tanh(h1) * h3
        elementwise(n * H, [&](int64_t b, int64_t e) {
          gelu_tanh_inplace(h1_.data() + b, e - b);
          for (int64_t i = b; i < e; ++i) h1_[i] *= h3_[i];
        });
    } else {
      gemm(pool_, L.w1, opt_ptr(L.b1), xb_.data(), n, h1_.data());
      elementwise(n * H, [&](int64_t b, int64_t e) { gelu_tanh_inplace(h1_.data() + b, e - b); });
    }
    gemm(pool_, L.w2, opt_ptr(L.b2), h1_.data(), n, xb_.data());
    if (!L.ffn_post_norm.empty()) norm_rows(xb_.data(), L.ffn_post_norm, {}, n, xb_.data());
    add_rows(x, xb_.data(), n * D);
  }
  head(x, n, all_logits != nullptr, all_logits);
}

// logits = cap * tanh(logits / cap) when the model soft-caps its logits (Gemma's final_logit_softcapping).
void Engine::soft_cap(float* logits, int64_t count) {
  const float cap = model_.config.logit_softcap;
  if (cap <= 0.0f) return;
  elementwise(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  });
}

void Engine::head(const float* x, int64_t n, bool all, std::vector<float>* all_logits) {
  const auto& c = model_.config;
  const int64_t first = all ? 0 : n - 1;
  const int64_t m = n - first;
  norm_rows(x + first * c.dim, norm_, norm_b_, m, xb_.data());
  if (all) {
    const size_t old = all_logits->size();
    all_logits->resize(old + static_cast<size_t>(m * c.vocab_size));
    gemm(pool_, out_, nullptr, xb_.data(), m, all_logits->data() + old);
    soft_cap(all_logits->data() + old, m * c.vocab_size);
    std::memcpy(logits_.data(), all_logits->data() + old + (m - 1) * c.vocab_size,
                static_cast<size_t>(c.vocab_size) * 4);
  } else {
    gemv(pool_, out_, nullptr, xb_.data(), logits_.data());
    soft_cap(logits_.data(), c.vocab_size);
  }
}

const float* Engine::prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ANELAB_CHECK(n > 0, "infer", "prefill needs at least one token");
  ANELAB_CHECK(pos >= 0 && pos + n <= ctx_, "infer", "prefill of ", n, " tokens at position ", pos,
               " exceeds the context of ", ctx_, " positions");
  if (all_logits) all_logits->clear();
  const auto t0 = std::chrono::steady_clock::now();
  stats_ = PrefillStats{"cpu", 0, 0, 0};
  if (mil_ && mil_->run(tokens, pos, all_logits, stats_)) return logits_.data();
  for (int64_t b = 0; b < n; b += chunk_) {
    const int64_t m = std::min(chunk_, n - b);
    forward_cpu(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(m)), pos + b, all_logits);
  }
  stats_.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return logits_.data();
}

const float* Engine::decode(int32_t token, int64_t pos) {
  ANELAB_CHECK(pos >= 0 && pos < ctx_, "infer", "position ", pos, " outside the context of ", ctx_, " positions");
  const int32_t t[1] = {token};
  forward_cpu(t, pos, nullptr);
  return logits_.data();
}

}  // namespace anelab::infer

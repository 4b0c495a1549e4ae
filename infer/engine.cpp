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
#include "models/arch/arch.h"

namespace anelab::infer {

using models::DType;

WType parse_wtype(const std::string& s) {
  if (s == "fp16" || s == "f16" || s == "float16") return WType::kF16;
  if (s == "fp32" || s == "f32" || s == "float32") return WType::kF32;
  fail("infer", "unknown --dtype '", s,
       "' (use auto, fp16 or fp32; auto keeps q8_0/q4_0/q5_0/q5_1/q4_k/q5_k/q6_k matrices in their "
       "blocks, fp16/fp32 convert every matrix)");
}

bool has_recurrent_state(const models::ModelConfig& c) {
  for (const models::LayerDesc& l : models::describe_model(c).layers)
    for (const models::Step& s : l.steps)
      if (s.kind == models::StepKind::kLinearAttention) return true;
  return false;
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
  desc_ = models::describe_model(c);
  check_supported();
  ctx_ = opt.context > 0 ? std::min(opt.context, c.max_seq_len) : c.max_seq_len;
  chunk_ = std::max<int64_t>(1, std::min(opt.prefill_chunk, ctx_));
  ANELAB_CHECK(opt_.slots >= 1, "infer", "slots must be at least 1, got ", opt_.slots);
  rows_ = std::max(chunk_, opt_.slots);
  plan_layers();
  if (opt_.slots > 1 && n_lin_layers_ > 0)
    fail("infer", "several slots in one engine (", opt_.slots,
         ") are not supported for a model with linear-attention layers: their recurrent state holds one sequence");
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
  const std::string refusal = kv_cache_refusal(ctx_ * opt_.slots, kv_bytes_per_position(), opt_.kv_type, n_kv_layers_,
                                               c.max_seq_len, platform::machine_memory());
  if (!refusal.empty()) fail("infer", refusal);
  const int64_t kv = opt_.slots * ctx_ * kv_bytes_per_position() / 2;
  try {
    kcache_.grow(kv);
    vcache_.grow(kv);
  } catch (const std::bad_alloc&) {
    fail("infer", "out of memory reserving the KV cache of ", opt_.slots * ctx_, " positions x ",
         kv_bytes_per_position(), " bytes = ", (opt_.slots * ctx_ * kv_bytes_per_position()) >> 20,
         " MiB: a smaller --ctx shrinks it", opt_.kv_type == KvType::kF16 ? "" : ", --kv-type f16 halves it");
  }
  const auto n = static_cast<size_t>(rows_);
  x_.grow(n * c.dim);
  xb_.grow(n * std::max(c.dim, c.q_dim()));
  q_.grow(n * c.q_dim());
  k_.grow(n * c.kv_dim());
  v_.grow(n * c.kv_dim());
  att_.grow(n * c.q_dim());
  h1_.grow(n * c.hidden_dim);
  h3_.grow(n * c.hidden_dim);
  attn_.reserve(pool_.size(), ctx_);
  plan_rope();
  logits_.resize(static_cast<size_t>(c.vocab_size));
  batch_logits_.resize(static_cast<size_t>(opt_.slots * c.vocab_size));
  batch_kv_.reserve(static_cast<size_t>(rows_));
  lora_scale_.resize(static_cast<size_t>(opt_.slots));
  if (opt_.backend != "cpu")
    mil_ = std::make_unique<MilPrefill>(*this, opt_.backend, opt_.device, opt_.ane_weights, opt_.quiet);
}

Engine::~Engine() = default;

namespace {
constexpr const char* kExecutor = "the CPU inference engine";
}  // namespace

void Engine::check_supported() const { check_engine_supports(desc_, model_.config); }

void check_engine_supports(const models::ModelDesc& desc_, const models::ModelConfig& c) {
  for (size_t l = 0; l < desc_.layers.size(); ++l) {
    bool seen[models::kStepKinds] = {};
    bool mixers = false;  // an attention or linear-attention step: one mixer per layer
    for (const models::Step& s : desc_.layers[l].steps) {
      auto refuse = [&](const std::string& what) {
        models::unsupported("infer", kExecutor, static_cast<int64_t>(l), s.kind, what);
      };
      bool& twice = seen[static_cast<size_t>(s.kind)];
      if (twice) refuse("a second step of this kind in one layer (one set of weights per layer)");
      twice = true;
      if (s.kind != models::StepKind::kFfn) {
        if (mixers) refuse("attention and linear attention in one layer (one set of weights per layer)");
        mixers = true;
      }
      if (s.post_norm && !s.post_norm->bias.empty()) refuse("a post-norm with a bias (" + s.post_norm->bias + ")");
      switch (s.kind) {
        case models::StepKind::kAttention: {
          const models::AttnDesc& a = s.attn;
          if (a.score_softcap > 0.0f) refuse(cat("score soft-capping (cap ", a.score_softcap, ")"));
          if (a.n_heads * a.head_dim != c.q_dim() || a.n_kv_heads * a.head_dim != c.kv_dim())
            refuse(cat(a.n_heads, " heads / ", a.n_kv_heads, " kv heads of ", a.head_dim,
                       " (the KV cache and scratch are sized by the model's)"));
          for (const auto* qk : {&a.q_norm, &a.k_norm})
            if (*qk && (*qk)->kind != models::NormType::kRms) refuse("a q/k norm other than RMSNorm");
          if (a.output_gate && !a.bq.empty()) refuse("an output gate with a q bias");
          if (a.rope.dims < 0 || a.rope.dims > a.head_dim || a.rope.dims % 2)
            refuse(cat("RoPE on ", a.rope.dims, " of ", a.head_dim, " dims (an even count up to head_dim)"));
          break;
        }
        case models::StepKind::kLinearAttention: {
          const models::DeltaNetDesc& d = s.deltanet;
          if (d.n_k_heads != c.linear_k_heads || d.n_v_heads != c.linear_v_heads || d.k_dim != c.linear_k_dim ||
              d.v_dim != c.linear_v_dim || d.conv_kernel != c.linear_conv_kernel)
            refuse(cat(d.n_k_heads, " key heads of ", d.k_dim, ", ", d.n_v_heads, " value heads of ", d.v_dim,
                       ", conv kernel ", d.conv_kernel, " (the state and scratch are sized by the model's)"));
          if (d.norm.kind != models::NormType::kRms || !d.norm.bias.empty()) refuse("a gated norm other than RMSNorm");
          break;
        }
        case models::StepKind::kFfn:
          if (s.ffn.hidden != c.hidden_dim)
            refuse(cat("an FFN of width ", s.ffn.hidden, " (scratch is sized by the model's)"));
          break;
      }
    }
  }
}

// The distinct RoPEs of the layers, their frequencies (run.c / HF: in fp32) and angle buffers.
void Engine::plan_rope() {
  layer_rope_.assign(desc_.layers.size(), -1);
  for (size_t l = 0; l < desc_.layers.size(); ++l) {
    for (const models::Step& s : desc_.layers[l].steps) {
      if (s.kind != models::StepKind::kAttention || s.attn.rope.style == models::RopeStyle::kNone) continue;
      const models::AttnDesc& a = s.attn;
      auto it = std::find_if(ropes_.begin(), ropes_.end(),
                             [&](const RopeTable& t) { return t.rope == a.rope && t.head_dim == a.head_dim; });
      if (it == ropes_.end()) {
        RopeTable t;
        t.rope = a.rope;
        t.head_dim = a.head_dim;
        t.dims = a.rope.dims > 0 ? a.rope.dims : a.head_dim;
        t.freq = kern::cpu::rope_freqs(t.dims, a.rope.theta, kern::cpu::Numerics::kRunc, a.rope.scaling,
                                       a.rope.linear_factor);
        t.cos.resize(static_cast<size_t>(rows_ * (t.dims / 2)));
        t.sin.resize(static_cast<size_t>(rows_ * (t.dims / 2)));
        ropes_.push_back(std::move(t));
        it = ropes_.end() - 1;
      }
      layer_rope_[l] = static_cast<int>(it - ropes_.begin());
    }
  }
}

int64_t Engine::kv_bytes_per_position() const {
  return 2 * n_kv_layers_ * config().kv_dim() * kv_type_bytes(opt_.kv_type);
}

void Engine::use_slot(int64_t slot) {
  ANELAB_CHECK(slot >= 0 && slot < opt_.slots, "infer", "slot ", slot, " outside the engine's ", opt_.slots, " slots");
  slot_ = slot;
}

KvView Engine::kv_rows(int64_t l, int64_t seq) const {
  const int64_t slot = kv_slot_[static_cast<size_t>(l)];
  ANELAB_CHECK(slot >= 0, "infer", "layer ", l, " has no KV cache rows (a linear-attention layer)");
  const int64_t off = (seq * n_kv_layers_ + slot) * ctx_ * config().kv_dim() * kv_type_bytes(opt_.kv_type);
  return {kcache_.data() + off, vcache_.data() + off, opt_.kv_type};
}

void Engine::store_kv(int64_t l, int64_t seq, int64_t pos, const float* k, const float* v, int64_t n) {
  const int64_t slot = kv_slot_[static_cast<size_t>(l)];
  ANELAB_CHECK(slot >= 0, "infer", "layer ", l, " has no KV cache rows (a linear-attention layer)");
  const int64_t kvd = config().kv_dim(), count = n * kvd, off = ((seq * n_kv_layers_ + slot) * ctx_ + pos) * kvd;
  if (opt_.kv_type == KvType::kF16) {
    float_to_half(k, reinterpret_cast<half_bits*>(kcache_.data()) + off, static_cast<size_t>(count));
    float_to_half(v, reinterpret_cast<half_bits*>(vcache_.data()) + off, static_cast<size_t>(count));
  } else {
    std::memcpy(reinterpret_cast<float*>(kcache_.data()) + off, k, static_cast<size_t>(count) * sizeof(float));
    std::memcpy(reinterpret_cast<float*>(vcache_.data()) + off, v, static_cast<size_t>(count) * sizeof(float));
  }
}

void Engine::copy_kv(int64_t from, int64_t to, int64_t n) {
  ANELAB_CHECK(from >= 0 && from < opt_.slots && to >= 0 && to < opt_.slots, "infer", "copy_kv: slots ", from, ", ", to,
               " outside the engine's ", opt_.slots);
  ANELAB_CHECK(n >= 0 && n <= ctx_, "infer", "copy_kv: ", n, " positions outside the context of ", ctx_);
  if (from == to || n == 0) return;
  const auto row = static_cast<size_t>(config().kv_dim() * kv_type_bytes(opt_.kv_type));
  for (int64_t s = 0; s < n_kv_layers_; ++s) {
    const size_t src = static_cast<size_t>((from * n_kv_layers_ + s) * ctx_) * row,
                 dst = static_cast<size_t>((to * n_kv_layers_ + s) * ctx_) * row;
    std::memcpy(kcache_.data() + dst, kcache_.data() + src, static_cast<size_t>(n) * row);
    std::memcpy(vcache_.data() + dst, vcache_.data() + src, static_cast<size_t>(n) * row);
  }
}

Engine::SeqSnapshot Engine::save_seq(int64_t slot, int64_t n) const {
  ANELAB_CHECK(slot >= 0 && slot < opt_.slots, "infer", "save_seq: slot ", slot, " outside the engine's ", opt_.slots);
  ANELAB_CHECK(n >= 1 && n <= ctx_, "infer", "save_seq: ", n, " positions outside [1, ", ctx_, "]");
  ANELAB_CHECK(n_lin_layers_ == 0 || n == state_pos_, "infer",
               "save_seq: the linear-attention state holds positions [0, ", state_pos_, "), not [0, ", n,
               ") (a recurrent state is valid only at its own position)");
  SeqSnapshot s;
  s.n = n;
  const auto row = static_cast<size_t>(config().kv_dim() * kv_type_bytes(opt_.kv_type)),
             len = static_cast<size_t>(n) * row;
  s.k.resize(static_cast<size_t>(n_kv_layers_) * len);
  s.v.resize(s.k.size());
  for (int64_t l = 0; l < n_kv_layers_; ++l) {
    const size_t src = static_cast<size_t>((slot * n_kv_layers_ + l) * ctx_) * row, dst = static_cast<size_t>(l) * len;
    std::memcpy(s.k.data() + dst, kcache_.data() + src, len);
    std::memcpy(s.v.data() + dst, vcache_.data() + src, len);
  }
  if (n_lin_layers_ > 0) {
    s.delta.assign(dstate_.data(), dstate_.data() + n_lin_layers_ * lin_.n_v_heads * lin_.k_dim * lin_.v_dim);
    s.conv.assign(cstate_.data(), cstate_.data() + n_lin_layers_ * (lin_.conv_kernel - 1) * lin_.conv_dim());
  }
  return s;
}

void Engine::restore_seq(int64_t slot, const SeqSnapshot& s) {
  ANELAB_CHECK(slot >= 0 && slot < opt_.slots, "infer", "restore_seq: slot ", slot, " outside the engine's ",
               opt_.slots);
  ANELAB_CHECK(s.n >= 1 && s.n <= ctx_, "infer", "restore_seq: n ", s.n, " outside this engine's context [1, ", ctx_,
               "]");
  const auto row = static_cast<size_t>(config().kv_dim() * kv_type_bytes(opt_.kv_type)),
             len = static_cast<size_t>(s.n) * row;
  ANELAB_CHECK(s.k.size() == static_cast<size_t>(n_kv_layers_) * len && s.v.size() == s.k.size(), "infer",
               "restore_seq: k/v hold ", s.k.size(), " / ", s.v.size(), " bytes, this engine's ", s.n,
               " positions take ", static_cast<size_t>(n_kv_layers_) * len);
  const auto nd = static_cast<size_t>(n_lin_layers_ * lin_.n_v_heads * lin_.k_dim * lin_.v_dim),
             nc = static_cast<size_t>(n_lin_layers_ * (lin_.conv_kernel - 1) * lin_.conv_dim());
  ANELAB_CHECK(s.delta.size() == nd && s.conv.size() == nc, "infer", "restore_seq: delta/conv states of ",
               s.delta.size(), " / ", s.conv.size(), " floats, this engine's are ", nd, " / ", nc);
  for (int64_t l = 0; l < n_kv_layers_; ++l) {
    const size_t dst = static_cast<size_t>((slot * n_kv_layers_ + l) * ctx_) * row, src = static_cast<size_t>(l) * len;
    std::memcpy(kcache_.data() + dst, s.k.data() + src, len);
    std::memcpy(vcache_.data() + dst, s.v.data() + src, len);
  }
  if (n_lin_layers_ > 0) {
    std::memcpy(dstate_.data(), s.delta.data(), nd * sizeof(float));
    std::memcpy(cstate_.data(), s.conv.data(), nc * sizeof(float));
    state_pos_ = s.n;
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

std::span<const float> Engine::vec(const std::string& name) {
  if (name.empty()) return {};
  const models::Tensor* t = model_.find(name);
  ANELAB_CHECK(t != nullptr, "infer", model_.source_path, ": model has no tensor ", name);
  return vecs_.emplace_back(t->to_f32());
}

// A norm weight as the kernels multiply by: (offset + w), added in fp32 (Gemma: 1 + w).
std::span<const float> Engine::norm_weight(const std::optional<models::NormDesc>& n) {
  if (!n) return {};
  const std::span<const float> v = vec(n->weight);
  if (n->offset == 0.0f) return v;
  std::vector<float>& w = vecs_.back();
  for (float& x : w) x += n->offset;
  return w;
}

// The weights of one step into the layer's LayerWeights (the MIL prefill reads them there too); its norms by their
// weight names (NormDesc::weight / bias), the offset added.
void Engine::load_step(const models::Step& s, LayerWeights& L) {
  auto put_norm = [&](const std::optional<models::NormDesc>& n) {
    if (!n) return;
    L.set_norm(n->weight, norm_weight(n));
    if (!n->bias.empty()) L.set_norm(n->bias, vec(n->bias));
  };
  put_norm(s.pre_norm);
  put_norm(s.post_norm);
  auto put_palette = [&](const char* m, const std::string& tensor) {
    if (const auto it = model_.palettes.find(tensor); it != model_.palettes.end()) L.palettes[m] = it->second;
  };
  for (const auto& [m, tensor] : {std::pair<const char*, const std::string&>{"wq", s.attn.wq},
                                  {"wk", s.attn.wk},
                                  {"wv", s.attn.wv},
                                  {"wo", s.attn.wo},
                                  {"w1", s.ffn.w_in},
                                  {"w2", s.ffn.w_out},
                                  {"w3", s.ffn.w_up}})
    if (!tensor.empty()) put_palette(m, tensor);
  switch (s.kind) {
    case models::StepKind::kAttention: {
      const models::AttnDesc& a = s.attn;
      L.wq = matrix(a.wq);
      L.wk = matrix(a.wk);
      L.wv = matrix(a.wv);
      L.wo = matrix(a.wo);
      L.bq = vec(a.bq);
      L.bk = vec(a.bk);
      L.bv = vec(a.bv);
      L.bo = vec(a.bo);
      put_norm(a.q_norm);
      put_norm(a.k_norm);
      break;
    }
    case models::StepKind::kFfn: {
      const models::FfnDesc& f = s.ffn;
      L.w1 = matrix(f.w_in);
      L.w2 = matrix(f.w_out);
      if (!f.w_up.empty()) L.w3 = matrix(f.w_up);
      L.b1 = vec(f.b_in);
      L.b2 = vec(f.b_out);
      break;
    }
    case models::StepKind::kLinearAttention:  // weights: load_deltanet
      break;
  }
}

void Engine::load_weights() {
  tok_emb_ = matrix(desc_.embed.tokens);
  weight_bytes_ -= tok_emb_.nbytes();  // one row per token
  if (!desc_.embed.positions.empty()) pos_emb_ = matrix(desc_.embed.positions);
  out_ = desc_.head.tied ? tok_emb_ : matrix(desc_.head.weight);
  if (desc_.head.tied) weight_bytes_ += out_.nbytes();
  norm_ = norm_weight(desc_.head.norm);
  norm_b_ = vec(desc_.head.norm.bias);
  layers_.resize(desc_.layers.size());
  delta_.resize(desc_.layers.size());
  for (size_t l = 0; l < desc_.layers.size(); ++l)
    for (const models::Step& s : desc_.layers[l].steps) {
      load_step(s, layers_[l]);
      if (s.kind == models::StepKind::kLinearAttention) load_deltanet(s.deltanet, delta_[l]);
    }
  // Each step's norms resolved once, by their weight names, from the layer's LayerWeights.
  step_norms_.resize(desc_.layers.size());
  for (size_t l = 0; l < desc_.layers.size(); ++l)
    for (const models::Step& s : desc_.layers[l].steps) {
      const LayerWeights& L = layers_[l];
      auto span = [&](const std::optional<models::NormDesc>& n, bool bias = false) {
        return n ? L.norm(bias ? n->bias : n->weight) : std::span<const float>{};
      };
      StepNormSpans w{span(s.pre_norm), span(s.pre_norm, true), span(s.post_norm), {}, {}};
      if (s.kind == models::StepKind::kAttention) w.q = span(s.attn.q_norm), w.k = span(s.attn.k_norm);
      step_norms_[l].push_back(w);
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
    if (!desc_.embed.positions.empty()) {
      mat_row(pos_emb_, pos + static_cast<int64_t>(i), row);
      for (int64_t d = 0; d < c.dim; ++d) xi[d] += row[d];
    }
    if (const float scale = desc_.embed.scale; scale != 1.0f)
      for (int64_t d = 0; d < c.dim; ++d) xi[d] *= scale;
  }
}

// The norm nd (weight w, bias b) of rows x [n, dim] into out (may be x).
void Engine::norm_rows(const float* x, const models::NormDesc& nd, std::span<const float> w, std::span<const float> b,
                       int64_t n, float* out) {
  const int64_t D = desc_.dim;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      switch (nd.kind) {
        case models::NormType::kRms:
          kern::cpu::rms_norm(x + i * D, w.data(), nd.eps, D, out + i * D, kern::cpu::Numerics::kRunc);
          break;
        case models::NormType::kLayer:
          kern::cpu::layer_norm(x + i * D, w.data(), opt_ptr(b), nd.eps, D, out + i * D);
          break;
      }
    }
  };
  if (n * D >= (1 << 14))
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

// Rotates q or k rows [n, heads*head_dim] by the angles of t that forward_cpu filled: the first t.dims of each head
// (all of them unless the RoPE is partial).
void Engine::rope_rows(float* x, int64_t n, int64_t heads, const RopeTable& t) {
  const int64_t hd = t.head_dim, half = t.dims / 2;
  const auto style = t.rope.style == models::RopeStyle::kAdjacentPairs ? kern::RopeStyle::kAdjacentPairs
                                                                       : kern::RopeStyle::kRotateHalf;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* cs = t.cos.data() + i * half;
      const float* sn = t.sin.data() + i * half;
      if (t.dims == hd)
        kern::cpu::rope_row(x + i * heads * hd, heads, hd, style, cs, sn, kern::cpu::Numerics::kRunc);
      else
        for (int64_t h = 0; h < heads; ++h)
          kern::cpu::rope_row(x + (i * heads + h) * hd, 1, t.dims, style, cs, sn, kern::cpu::Numerics::kRunc);
    }
  };
  if (n * heads * hd >= (1 << 14))
    pool_.parallel_for(n, 1, rows);
  else
    rows(0, n);
}

// The RMSNorm nd of rows of head_dim in place (q and k norms; check_supported refuses other kinds), on the pool
// when the batch is large.
void Engine::head_norm_rows(float* v, const models::NormDesc& nd, std::span<const float> w, int64_t rows,
                            int64_t head_dim) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kern::cpu::rms_norm(v + r * head_dim, w.data(), nd.eps, head_dim, v + r * head_dim, kern::cpu::Numerics::kRunc);
  };
  if (rows * head_dim >= (1 << 14))
    pool_.parallel_for(rows, 8, body);
  else
    body(0, rows);
}

// x += scale * y over count values (the residual adds), on the pool when the batch is large.
void Engine::add_rows(float* x, const float* y, int64_t count, float scale) {
  if (scale == 1.0f)
    elementwise(count, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] += y[i];
    });
  else
    elementwise(count, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] += scale * y[i];
    });
}

// Attention of layer l (a) on the branch xb_ [n, dim] of the n new tokens (positions pos..pos+n-1), over
// the cache (on sliding layers only the last a.window positions); the output projection back into xb_.
// Kernels: infer/cpu_attention.h (register-tiled blocked path for prefill batches of >= 8 tokens, head_dim
// 64/128/192/256; one query at a time otherwise).
void Engine::attention(int64_t l, const models::AttnDesc& a, const StepNormSpans& w, int64_t pos, int64_t n) {
  const LayerWeights& L = layers_[static_cast<size_t>(l)];
  float* const qp = a.output_gate ? qg_.data() : q_.data();  // gated: per head [q | gate], split below
  if (n == 1 || !batch_pos_.empty()) {
    gemv_batch(pool_,
               {{&L.wq, opt_ptr(L.bq), qp}, {&L.wk, opt_ptr(L.bk), k_.data()}, {&L.wv, opt_ptr(L.bv), v_.data()}},
               xb_.data(), n);
  } else {
    gemm(pool_, L.wq, opt_ptr(L.bq), xb_.data(), n, qp);
    gemm(pool_, L.wk, opt_ptr(L.bk), xb_.data(), n, k_.data());
    gemm(pool_, L.wv, opt_ptr(L.bv), xb_.data(), n, v_.data());
  }
  lora_apply(l, LoraSite::kQ, xb_.data(), n, qp);
  lora_apply(l, LoraSite::kK, xb_.data(), n, k_.data());
  lora_apply(l, LoraSite::kV, xb_.data(), n, v_.data());
  const int64_t hd = a.head_dim;
  if (a.output_gate)
    for (int64_t r = 0; r < n * a.n_heads; ++r)
      std::memcpy(q_.data() + r * hd, qg_.data() + r * 2 * hd, static_cast<size_t>(hd) * sizeof(float));
  if (a.q_norm) head_norm_rows(q_.data(), *a.q_norm, w.q, n * a.n_heads, a.head_dim);  // pre-RoPE
  if (a.k_norm) head_norm_rows(k_.data(), *a.k_norm, w.k, n * a.n_kv_heads, a.head_dim);
  if (const int r = layer_rope_[static_cast<size_t>(l)]; r >= 0) {
    rope_rows(q_.data(), n, a.n_heads, ropes_[static_cast<size_t>(r)]);
    rope_rows(k_.data(), n, a.n_kv_heads, ropes_[static_cast<size_t>(r)]);
  }
  const AttentionShape s{a.n_heads, a.n_kv_heads, a.head_dim, a.score_scale, a.window};
  if (batch_pos_.empty()) {
    store_kv(l, pos, k_.data(), v_.data(), n);
    attn_.run(pool_, s, q_.data(), kv_rows(l), pos, n, att_.data());
  } else {  // decode_batch: row i is one token of slot batch_slot_[i] at batch_pos_[i]
    // Every row's keys and values first (a row reads only positions <= its own, so a slot's later rows stored before
    // its earlier rows attend change nothing), then all rows' attention in one pass over the pool.
    const int64_t kvd = a.n_kv_heads * hd;
    batch_kv_.clear();
    for (int64_t i = 0; i < n; ++i) {
      const auto r = static_cast<size_t>(i);
      store_kv(l, batch_slot_[r], batch_pos_[r], k_.data() + i * kvd, v_.data() + i * kvd, 1);
      batch_kv_.push_back(kv_rows(l, batch_slot_[r]));
    }
    attn_.rows_batch(pool_, s, q_.data(), batch_kv_, batch_pos_, att_.data());
  }
  if (a.output_gate)  // att *= sigmoid(gate), per head
    elementwise(n * a.n_heads * hd, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float g = qg_[(i / hd) * 2 * hd + hd + i % hd];
        att_[i] *= 1.0f / (1.0f + std::exp(-g));
      }
    });
  project(L.wo, opt_ptr(L.bo), att_.data(), n, xb_.data());
  lora_apply(l, LoraSite::kO, att_.data(), n, xb_.data());
}

// y [n, w.rows] = x [n, w.cols] W^T (+ bias): the GEMM, or in a batched decode step the GEMV of each row.
void Engine::project(const Mat& w, const float* bias, const float* x, int64_t n, float* y) {
  if (batch_pos_.empty())
    gemm(pool_, w, bias, x, n, y);
  else
    gemv_batch(pool_, {{&w, bias, y}}, x, n);
}

// The feed-forward network f on the branch xb_ [n, dim], back into xb_.
void Engine::ffn(int64_t l, const models::FfnDesc& f, const LayerWeights& L, int64_t n) {
  const int64_t H = f.hidden;
  auto gate_up = [&] {  // h1 = w_in·x, h3 = w_up·x
    if (n == 1 || !batch_pos_.empty())
      gemv_batch(pool_, {{&L.w1, opt_ptr(L.b1), h1_.data()}, {&L.w3, nullptr, h3_.data()}}, xb_.data(), n);
    else {
      gemm(pool_, L.w1, opt_ptr(L.b1), xb_.data(), n, h1_.data());
      gemm(pool_, L.w3, nullptr, xb_.data(), n, h3_.data());
    }
    lora_apply(l, LoraSite::kIn, xb_.data(), n, h1_.data());
    lora_apply(l, LoraSite::kUp, xb_.data(), n, h3_.data());
  };
  switch (f.activation) {
    case models::Activation::kSilu:  // SwiGLU: silu(h1) * h3
      gate_up();
      elementwise(n * H, [&](int64_t b, int64_t e) { silu_mul(h1_.data() + b, h3_.data() + b, e - b); });
      break;
    case models::Activation::kGeluTanhGated:  // GeGLU: gelu_tanh(h1) * h3
      gate_up();
      elementwise(n * H, [&](int64_t b, int64_t e) {
        gelu_tanh_inplace(h1_.data() + b, e - b);
        for (int64_t i = b; i < e; ++i) h1_[i] *= h3_[i];
      });
      break;
    case models::Activation::kGeluTanh:  // GPT-2 MLP: gelu_tanh(h1)
      project(L.w1, opt_ptr(L.b1), xb_.data(), n, h1_.data());
      lora_apply(l, LoraSite::kIn, xb_.data(), n, h1_.data());
      elementwise(n * H, [&](int64_t b, int64_t e) { gelu_tanh_inplace(h1_.data() + b, e - b); });
      break;
  }
  project(L.w2, opt_ptr(L.b2), h1_.data(), n, xb_.data());
  lora_apply(l, LoraSite::kOut, h1_.data(), n, xb_.data());
}

// One residual step of layer l on x_ [n, dim]: branch = pre_norm(x); branch = op(branch);
// branch = post_norm(branch); x += residual_scale * branch.
void Engine::run_step(int64_t l, size_t i, int64_t pos, int64_t n) {
  const models::Step& s = desc_.layers[static_cast<size_t>(l)].steps[i];
  const LayerWeights& L = layers_[static_cast<size_t>(l)];
  const StepNormSpans& w = step_norms_[static_cast<size_t>(l)][i];
  const int64_t D = desc_.dim;
  float* x = x_.data();
  if (s.pre_norm)
    norm_rows(x, *s.pre_norm, w.pre, w.pre_bias, n, xb_.data());
  else
    std::memcpy(xb_.data(), x, static_cast<size_t>(n * D) * sizeof(float));
  switch (s.kind) {
    case models::StepKind::kAttention:
      attention(l, s.attn, w, pos, n);
      break;
    case models::StepKind::kFfn:
      ffn(l, s.ffn, L, n);
      break;
    case models::StepKind::kLinearAttention:
      linear_attention(l, s.deltanet, n);
      break;
  }
  if (s.post_norm) norm_rows(xb_.data(), *s.post_norm, w.post, {}, n, xb_.data());
  add_rows(x, xb_.data(), n * D, s.residual_scale);
}

void Engine::forward_cpu(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  begin_state(pos);
  embed(tokens, pos, x_.data());
  for (RopeTable& t : ropes_)
    kern::cpu::rope_half_tables(n, t.freq, pos, kern::cpu::Numerics::kRunc, t.cos.data(), t.sin.data());
  for (size_t l = 0; l < desc_.layers.size(); ++l)
    for (size_t i = 0; i < desc_.layers[l].steps.size(); ++i) run_step(static_cast<int64_t>(l), i, pos, n);
  state_pos_ = pos + n;
  head(x_.data(), n, all_logits != nullptr, all_logits);
}

// logits = cap * tanh(logits / cap) when the model soft-caps its logits (Gemma's final_logit_softcapping).
void Engine::soft_cap(float* logits, int64_t count) {
  const float cap = desc_.head.softcap;
  if (cap <= 0.0f) return;
  elementwise(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  });
}

void Engine::head(const float* x, int64_t n, bool all, std::vector<float>* all_logits) {
  const auto& c = model_.config;
  const int64_t first = all ? 0 : n - 1;
  const int64_t m = n - first;
  norm_rows(x + first * c.dim, desc_.head.norm, norm_, norm_b_, m, xb_.data());
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
  if (mil_ && !lora_on(slot_) && mil_->run(tokens, pos, all_logits, stats_)) return logits_.data();
  for (int64_t b = 0; b < n; b += chunk_) {
    const int64_t m = std::min(chunk_, n - b);
    forward_cpu(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(m)), pos + b, all_logits);
  }
  stats_.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return logits_.data();
}

const float* Engine::decode_batch(std::span<const int32_t> tokens, std::span<const int64_t> pos,
                                  std::span<const int64_t> slots) {
  const auto& c = model_.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  ANELAB_CHECK(n >= 1 && n <= rows_ && pos.size() == tokens.size() && slots.size() == tokens.size(), "infer",
               "a batched decode step takes 1 to ", rows_, " tokens with a position and a slot each, got ",
               tokens.size(), " / ", pos.size(), " / ", slots.size());
  if (n == 1) {  // decode itself (its fused GEMVs), on the row's slot
    const int64_t keep = slot_;
    use_slot(slots[0]);
    const float* l = decode(tokens[0], pos[0]);
    slot_ = keep;
    std::memcpy(batch_logits_.data(), l, static_cast<size_t>(c.vocab_size) * sizeof(float));
    return batch_logits_.data();
  }
  ANELAB_CHECK(n_lin_layers_ == 0, "infer",
               "a batched decode step is not supported for a model with linear-attention "
               "layers (their recurrent state holds one sequence)");
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(i);
    ANELAB_CHECK(slots[r] >= 0 && slots[r] < opt_.slots, "infer", "slot ", slots[r], " outside the engine's ",
                 opt_.slots, " slots");
    ANELAB_CHECK(pos[r] >= 0 && pos[r] < ctx_, "infer", "position ", pos[r], " outside the context of ", ctx_,
                 " positions");
    for (int64_t j = i - 1; j >= 0; --j)  // the slot's latest earlier row: this row must be its next position
      if (slots[static_cast<size_t>(j)] == slots[r]) {
        ANELAB_CHECK(pos[r] == pos[static_cast<size_t>(j)] + 1, "infer", "slot ", slots[r], " at position ", pos[r],
                     " after its row at position ", pos[static_cast<size_t>(j)],
                     " in one batched step (a slot's rows take consecutive positions)");
        break;
      }
  }
  if (static_cast<int64_t>(batch_logits_.size()) < n * c.vocab_size)
    batch_logits_.resize(static_cast<size_t>(n * c.vocab_size));  // more rows than slots: a slot's run of positions
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(i);
    embed(tokens.subspan(r, 1), pos[r], x_.data() + i * c.dim);
    for (RopeTable& t : ropes_) {
      const int64_t half = t.dims / 2;
      kern::cpu::rope_half_tables(1, t.freq, pos[r], kern::cpu::Numerics::kRunc, t.cos.data() + i * half,
                                  t.sin.data() + i * half);
    }
  }
  batch_pos_ = pos;
  batch_slot_ = slots;
  for (size_t l = 0; l < desc_.layers.size(); ++l)
    for (size_t i = 0; i < desc_.layers[l].steps.size(); ++i) run_step(static_cast<int64_t>(l), i, 0, n);
  batch_pos_ = {};
  batch_slot_ = {};
  norm_rows(x_.data(), desc_.head.norm, norm_, norm_b_, n, xb_.data());
  gemv_batch(pool_, {{&out_, nullptr, batch_logits_.data()}}, xb_.data(), n);
  soft_cap(batch_logits_.data(), n * c.vocab_size);
  return batch_logits_.data();
}

const float* Engine::decode_run(std::span<const int32_t> tokens, int64_t pos) {
  const auto n = static_cast<int64_t>(tokens.size());
  run_pos_.resize(tokens.size());
  run_slot_.assign(tokens.size(), slot_);
  for (int64_t i = 0; i < n; ++i) run_pos_[static_cast<size_t>(i)] = pos + i;
  return decode_batch(tokens, run_pos_, run_slot_);
}

const float* Engine::decode(int32_t token, int64_t pos) {
  ANELAB_CHECK(pos >= 0 && pos < ctx_, "infer", "position ", pos, " outside the context of ", ctx_, " positions");
  const int32_t t[1] = {token};
  forward_cpu(t, pos, nullptr);
  return logits_.data();
}

}  // namespace anelab::infer

#include "models/formats/model.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/quant/blocks.h"

namespace anelab::models {

std::optional<quant::BlockType> block_type_of(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return std::nullopt;
    case DType::kQ8_0:
      return quant::BlockType::kQ8_0;
    case DType::kQ4_0:
      return quant::BlockType::kQ4_0;
    case DType::kQ5_0:
      return quant::BlockType::kQ5_0;
    case DType::kQ5_1:
      return quant::BlockType::kQ5_1;
    case DType::kQ4_K:
      return quant::BlockType::kQ4_K;
    case DType::kQ5_K:
      return quant::BlockType::kQ5_K;
    case DType::kQ6_K:
      return quant::BlockType::kQ6_K;
  }
  fail("model", "dtype id ", int(t), " is not a DType");
}

DType dtype_of(quant::BlockType t) {
  switch (t) {
    case quant::BlockType::kQ8_0:
      return DType::kQ8_0;
    case quant::BlockType::kQ4_0:
      return DType::kQ4_0;
    case quant::BlockType::kQ5_0:
      return DType::kQ5_0;
    case quant::BlockType::kQ5_1:
      return DType::kQ5_1;
    case quant::BlockType::kQ4_K:
      return DType::kQ4_K;
    case quant::BlockType::kQ5_K:
      return DType::kQ5_K;
    case quant::BlockType::kQ6_K:
      return DType::kQ6_K;
  }
  fail("model", "block type ", int(t), " is not a quant::BlockType");
}

const char* dtype_name(DType t) {
  if (t == DType::kF32) return "fp32";
  if (t == DType::kF16) return "fp16";
  if (t == DType::kBF16) return "bf16";
  return quant::traits(*block_type_of(t)).name;
}

bool is_block_quantized(DType t) { return block_type_of(t).has_value(); }

int64_t dtype_block(DType t) {
  const std::optional<quant::BlockType> b = block_type_of(t);
  return b ? quant::traits(*b).block_values : 1;
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32" || s == "F32") return DType::kF32;
  if (s == "fp16" || s == "f16" || s == "float16" || s == "F16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16" || s == "BF16") return DType::kBF16;
  if (const std::optional<quant::BlockType> b = quant::find_type(s)) return dtype_of(*b);
  std::string names;
  for (const quant::TypeTraits& r : quant::kTypes) names += std::string(", ") + r.name;
  fail("model", "unknown dtype '", s, "': use one of fp32, fp16, bf16", names);
}

int64_t dtype_nbytes(DType t, int64_t n) {
  if (n < 0) return -1;
  if (const std::optional<quant::BlockType> b = block_type_of(t)) {
    const quant::TypeTraits& r = quant::traits(*b);
    return n % r.block_values ? -1 : n / r.block_values * r.block_bytes;
  }
  return n * (t == DType::kF32 ? 4 : 2);
}

namespace {
void check_range(const std::string& where, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    fail("model", where, ": config field ", field, " = ", v, " is outside [", lo, ", ", hi,
         "]; the file is corrupt or not a supported model");
}
}  // namespace

namespace {
void validate_rope_scaling(const RopeScaling& s, const std::string& where) {
  if (s.type != RopeScalingType::kLlama3) return;
  if (!(s.factor >= 1.0f && s.factor <= 1024.0f))
    fail("model", where, ": rope_scaling factor ", s.factor, " must be in [1, 1024]");
  if (!(s.low_freq_factor > 0.0f && s.high_freq_factor > s.low_freq_factor && std::isfinite(s.high_freq_factor)))
    fail("model", where, ": rope_scaling low_freq_factor ", s.low_freq_factor, " and high_freq_factor ",
         s.high_freq_factor, " must satisfy 0 < low < high");
  check_range(where, "rope_scaling original_max_pos", s.original_max_pos, 1, 1 << 22);
}
}  // namespace

void validate_config_fields(const ModelConfig& c, const std::string& where) {
  if (c.arch.empty()) fail("model", where, ": config field arch is empty");
  check_range(where, "dim", c.dim, 1, 1 << 16);
  check_range(where, "hidden_dim", c.hidden_dim, 1, 1 << 18);
  check_range(where, "n_layers", c.n_layers, 1, 1024);
  check_range(where, "n_heads", c.n_heads, 1, 1024);
  check_range(where, "n_kv_heads", c.n_kv_heads, 1, c.n_heads);
  check_range(where, "head_dim", c.head_dim, 1, 4096);
  check_range(where, "vocab_size", c.vocab_size, 1, 1 << 22);
  check_range(where, "max_seq_len", c.max_seq_len, 1, 1 << 22);
  if (c.n_heads % c.n_kv_heads)
    fail("model", where, ": n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads);
  if (c.rope_style != RopeStyle::kNone && c.head_dim % 2)
    fail("model", where, ": head_dim ", c.head_dim, " must be even for RoPE");
  if (!(c.norm_eps > 0.0f && c.norm_eps < 1.0f)) fail("model", where, ": norm_eps ", c.norm_eps, " must be in (0, 1)");
  check_range(where, "n_heads * head_dim", c.q_dim(), 1, 1 << 18);
  if (!std::isfinite(c.rope_theta) || (c.rope_style != RopeStyle::kNone && !(c.rope_theta > 1.0f)))
    fail("model", where, ": rope_theta ", c.rope_theta, " must be a finite value > 1");
  validate_rope_scaling(c.rope_scaling, where);
  if (c.learned_pos != (c.rope_style == RopeStyle::kNone))
    fail("model", where, ": learned positions and rope_style '", rope_style_name(c.rope_style),
         "' contradict each other (exactly one positional scheme is needed)");
  auto finite_in = [&](const char* field, float v, float lo, float hi) {
    if (!(std::isfinite(v) && v >= lo && v <= hi))
      fail("model", where, ": config field ", field, " = ", v, " is outside [", lo, ", ", hi, "]");
  };
  // The architecture parameters' ranges are the architecture's table's (validate_config); here only what any
  // number must be.
  for (const auto& [name, v] : c.params)
    if (!std::isfinite(v.value()))
      fail("model", where, ": config parameter ", name, " = ", v.value(), " is not finite");
  finite_in("rope_fraction", c.rope_fraction, 0.0f, 1.0f);
  if (c.rope_style != RopeStyle::kNone && (c.rope_fraction <= 0.0f || int64_t(c.rope_fraction * c.head_dim) % 2))
    fail("model", where, ": rope_fraction ", c.rope_fraction, " of head_dim ", c.head_dim,
         " must rotate an even, non-zero number of dims");
  check_range(where, "full_attention_interval", c.full_attention_interval, 0, 1024);
  if (c.full_attention_interval > 0) {
    check_range(where, "linear_k_heads", c.linear_k_heads, 1, 1024);
    check_range(where, "linear_v_heads", c.linear_v_heads, 1, 4096);
    check_range(where, "linear_k_dim", c.linear_k_dim, 1, 4096);
    check_range(where, "linear_v_dim", c.linear_v_dim, 1, 4096);
    check_range(where, "linear_conv_kernel", c.linear_conv_kernel, 2, 64);
    if (c.linear_v_heads % c.linear_k_heads)
      fail("model", where, ": linear_v_heads ", c.linear_v_heads, " is not a multiple of linear_k_heads ",
           c.linear_k_heads);
  }
}

namespace {
std::string rope_scaling_text(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return "";
  std::ostringstream os;
  os << ", scaling " << rope_scaling_name(s.type) << " factor " << s.factor << " low " << s.low_freq_factor << " high "
     << s.high_freq_factor << " original " << s.original_max_pos;
  return os.str();
}
}  // namespace

std::string describe_config(const ModelConfig& c) {
  std::ostringstream os;
  os << "  arch            " << c.arch << "\n  dim             " << c.dim << "\n  hidden_dim      " << c.hidden_dim
     << "\n  n_layers        " << c.n_layers << "\n  n_heads         " << c.n_heads << "\n  n_kv_heads      "
     << c.n_kv_heads << "\n  head_dim        " << c.head_dim << "\n  vocab_size      " << c.vocab_size
     << "\n  max_seq_len     " << c.max_seq_len << "\n  norm            " << norm_type_name(c.norm) << " (eps "
     << c.norm_eps << ")\n  activation      " << activation_name(c.activation) << "\n  positions       "
     << (c.learned_pos ? "learned" : std::string("rope ") + rope_style_name(c.rope_style)) << " (theta " << c.rope_theta
     << rope_scaling_text(c.rope_scaling) << ")\n  tied_embeddings " << (c.tied_embeddings ? "yes" : "no")
     << "\n  biases          qkv " << (c.qkv_bias ? "yes" : "no") << ", attn_out " << (c.attn_out_bias ? "yes" : "no")
     << ", mlp " << (c.mlp_bias ? "yes" : "no") << "\n";
  if (c.rope_fraction != 1.0f) os << "  rope fraction   " << c.rope_fraction << " of head_dim\n";
  if (c.attn_output_gate) os << "  attention       sigmoid output gate\n";
  if (c.full_attention_interval > 0)
    os << "  linear attn     Gated DeltaNet on layers l with (l + 1) % " << c.full_attention_interval
       << " != 0: " << c.linear_k_heads << " key heads of " << c.linear_k_dim << ", " << c.linear_v_heads
       << " value heads of " << c.linear_v_dim << ", conv kernel " << c.linear_conv_kernel << "\n";
  return os.str();
}

int64_t checked_numel(const std::vector<TensorSpec>& specs, const std::string& where) {
  int64_t n = 0;
  for (const auto& s : specs) {
    int64_t k = 1;
    for (int64_t d : s.shape) {
      if (d <= 0 || k > kMaxParams / d)
        fail("model", where, ": tensor ", s.name, " ", shape_string(s.shape), " exceeds ", kMaxParams, " elements");
      k *= d;
    }
    if (n > kMaxParams - k)
      fail("model", where, ": the config implies more than ", kMaxParams, " parameters; the file is corrupt");
    n += k;
  }
  return n;
}

// ---- Tensor ----

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const float* Tensor::f32() const {
  if (dtype != DType::kF32)
    fail("model", "tensor ", name, " is ", dtype_name(dtype), ", not fp32: use to_f32() for a converted copy");
  return reinterpret_cast<const float*>(data);
}

std::vector<float> Tensor::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  to_f32(0, numel(), out.data());
  return out;
}

void Tensor::to_f32(int64_t begin, int64_t count, float* out) const {
  if (begin < 0 || count < 0 || begin + count > numel())
    fail("model", "tensor ", name, ": element range [", begin, ", ", begin + count, ") outside ", numel(), " elements");
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, data + begin * 4, static_cast<size_t>(count) * 4);
      return;
    case DType::kF16:
      half_to_float(reinterpret_cast<const half_bits*>(data) + begin, out, static_cast<size_t>(count));
      return;
    case DType::kBF16:
      bf16_to_f32(reinterpret_cast<const uint16_t*>(data) + begin, out, count);
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: {
      const int64_t blk = dtype_block(dtype);
      if (begin % blk || count % blk)
        fail("model", "tensor ", name, ": ", dtype_name(dtype), " ranges must start and end on ", blk,
             "-element blocks");
      quant::dequantize(*block_type_of(dtype), data + dtype_nbytes(dtype, begin), out, count);
      return;
    }
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
std::string Tensor::shape_str() const { return shape_string(shape); }

// ---- Model ----

const Tensor* Model::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const Tensor& Model::tensor(std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string some;
  for (size_t i = 0; i < tensors_.size() && i < 6; ++i) some += (i ? ", " : "") + tensors_[i].name;
  fail("model", "no tensor '", name, "' in ", source_path.empty() ? "model" : source_path, " (", tensors_.size(),
       " tensors, e.g. ", some, "); see models/formats/model.h for the canonical names");
}

const Tensor& Model::output_weight() const {
  return config.tied_embeddings ? tensor("tok_embeddings") : tensor("output");
}

void Model::add_view(std::string name, DType dtype, std::vector<int64_t> shape, const uint8_t* data, int64_t nbytes,
                     std::shared_ptr<const void> owner) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d <= 0 || d > (int64_t{1} << 40) || n > (int64_t{1} << 40) / d)
      fail("model", "tensor ", t.name, ": invalid shape ", t.shape_str());
    n *= d;
  }
  if (is_block_quantized(dtype) && (t.shape.empty() || t.shape.back() % dtype_block(dtype)))
    fail("model", "tensor ", t.name, ": rows of ", t.shape.empty() ? 0 : t.shape.back(), " values are not whole ",
         dtype_name(dtype), " blocks of ", dtype_block(dtype));
  if (dtype_nbytes(dtype, n) != nbytes)
    fail("model", "tensor ", t.name, ": ", nbytes, " bytes do not match shape ", t.shape_str(), " of ",
         dtype_name(dtype), " (", dtype_nbytes(dtype, n), " bytes)");
  if (index_.count(t.name)) fail("model", "duplicate tensor ", t.name);
  t.data = data;
  t.nbytes = nbytes;
  t.owner = std::move(owner);
  index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
}

void Model::add_owned(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* p = buf->data();
  const auto n = static_cast<int64_t>(buf->size());
  add_view(std::move(name), dtype, std::move(shape), p, n, std::move(buf));
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.numel();
  return n;
}

int64_t Model::total_bytes() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes;
  return n;
}

// ---- conversions ----

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, 4);
  }
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) {
      dst[i] = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      dst[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

void f32_to_dtype(const float* src, DType t, uint8_t* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      float_to_half(src, reinterpret_cast<half_bits*>(dst), static_cast<size_t>(n));
      return;
    case DType::kBF16:
      f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n);
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      quant::quantize(*block_type_of(t), src, dst, n);
      return;
  }
}

}  // namespace anelab::models

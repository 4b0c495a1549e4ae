#include "models/quant/quant_mix.h"

#include <cctype>

#include "framework/core/thread_pool.h"
#include "models/arch/arch.h"
#include "models/io/export.h"

namespace anelab::models {
namespace {

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The canonical leaf ("wv") and layer index of "layers.N.leaf"; layer -1 for top-level tensors.
std::pair<std::string, int64_t> leaf_of(const std::string& name) {
  if (!name.starts_with("layers.")) return {name, -1};
  const size_t dot = name.find('.', 7);
  return {name.substr(dot + 1), std::stoll(name.substr(7, dot - 7))};
}

// llama.cpp's fallback for a row that is not whole blocks of t (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16).
DType fit_row(DType t, int64_t row) {
  if (row % dtype_block(t) == 0) return t;
  if (t == DType::kQ4_K) t = DType::kQ5_0;
  if (t == DType::kQ5_K) t = DType::kQ5_1;
  if (t == DType::kQ6_K) t = DType::kQ8_0;
  return row % dtype_block(t) == 0 ? t : DType::kF16;
}

}  // namespace

std::optional<QuantMix> parse_quant_mix(std::string_view s) {
  std::string l;
  for (char ch : s) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  if (l == "q8_0") return QuantMix::kQ8_0;
  if (l == "q4_0") return QuantMix::kQ4_0;
  if (l == "q4_k_m") return QuantMix::kQ4_K_M;
  if (l == "q5_k_s") return QuantMix::kQ5_K_S;
  if (l == "q5_k_m") return QuantMix::kQ5_K_M;
  return std::nullopt;
}

const char* quant_mix_name(QuantMix m) {
  switch (m) {
    case QuantMix::kQ8_0:
      return "q8_0";
    case QuantMix::kQ4_0:
      return "q4_0";
    case QuantMix::kQ4_K_M:
      return "q4_k_m";
    case QuantMix::kQ5_K_S:
      return "q5_k_s";
    case QuantMix::kQ5_K_M:
      return "q5_k_m";
  }
  return "?";
}

DType mix_dtype(const ModelConfig& c, const std::string& name, const std::vector<int64_t>& shape, DType src,
                QuantMix mix) {
  if (shape.size() < 2 || name == "pos_embeddings") return src;
  DType t = DType::kQ5_K;
  if (mix == QuantMix::kQ8_0) t = DType::kQ8_0;
  if (mix == QuantMix::kQ4_0) t = DType::kQ4_0;
  if (mix == QuantMix::kQ4_K_M) t = DType::kQ4_K;
  const auto [leaf, layer] = leaf_of(name);
  if (name == "output" || (name == "tok_embeddings" && c.tied_embeddings)) {
    t = mix == QuantMix::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  } else if (mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M) {
    // A fused attn_qkv in GGUF (the architecture table says which) is one tensor with wv in it: llama-quantize
    // counts it as an attn_v, so q and k take wv's type.
    const Arch* a = find_arch(c.arch);
    const bool attn_v = leaf == "wv" || (a && a->gguf_fused_qkv && (leaf == "wq" || leaf == "wk"));
    if ((attn_v || leaf == "w2" || leaf == "proj") && use_more_bits(layer, c.n_layers)) t = DType::kQ6_K;
  }
  return fit_row(t, shape.back());
}

Model quantize_model(const Model& m, QuantMix mix) {
  Model r = copy_header(m);
  ThreadPool& pool = ThreadPool::global();
  for (const Tensor& t : m.tensors()) {
    const DType d = mix_dtype(m.config, t.name, t.shape, t.dtype, mix);
    if (d == t.dtype) {
      r.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
      continue;
    }
    const int64_t rows = t.rows(), cols = t.cols(), row_bytes = dtype_nbytes(d, cols);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
    pool.parallel_for(rows, 1, [&](int64_t b, int64_t e) {
      std::vector<float> f(static_cast<size_t>(cols));
      for (int64_t i = b; i < e; ++i) {
        t.to_f32(i * cols, cols, f.data());
        f32_to_dtype(f.data(), d, bytes.data() + i * row_bytes, cols);
      }
    });
    r.add_owned(t.name, d, t.shape, std::move(bytes));
  }
  return r;
}

Model palettize_model(const Model& m, int bits, int64_t group) {
  std::vector<const Tensor*> todo;
  for (const Tensor& t : m.tensors()) {
    const std::string leaf = leaf_of(t.name).first;
    if (t.name.starts_with("layers.") && t.shape.size() == 2 &&
        (leaf == "wq" || leaf == "wk" || leaf == "wv" || leaf == "wo" || leaf == "w1" || leaf == "w2" || leaf == "w3"))
      todo.push_back(&t);
  }
  std::map<std::string, std::shared_ptr<const quant::Palette>> pal;
  std::vector<std::shared_ptr<const quant::Palette>> made(todo.size());
  ThreadPool::global().parallel_for(static_cast<int64_t>(todo.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Tensor& t = *todo[static_cast<size_t>(i)];
      const int64_t g = group > 0 && t.rows() % group == 0 ? group : t.rows();
      made[static_cast<size_t>(i)] =
          std::make_shared<const quant::Palette>(quant::palettize(t.to_f32(), t.rows(), t.cols(), bits, g));
    }
  });
  for (size_t i = 0; i < todo.size(); ++i) pal[todo[i]->name] = made[i];
  Model r = copy_header(m);
  for (const Tensor& t : m.tensors()) {
    const auto it = pal.find(t.name);
    if (it == pal.end()) {
      r.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
      continue;
    }
    const std::vector<float> v = quant::palette_values(*it->second);
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_nbytes(DType::kF16, t.numel())));
    f32_to_dtype(v.data(), DType::kF16, bytes.data(), t.numel());  // exact: the values are fp16 table entries
    r.add_owned(t.name, DType::kF16, t.shape, std::move(bytes));
  }
  r.palettes = std::move(pal);
  return r;
}

}  // namespace anelab::models

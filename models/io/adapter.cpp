#include "models/io/adapter.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/gguf.h"
#include "models/formats/safetensors.h"
#include "models/io/export.h"

namespace anelab::models {
namespace {

namespace fs = std::filesystem;

struct AdapterModule {
  const char* canonical;  // leaf of layers.N.<leaf>
  const char* peft;       // PEFT module path under layers.N
  const char* gguf;       // llama.cpp tensor under blk.N
};
// Qwen3.5's Gated DeltaNet projections: transformers' Qwen3_5GatedDeltaNet (modeling_qwen3_5.py) under
// linear_attn; llama.cpp's qwen35 tensors (src/llama-arch.cpp LLM_TENSOR_ATTN_QKV / ATTN_GATE / SSM_BETA / SSM_ALPHA /
// SSM_OUT; its src/models/qwen35.cpp graph runs each through build_lora_mm, so --lora adapts them).
constexpr AdapterModule kAdapterModules[] = {{"wq", "self_attn.q_proj", "attn_q"},
                                             {"wk", "self_attn.k_proj", "attn_k"},
                                             {"wv", "self_attn.v_proj", "attn_v"},
                                             {"wo", "self_attn.o_proj", "attn_output"},
                                             {"w1", "mlp.gate_proj", "ffn_gate"},
                                             {"w3", "mlp.up_proj", "ffn_up"},
                                             {"w2", "mlp.down_proj", "ffn_down"},
                                             {"ssm_qkv", "linear_attn.in_proj_qkv", "attn_qkv"},
                                             {"ssm_z", "linear_attn.in_proj_z", "attn_gate"},
                                             {"ssm_b", "linear_attn.in_proj_b", "ssm_beta"},
                                             {"ssm_a", "linear_attn.in_proj_a", "ssm_alpha"},
                                             {"ssm_out", "linear_attn.out_proj", "ssm_out"}};
constexpr const char* kAdaptable = "q, k, v, o, gate, up, down and Qwen3.5's linear_attn projections";

// (layer, module) of a canonical tensor name "layers.N.leaf"; throws for a tensor no adapter file can name.
std::pair<int64_t, const AdapterModule*> adapter_module(const std::string& tensor) {
  static const std::regex re(R"(layers\.(\d+)\.(\w+))");
  std::smatch m;
  if (std::regex_match(tensor, m, re))
    for (const AdapterModule& a : kAdapterModules)
      if (m[2] == a.canonical) return {std::stoll(m[1]), &a};
  fail("adapter", "tensor ", tensor, " cannot be adapted (", kAdaptable, " only)");
}

bool is_qk(const AdapterModule* m) {
  return std::strcmp(m->canonical, "wq") == 0 || std::strcmp(m->canonical, "wk") == 0;
}

// B [out, r] with its q/k rows moved from one RoPE order to another (other projections unchanged).
std::vector<float> reorder_b(const LoraPair& p, const AdapterModule* m, const ModelConfig& c, RopeStyle from,
                             RopeStyle to) {
  if (!is_qk(m) || from == to || from == RopeStyle::kNone || to == RopeStyle::kNone) return p.b;
  Tensor t;
  t.name = p.tensor, t.dtype = DType::kF32, t.shape = {p.out, int64_t(p.b.size()) / p.out};
  t.data = reinterpret_cast<const uint8_t*>(p.b.data()), t.nbytes = int64_t(p.b.size() * 4);
  const Tensor r = permute_rope_rows(t, c.head_dim, from, to);
  std::vector<float> out(p.b.size());
  std::memcpy(out.data(), r.data, size_t(r.nbytes));
  return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(b, b + v.size() * 4);
}

// The pair's A [r, in] and B [out, r] between anelab's order and the GGUF's (Arch::gguf_matrix_order: B's rows and A's
// columns as the base's rows and columns are stored); to_gguf false: back.
void gguf_order(const ModelConfig& c, const Arch& arch, int64_t r, LoraPair& p, bool to_gguf) {
  if (!arch.gguf_matrix_order) return;
  const GgufMatrixOrder o = arch.gguf_matrix_order(c, p.tensor, p.out, p.in);
  if (!o.rows.empty()) {
    std::vector<float> b(p.b.size());
    for (int64_t i = 0; i < p.out; ++i) {
      const int64_t s = to_gguf ? o.rows[size_t(i)] : i, d = to_gguf ? i : o.rows[size_t(i)];
      std::memcpy(b.data() + d * r, p.b.data() + s * r, size_t(r) * 4);
    }
    p.b = std::move(b);
  }
  if (!o.cols.empty()) {
    std::vector<float> a(p.a.size());
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < p.in; ++j) {
        const int64_t s = to_gguf ? o.cols[size_t(j)] : j, d = to_gguf ? j : o.cols[size_t(j)];
        a[size_t(k * p.in + d)] = p.a[size_t(k * p.in + s)];
      }
    p.a = std::move(a);
  }
}

RopeStyle gguf_rope_of(const ModelConfig& c, const std::string& where) {
  return arch_of(c.arch, where).gguf_rope.value_or(c.rope_style);
}

// The adapted projection's [out, in] in the base of config c (from its canonical tensor table).
std::pair<int64_t, int64_t> base_shape(const ModelConfig& c, const std::string& tensor, const std::string& where) {
  for (const TensorSpec& t : canonical_tensors(c))
    if (t.name == tensor && t.shape.size() == 2) return {t.shape[0], t.shape[1]};
  fail("adapter", where, ": tensor ", tensor, " is not in the base model (", c.arch, ", ", c.n_layers, " layers)");
}

}  // namespace

void write_peft_adapter(const LoraAdapter& a, const ModelConfig& c, const std::string& dir) {
  std::vector<StWrite> t;
  std::vector<std::string> modules;
  for (const LoraPair& p : a.pairs) {
    const auto [layer, m] = adapter_module(p.tensor);
    const std::string key = "base_model.model.model.layers." + std::to_string(layer) + "." + m->peft;
    t.push_back({key + ".lora_A.weight", "F32", {a.rank, p.in}, f32_bytes(p.a)});
    t.push_back({key + ".lora_B.weight",
                 "F32",
                 {p.out, a.rank},
                 f32_bytes(reorder_b(p, m, c, c.rope_style, RopeStyle::kRotateHalf))});
    const std::string mod = std::string(m->peft).substr(std::string(m->peft).find('.') + 1);
    if (std::find(modules.begin(), modules.end(), mod) == modules.end()) modules.push_back(mod);
  }
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", a.rank},
      {"lora_alpha", a.alpha},
      {"lora_dropout", 0.0},
      {"target_modules", modules},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"base_model_name_or_path", a.base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.base_model)}};
  const std::string tmp = dir + ".tmp." + std::to_string(platform::process_id());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_file_atomic(tmp + "/adapter_config.json", j.dump(2) + "\n");
  const std::vector<uint8_t> img = build_safetensors(t);
  write_file_atomic(tmp + "/adapter_model.safetensors", img.data(), img.size());
  if (fs::exists(dir)) fs::remove_all(dir);
  fs::rename(tmp, dir);
}

void write_gguf_adapter(const LoraAdapter& a, const ModelConfig& c, const std::string& path) {
  const Arch& arch = arch_of(c.arch, path);
  if (arch.gguf_fused_qkv)
    fail("adapter", path, ": the ", c.arch,
         " GGUF fuses q/k/v into attn_qkv; a GGUF LoRA adapter for it is not written");
  GgufWriter w;
  w.add_str("general.architecture", c.arch);
  w.add_str("general.type", "adapter");
  w.add_str("adapter.type", "lora");
  w.add_f32("adapter.lora.alpha", a.alpha);
  const RopeStyle want = gguf_rope_of(c, path);
  for (const LoraPair& p : a.pairs) {
    const auto [layer, m] = adapter_module(p.tensor);
    const std::string base = "blk." + std::to_string(layer) + "." + m->gguf + ".weight";
    LoraPair g = p;
    g.b = reorder_b(p, m, c, c.rope_style, want);
    gguf_order(c, arch, a.rank, g, true);
    w.add_tensor(base + ".lora_a", kGgmlF32, {p.in, a.rank}, f32_bytes(g.a));
    w.add_tensor(base + ".lora_b", kGgmlF32, {a.rank, p.out}, f32_bytes(g.b));
  }
  w.write(path);
}

LoraAdapter read_lora_adapter(const std::string& path, const ModelConfig& c) {
  LoraAdapter a;
  std::map<std::string, LoraPair> pairs;  // by canonical tensor
  RopeStyle file_rope = RopeStyle::kRotateHalf;
  bool gguf = false;  // (B's rows and A's columns in the GGUF's order)
  auto put = [&](const std::string& tensor, bool is_a, const std::vector<int64_t>& shape, std::vector<float> v) {
    const auto [out, in] = base_shape(c, tensor, path);
    LoraPair& p = pairs[tensor];
    p.tensor = tensor, p.in = in, p.out = out;
    const int64_t r = is_a ? shape[0] : shape[1];
    if (a.rank == 0) a.rank = r;
    const std::vector<int64_t> want = is_a ? std::vector<int64_t>{a.rank, in} : std::vector<int64_t>{out, a.rank};
    if (shape != want)
      fail("adapter", path, ": ", tensor, is_a ? " lora_A" : " lora_B", " has shape ", shape_string(shape),
           ", the base needs ", shape_string(want));
    (is_a ? p.a : p.b) = std::move(v);
  };
  if (fs::is_directory(path)) {
    const std::string cfg_path = path + "/adapter_config.json";
    const auto j = nlohmann::json::parse(read_file_text(cfg_path), nullptr, false);
    if (!j.is_object() || !j.contains("lora_alpha") || !j["lora_alpha"].is_number())
      fail("adapter", cfg_path, ": not a PEFT adapter config (no numeric lora_alpha)");
    a.alpha = j["lora_alpha"].get<float>();
    if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      a.base_model = j["base_model_name_or_path"].get<std::string>();
    const std::string st = path + "/adapter_model.safetensors";
    auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(st));
    static const std::regex re(R"(base_model\.model\.model\.layers\.(\d+)\.(\w+\.\w+)\.lora_(A|B)\.weight)");
    for (const auto& [name, t] : parse_safetensors(bytes->data(), bytes->size(), bytes, st)) {
      std::smatch m;
      const AdapterModule* mod = nullptr;
      if (std::regex_match(name, m, re))
        for (const AdapterModule& am : kAdapterModules)
          if (m[2] == am.peft) mod = &am;
      if (!mod) fail("adapter", st, ": tensor ", name, " is not a LoRA A/B of ", kAdaptable);
      if (t.dtype != DType::kF32 || t.shape.size() != 2) fail("adapter", st, ": tensor ", name, " is not 2-D F32");
      std::vector<float> v(size_t(t.nbytes / 4));
      std::memcpy(v.data(), t.data, size_t(t.nbytes));
      put("layers." + m[1].str() + "." + mod->canonical, m[3] == "A", t.shape, std::move(v));
    }
  } else {
    const GgufFile g = read_gguf_file(path);
    if (g.get_str("general.type", path) != "adapter" || g.get_str("adapter.type", path) != "lora")
      fail("adapter", path, ": not a GGUF LoRA adapter (general.type 'adapter', adapter.type 'lora')");
    if (g.get_str("general.architecture", path) != c.arch)
      fail("adapter", path, ": adapter for architecture ", g.get_str("general.architecture", path), ", the base is ",
           c.arch);
    a.alpha = float(g.get_num("adapter.lora.alpha", 0.0));
    file_rope = gguf_rope_of(c, path);
    gguf = true;
    static const std::regex re(R"(blk\.(\d+)\.(\w+)\.weight\.lora_(a|b))");
    for (const GgufTensorInfo& t : g.tensors) {
      std::smatch m;
      const AdapterModule* mod = nullptr;
      if (std::regex_match(t.name, m, re))
        for (const AdapterModule& am : kAdapterModules)
          if (m[2] == am.gguf) mod = &am;
      if (!mod || t.ggml_type != kGgmlF32 || t.ne.size() != 2)
        fail("adapter", path, ": tensor ", t.name, " is not an F32 lora_a/lora_b of ", kAdaptable);
      std::vector<float> v(size_t(t.nbytes / 4));
      std::memcpy(v.data(), t.data, size_t(t.nbytes));
      put("layers." + m[1].str() + "." + mod->canonical, m[3] == "a", {t.ne[1], t.ne[0]}, std::move(v));
    }
  }
  if (pairs.empty()) fail("adapter", path, ": no LoRA tensors");
  if (!(a.alpha > 0)) fail("adapter", path, ": lora alpha ", a.alpha, " is not positive");
  for (auto& [name, p] : pairs) {
    if (p.a.empty() || p.b.empty()) fail("adapter", path, ": ", name, " has only one of lora_A / lora_B");
    if (gguf) gguf_order(c, arch_of(c.arch, path), a.rank, p, false);
    p.b = reorder_b(p, adapter_module(name).second, c, file_rope, c.rope_style);
    a.pairs.push_back(std::move(p));
  }
  return a;
}

void merge_lora(Model& m, const LoraAdapter& a, float s) {
  const float k = s * a.scale();
  Model r = copy_header(m);
  std::map<std::string, const LoraPair*> by;
  for (const LoraPair& p : a.pairs) by[p.tensor] = &p;
  for (const Tensor& t : m.tensors()) {
    const auto it = by.find(t.name);
    if (it == by.end()) {
      r.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
      continue;
    }
    const LoraPair& p = *it->second;
    if (t.shape != std::vector<int64_t>{p.out, p.in})
      fail("adapter", "tensor ", t.name, " ", t.shape_str(), " does not fit the adapter's [", p.out, ", ", p.in, "]");
    std::vector<float> w = t.to_f32();
    for (int64_t o = 0; o < p.out; ++o)
      for (int64_t i = 0; i < p.in; ++i) {
        float acc = 0;
        for (int64_t j = 0; j < a.rank; ++j) acc += p.b[size_t(o * a.rank + j)] * p.a[size_t(j * p.in + i)];
        w[size_t(o * p.in + i)] += k * acc;
      }
    r.add_owned(t.name, DType::kF32, t.shape, f32_bytes(w));
  }
  m = std::move(r);
}

}  // namespace anelab::models

#include "models/presets.h"

#include <cmath>
#include <map>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/model_config_json.h"

namespace anelab::models {
namespace {

// Every architecture's presets (models/arch/<name>.cpp), by name.
const std::map<std::string, ModelConfig>& registry() {
  static const std::map<std::string, ModelConfig> r = [] {
    std::map<std::string, ModelConfig> m;
    for (const Arch* a : architectures())
      for (const auto& [name, c] : a->presets)
        if (!m.emplace(name, c).second) fail("model", "preset ", name, " is defined twice (", a->name, ")");
    return m;
  }();
  return r;
}

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Init { kNormal, kOnes, kZeros };
Init init_of(const std::string& name) {
  if (name.ends_with("_bias") || name.ends_with(".bq") || name.ends_with(".bk") || name.ends_with(".bv") ||
      name.ends_with(".bo"))
    return Init::kZeros;
  if (name.ends_with("norm")) return Init::kOnes;
  return Init::kNormal;
}
}  // namespace

const ModelConfig& preset(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("model", "unknown preset '", name, "' (known: ", known, ")");
  }
  return it->second;
}

ModelConfig preset_with_shape(const std::string& name, const std::string& shape, const char* component) {
  if (shape.empty()) return preset(name);
  nlohmann::json j = model_config_to_json(preset(name)), o;
  try {
    o = nlohmann::json::parse(shape);
  } catch (const nlohmann::json::exception& e) {
    fail(component, "--shape is not JSON: ", e.what());
  }
  if (!o.is_object()) fail(component, "--shape must be a JSON object of model config fields, got ", shape);
  for (const auto& [k, v] : o.items()) {
    if (!j.contains(k))
      fail(component, "--shape: '", k, "' is not a model config field (", j.dump().substr(0, 60), "...)");
    j[k] = v;
  }
  return model_config_from_json(j, "--shape", component, "");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& [k, c] : registry()) v.push_back(k);
  return v;
}

std::vector<float> norm_offsets(const ModelConfig& c) {
  const ModelDesc d = describe_model(c);
  std::map<std::string, float, std::less<>> offset;
  offset[d.head.norm.weight] = d.head.norm.offset;
  for (const LayerDesc& l : d.layers)
    for (const Step& s : l.steps)
      for (const StepNorm& n : step_norms(s, d.dim)) offset[n.norm->weight] = n.norm->offset;
  std::vector<float> v;
  for (const TensorSpec& t : desc_weights(d)) {
    auto it = offset.find(t.name);
    v.push_back(it == offset.end() ? 0.0f : it->second);
  }
  return v;
}

void random_init(const TensorSpec& spec, float norm_offset, uint64_t seed, size_t tensor_index, int64_t begin,
                 int64_t count, float* out) {
  const Init init = init_of(spec.name);
  if (init != Init::kNormal) {
    std::fill(out, out + count, init == Init::kOnes ? 1.0f - norm_offset : 0.0f);
    return;
  }
  const uint64_t key = splitmix64(seed ^ splitmix64(0x51ed270b0a5ull + tensor_index));
  const int64_t p0 = begin / 2, p1 = (begin + count + 1) / 2;
  const float two_pi = 6.28318530717958647692f, sigma = 0.02f;
  ThreadPool::global().parallel_for(p1 - p0, 1024, [&](int64_t q0, int64_t q1) {  // each pair depends on p alone
    for (int64_t p = p0 + q0; p < p0 + q1; ++p) {
      const uint64_t r = splitmix64(key + static_cast<uint64_t>(p));
      const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
      const float u2 = static_cast<float>((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
      const float rad = sigma * std::sqrt(-2.0f * std::log(u1));
      const float z0 = rad * std::cos(two_pi * u2), z1 = rad * std::sin(two_pi * u2);
      const int64_t e = 2 * p;
      if (e >= begin && e < begin + count) out[e - begin] = z0;
      if (e + 1 >= begin && e + 1 < begin + count) out[e + 1 - begin] = z1;
    }
  });
}

int64_t write_random_model(const ModelConfig& c, const std::string& path, uint64_t seed, std::optional<DType> dtype,
                           const ProgressFn& progress) {
  validate_config(c, "random model");
  const auto specs = canonical_tensors(c);
  const std::vector<float> off = norm_offsets(c);
  std::vector<TensorWriteSpec> ws;
  for (size_t i = 0; i < specs.size(); ++i) {
    TensorWriteSpec w{specs[i].name, stored_dtype(DType::kF32, specs[i].shape, dtype), specs[i].shape, nullptr, {}};
    w.fill = [spec = specs[i], o = off[i], seed, i](int64_t b, int64_t n, float* out) {
      random_init(spec, o, seed, i, b, n, out);
    };
    ws.push_back(std::move(w));
  }
  AnelabWriteInfo info{c, nullptr, "", "", "random seed " + std::to_string(seed)};
  return write_anelab_file(path, info, ws, progress);
}

Model random_model(const ModelConfig& c, uint64_t seed) {
  validate_config(c, "random model");
  Model m;
  m.config = c;
  m.source_format = "random";
  const auto specs = canonical_tensors(c);
  const std::vector<float> off = norm_offsets(c);
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].numel();
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
    random_init(specs[i], off[i], seed, i, 0, n, reinterpret_cast<float*>(bytes.data()));
    m.add_owned(specs[i].name, DType::kF32, specs[i].shape, std::move(bytes));
  }
  return m;
}

}  // namespace anelab::models

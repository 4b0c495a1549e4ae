// A raw session of `anelab probe`'s experiments (probe_rules.cpp, probe_seeds.cpp): compile / load /
// evaluate through a Shim (the real ANE, or FakeShim standing in for it) with surfaces of exactly the
// sizes an experiment asks for, cleaned up at the end; and the fp16 byte helpers the experiments share.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "framework/ane/native_rules.h"
#include "framework/ane/shim.h"
#include "framework/core/fp16.h"
#include "framework/mil/builder.h"
#include "framework/mil/printer.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/weights.h"

namespace anelab::cli {

// Which evaluate call a request goes through: -[_ANEInMemoryModel evaluateWithQoS:...] (the daemon, over
// XPC) or -[_ANEClient doEvaluateDirectWithModel:...] (Shim::evaluate_direct).
enum class EvalPath { kModel, kDirect };

// ---- a raw session: compile / load / evaluate through the shim, cleaned up at the end -------------
class Raw {
 public:
  Raw(ane::Shim& shim, uint32_t qos) : shim_(shim), qos_(qos) {}
  ~Raw() {
    for (auto& m : models_) drop(m);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  int compiles() const { return compiles_; }

  // create_model -> hexStringIdentifier -> model dir -> compile -> load. Returns the model's index.
  Result<size_t> load(const std::string& text, const rt::Weights& w = {}) {
    const std::vector<ane::WeightEntry> entries = ane::weight_entries(w);
    Result<ane::ModelHandle> h = shim_.create_model(text, entries);
    if (!h) return h.status();
    models_.push_back({*h, "", false});
    Model& m = models_.back();
    Result<std::string> hex = shim_.hex_string_identifier(m.h);
    if (!hex) return hex.status();
    m.dir = (std::filesystem::path(shim_.temporary_directory()) / *hex).string();
    if (Status s = ane::write_model_dir(m.dir, text, w); !s) return s;
    ++compiles_;
    if (Status s = shim_.compile(m.h, qos_); !s) return s;
    if (Status s = shim_.load(m.h, qos_); !s) return s;
    m.loaded = true;
    return models_.size() - 1;
  }
  ane::ModelHandle handle(size_t m) const { return models_.at(m).h; }
  void unload(size_t m) { drop(models_.at(m)); }

  // One evaluate with surfaces of the given sizes: inputs hold `in` (copied to the surface start),
  // outputs are pre-filled with `fill` (fp16 bits) and returned whole.
  Result<std::vector<std::vector<uint8_t>>> eval(size_t m, const std::vector<std::vector<uint8_t>>& in,
                                                 const std::vector<size_t>& in_sizes,
                                                 const std::vector<size_t>& out_sizes, const ane::RequestIndices& idx,
                                                 half_bits fill = 0, EvalPath path = EvalPath::kModel,
                                                 double* eval_ms = nullptr) {
    std::vector<ane::SurfaceHandle> ins, outs;
    auto cleanup = [&](Status s) {
      for (auto h : ins) shim_.release_surface(h);
      for (auto h : outs) shim_.release_surface(h);
      return s;
    };
    for (size_t i = 0; i < in.size(); ++i) {
      Result<ane::SurfaceHandle> s = shim_.create_surface(in_sizes[i]);
      if (!s) return cleanup(s.status());
      ins.push_back(*s);
      if (Status st = write(*s, in[i].data(), in[i].size()); !st) return cleanup(st);
    }
    for (size_t j = 0; j < out_sizes.size(); ++j) {
      Result<ane::SurfaceHandle> s = shim_.create_surface(out_sizes[j]);
      if (!s) return cleanup(s.status());
      outs.push_back(*s);
      std::vector<half_bits> f(out_sizes[j] / 2, fill);
      if (Status st = write(*s, f.data(), f.size() * 2); !st) return cleanup(st);
    }
    Result<ane::RequestHandle> r = shim_.create_request({ins, idx.inputs, outs, idx.outputs, idx.procedure});
    if (!r) return cleanup(r.status());
    const auto t0 = std::chrono::steady_clock::now();
    Status ev = path == EvalPath::kDirect ? shim_.evaluate_direct(models_.at(m).h, *r, qos_)
                                          : shim_.evaluate(models_.at(m).h, *r, qos_);
    if (eval_ms) *eval_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::vector<uint8_t>> result;
    for (size_t j = 0; ev && j < outs.size(); ++j) {
      result.emplace_back(out_sizes[j]);
      ev = read(outs[j], result.back().data(), result.back().size());
    }
    shim_.release_request(*r);
    if (!ev) return cleanup(ev);
    cleanup(Status::ok());
    return result;
  }

 private:
  struct Model {
    ane::ModelHandle h;
    std::string dir;
    bool loaded = false;
  };
  void drop(Model& m) {
    if (m.loaded) (void)shim_.unload(m.h, qos_);
    if (m.h) shim_.release_model(m.h);
    if (!m.dir.empty()) ane::remove_model_dir(m.dir);
    m = Model{};
  }
  // Copies `n` bytes into the surface (lock, memcpy, unlock).
  Status write(ane::SurfaceHandle s, const void* data, size_t n) {
    Result<ane::SurfaceMapping> map = shim_.lock_surface(s, false);
    if (!map) return map.status();
    std::memcpy(map->base, data, std::min(n, map->size));
    return shim_.unlock_surface(s, false);
  }
  // Copies the surface's first `n` bytes out (read-only lock).
  Status read(ane::SurfaceHandle s, void* data, size_t n) {
    Result<ane::SurfaceMapping> map = shim_.lock_surface(s, true);
    if (!map) return map.status();
    std::memcpy(data, map->base, std::min(n, map->size));
    return shim_.unlock_surface(s, true);
  }

  ane::Shim& shim_;
  uint32_t qos_;
  std::vector<Model> models_;
  int compiles_ = 0;
};

inline std::vector<uint8_t> f16_bytes(const std::vector<float>& v, size_t size) {
  std::vector<uint8_t> b(std::max(size, v.size() * 2), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    const half_bits h = float_to_half(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}
inline float f16_at(const std::vector<uint8_t>& b, size_t i) {
  half_bits h = 0;
  if (2 * i + 2 <= b.size()) std::memcpy(&h, b.data() + 2 * i, 2);
  return half_to_float(h);
}

struct Built {
  std::string text;
  rt::Weights weights;
  mil::Program program;
};
inline Built print_for(const mil::ProgramBuilder& pb, const rt::DeviceProfile& p) {
  Built b;
  b.program = pb.build(p.dialect);
  b.text = mil::print(b.program, p.dialect);
  return b;
}

}  // namespace anelab::cli

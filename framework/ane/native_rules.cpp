#include "framework/ane/native_rules.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "framework/core/sha256.h"
#include "framework/runtime/device_profile.h"

namespace anelab::ane {

namespace fs = std::filesystem;

std::vector<WeightEntry> weight_entries(const rt::Weights& weights) {
  std::vector<WeightEntry> v;
  v.reserve(weights.size());
  for (const auto& [key, blob] : weights) {  // std::map: key order
    WeightEntry e;
    e.path = key;
    e.offset = 0;
    if (blob) e.data = std::span<const uint8_t>(blob->data(), blob->size());
    v.push_back(std::move(e));
  }
  return v;
}

Result<std::string> model_relative_path(const std::string& key) {
  static const std::string kPrefix = "@model_path/";
  auto bad = [&](const char* why) {
    return Status(Code::kInvalidArgument,
                  cat("[ane] weights key '", key, "': ", why, " (keys must look like \"@model_path/weights/x.bin\")"));
  };
  if (key.rfind(kPrefix, 0) != 0) return bad("does not start with \"@model_path/\"");
  std::string rel = key.substr(kPrefix.size());
  if (rel.empty() || rel.front() == '/') return bad("has an empty or absolute path after the prefix");
  if (rel.find('\0') != std::string::npos) return bad("contains a NUL byte");
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return bad("has an empty, '.' or '..' path component");
    start = end + 1;
  }
  return rel;
}

namespace {

Status write_bytes(const fs::path& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (f) f.close();
  if (!f)
    return Status(Code::kIoError, cat("[ane] cannot write ", path.string(), " (model directory for the compiler)"));
  return Status::ok();
}

}  // namespace

Status write_model_dir(const std::string& dir, std::string_view mil_text, const rt::Weights& weights) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(Code::kIoError, cat("[ane] cannot create the model directory ", dir, ": ", ec.message()));
  fs::create_directories(fs::path(dir) / "weights", ec);  // also without weights (maderix ane_runtime.h)
  if (ec) return Status(Code::kIoError, cat("[ane] cannot create ", dir, "/weights: ", ec.message()));
  if (Status s = write_bytes(fs::path(dir) / "model.mil", mil_text.data(), mil_text.size()); !s) return s;
  for (const auto& [key, blob] : weights) {
    Result<std::string> rel = model_relative_path(key);
    if (!rel) return rel.status();
    fs::path p = fs::path(dir) / *rel;
    fs::create_directories(p.parent_path(), ec);
    if (ec) return Status(Code::kIoError, cat("[ane] cannot create ", p.parent_path().string(), ": ", ec.message()));
    const size_t n = blob ? blob->size() : 0;
    if (Status s = write_bytes(p, blob ? blob->data() : nullptr, n); !s) return s;
  }
  return Status::ok();
}

void remove_model_dir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

std::string program_key(std::string_view mil_text, const rt::Weights& weights) {
  Sha256 w;
  for (const auto& [key, blob] : weights) {
    const uint64_t klen = key.size(), blen = blob ? blob->size() : 0;
    w.update(&klen, sizeof klen).update(key).update(&blen, sizeof blen);
    if (blob) w.update(blob->data(), blob->size());
  }
  return sha256_hex(mil_text) + "_" + w.hex();
}

RequestIndices request_indices(const mil::Program& program, int fn) {
  ANELAB_CHECK(fn >= 0 && fn < static_cast<int>(program.functions.size()), "ane", "function index ", fn,
               " out of range (program has ", program.functions.size(), " functions)");
  RequestIndices r;
  int64_t in0 = 0, out0 = 0;
  for (int q = 0; q < fn; ++q) {
    in0 += static_cast<int64_t>(program.functions[static_cast<size_t>(q)].inputs.size());
    out0 += static_cast<int64_t>(program.functions[static_cast<size_t>(q)].outputs.size());
  }
  const mil::Function& f = program.functions[static_cast<size_t>(fn)];
  for (size_t i = 0; i < f.inputs.size(); ++i) r.inputs.push_back(in0 + static_cast<int64_t>(i));
  for (size_t j = 0; j < f.outputs.size(); ++j) r.outputs.push_back(out0 + static_cast<int64_t>(j));
  r.procedure = fn;
  return r;
}

Result<RequestIndices> procedure_indices(const mil::Program& program, int fn,
                                         const std::vector<ProcedureSymbols>& table, const std::string& table_error) {
  const mil::Function& f = program.functions.at(static_cast<size_t>(fn));
  if (table.empty()) {
    if (program.functions.size() == 1) return request_indices(program, fn);
    return Status(Code::kInternal, cat("[ane] function '", f.name, "' of a ", program.functions.size(),
                                       "-procedure program: the model attributes give no procedure symbol indices (",
                                       table_error.empty() ? "ANEFModelProcedures is empty" : table_error,
                                       "); guessing them risks error 0x2 or another procedure's surfaces"));
  }
  for (const ProcedureSymbols& e : table) {
    if (e.procedure_id != fn) continue;
    if (e.inputs.size() != f.inputs.size() || e.outputs.size() != f.outputs.size())
      return Status(
          Code::kInternal,
          cat("[ane] function '", f.name, "': ANEFModelProcedures entry ", fn, " has ", e.inputs.size(), " input and ",
              e.outputs.size(), " output symbols, the function has ", f.inputs.size(), " and ", f.outputs.size()));
    RequestIndices r;
    r.inputs = e.inputs;
    r.outputs = e.outputs;
    r.procedure = e.procedure_id;
    return r;
  }
  return Status(Code::kInternal, cat("[ane] function '", f.name, "': no ANEFModelProcedures entry with ProcedureID ",
                                     fn, " (the attributes list ", table.size(), " procedures)"));
}

SurfaceSizes surface_sizes(const mil::Function& fn, const rt::DeviceProfile& profile) {
  SurfaceSizes s;
  for (const auto& [n, t] : fn.inputs) s.inputs.push_back(rt::surface_alloc_bytes(t, profile));
  for (const auto& o : fn.outputs) {
    const mil::TensorType* t = fn.type_of(o);
    ANELAB_CHECK(t, "ane", "function '", fn.name, "' returns unknown value '", o, "'");
    s.outputs.push_back(rt::surface_alloc_bytes(*t, profile));
  }
  if (s.inputs.size() + s.outputs.size() > 2) {
    size_t largest = 0;
    for (size_t b : s.inputs) largest = std::max(largest, b);
    for (size_t b : s.outputs) largest = std::max(largest, b);
    std::fill(s.inputs.begin(), s.inputs.end(), largest);
    std::fill(s.outputs.begin(), s.outputs.end(), largest);
  }
  return s;
}

DeviceChoice choose_device(const std::string& requested, Result<std::string> sub_type) {
  if (requested != "auto") return {requested, ""};
  if (!sub_type)
    return {rt::kFallbackDevice, cat("[ane] cannot read the chip family (", sub_type.status().message(),
                                     "); using device profile ", rt::kFallbackDevice, " (pass --device m1..m5)")};
  const std::string p = rt::profile_for_ane_sub_type(*sub_type);
  if (p.empty())
    return {rt::kFallbackDevice, cat("[ane] unknown chip family aneSubType '", *sub_type, "'; using device profile ",
                                     rt::kFallbackDevice, " (pass --device m1..m5)")};
  return {p, cat("[ane] chip family ", *sub_type, ": device profile ", p, " (", rt::device_profile(p).description,
                 "; --device overrides)")};
}

Status map_compile_failure(const Status& shim_error, int used, int budget, double near_fraction,
                           const std::string& what) {
  const int near = static_cast<int>(std::ceil(near_fraction * budget));
  if (budget > 0 && used >= near)
    return Status(Code::kBudgetExhausted, cat("[compile] ane: ", what, ": the ANE compiler failed at compile ", used,
                                              " of this process's ", budget, "-compile budget (>= ", near,
                                              " counts as the per-process compile limit, ~119 on every "
                                              "chip) — checkpoint and restart the process. Compiler said: ",
                                              shim_error.message()));
  return Status(
      Code::kCompileFailed,
      cat("[compile] ane: ", what, ": the ANE compiler failed (compile ", used, " of ", budget,
          " budgeted): ", shim_error.message(),
          " — a transient failure passes after a restart; if it "
          "repeats, run the program on --backend emulator with the same --device to check shapes and limits"));
}

}  // namespace anelab::ane

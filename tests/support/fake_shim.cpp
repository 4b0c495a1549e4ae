#include "tests/support/fake_shim.h"

#include <unistd.h>  // mkdtemp (macOS declares it here, glibc in <stdlib.h>)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "framework/ane/native_rules.h"
#include "framework/core/file.h"
#include "framework/core/sha256.h"
#include "framework/emulator/emulator.h"
#include "framework/mil/parser.h"
#include "framework/runtime/surface.h"

namespace anelab::ane {

namespace fs = std::filesystem;

struct FakeShim::Model {
  std::string mil_text;
  rt::Weights weights;  // the dictionary as received (copies)
  std::string hex_id;
  bool compiled = false, loaded = false;
  mil::Program program;                   // parsed at compile
  std::vector<ProcedureSymbols> symbols;  // the "model attributes", set at compile
  std::unique_ptr<rt::Kernel> kernel;     // emulator kernel
};
struct FakeShim::Surface {
  std::vector<uint8_t> bytes;  // [alloc] the IOSurface memory
  int locks = 0;
  bool read_only = false;
};
struct FakeShim::Request {
  RequestSpec spec;
};

namespace {

const char* selector_of(const std::string& call) {
  static const std::map<std::string, const char*> m = {{"ane_sub_type", sel::kSubType},
                                                       {"create_model", sel::kDescriptor},
                                                       {"hex_string_identifier", sel::kHexId},
                                                       {"compile", sel::kCompile},
                                                       {"compiled_model_exists", sel::kCompiledExists},
                                                       {"load", sel::kLoad},
                                                       {"evaluate", sel::kEvaluate},
                                                       {"unload", sel::kUnload},
                                                       {"create_surface", sel::kSurfaceCreate},
                                                       {"procedure_symbols", sel::kProcedures},
                                                       {"lock_surface", sel::kSurfaceLock},
                                                       {"unlock_surface", sel::kSurfaceUnlock},
                                                       {"create_request", sel::kRequest}};
  auto it = m.find(call);
  return it == m.end() ? "?" : it->second;
}

std::string default_failure_text(const std::string& call) {
  if (call == "compile") return "_ANECompiler : ANECCompile() FAILED";
  if (call == "load") return "ANEProgramLoad() Failed: Program load failure (0x1d)";
  if (call == "evaluate")
    return "ANEProgramProcessRequestDirect() Failed with status=0x1d : statusType=0x9: Program Inference error";
  if (call == "create_surface") return "IOSurfaceCreate returned NULL";
  return "injected failure of " + call;
}

ShimCall make_call(std::string name) {
  ShimCall c;
  c.call = std::move(name);
  return c;
}

std::string hex_id_of(std::string_view mil, std::span<const WeightEntry> weights) {
  Sha256 w;
  for (const WeightEntry& e : weights) {
    const uint64_t n = e.data.size();
    w.update(e.path).update("\0", 1).update(&e.offset, sizeof e.offset).update(&n, sizeof n);
    w.update(e.data.data(), e.data.size());
  }
  return sha256_hex(mil) + "_" + w.hex() + "_" + sha256_hex("");  // options nil (digest §1.4)
}

// The fake compiler's symbol table: inputs (outputs) of all functions numbered program-wide, in
// declaration order or in sorted-name order.
std::vector<ProcedureSymbols> symbol_table(const mil::Program& p, const std::string& order) {
  std::vector<std::string> ins, outs;
  for (const auto& f : p.functions) {
    for (const auto& [n, t] : f.inputs) ins.push_back(n);
    for (const auto& o : f.outputs) outs.push_back(o + "@output");
  }
  std::vector<std::string> in_sym = ins, out_sym = outs;
  if (order == "by_name") {
    std::sort(in_sym.begin(), in_sym.end());
    std::sort(out_sym.begin(), out_sym.end());
  }
  auto index = [](const std::vector<std::string>& table, const std::string& n) {
    return static_cast<int64_t>(std::find(table.begin(), table.end(), n) - table.begin());
  };
  std::vector<ProcedureSymbols> v;
  size_t i = 0, o = 0;
  for (size_t k = 0; k < p.functions.size(); ++k) {
    ProcedureSymbols ps;
    ps.procedure_id = static_cast<int64_t>(k);
    for (size_t j = 0; j < p.functions[k].inputs.size(); ++j) ps.inputs.push_back(index(in_sym, ins[i++]));
    for (size_t j = 0; j < p.functions[k].outputs.size(); ++j) ps.outputs.push_back(index(out_sym, outs[o++]));
    v.push_back(std::move(ps));
  }
  return v;
}

}  // namespace

FakeShim::FakeShim(FakeShimOptions o) : opts_(std::move(o)) {
  if (opts_.temp_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "anelab-fakeshim-XXXXXX").string();
    ANELAB_CHECK(mkdtemp(tmpl.data()), "ane", "fake shim: cannot create a temp dir ", tmpl);
    temp_dir_ = tmpl;
    own_temp_dir_ = true;
  } else {
    temp_dir_ = opts_.temp_dir;
  }
  rt::BackendOptions eo;
  eo.device = opts_.device;
  eo.compile_budget = 1 << 30;  // the fake's limit is compile_limit
  eo.threads = opts_.threads;
  emulator_ = emu::make_emulator_backend(eo);
}

FakeShim::~FakeShim() {
  for (auto& [id, m] : models_) m->kernel.reset();
  if (own_temp_dir_) {
    std::error_code ec;
    fs::remove_all(temp_dir_, ec);
  }
}

// ---- recording and failure injection ------------------------------------------------------------
ShimCall& FakeShim::record(std::string call) { return record(make_call(std::move(call))); }

ShimCall& FakeShim::record(ShimCall c) {
  calls_.push_back(std::move(c));
  return calls_.back();
}

void FakeShim::fail(const std::string& call, FakeFailure f) { failures_[call] = std::move(f); }

Status FakeShim::failed(ShimCall& c, Status s) {
  c.ok = false;
  c.error = s.message();
  return s;
}

Status FakeShim::injected(ShimCall& c) {
  if (!opts_.abort_at.empty() && c.call == opts_.abort_at) {  // a crash inside a private call
    std::fprintf(stderr, "[fake ane] aborting in %s (abort_at)\n", c.call.c_str());
    std::fflush(stderr);
    std::abort();
  }
  auto it = failures_.find(c.call);
  if (it == failures_.end()) return Status::ok();
  FakeFailure& f = it->second;
  if (f.skip > 0) {
    --f.skip;
    return Status::ok();
  }
  if (f.times == 0) return Status::ok();
  if (f.times > 0) --f.times;
  std::string text = f.description.empty() ? default_failure_text(c.call) : f.description;
  return failed(c, shim_error(selector_of(c.call), text, f.domain, f.code));
}

std::vector<const ShimCall*> FakeShim::calls_named(const std::string& name) const {
  std::vector<const ShimCall*> v;
  for (const auto& c : calls_)
    if (c.call == name) v.push_back(&c);
  return v;
}

std::vector<std::string> FakeShim::call_names() const {
  std::vector<std::string> v;
  for (const auto& c : calls_) v.push_back(c.call);
  return v;
}

size_t FakeShim::live_models() const { return models_.size(); }
size_t FakeShim::live_surfaces() const { return surfaces_.size(); }
size_t FakeShim::live_requests() const { return requests_.size(); }
size_t FakeShim::loaded_models() const {
  return static_cast<size_t>(std::count_if(models_.begin(), models_.end(), [](auto& kv) { return kv.second->loaded; }));
}

FakeShim::Model* FakeShim::model(ModelHandle m) {
  auto it = models_.find(m.id);
  return it == models_.end() ? nullptr : it->second.get();
}

// ---- models ---------------------------------------------------------------------------------------
Result<std::string> FakeShim::ane_sub_type() {
  ShimCall& c = record("ane_sub_type");
  if (Status s = injected(c); !s) return s;
  return opts_.sub_type;
}

Result<ModelHandle> FakeShim::create_model(std::string_view mil_text, std::span<const WeightEntry> weights) {
  ShimCall rec = make_call("create_model");
  rec.mil_text = std::string(mil_text);
  for (const WeightEntry& e : weights) {
    rec.weight_keys.push_back(e.path);
    rec.weight_offsets.push_back(e.offset);
    rec.weight_sizes.push_back(e.data.size());
  }
  ShimCall& c = record(std::move(rec));
  if (Status s = injected(c); !s) return s;
  if (mil_text.empty()) return failed(c, shim_error(sel::kDescriptor, "returned nil (empty MIL text)", "fake", 0));
  auto m = std::make_unique<Model>();
  for (const WeightEntry& e : weights) {
    if (e.path.rfind("@model_path/", 0) != 0 || e.offset != 0 || e.data.empty())
      return failed(c, shim_error(sel::kDescriptor,
                                  cat("returned nil (fake: weights entry '", e.path,
                                      "' needs an \"@model_path/\" key, "
                                      "offset 0 and non-empty data)"),
                                  "fake", 0));
    m->weights[e.path] = std::make_shared<std::vector<uint8_t>>(e.data.begin(), e.data.end());
  }
  m->mil_text = std::string(mil_text);
  m->hex_id = hex_id_of(mil_text, weights);
  const uint64_t id = next_id_++;
  models_[id] = std::move(m);
  c.model = id;
  return ModelHandle{id};
}

Result<std::string> FakeShim::hex_string_identifier(ModelHandle h) {
  ShimCall& c = record("hex_string_identifier");
  c.model = h.id;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (!m) return failed(c, shim_error(sel::kHexId, "unknown model handle", "fake", 0));
  return m->hex_id;
}

Status FakeShim::check_model_dir(const Model& m, ShimCall& c) {
  const fs::path dir = fs::path(temp_dir_) / m.hex_id;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_regular_file()) c.model_dir_files.push_back(fs::relative(it->path(), dir).string());
  std::sort(c.model_dir_files.begin(), c.model_dir_files.end());
  auto missing = [&](const std::string& what) {
    return shim_error(sel::kCompile, cat("_ANECompiler : ANECCompile() FAILED (fake: ", what, ")"),
                      "com.apple.appleneuralengine.compiler", 1);
  };
  auto same = [&](const fs::path& p, const uint8_t* data, size_t n) {
    if (!fs::is_regular_file(p, ec)) return false;
    std::vector<uint8_t> b = read_file_bytes(p.string());
    return b.size() == n && (n == 0 || std::memcmp(b.data(), data, n) == 0);
  };
  if (!same(dir / "model.mil", reinterpret_cast<const uint8_t*>(m.mil_text.data()), m.mil_text.size()))
    return missing(cat((dir / "model.mil").string(), " is missing or differs from the MIL text"));
  for (const auto& [key, blob] : m.weights) {
    const fs::path p = dir / key.substr(std::string("@model_path/").size());
    if (!same(p, blob->data(), blob->size()))
      return missing(cat("weight file ", p.string(), " is missing or differs from the dictionary's data"));
  }
  return Status::ok();
}

Status FakeShim::compile(ModelHandle h, uint32_t qos) {
  ShimCall& c = record("compile");
  c.model = h.id;
  c.qos = qos;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (!m) return failed(c, shim_error(sel::kCompile, "unknown model handle", "fake", 0));
  c.run_compile = next_run_compile();
  if (opts_.compile_failures.fails(c.run_compile))
    return failed(c, shim_error(sel::kCompile,
                                cat("_ANECompiler : ANECCompile() FAILED (fake: injected at compile ", c.run_compile,
                                    " of the run)"),
                                "com.apple.appleneuralengine.compiler", 1));
  if (++compiles_ > opts_.compile_limit)  // the leak every repo hits (digest §1.11)
    return failed(
        c, shim_error(sel::kCompile, "_ANECompiler : ANECCompile() FAILED", "com.apple.appleneuralengine.compiler", 1));
  const fs::path dir = fs::path(temp_dir_) / m->hex_id;
  std::error_code ec;
  c.weights_dir = fs::is_directory(dir / "weights", ec);
  if (Status s = check_model_dir(*m, c); !s) return failed(c, s);
  if (Status s = build_kernel(*m); !s) return failed(c, s);
  // The compiler's output next to model.mil, and the daemon's cache entry, which outlives the model
  // directory and the process (what compiled_model_exists finds, also after an exec or a clean exit).
  const std::string plist = cat("fake net.plist for ", m->hex_id, "\n");
  try {
    write_file_atomic((dir / "net.plist").string(), plist);
    write_file_atomic((dir / "data").string(), "fake compiled program\n");
    fs::create_directories(daemon_cache_dir());
    write_file_atomic((daemon_cache_dir() / m->hex_id).string(), plist);
  } catch (const std::exception& e) {
    return failed(c, shim_error(sel::kCompile, cat("cannot write the compiled program: ", e.what()), "fake", 0));
  }
  m->compiled = true;
  return Status::ok();
}

Status FakeShim::build_kernel(Model& m) {
  try {
    m.program = mil::parse(m.mil_text, "model.mil");
  } catch (const Error& e) {
    return shim_error(sel::kCompile, cat("InvalidMILProgram (fake: ", e.what(), ")"),
                      "com.apple.appleneuralengine.compiler", 1);
  }
  Result<std::unique_ptr<rt::Kernel>> k = emulator_->compile(m.program, m.weights);
  if (!k)
    return shim_error(sel::kCompile, cat("_ANECompiler : ANECCompile() FAILED (fake: ", k.status().message(), ")"),
                      "com.apple.appleneuralengine.compiler", 1);
  m.kernel = std::move(*k);
  m.symbols = symbol_table(m.program, opts_.symbol_order);
  return Status::ok();
}

fs::path FakeShim::daemon_cache_dir() const { return fs::path(temp_dir_) / kDaemonCacheDir; }

bool FakeShim::compiled_output_exists(const Model& m) const {
  const fs::path p = daemon_cache_dir() / m.hex_id;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  try {
    return read_file_text(p.string()) == cat("fake net.plist for ", m.hex_id, "\n");
  } catch (const std::exception&) {
    return false;
  }
}

Result<bool> FakeShim::compiled_model_exists(ModelHandle h) {
  ShimCall& c = record("compiled_model_exists");
  c.model = h.id;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (!m) return failed(c, shim_error(sel::kCompiledExists, "unknown model handle", "fake", 0));
  return compiled_output_exists(*m);
}

int64_t FakeShim::next_run_compile() {
  const std::string& file = opts_.compile_failures.count_file;
  if (file.empty()) return ++run_compiles_;
  int64_t n = 0;
  std::error_code ec;
  if (fs::exists(file, ec)) {
    try {
      n = std::stoll(read_file_text(file));
    } catch (const std::exception& e) {
      anelab::fail("ane", "fake shim: unreadable compile count file ", file, ": ", e.what());
    }
  }
  write_file_atomic(file, std::to_string(++n) + "\n");
  return n;
}

Result<std::vector<ProcedureSymbols>> FakeShim::procedure_symbols(ModelHandle h) {
  ShimCall& c = record("procedure_symbols");
  c.model = h.id;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (!m || !m->loaded) return failed(c, shim_error(sel::kProcedures, "model is not loaded", "fake", 0));
  if (!opts_.has_procedure_attributes)
    return failed(c, shim_error(sel::kProcedures, "no ANEFModelProcedures array in the model attributes", "fake", 0));
  return m->symbols;
}

rt::SurfaceLayout FakeShim::layout(const mil::TensorType& t) const {
  rt::DeviceProfile p = emulator_->profile();
  if (opts_.row_align_bytes) p.row_align_bytes = opts_.row_align_bytes;
  return rt::surface_layout(t, p);
}

Status FakeShim::load(ModelHandle h, uint32_t qos) {
  ShimCall& c = record("load");
  c.model = h.id;
  c.qos = qos;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (m && !m->compiled && compiled_output_exists(*m)) {  // compiled by an earlier process: no compile
    // The daemon's cached program loads only from a model directory that holds model.mil and the
    // weights again (m0at/ANEtransformers training/ane_runtime.h writes them before this load).
    if (Status s = check_model_dir(*m, c); !s)
      return failed(c,
                    shim_error(sel::kLoad, cat("fake: the cached program ", m->hex_id, " cannot load: ", s.message()),
                               "com.apple.appleneuralengine", 1));
    if (Status s = build_kernel(*m); !s) return failed(c, s);
    m->compiled = true;
  }
  if (!m || !m->compiled || m->loaded)
    return failed(c, shim_error(sel::kLoad,
                                !m             ? "unknown model handle"
                                : !m->compiled ? "model is not compiled"
                                               : "model is already loaded",
                                "fake", 0));
  m->loaded = true;
  return Status::ok();
}

Status FakeShim::unload(ModelHandle h, uint32_t qos) {
  ShimCall& c = record("unload");
  c.model = h.id;
  c.qos = qos;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  if (!m || !m->loaded) return failed(c, shim_error(sel::kUnload, "model is not loaded", "fake", 0));
  m->loaded = false;
  return Status::ok();
}

void FakeShim::release_model(ModelHandle h) {
  ShimCall& c = record("release_model");
  c.model = h.id;
  models_.erase(h.id);
}

// ---- surfaces and requests ------------------------------------------------------------------------
Result<SurfaceHandle> FakeShim::create_surface(size_t bytes) {
  ShimCall& c = record("create_surface");
  c.bytes = bytes;
  if (Status s = injected(c); !s) return s;
  if (bytes == 0) return failed(c, shim_error(sel::kSurfaceCreate, "returned NULL for 0 bytes", "fake", 0));
  auto s = std::make_unique<Surface>();
  s->bytes.assign(bytes, 0);
  const uint64_t id = next_id_++;
  surfaces_[id] = std::move(s);
  c.surface = id;
  return SurfaceHandle{id};
}

Result<SurfaceMapping> FakeShim::lock_surface(SurfaceHandle h, bool read_only) {
  ShimCall& c = record("lock_surface");
  c.surface = h.id;
  c.read_only = read_only;
  if (Status s = injected(c); !s) return s;
  auto it = surfaces_.find(h.id);
  if (it == surfaces_.end() || it->second->locks > 0)
    return failed(c, shim_error(sel::kSurfaceLock, it == surfaces_.end() ? "unknown surface" : "surface already locked",
                                "kern_return_t", 0xe00002c2));
  it->second->locks = 1;
  it->second->read_only = read_only;
  return SurfaceMapping{it->second->bytes.data(), it->second->bytes.size()};
}

Status FakeShim::unlock_surface(SurfaceHandle h, bool read_only) {
  ShimCall& c = record("unlock_surface");
  c.surface = h.id;
  c.read_only = read_only;
  if (Status s = injected(c); !s) return s;
  auto it = surfaces_.find(h.id);
  if (it == surfaces_.end() || it->second->locks == 0 || it->second->read_only != read_only)
    return failed(c, shim_error(sel::kSurfaceUnlock, "surface not locked in this mode", "kern_return_t", 0xe00002c2));
  it->second->locks = 0;
  return Status::ok();
}

void FakeShim::release_surface(SurfaceHandle h) {
  ShimCall& c = record("release_surface");
  c.surface = h.id;
  surfaces_.erase(h.id);
}

Result<RequestHandle> FakeShim::create_request(const RequestSpec& spec) {
  ShimCall rec = make_call("create_request");
  rec.input_indices = spec.input_indices;
  rec.output_indices = spec.output_indices;
  rec.procedure = spec.procedure_index;
  for (auto s : spec.inputs) rec.inputs.push_back(s.id);
  for (auto s : spec.outputs) rec.outputs.push_back(s.id);
  ShimCall& c = record(std::move(rec));
  if (Status s = injected(c); !s) return s;
  bool known = spec.inputs.size() == spec.input_indices.size() && spec.outputs.size() == spec.output_indices.size();
  for (auto s : spec.inputs) known = known && surfaces_.count(s.id);
  for (auto s : spec.outputs) known = known && surfaces_.count(s.id);
  if (!known)
    return failed(c, shim_error(sel::kRequest, "returned nil (unknown surface or index count mismatch)", "fake", 0));
  const uint64_t id = next_id_++;
  requests_[id] = std::make_unique<Request>(Request{spec});
  c.request = id;
  return RequestHandle{id};
}

void FakeShim::release_request(RequestHandle h) {
  ShimCall& c = record("release_request");
  c.request = h.id;
  requests_.erase(h.id);
}

// ---- evaluate -------------------------------------------------------------------------------------
Status FakeShim::check_request(const Model& m, const Request& r) {
  const RequestSpec& s = r.spec;
  const auto nfn = static_cast<int64_t>(m.program.functions.size());
  auto err = [&](const std::string& d, long code) {
    return shim_error(sel::kEvaluate, d, "com.apple.appleneuralengine", code);
  };
  if (s.procedure_index < 0 || s.procedure_index >= nfn)
    return err(cat("Program Inference error (fake: procedureIndex ", s.procedure_index, ", the program has ", nfn,
                   " procedures)"),
               2);
  const ProcedureSymbols& want = m.symbols.at(static_cast<size_t>(s.procedure_index));
  if (s.input_indices != want.inputs || s.output_indices != want.outputs)
    return err(cat("Program Inference error 0x2 (fake: procedure ", s.procedure_index,
                   " needs its own input/output symbol indices, digest §1.9)"),
               2);
  const mil::Function& f = m.program.functions[static_cast<size_t>(s.procedure_index)];
  size_t largest = 0;
  std::vector<size_t> need;
  for (const auto& [n, t] : f.inputs) need.push_back(layout(t).extent);
  for (const auto& o : f.outputs) need.push_back(layout(*f.type_of(o)).extent);
  for (const auto& [n, t] : f.inputs)
    largest = std::max(largest, static_cast<size_t>(t.numel()) * mil::dtype_bytes(t.dtype));
  for (const auto& o : f.outputs)
    largest = std::max(largest, static_cast<size_t>(f.type_of(o)->numel()) * mil::dtype_bytes(f.type_of(o)->dtype));
  std::vector<SurfaceHandle> all = s.inputs;
  all.insert(all.end(), s.outputs.begin(), s.outputs.end());
  for (size_t i = 0; i < all.size(); ++i) {
    const Surface& sf = *surfaces_.at(all[i].id);
    if (sf.locks) return err(cat("surface ", all[i].id, " is still locked"), 1);
    const size_t sz = sf.bytes.size();
    if (sz < need[i] || sz < opts_.min_surface_bytes || (all.size() > 2 && sz < largest))
      return err(cat("fake: surface ", all[i].id, " has ", sz, " bytes; the tensor needs ", need[i],
                     ", the ANE needs >= ", opts_.min_surface_bytes,
                     all.size() > 2 ? cat(" and >= the largest I/O tensor (", largest, ")") : "",
                     " — the real ANE returns zeros here"),
                 1);
  }
  return Status::ok();
}

// Inputs in ascending tensor size, outputs in descending (FakeShimOptions::io_size_order).
bool FakeShim::sizes_ordered(const mil::Function& f) const {
  auto bytes = [](const mil::TensorType& t) { return t.numel() * static_cast<int64_t>(mil::dtype_bytes(t.dtype)); };
  for (size_t i = 1; i < f.inputs.size(); ++i)
    if (bytes(f.inputs[i - 1].second) > bytes(f.inputs[i].second)) return false;
  for (size_t j = 1; j < f.outputs.size(); ++j)
    if (bytes(*f.type_of(f.outputs[j - 1])) < bytes(*f.type_of(f.outputs[j]))) return false;
  return true;
}

Status FakeShim::run(Model& m, const Request& r) {
  const int fn = static_cast<int>(r.spec.procedure_index);
  const mil::Function& f = m.program.functions[static_cast<size_t>(fn)];
  std::vector<rt::Surface> ins, outs;
  std::vector<rt::Surface*> in_ptrs, out_ptrs;
  for (size_t i = 0; i < f.inputs.size(); ++i) {  // the device reads rows at its own stride
    const Surface& src = *surfaces_.at(r.spec.inputs[i].id);
    ins.emplace_back(f.inputs[i].second, src.bytes.size());
    rt::unpack_rows(src.bytes.data(), src.bytes.size(), layout(f.inputs[i].second), ins.back());
  }
  for (size_t j = 0; j < f.outputs.size(); ++j)
    outs.emplace_back(*f.type_of(f.outputs[j]), surfaces_.at(r.spec.outputs[j].id)->bytes.size());
  for (auto& s : ins) in_ptrs.push_back(&s);
  for (auto& s : outs) out_ptrs.push_back(&s);
  if (Status s = emulator_->evaluate(*m.kernel, fn, in_ptrs, out_ptrs); !s)
    return shim_error(sel::kEvaluate, cat("Program Inference error (fake: ", s.message(), ")"),
                      "com.apple.appleneuralengine", 1);
  if (opts_.io_size_order && !sizes_ordered(f)) {  // the planted rule: zeros, no error
    for (const SurfaceHandle& o : r.spec.outputs)
      std::fill_n(surfaces_.at(o.id)->bytes.begin(), surfaces_.at(o.id)->bytes.size(), uint8_t{0});
    return Status::ok();
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    std::vector<uint8_t>& dst = surfaces_.at(r.spec.outputs[j].id)->bytes;
    const rt::SurfaceLayout l = layout(outs[j].type());
    rt::pack_rows(outs[j], l, dst.data(), dst.size());
    if (opts_.layout_error && dst.size() > l.row_stride) {  // the planted error: one row further down
      std::memmove(dst.data() + l.row_stride, dst.data(), dst.size() - l.row_stride);
      std::fill_n(dst.begin(), l.row_stride, uint8_t{0});
    }
  }
  return Status::ok();
}

Status FakeShim::evaluate(ModelHandle h, RequestHandle rh, uint32_t qos) { return evaluate_as("evaluate", h, rh, qos); }

Status FakeShim::evaluate_direct(ModelHandle h, RequestHandle rh, uint32_t qos) {
  return evaluate_as("evaluate_direct", h, rh, qos);
}

Status FakeShim::evaluate_as(const char* call, ModelHandle h, RequestHandle rh, uint32_t qos) {
  ShimCall& c = record(call);
  c.model = h.id;
  c.request = rh.id;
  c.qos = qos;
  if (Status s = injected(c); !s) return s;
  Model* m = model(h);
  auto rit = requests_.find(rh.id);
  if (!m || !m->loaded || rit == requests_.end())
    return failed(
        c, shim_error(sel::kEvaluate, !m || rit == requests_.end() ? "unknown model or request" : "model is not loaded",
                      "com.apple.appleneuralengine", 1));
  if (Status s = check_request(*m, *rit->second); !s) return failed(c, s);
  if (Status s = run(*m, *rit->second); !s) return failed(c, s);
  return Status::ok();
}

// ---- compile failures over a run and the environment-configured fake -----------------------------
bool FakeCompileFailures::fails(int64_t n) const {
  if (std::find(at.begin(), at.end(), n) != at.end()) return true;
  if (probability <= 0) return false;
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n);  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0 < probability;
}

FakeCompileFailures parse_compile_failures(const std::string& spec) {
  FakeCompileFailures f;
  auto bad = [&](const std::string& why) -> FakeCompileFailures {
    fail("ane", "ANELAB_FAKE_ANE_FAIL_COMPILES '", spec, "': ", why,
         " (expected compile numbers \"12,40,97\" or \"random:P:SEED\" with 0 <= P <= 1)");
  };
  try {
    if (spec.rfind("random:", 0) == 0) {
      const size_t colon = spec.find(':', 7);
      if (colon == std::string::npos) return bad("missing SEED");
      size_t used = 0;
      f.probability = std::stod(spec.substr(7, colon - 7), &used);
      if (used != colon - 7 || !(f.probability >= 0 && f.probability <= 1)) return bad("bad probability");
      const std::string seed = spec.substr(colon + 1);
      f.seed = std::stoull(seed, &used);
      if (used != seed.size()) return bad("bad seed");
      return f;
    }
    if (spec.empty() || spec.back() == ',') return bad("empty compile number");
    size_t start = 0;
    while (start < spec.size()) {
      size_t end = spec.find(',', start);
      if (end == std::string::npos) end = spec.size();
      const std::string part = spec.substr(start, end - start);
      size_t used = 0;
      const long long n = std::stoll(part, &used);
      if (used != part.size() || n < 1) return bad("'" + part + "' is not a compile number >= 1");
      f.at.push_back(n);
      start = end + 1;
    }
  } catch (const std::logic_error&) {  // stoll / stod: not a number, or out of range
    return bad("not a number");
  }
  return f;
}

std::unique_ptr<FakeShim> fake_shim_from_env(const std::string& device) {
  FakeShimOptions o;
  o.device = device;
  const char* dir = std::getenv("ANELAB_FAKE_ANE_DIR");
  o.temp_dir = dir && *dir ? std::string(dir) : (fs::temp_directory_path() / "anelab-fake-ane").string();
  std::error_code ec;
  fs::create_directories(o.temp_dir, ec);
  if (ec) fail("ane", "fake shim: cannot create ANELAB_FAKE_ANE_DIR ", o.temp_dir, ": ", ec.message());
  // A count >= 0 from the variable `name`, or `fallback` when it is unset or empty.
  auto count = [](const char* name, const char* what, int fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    size_t used = 0;
    int n = -1;
    try {
      n = std::stoi(v, &used);
    } catch (const std::logic_error&) {
    }
    if (n < 0 || used != std::strlen(v)) anelab::fail("ane", name, " '", v, "' is not ", what, " >= 0");
    return n;
  };
  o.compile_limit = count("ANELAB_FAKE_ANE_COMPILE_LIMIT", "a compile count", o.compile_limit);
  o.row_align_bytes = static_cast<size_t>(count("ANELAB_FAKE_ANE_ROW_ALIGN", "a byte count", 0));
  if (const char* v = std::getenv("ANELAB_FAKE_ANE_LAYOUT_ERROR"); v && *v) {
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
      anelab::fail("ane", "ANELAB_FAKE_ANE_LAYOUT_ERROR '", v, "' is not 0 or 1");
    o.layout_error = *v == '1';
  }
  if (const char* spec = std::getenv("ANELAB_FAKE_ANE_FAIL_COMPILES"); spec && *spec)
    o.compile_failures = parse_compile_failures(spec);
  o.compile_failures.count_file = (fs::path(o.temp_dir) / "fake_compile_count").string();
  return std::make_unique<FakeShim>(o);
}

std::unique_ptr<Shim> fake_shim_for_backend(const std::string& device) { return fake_shim_from_env(device); }

}  // namespace anelab::ane

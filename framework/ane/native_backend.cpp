#include "framework/ane/native_backend.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "framework/mil/printer.h"
#include "framework/runtime/surface.h"
#include "framework/runtime/weights.h"

namespace anelab::ane {

// ---- a compiled + loaded model, shared by the Kernels (and the cache) that use it ---------------
class LoadedModel {
 public:
  LoadedModel(std::shared_ptr<Shim> shim, ModelHandle m, uint32_t qos) : shim(std::move(shim)), model(m), qos(qos) {}
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel() {
    unload();
    if (model) shim->release_model(model);
    if (!dir.empty()) remove_model_dir(dir);  // after unload (digest §1.2 step 9)
  }
  void unload() {
    if (!loaded) return;
    loaded = false;
    Status s = shim->unload(model, qos);
    if (!s) std::fprintf(stderr, "[ane] warning: unload of %s failed: %s\n", hex_id.c_str(), s.message().c_str());
  }

  std::shared_ptr<Shim> shim;
  ModelHandle model;
  uint32_t qos = 21;
  std::string hex_id;
  std::string dir;  // <tmp>/<hexId>, "" until written
  bool loaded = false;
  std::vector<ProcedureSymbols> procedures;  // ANEFModelProcedures, read after load (may be empty)
  std::string procedures_error;              // why they could not be read
};

namespace {

class NativeKernel : public rt::Kernel {
 public:
  NativeKernel(mil::Program p, std::shared_ptr<LoadedModel> m)
      : Kernel(std::move(p)), model(std::move(m)), io(program_.functions.size()) {}
  ~NativeKernel() override {
    if (model.use_count() == 1) model->unload();  // the last user: unload before releasing the request and
    for (FnIO& f : io) release(f);                // surfaces (maderix free_kern's order)
  }
  struct FnIO {
    std::vector<SurfaceHandle> ins, outs;  // shim surfaces, function parameter / return order
    RequestHandle request;                 // built once, reused for every evaluate (digest §1.2 step 8)
  };
  void release(FnIO& f) {
    Shim& s = *model->shim;
    if (f.request) s.release_request(f.request);
    for (SurfaceHandle h : f.ins) s.release_surface(h);
    for (SurfaceHandle h : f.outs) s.release_surface(h);
    f = FnIO{};
  }

  std::shared_ptr<LoadedModel> model;
  std::vector<FnIO> io;  // [functions]
};

Status wrap(Code code, const std::string& what, const Status& shim_error) {
  return Status(code, cat("[ane] ", what, ": ", shim_error.message()));
}

// After a load (compiled here or cached by the daemon): the procedures' symbol indices come from the
// compiled model, not from our guess (digest §1.9).
std::shared_ptr<LoadedModel> read_procedures(Shim& shim, std::shared_ptr<LoadedModel> m) {
  Result<std::vector<ProcedureSymbols>> procs = shim.procedure_symbols(m->model);
  if (procs)
    m->procedures = std::move(*procs);
  else
    m->procedures_error = procs.status().message();
  return m;
}

}  // namespace

// ---- backend ------------------------------------------------------------------------------------
namespace {
DeviceChoice detect_device(const rt::BackendOptions& opts, Shim* shim) {
  ANELAB_CHECK(shim, "ane", "NativeBackend needs a shim");
  if (opts.device != "auto") return {opts.device, ""};
  return choose_device(opts.device, shim->ane_sub_type());
}
rt::BackendOptions with_device(rt::BackendOptions o, const std::string& device) {
  o.device = device;
  return o;
}
}  // namespace

NativeBackend::NativeBackend(std::unique_ptr<Shim> shim, const rt::BackendOptions& opts, NativeOptions native)
    : NativeBackend(detect_device(opts, shim.get()), std::move(shim), opts, std::move(native)) {}

NativeBackend::NativeBackend(DeviceChoice choice, std::unique_ptr<Shim>&& shim, const rt::BackendOptions& opts,
                             NativeOptions native)
    : Backend(with_device(opts, choice.profile)),
      shim_(std::move(shim)),
      native_(std::move(native)),
      device_choice_(std::move(choice)) {
  if (!device_choice_.note.empty()) std::fprintf(stderr, "%s\n", device_choice_.note.c_str());
}

NativeBackend::~NativeBackend() { clear_cache(); }

void NativeBackend::clear_cache() {
  cache_.clear();
  lru_.clear();
}

std::string NativeBackend::mil_text(const mil::Program& program) const {
  return mil::print(program, profile().dialect);
}

void NativeBackend::remember(const std::string& key, std::shared_ptr<LoadedModel> m) {
  if (native_.cache_capacity == 0) return;
  lru_.emplace_front(key, std::move(m));
  cache_[key] = lru_.begin();
  while (lru_.size() > native_.cache_capacity) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();  // the model unloads once no Kernel holds it
  }
}

Result<std::unique_ptr<rt::Kernel>> NativeBackend::compile(const mil::Program& program, const rt::Weights& weights) {
  mil::Program p = program;
  p.dialect = profile().dialect;  // M1-M3: program(1.0)/ios16 verbose text (digest §2.1)
  if (Status s = rt::check_program(p, profile()); !s) return s;
  if (Status s = rt::check_weights(p, weights); !s) return s;
  const std::string text = mil_text(p);
  const std::string key = program_key(text, weights);

  if (auto it = cache_.find(key); it != cache_.end()) {  // hit: no budget, no compiler call
    ++cache_hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return std::unique_ptr<rt::Kernel>(std::make_unique<NativeKernel>(std::move(p), it->second->second));
  }
  ++cache_misses_;
  Result<std::shared_ptr<LoadedModel>> m = compile_and_load(p, text, weights);
  if (!m) return m.status();
  remember(key, *m);
  return std::unique_ptr<rt::Kernel>(std::make_unique<NativeKernel>(std::move(p), *m));
}

void NativeBackend::discard(std::unique_ptr<rt::Kernel> kernel) {
  auto* k = dynamic_cast<NativeKernel*>(kernel.get());
  if (k)
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (it->second == k->model) {
        cache_.erase(it->first);
        lru_.erase(it);
        break;
      }
  kernel.reset();  // the last user unloads, then releases its request and surfaces
}

Result<std::shared_ptr<LoadedModel>> NativeBackend::compile_and_load(const mil::Program& p, const std::string& text,
                                                                     const rt::Weights& weights) {
  const std::string what = cat("program '", p.functions.front().name, "'",
                               p.functions.size() > 1 ? cat(" (+", p.functions.size() - 1, " procedures)") : "");
  const std::vector<WeightEntry> entries = weight_entries(weights);
  Result<ModelHandle> h = shim_->create_model(text, entries);
  if (!h) return wrap(Code::kInternal, "creating the in-memory model for " + what, h.status());
  auto m = std::make_shared<LoadedModel>(shim_, *h, native_.qos);  // cleans up on every error path below

  Result<std::string> hex = shim_->hex_string_identifier(m->model);
  if (!hex) return wrap(Code::kInternal, "hexStringIdentifier of " + what, hex.status());
  if (hex->empty() || hex->find('/') != std::string::npos || *hex == "." || *hex == "..")
    return Status(Code::kInternal, cat("[ane] ", what, ": unusable hexStringIdentifier '", *hex, "'"));
  m->hex_id = *hex;
  const std::string root = native_.temp_root.empty() ? shim_->temporary_directory() : native_.temp_root;
  m->dir = (std::filesystem::path(root) / m->hex_id).string();
  if (load_compiled(*m, text, weights)) return read_procedures(*shim_, std::move(m));

  if (Status s = take_compile(); !s) return s;
  if (Status s = write_model_dir(m->dir, text, weights); !s) return s;
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  auto t0 = Clock::now();
  Status compiled = shim_->compile(m->model, native_.qos);
  compile_ms_ += ms_since(t0);
  if (!compiled)
    return map_compile_failure(compiled, compiles_used(), compile_budget(), native_.budget_near_fraction, what);
  t0 = Clock::now();
  Status loaded = load_with_retry(*m);
  load_ms_ += ms_since(t0);
  if (!loaded) return wrap(Code::kInternal, "loading " + what, loaded);
  m->loaded = true;
  return read_procedures(*shim_, std::move(m));
}

bool NativeBackend::load_compiled(LoadedModel& m, const std::string& text, const rt::Weights& weights) {
  Result<bool> exists = shim_->compiled_model_exists(m.model);
  if (!exists || !*exists) return false;  // an error (e.g. no such selector) only means: compile
  // The daemon's cache outlives our model directory (removed after every unload): the cached program
  // loads from <tmp>/<hexId> with model.mil and the weights written again (m0at/ANEtransformers
  // training/ane_runtime.h does the same before its load).
  if (Status w = write_model_dir(m.dir, text, weights); !w) {
    std::fprintf(stderr,
                 "[ane] note: cannot rewrite the model directory of the compiled program %s (%s); compiling it\n",
                 m.hex_id.c_str(), w.message().c_str());
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status loaded = load_with_retry(m);
  load_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!loaded) {
    std::fprintf(stderr, "[ane] note: the compiled program %s exists but did not load (%s); compiling it again\n",
                 m.hex_id.c_str(), loaded.message().c_str());
    return false;
  }
  m.loaded = true;
  ++compiled_reuses_;
  return true;
}

Status NativeBackend::load_with_retry(LoadedModel& m) {
  Status first = shim_->load(m.model, native_.qos);
  if (first) return first;
  // "for ANE slot reclamation" (digest §1.2 step 6): one retry after a short sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(native_.load_retry_delay_ms));
  Status second = shim_->load(m.model, native_.qos);
  if (second) return second;
  return Status(Code::kInternal, cat(second.message(), " (failed twice; retried after ", native_.load_retry_delay_ms,
                                     " ms; first failure: ", first.message(), ")"));
}

namespace {

// Staging through the device's row layout (rt::surface_layout: rows start every row_stride bytes).
Status copy_in(Shim& shim, SurfaceHandle h, const rt::Surface& src, const rt::SurfaceLayout& l,
               const std::string& what) {
  Result<SurfaceMapping> map = shim.lock_surface(h, false);
  if (!map) return wrap(Code::kIoError, "locking " + what, map.status());
  Status st;
  if (!map->base || map->size < l.extent)
    st = Status(Code::kIoError, cat("[ane] ", what, ": locked surface has ", map->size, " bytes, need ", l.extent));
  else
    rt::pack_rows(src, l, map->base, map->size);
  Status u = shim.unlock_surface(h, false);
  if (!st) return st;
  return u ? u : wrap(Code::kIoError, "unlocking " + what, u);
}

Status copy_out(Shim& shim, SurfaceHandle h, rt::Surface& dst, const rt::SurfaceLayout& l, const std::string& what) {
  Result<SurfaceMapping> map = shim.lock_surface(h, true);
  if (!map) return wrap(Code::kIoError, "locking " + what, map.status());
  Status st;
  if (!map->base || map->size < l.extent)
    st = Status(Code::kIoError, cat("[ane] ", what, ": locked surface has ", map->size, " bytes, need ", l.extent));
  else
    rt::unpack_rows(map->base, map->size, l, dst);
  Status u = shim.unlock_surface(h, true);
  if (!st) return st;
  return u ? u : wrap(Code::kIoError, "unlocking " + what, u);
}

// First evaluate of a function: its surfaces and its request.
Status prepare_io(NativeKernel& k, int fn, const rt::DeviceProfile& profile) {
  NativeKernel::FnIO& io = k.io[static_cast<size_t>(fn)];
  if (io.request) return Status::ok();
  Shim& shim = *k.model->shim;
  const mil::Function& f = k.function(fn);
  const SurfaceSizes sizes = surface_sizes(f, profile);
  auto make = [&](size_t bytes, std::vector<SurfaceHandle>& into, const std::string& what) -> Status {
    Result<SurfaceHandle> s = shim.create_surface(bytes);
    if (!s) return wrap(Code::kIoError, cat("creating the ", bytes, "-byte IOSurface for ", what), s.status());
    into.push_back(*s);
    return Status::ok();
  };
  Status st;
  for (size_t i = 0; st && i < sizes.inputs.size(); ++i)
    st = make(sizes.inputs[i], io.ins, cat("input '", f.inputs[i].first, "' of '", f.name, "'"));
  for (size_t j = 0; st && j < sizes.outputs.size(); ++j)
    st = make(sizes.outputs[j], io.outs, cat("output '", f.outputs[j], "' of '", f.name, "'"));
  if (st) {
    Result<RequestIndices> idx = procedure_indices(k.program(), fn, k.model->procedures, k.model->procedures_error);
    if (!idx) {
      st = idx.status();
    } else {
      RequestSpec spec{io.ins, idx->inputs, io.outs, idx->outputs, idx->procedure};
      Result<RequestHandle> r = shim.create_request(spec);
      if (r)
        io.request = *r;
      else
        st = wrap(Code::kInternal, cat("building the _ANERequest for '", f.name, "'"), r.status());
    }
  }
  if (!st) k.release(io);
  return st;
}

}  // namespace

Status NativeBackend::evaluate(rt::Kernel& kernel, int fn, std::span<rt::Surface* const> inputs,
                               std::span<rt::Surface* const> outputs) {
  auto* k = dynamic_cast<NativeKernel*>(&kernel);
  if (!k) return Status(Code::kInvalidArgument, "[ane] evaluate: kernel was not compiled by the ane backend");
  if (fn < 0 || fn >= static_cast<int>(k->io.size()))
    return Status(Code::kInvalidArgument, cat("[ane] evaluate: function index ", fn, " out of range (program has ",
                                              k->io.size(), " functions)"));
  const mil::Function& f = k->function(fn);
  if (Status s = rt::check_surfaces(f, inputs, outputs, profile()); !s) return s;
  if (Status s = prepare_io(*k, fn, profile()); !s) return s;
  NativeKernel::FnIO& io = k->io[static_cast<size_t>(fn)];
  for (size_t i = 0; i < inputs.size(); ++i)
    if (Status s = copy_in(*shim_, io.ins[i], *inputs[i], rt::surface_layout(f.inputs[i].second, profile()),
                           cat("input '", f.inputs[i].first, "' of '", f.name, "'"));
        !s)
      return s;
  if (Status s = shim_->evaluate(k->model->model, io.request, native_.qos); !s)
    return wrap(Code::kInternal, cat("evaluate of '", f.name, "' (procedure ", fn, ", model ", k->model->hex_id, ")"),
                s);
  for (size_t j = 0; j < outputs.size(); ++j)
    if (Status s = copy_out(*shim_, io.outs[j], *outputs[j], rt::surface_layout(outputs[j]->type(), profile()),
                            cat("output '", f.outputs[j], "' of '", f.name, "'"));
        !s)
      return s;
  return Status::ok();
}

}  // namespace anelab::ane

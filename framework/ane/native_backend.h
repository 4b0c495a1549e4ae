// NativeBackend: the portable half of the "ane" backend. Everything between rt::Backend and the
// private API lives here, in plain C++ tested on Linux through FakeShim; the Shim (shim.h) only
// forwards single calls. See docs/native_backend.md.
//
// compile(program, weights):
//   1. copy the program into the profile's dialect (ios18 on m4/m5, ios16 on m1-m3) and run
//      rt::check_program (cast / fp32 I/O are rejected on m1/m2 with a clear message: no retry) and
//      rt::check_weights (every BLOBFILE const resolves, blob headers valid);
//   2. text = mil::print(program, profile dialect); key = program_key(text, weights);
//      a cache hit returns a new Kernel sharing the loaded model (no budget, no shim call);
//   3. shim: create_model(text, weights dictionary) -> hex_string_identifier ->
//      compiled_model_exists: the compiler's output is still in <tmp>/<hexId>/ (left by a process that
//      exec-restarted with this program loaded) -> load (one retry after 100 ms), no compile, no budget;
//      otherwise (or when that load fails):
//   4. take_compile() (kBudgetExhausted when the process's budget is spent) -> write
//      <tmp>/<hexId>/model.mil + weights/ (always created) + weights/... -> compile(qos) -> load(qos)
//      (one retry); a failed compile maps through map_compile_failure (kBudgetExhausted near the
//      budget, else kCompileFailed).
// evaluate(kernel, fn, inputs, outputs):
//   rt::check_surfaces, then (first time per function) create the shim surfaces (surface_sizes) and
//   the request (request_indices); stage input bytes (lock/memcpy/unlock), evaluate(qos), copy the
//   output bytes back (read-only lock).
// Destruction (the references' order, maderix stories_io.h free_kern): the last holder of a model
// unloads it first, then the Kernel releases its request and surfaces, then the model is released
// and its temp directory removed. A model still loaded when the process exec-restarts keeps its
// directory, and so its compiled program, for step 3 of the next process.
// discard(kernel): drops the kernel's program from the cache first (a static kernel built from old
// weights is never compiled again), so the model unloads now instead of staying in the LRU.
#pragma once
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "framework/ane/native_rules.h"
#include "framework/ane/shim.h"
#include "framework/runtime/backend.h"

namespace anelab::ane {

struct NativeOptions {
  uint32_t qos = 21;                  // every repo uses 21 (digest §1.7)
  int load_retry_delay_ms = 100;      // one load retry after this delay (digest §1.2 step 6)
  size_t cache_capacity = 64;         // compiled programs kept loaded for cache hits (LRU)
  double budget_near_fraction = 0.9;  // see map_compile_failure
  std::string temp_root;              // "" = shim.temporary_directory()
};

class LoadedModel;

class NativeBackend : public rt::Backend {
 public:
  // opts.device "auto" (the default) picks the profile of the chip the shim reports (choose_device)
  // and prints which on stderr.
  NativeBackend(std::unique_ptr<Shim> shim, const rt::BackendOptions& opts, NativeOptions native = {});
  ~NativeBackend() override;
  std::string name() const override { return "ane"; }

  Result<std::unique_ptr<rt::Kernel>> compile(const mil::Program& program, const rt::Weights& weights) override;
  void discard(std::unique_ptr<rt::Kernel> kernel) override;
  Status evaluate(rt::Kernel& kernel, int fn, std::span<rt::Surface* const> inputs,
                  std::span<rt::Surface* const> outputs) override;

  Shim& shim() { return *shim_; }
  const DeviceChoice& device_choice() const { return device_choice_; }
  const NativeOptions& native_options() const { return native_; }
  // The exact MIL text compile() hands to the shim for `program` on this backend's profile.
  std::string mil_text(const mil::Program& program) const;
  int cache_hits() const { return cache_hits_; }
  int cache_misses() const { return cache_misses_; }
  // Programs loaded from the compiler's output of an earlier compile (compiled_model_exists), no compile.
  int compiled_reuses() const { return compiled_reuses_; }
  size_t cached_programs() const { return lru_.size(); }
  void clear_cache();  // drops the cache's references (models unload once no Kernel uses them)
  // Wall time spent in the shim's compile and load calls (incl. the retry) since construction.
  double compile_ms_total() const { return compile_ms_; }
  double load_ms_total() const { return load_ms_; }

 private:
  NativeBackend(DeviceChoice choice, std::unique_ptr<Shim>&& shim, const rt::BackendOptions& opts,
                NativeOptions native);
  Result<std::shared_ptr<LoadedModel>> compile_and_load(const mil::Program& p, const std::string& text,
                                                        const rt::Weights& weights);
  // Step 3: true when the compiler's earlier output (compiledModelExists) loaded, from a model directory
  // written again with `text` and `weights`.
  bool load_compiled(LoadedModel& m, const std::string& text, const rt::Weights& weights);
  Status load_with_retry(LoadedModel& m);
  void remember(const std::string& key, std::shared_ptr<LoadedModel> m);

  std::shared_ptr<Shim> shim_;
  NativeOptions native_;
  DeviceChoice device_choice_;
  std::list<std::pair<std::string, std::shared_ptr<LoadedModel>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> cache_;
  int cache_hits_ = 0, cache_misses_ = 0, compiled_reuses_ = 0;
  double compile_ms_ = 0, load_ms_ = 0;
};

}  // namespace anelab::ane

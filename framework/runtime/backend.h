// Backend: a small interface in the style of executorch's backend interface. A backend compiles a MIL
// program plus its weights dictionary into a Kernel and evaluates a Kernel's function on surfaces.
// Backends are chosen by name at run time through the registry (framework/backends/registry.h,
// create_backend("emulator")).
//
//   weights: exactly what the private API receives (digest §1.3): keys are BLOBFILE paths such as
//   "@model_path/weights/wq.bin", values are the blob files' bytes (framework/mil/blob.h format).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/mil/ir.h"
#include "framework/runtime/device_profile.h"
#include "framework/runtime/surface.h"

namespace anelab {
class ThreadPool;
}

namespace anelab::rt {

using Blob = std::shared_ptr<const std::vector<uint8_t>>;
using Weights = std::map<std::string, Blob>;  // "@model_path/weights/x.bin" -> blob file bytes

// A compiled program. Backends subclass it; callers only use the signature accessors.
class Kernel {
 public:
  virtual ~Kernel() = default;
  const mil::Program& program() const { return program_; }
  int function_index(const std::string& name) const;  // throws naming the functions
  const mil::Function& function(int index) const { return program_.functions.at(static_cast<size_t>(index)); }
  // Surfaces of the right type and device-legal allocation for function `index`'s inputs / outputs.
  std::vector<Surface> make_inputs(int index, const DeviceProfile& p) const;
  std::vector<Surface> make_outputs(int index, const DeviceProfile& p) const;

 protected:
  explicit Kernel(mil::Program program) : program_(std::move(program)) {}
  mil::Program program_;
};

// Compiles done in one process. The ANE compiler's limit (~119, digest §1.11) is per process, not per
// backend: every "ane" backend of a process counts in CompileCounter::process() (the registry passes it),
// so two backends (or two models) in one process share one budget. A simulated process (the emulator,
// a test's NativeBackend over a FakeShim) gets a counter of its own unless given one.
class CompileCounter {
 public:
  int used() const { return used_.load(); }
  // Counts one compile if fewer than `budget` were done; false (nothing counted) otherwise.
  bool take(int budget) {
    int u = used_.load();
    while (u < budget)
      if (used_.compare_exchange_weak(u, u + 1)) return true;
    return false;
  }
  // This OS process's counter (the one the real compiler's limit applies to).
  static const std::shared_ptr<CompileCounter>& process();

 private:
  std::atomic<int> used_{0};
};

struct BackendOptions {
  std::string device = kDefaultDevice;  // device profile name
  int compile_budget = -1;              // -1: the profile's budget (tests override with small numbers)
  int threads = 0;                      // 0: all hardware threads (ThreadPool::global())
  // A pool the caller owns and keeps alive longer than the backend (an engine's: one pool per engine, shared
  // with the emulator it drives); when set, the emulator runs on it and `threads` is not used.
  ThreadPool* pool = nullptr;
  // Where compiles are counted; null: a counter of this backend's own (one simulated process). The
  // "ane" registry entry fills in CompileCounter::process().
  std::shared_ptr<CompileCounter> compile_counter;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  const DeviceProfile& profile() const { return *profile_; }

  // Compiles all functions of `program`. Fails with kBudgetExhausted once the per-process compile
  // budget is spent (like the real compiler), kLimitExceeded / kInvalidArgument on profile violations.
  virtual Result<std::unique_ptr<Kernel>> compile(const mil::Program& program, const Weights& weights) = 0;
  // Runs function `fn` of `kernel`; surfaces in the function's parameter / return order.
  virtual Status evaluate(Kernel& kernel, int fn, std::span<Surface* const> inputs,
                          std::span<Surface* const> outputs) = 0;

  // Compiles counted so far in this backend's process (CompileCounter), by every backend sharing it.
  int compiles_used() const { return counter_->used(); }
  int compile_budget() const { return compile_budget_; }
  int compiles_left() const { return compile_budget_ - compiles_used(); }
  // The kernel's program will not be compiled again (a static kernel built from weights that changed):
  // a backend that keeps compiled programs for cache hits drops it now, then the kernel is destroyed.
  virtual void discard(std::unique_ptr<Kernel> kernel) { kernel.reset(); }

 protected:
  Backend(const BackendOptions& opts);
  // Call at the start of compile(): counts one compile or returns kBudgetExhausted.
  Status take_compile();
  const DeviceProfile* profile_;
  int compile_budget_ = 0;
  std::shared_ptr<CompileCounter> counter_;
};

// Thrown by callers that cannot go on without a kernel (framework/kernels KernelCache) when a compile
// fails with kBudgetExhausted or kCompileFailed: the process should checkpoint and exec-restart
// (train/trainer.cpp). `code` is the backend's status code.
class CompileError : public Error {
 public:
  CompileError(Code code, const std::string& msg) : Error(msg), code(code) {}
  Code code;
};

}  // namespace anelab::rt

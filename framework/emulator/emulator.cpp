// The emulator backend: compile = budget + device-profile check + lowering to execution plans;
// evaluate = surface check + staging + plan walk. See framework/emulator/README.md.
#include "framework/emulator/emulator.h"

#include <cstdlib>
#include <cstring>

#include "framework/core/fp16.h"
#include "framework/emulator/lower.h"
#include "framework/emulator/plan.h"

namespace anelab::emu {

// ---- plan storage ---------------------------------------------------------------------------------
AlignedFloats::AlignedFloats(size_t n) : n_(n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) fail("emulator", "out of memory allocating ", bytes, " bytes");
  std::memset(p, 0, bytes);
  p_.reset(static_cast<float*>(p));
}
void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

const float* FunctionPlan::ptr(const Ref& r) const {
  if (r.kind == Ref::kConst) return consts.at(static_cast<size_t>(r.index)).data() + r.off;
  return arena.data() + vbuf_offset.at(static_cast<size_t>(r.index)) + r.off;
}
float* FunctionPlan::mut_ptr(const Ref& r) {
  ANELAB_CHECK(r.kind == Ref::kArena, "emulator", "internal: writable reference to a const");
  return arena.data() + vbuf_offset.at(static_cast<size_t>(r.index)) + r.off;
}

namespace {

class EmuKernel : public rt::Kernel {
 public:
  explicit EmuKernel(mil::Program p) : Kernel(std::move(p)) {}
  std::vector<FunctionPlan> plans;  // one per function, program order
  ExecCtx ctx;
  AlignedFloats workspace;  // [threads] x (ws_a + ws_b) GEMM packing buffers
};

class EmulatorBackend : public rt::Backend {
 public:
  explicit EmulatorBackend(const rt::BackendOptions& o) : Backend(o) {
    // The caller's pool when given; else the process-wide pool (all hardware threads); an explicit count
    // gets its own pool.
    if (o.pool) {
      pool_ = o.pool;
    } else if (o.threads <= 0) {
      pool_ = &ThreadPool::global();
    } else if (o.threads > 1) {
      own_pool_ = std::make_unique<ThreadPool>(o.threads);
      pool_ = own_pool_.get();
    }
    threads_ = pool_ ? pool_->size() : 1;
  }
  std::string name() const override { return "emulator"; }

  Result<std::unique_ptr<rt::Kernel>> compile(const mil::Program& program, const rt::Weights& weights) override {
    if (Status s = take_compile(); !s) return s;
    if (Status s = rt::check_program(program, profile()); !s) return s;
    try {
      auto k = std::make_unique<EmuKernel>(program);
      k->plans.resize(program.functions.size());
      size_t wa = 0, wb = 0;
      for (size_t i = 0; i < program.functions.size(); ++i) {
        lower_function(program.functions[i], weights, k->plans[i]);
        gemm_workspace_needs(k->plans[i], &wa, &wb);
      }
      wa = (wa + 15) / 16 * 16;
      wb = (wb + 15) / 16 * 16;
      k->ctx.threads = threads_;
      k->ctx.pool = pool_;
      k->workspace = AlignedFloats(static_cast<size_t>(threads_) * (wa + wb) + 16);
      for (int t = 0; t < threads_; ++t) {
        k->ctx.ws_a.push_back(k->workspace.data() + static_cast<size_t>(t) * (wa + wb));
        k->ctx.ws_b.push_back(k->workspace.data() + static_cast<size_t>(t) * (wa + wb) + wa);
      }
      return std::unique_ptr<rt::Kernel>(std::move(k));
    } catch (const Error& e) {
      return Status(Code::kInvalidArgument, e.what());
    }
  }

  Status evaluate(rt::Kernel& kernel, int fn, std::span<rt::Surface* const> inputs,
                  std::span<rt::Surface* const> outputs) override {
    auto* k = dynamic_cast<EmuKernel*>(&kernel);
    if (!k) return Status(Code::kInvalidArgument, "[emulator] evaluate: kernel was not compiled by the emulator");
    if (fn < 0 || fn >= static_cast<int>(k->plans.size()))
      return Status(Code::kInvalidArgument, cat("[emulator] evaluate: function index ", fn,
                                                " out of range (program has ", k->plans.size(), " functions)"));
    const mil::Function& f = k->function(fn);
    if (Status s = rt::check_surfaces(f, inputs, outputs, profile()); !s) return s;
    run_plan(k->plans[static_cast<size_t>(fn)], k->ctx, inputs, outputs);
    return Status::ok();
  }

 private:
  static void run_plan(FunctionPlan& p, const ExecCtx& ctx, std::span<rt::Surface* const> inputs,
                       std::span<rt::Surface* const> outputs) {
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const ValueInfo& v = p.inputs[i];
      float* dst = p.mut_ptr(v.ref);
      const size_t n = static_cast<size_t>(v.type.numel());
      if (v.type.dtype == mil::DType::kFp16)
        half_to_float(inputs[i]->f16(), dst, n);
      else
        std::memcpy(dst, inputs[i]->f32(), n * sizeof(float));
    }
    for (const Step& s : p.steps) s.run(s, ctx);
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      const ValueInfo& v = p.outputs[i];
      const float* src = p.ptr(v.ref);
      const size_t n = static_cast<size_t>(v.type.numel());
      if (v.type.dtype == mil::DType::kFp16)
        float_to_half(src, outputs[i]->f16(), n);
      else
        std::memcpy(outputs[i]->f32(), src, n * sizeof(float));
    }
  }
  int threads_ = 1;
  ThreadPool* pool_ = nullptr;  // nullptr: single-threaded
  std::unique_ptr<ThreadPool> own_pool_;
};

}  // namespace

std::unique_ptr<rt::Backend> make_emulator_backend(const rt::BackendOptions& opts) {
  return std::make_unique<EmulatorBackend>(opts);
}

}  // namespace anelab::emu

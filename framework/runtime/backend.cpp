#include "framework/runtime/backend.h"

#include <algorithm>

namespace anelab::rt {

int Kernel::function_index(const std::string& name) const {
  std::string known;
  for (size_t i = 0; i < program_.functions.size(); ++i) {
    if (program_.functions[i].name == name) return static_cast<int>(i);
    known += (known.empty() ? "" : ", ") + program_.functions[i].name;
  }
  fail("kernel", "no function '", name, "' in the compiled program (functions: ", known, ")");
}

namespace {
// Device-legal surfaces for a list of tensor types of function `fn`: each at least the device minimum;
// with several inputs/outputs all at the largest allocation (digest §4.3).
std::vector<Surface> make_surfaces(const mil::Function& fn, const std::vector<const mil::TensorType*>& types,
                                   const DeviceProfile& p) {
  size_t largest = 0;
  for (const auto& [n, t] : fn.inputs) largest = std::max(largest, surface_alloc_bytes(t, p));
  for (const auto& o : fn.outputs) largest = std::max(largest, surface_alloc_bytes(*fn.type_of(o), p));
  const bool multi = fn.inputs.size() + fn.outputs.size() > 2;
  std::vector<Surface> v;
  v.reserve(types.size());
  for (const mil::TensorType* t : types) v.emplace_back(*t, multi ? largest : surface_alloc_bytes(*t, p));
  return v;
}
}  // namespace

std::vector<Surface> Kernel::make_inputs(int index, const DeviceProfile& p) const {
  const mil::Function& fn = function(index);
  std::vector<const mil::TensorType*> types;
  for (const auto& [n, t] : fn.inputs) types.push_back(&t);
  return make_surfaces(fn, types, p);
}

std::vector<Surface> Kernel::make_outputs(int index, const DeviceProfile& p) const {
  const mil::Function& fn = function(index);
  std::vector<const mil::TensorType*> types;
  for (const auto& o : fn.outputs) types.push_back(fn.type_of(o));
  return make_surfaces(fn, types, p);
}

const std::shared_ptr<CompileCounter>& CompileCounter::process() {
  static const std::shared_ptr<CompileCounter> counter = std::make_shared<CompileCounter>();
  return counter;
}

Backend::Backend(const BackendOptions& opts)
    : profile_(&device_profile(opts.device)),
      counter_(opts.compile_counter ? opts.compile_counter : std::make_shared<CompileCounter>()) {
  compile_budget_ = opts.compile_budget >= 0 ? opts.compile_budget : profile_->compile_budget;
}

Status Backend::take_compile() {
  if (!counter_->take(compile_budget_))
    return Status(Code::kBudgetExhausted, cat("[compile] ", name(), ": per-process compile budget exhausted (",
                                              counter_->used(), " of ", compile_budget_,
                                              " used in this process; the ANE compiler fails after ~119 compiles per "
                                              "process) — checkpoint and restart the process"));
  return Status::ok();
}

}  // namespace anelab::rt

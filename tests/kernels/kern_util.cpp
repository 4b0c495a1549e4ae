#include "tests/kernels/kern_util.h"

#include <cstdio>
#include <map>
#include <mutex>

#include "framework/backends/registry.h"

namespace anelab::test {

std::vector<F32> eval_program(const mil::Program& p, const rt::Weights& w, const std::vector<F32>& inputs) {
  auto be = rt::create_backend("emulator");
  auto k = be->compile(p, w);
  k.status().throw_if_error();
  std::unique_ptr<rt::Kernel> kernel = std::move(k.value());
  auto ins = kernel->make_inputs(0, be->profile());
  auto outs = kernel->make_outputs(0, be->profile());
  EXPECT_EQ(ins.size(), inputs.size());
  std::vector<rt::Surface*> ip, op;
  for (size_t i = 0; i < ins.size(); ++i) {
    EXPECT_EQ(static_cast<int64_t>(inputs[i].size()), ins[i].numel());
    ins[i].write(inputs[i].data());
    ip.push_back(&ins[i]);
  }
  for (auto& o : outs) op.push_back(&o);
  auto st = be->evaluate(*kernel, 0, ip, op);
  if (!st.is_ok()) ADD_FAILURE() << st.message();
  std::vector<F32> res;
  for (auto& o : outs) {
    F32 v(static_cast<size_t>(o.numel()));
    o.read(v.data());
    res.push_back(std::move(v));
  }
  return res;
}

namespace {
struct Recorder {
  std::mutex mu;
  std::map<std::string, double> worst;
  ~Recorder() {
    for (const auto& [k, v] : worst) std::printf("[kernels] worst %-40s %.3e\n", k.c_str(), v);
  }
};
Recorder& recorder() {
  static Recorder r;
  return r;
}
}  // namespace

void record(const std::string& what, double value) {
  std::lock_guard<std::mutex> l(recorder().mu);
  double& w = recorder().worst[what];
  if (value > w) w = value;
}

}  // namespace anelab::test

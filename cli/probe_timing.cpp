#include "cli/probe_timing.h"

#include <algorithm>
#include <chrono>

#include "framework/kernels/workloads.h"

namespace anelab::cli {

TimedRun time_program(rt::Backend& be, const mil::Program& p, const rt::Weights& w, int repeats) {
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  TimedRun r;
  mil::Program q = p;
  q.dialect = be.profile().dialect;
  const auto t0 = Clock::now();
  auto k = be.compile(q, w);
  r.compile_ms = ms_since(t0);
  if (!k) {
    r.error = "compile: " + k.status().message();
    return r;
  }
  auto ins = (*k)->make_inputs(0, be.profile());
  auto outs = (*k)->make_outputs(0, be.profile());
  kern::fill_random_inputs(ins);
  std::vector<rt::Surface*> ip, op;
  for (auto& s : ins) ip.push_back(&s);
  for (auto& s : outs) op.push_back(&s);
  r.eval_ms = 1e300;
  for (int i = 0; i <= repeats; ++i) {
    const auto t1 = Clock::now();
    if (Status s = be.evaluate(**k, 0, ip, op); !s) {
      r.error = "evaluate: " + s.message();
      return r;
    }
    if (i > 0 || repeats == 0) r.eval_ms = std::min(r.eval_ms, ms_since(t1));  // i == 0: warm-up
  }
  for (auto& s : outs) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    s.read(v.data());
    r.out.insert(r.out.end(), v.begin(), v.end());
  }
  return r;
}

}  // namespace anelab::cli

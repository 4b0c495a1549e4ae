// Helpers of the MIL prefill tests (test_prefill_w8.cpp, test_prefill_q4.cpp, test_prefill_q8.cpp): one layer
// kernel run on the emulator, and a deterministic fp16 input.
#pragma once
#include <cmath>
#include <vector>

#include "framework/backends/registry.h"
#include "framework/core/fp16.h"
#include "infer/prefill_mil.h"

namespace anelab::infer::prefill_test {

// The layer kernel `src` compiled and run once on the emulator: its output for input x [1, dim, 1, S].
inline std::vector<float> run_layer_kernel(const LayerKernelSource& src, const std::vector<float>& x) {
  auto be = rt::create_backend("emulator");
  auto k = be->compile(src.program, src.weights);
  k.status().throw_if_error();
  auto in = k.value()->make_inputs(0, be->profile()), out = k.value()->make_outputs(0, be->profile());
  in[0].write(x.data());
  rt::Surface* ip[1] = {&in[0]};
  rt::Surface* op[1] = {&out[0]};
  be->evaluate(*k.value(), 0, ip, op).throw_if_error();
  std::vector<float> y(static_cast<size_t>(out[0].numel()));
  out[0].read(y.data());
  return y;
}

// n fp16 values sin(freq * i).
inline std::vector<float> sin_input(size_t n, double freq) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = round_fp16(static_cast<float>(std::sin(freq * static_cast<double>(i))));
  return x;
}

// The weight matrices of a layer kernel.
inline constexpr const char* kLayerMatrices[] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};

}  // namespace anelab::infer::prefill_test

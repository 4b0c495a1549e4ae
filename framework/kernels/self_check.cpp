#include "framework/kernels/self_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "framework/backends/registry.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/mil/builder.h"

namespace anelab::kern {

namespace {

// y [Co, So] = x [c mod Ci, s < So] * 0.5 + 0.25 (see self_check.h).
mil::Program self_check_program(const mil::TensorType& in, const mil::TensorType& out) {
  const int64_t ci = in.shape[1], co = out.shape[1], so = out.shape[3];
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  mil::Value x = b.input("x", in);
  // the arithmetic on the sliced input only, then copies along the channels: small intermediates
  const mil::Value part = b.add(b.mul(b.slice_by_size(x, {0, 0, 0, 0}, {1, std::min(ci, co), 1, so}), 0.5), 0.25);
  std::vector<mil::Value> copies;
  for (int64_t c = 0; c < co; c += ci) copies.push_back(part);
  const int64_t whole = static_cast<int64_t>(copies.size()) * std::min(ci, co);
  if (copies.size() == 1 && whole == co)
    b.output(b.named("y").identity(part));
  else if (whole == co)
    b.output(b.named("y").concat(copies, 1));
  else
    b.output(b.named("y").slice_by_size(b.concat(copies, 1), {0, 0, 0, 0}, {1, co, 1, so}));
  return pb.build();
}

std::vector<float> evaluate_once(rt::Backend& be, const mil::Program& p, const std::vector<float>& x,
                                 const std::string& what) {
  auto k = be.compile(p, {});
  ANELAB_CHECK(k.is_ok(), "self-check", what, ": compile on ", be.name(), " failed: ", k.status().message());
  std::vector<rt::Surface> ins = k.value()->make_inputs(0, be.profile()),
                           outs = k.value()->make_outputs(0, be.profile());
  ins[0].write(x.data());
  rt::Surface* ip[1] = {&ins[0]};
  rt::Surface* op[1] = {&outs[0]};
  const Status s = be.evaluate(*k.value(), 0, ip, op);
  ANELAB_CHECK(s.is_ok(), "self-check", what, ": evaluation on ", be.name(), " failed: ", s.message());
  std::vector<float> y(static_cast<size_t>(outs[0].numel()));
  outs[0].read(y.data());
  return y;
}

}  // namespace

std::string SelfCheck::line() const {
  char diff[64];
  std::snprintf(diff, sizeof diff, "max rel diff %.3g (limit %.3g)", max_rel_diff, tolerance);
  const std::string head =
      cat("[self-check] ", backend, " ", device, " ", kernel, " (in ", input.str(), ", out ", output.str(), "): ");
  if (ok()) return head + "agrees with the emulator, " + diff;
  return head + "DIFFERS from the emulator, " + diff + ": the device reads or writes this I/O layout otherwise";
}

std::string SelfCheck::json() const {
  nlohmann::json j{{"schema", "anelab.self_check/1"},
                   {"backend", backend},
                   {"device_profile", device},
                   {"kernel", kernel},
                   {"input", input.str()},
                   {"output", output.str()},
                   {"checked_input", checked_input.str()},
                   {"checked_output", checked_output.str()},
                   {"max_rel_diff", max_rel_diff},
                   {"tolerance", tolerance},
                   {"agrees", ok()},
                   {"ms", ms},
                   {"hint", "run `anelab probe --out probe.json` for the full report (docs/macos.md)"}};
  return j.dump(2) + "\n";
}

SelfCheck run_self_check(rt::Backend& backend, const std::string& kernel, const mil::TensorType& input,
                         const mil::TensorType& output) {
  ANELAB_CHECK(input.rank() == 4 && output.rank() == 4 && input.dtype == mil::DType::kFp16 &&
                   output.dtype == mil::DType::kFp16 && output.shape[3] <= input.shape[3],
               "self-check", kernel, ": needs fp16 [1, C, 1, S] I/O with the output no wider than the input, got ",
               input.str(), " -> ", output.str());
  const auto t0 = std::chrono::steady_clock::now();
  SelfCheck c;
  c.backend = backend.name(), c.device = backend.profile().name, c.kernel = kernel;
  c.input = input, c.output = output, c.tolerance = kSelfCheckTolerance;
  c.checked_input = input, c.checked_output = output;  // same widths and dtype, at most kSelfCheckChannels rows
  c.checked_input.shape[1] = std::min(input.shape[1], kSelfCheckChannels);
  c.checked_output.shape[1] = std::min(output.shape[1], kSelfCheckChannels);
  const mil::Program p = self_check_program(c.checked_input, c.checked_output);
  std::vector<float> x(static_cast<size_t>(c.checked_input.numel()));
  for (size_t k = 0; k < std::min<size_t>(x.size(), 1024); ++k) x[k] = static_cast<float>(k) / 64.0f - 8.0f;
  for (size_t k = 1024; k < x.size(); k += 1024)
    std::copy_n(x.begin(), std::min<size_t>(1024, x.size() - k), x.begin() + k);
  rt::BackendOptions eo;
  eo.device = c.device;
  eo.threads = 1;
  auto emu = rt::create_backend("emulator", eo);
  const std::vector<float> want = evaluate_once(*emu, p, x, kernel);
  const std::vector<float> got = evaluate_once(backend, p, x, kernel);
  double err = 0, scale = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double d = std::isfinite(got[k]) ? std::abs(double(got[k]) - want[k]) : INFINITY;
    err = std::max(err, d), scale = std::max(scale, std::abs(double(want[k])));
  }
  c.max_rel_diff = err / std::max(scale, 1e-30);
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

bool write_self_check_report(const SelfCheck& c, const std::string& path) {
  try {
    write_file_atomic(path, c.json());
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace anelab::kern

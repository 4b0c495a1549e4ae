// `anelab probe` rule probes: small experiments that measure, through a Shim (the real ANE, or FakeShim
// standing in for it), the device rules the native backend can only infer, and the device profile's
// assumption for each. They drive the shim directly (not NativeBackend), because several of them must
// break the profile's rules to measure them (widths that are not multiples of 32, a dimension of 65536,
// exponent-form float literals, tiny surfaces). docs/native_backend.md "Reading a probe report" says
// how each result becomes a device-profile change.
//
//   row_stride      identity conv at S = 32, 33, 48, 64, 100: the byte stride at which the device reads
//                   input rows and writes output rows (profile: surface_layout(...).row_stride)
//   min_surface     identity conv on a 2 KiB tensor with surfaces of 2048 / 16384 / 49152 bytes
//                   (profile: min_surface_bytes)
//   io_order        3 inputs (values 1, 2, 3) concatenated + a second output (10·a): the order in which
//                   the request's surfaces bind (profile: declaration order)
//   procedures      a 2-procedure program: the ANEFModelProcedures symbol indices after load, the inferred
//                   ones, and whether procedure 1 runs with the attributes' indices
//   max_dim         a tensor with one dimension of 32768 / 65536 / 131072 (profile: max_dim)
//   float_literals  y = x·c with c written as short hex, long hex, %f and exponent form
//                   (profile: the printer writes integers and hex floats only)
//   compile_limit   (opt-in) distinct compiles until the compiler fails (profile: compile_budget)
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/ane/shim.h"
#include "framework/kernels/train.h"
#include "framework/runtime/device_profile.h"

namespace anelab::cli {

struct RuleProbeOptions {
  int compile_limit = 0;  // > 0: run the compile_limit probe with at most this many compiles
  uint32_t qos = 21;
};

// Runs every rule probe but compile_limit on `shim` with programs printed for `profile`; returns
// {"<rule>": {measurement...}, "compiles": n}. Never throws for a failing experiment: each result
// records its error text.
nlohmann::json run_rule_probes(ane::Shim& shim, const rt::DeviceProfile& profile, const RuleProbeOptions& o);

// compile_limit: up to `limit` distinct compiles on `shim` until one fails; `compiles_before` is how
// many this process already made (the limit is per process).
nlohmann::json run_compile_limit_probe(ane::Shim& shim, const rt::DeviceProfile& profile, int limit,
                                       int compiles_before, uint32_t qos = 21);

// The profile's assumption for each rule, in the same shape as the measurements.
nlohmann::json rule_assumptions(const rt::DeviceProfile& profile, const RuleProbeOptions& o);

// Per rule: {"name", "profile", "emulator", "ane", "agrees"}; agrees compares the ANE measurement
// (null without an ANE) with the profile's assumption on the fields both have.
nlohmann::json compare_rules(const nlohmann::json& profile, const nlohmann::json& emulator, const nlohmann::json& ane);

}  // namespace anelab::cli

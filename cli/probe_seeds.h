// The seed-style measurements of `anelab probe` (issue 40 item 6): experiments that settle open questions
// about the ANE, after the seed material's probes (sram_probe.m, quant_probe.m), maderix/ANE issue #47 and
// the digest's §1.8. Each returns one section of the report. They measure the device; through FakeShim
// the timings are the emulator's, not the ANE's, and every section says which in "numbers".
//
//   sram           a chain of n 1x1 convs 1024 -> 1024 at S = 64, n = 1, 2, 4, ... 32 (2 to 64 MiB of fp16
//                  weights): TFLOPS per working-set size, and the knee: the first size whose throughput falls
//                  below kKneeFraction of the best smaller one (the on-chip memory then lies between the two)
//   quant          a 1x1 conv 2048 -> 2048 at S = 64 with fp16 weights and with int8 weights
//                  (constexpr_affine_dequantize): TFLOPS of each and int8 / fp16 (about 2: native int8
//                  compute; about 1: dequantized to fp16 at load), and the same conv with uint4 weights
//                  (constexpr_affine_dequantize), uint4 blocks of 32 (constexpr_blockwise_shift_scale) and a
//                  16-entry LUT (constexpr_lut_to_dense): per form TFLOPS, vs_fp16 and the max rel diff of
//                  the device's outputs against the emulator's on the same program
//   io_size_order  a kernel with two inputs and two outputs of different sizes (every surface as large as the
//                  largest tensor, the multi-I/O rule), its inputs declared in ascending and in descending size
//                  and its outputs both ways, each against the emulator (maderix/ANE #47: inputs ascending
//                  and outputs descending, else zeros)
//   direct_eval    one request through Shim::evaluate (the daemon, over XPC) and Shim::evaluate_direct
//                  (-[_ANEClient doEvaluateDirectWithModel:...]): best evaluate time of each and whether the
//                  outputs are equal
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "framework/ane/shim.h"
#include "framework/runtime/backend.h"
#include "framework/runtime/device_profile.h"

namespace anelab::cli {

inline constexpr double kKneeFraction = 0.7;

// `numbers`: what the timings are ("ane", or the fake shim's note); copied into each section.
// Programs that fail record their error in the section; the probes never throw for a failing experiment.
nlohmann::json sram_probe(rt::Backend& device, int repeats, const std::string& numbers);
nlohmann::json quant_probe(rt::Backend& device, int repeats, const std::string& numbers);
// `emulator`: the reference (FakeShim with the profile's layout). Returns "compiles" on `device` too.
nlohmann::json io_size_order_probe(ane::Shim& device, ane::Shim& emulator, const rt::DeviceProfile& profile,
                                   const std::string& numbers);
nlohmann::json direct_eval_probe(ane::Shim& device, const rt::DeviceProfile& profile, int repeats,
                                 const std::string& numbers);

}  // namespace anelab::cli

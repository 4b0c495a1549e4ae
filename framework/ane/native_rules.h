// The portable rules the native backend applies around the private API (digest §1, §3, §4), as pure
// functions so each one is tested on Linux on its own and by the contract tests through FakeShim.
//
//   model directory (digest §1.2 step 4, §1.3, §1.4), created before compile, removed at unload:
//     <NSTemporaryDirectory()>/<hexStringIdentifier>/model.mil          the MIL text, byte for byte
//     <NSTemporaryDirectory()>/<hexStringIdentifier>/weights/<file>.bin  one file per dictionary key
//                                                                       "@model_path/weights/<file>.bin"
//     (weights/ is created also for a program without weights, as maderix's ane_runtime.h does)
//   request indices (digest §1.6, §1.9): read after load from the model attributes'
//     ANEFModelProcedures (procedure_indices); only when they cannot be read does a single-function
//     program fall back to the inferred @0..@n-1 (request_indices: program-wide numbering
//     Σ_{q<p} n_inputs(q) + i, procedureIndex = p).
//   surface sizes (digest §1.5, §4.3): rt::surface_alloc_bytes per tensor (>= 49152, 16 KiB pages);
//     with more than two I/O tensors every surface gets the largest of those sizes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/ane/shim.h"
#include "framework/core/error.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"

namespace anelab::ane {

// Weights dictionary entries in key order, offset 0, data = the blob file bytes (digest §1.3).
std::vector<WeightEntry> weight_entries(const rt::Weights& weights);

// "@model_path/weights/layer_00/wq.bin" -> "weights/layer_00/wq.bin". Rejects (kInvalidArgument)
// keys without the "@model_path/" prefix, absolute paths, empty components, "." / ".." and NULs.
Result<std::string> model_relative_path(const std::string& key);

// Writes model.mil, weights/ and every weight file into `dir` (created, with intermediate directories).
// kInvalidArgument for a bad key, kIoError naming the file for a write failure.
Status write_model_dir(const std::string& dir, std::string_view mil_text, const rt::Weights& weights);
// Removes `dir` recursively; ignores a missing directory.
void remove_model_dir(const std::string& dir);

// Content key of a compiled program: SHA256(mil)_SHA256(weights) where the weights hash covers every
// key and its bytes in key order (the compiled-program cache key; same shape as digest §1.4's hexId).
std::string program_key(std::string_view mil_text, const rt::Weights& weights);

struct RequestIndices {
  std::vector<int64_t> inputs, outputs;  // program-wide symbol indices of function p's I/O
  int64_t procedure = 0;
};
// The inferred numbering above; used only when the loaded model's attributes cannot be read.
RequestIndices request_indices(const mil::Program& program, int fn);
// Function fn's request indices from the loaded model's ANEFModelProcedures table (digest §1.9; read
// after load through Shim::procedure_symbols): the entry whose ProcedureID is fn, with as many
// input/output symbols as the function has inputs/outputs. An empty table (attributes unreadable)
// falls back to request_indices() for a single-function program; for several functions it is an
// error (kInternal), as is an entry that is missing or does not fit the function.
Result<RequestIndices> procedure_indices(const mil::Program& program, int fn,
                                         const std::vector<ProcedureSymbols>& table,
                                         const std::string& table_error = "");

// Allocation sizes of the shim surfaces for function `fn`'s inputs / outputs (the same rule as
// rt::Kernel::make_inputs / make_outputs).
struct SurfaceSizes {
  std::vector<size_t> inputs, outputs;
};
SurfaceSizes surface_sizes(const mil::Function& fn, const rt::DeviceProfile& profile);

// The device profile of the ane backend: `requested` unless it is "auto"; then the profile of the
// chip's +[_ANEDeviceInfo aneSubType] (H13 m1, H14 m2, H15 m3, H16 m4, H17 m5), or rt::kFallbackDevice
// when the family is unknown or cannot be read. `note` says which and why (printed once by the backend).
struct DeviceChoice {
  std::string profile;
  std::string note;  // "" when the profile was requested explicitly
};
DeviceChoice choose_device(const std::string& requested, Result<std::string> sub_type);

// Maps a failed compileWithQoS: to a Status (docs/native_backend.md "Compile budget"):
//   used >= ceil(near_fraction * budget)  -> kBudgetExhausted: the ~119-compile limit is approximate
//                                           and shows up as a generic "ANECCompile() FAILED", so a
//                                           failure this close to the budget asks for the restart;
//   otherwise                             -> kCompileFailed: maybe transient, maybe a program the compiler
//                                           rejects; the trainer restarts once and reports a repeat.
// Both carry the shim's NSError text. `used` counts this compile.
Status map_compile_failure(const Status& shim_error, int used, int budget, double near_fraction,
                           const std::string& what);

}  // namespace anelab::ane

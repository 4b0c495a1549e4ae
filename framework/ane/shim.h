// Shim: the thinnest possible wrapper around AppleNeuralEngine.framework's private classes
// (../shared/reference/ane_digest.md §1). One method per private-API step, opaque integer handles,
// no Objective-C types and no logic: every decision (dialect, temp dir, surface sizes, request
// indices, retries, budget, caching, error mapping) lives above it in the portable NativeBackend
// (native_backend.h), which is tested on Linux against FakeShim (tests/support/fake_shim.h).
//
//   implementation          where                          built on
//   AppleShim               framework/ane/shim_apple.mm    Apple hosts (CMake `if(APPLE)`)
//   (none: unavailable)     framework/ane/shim_none.cpp    every other host
//   FakeShim                tests/support/fake_shim.cpp    everywhere (tests, `anelab probe`, ANELAB_ANE_SHIM=fake)
//
// Errors: every BOOL / NSError / nil return is turned into a non-ok Status whose message names the
// selector and carries the NSError's localizedDescription, domain and code, e.g.
//   "-[_ANEInMemoryModel compileWithQoS:options:error:] failed: _ANECompiler : ANECCompile() FAILED
//    (domain com.apple.appleneuralengine.compiler, code 1)"
// The shim always returns Code::kInternal; NativeBackend maps codes (docs/native_backend.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/error.h"

namespace anelab::ane {

// Opaque handles handed out by a shim (0 = none). Each kind has its own type so they cannot be mixed.
template <typename Tag>
struct Handle {
  uint64_t id = 0;
  explicit operator bool() const { return id != 0; }
  bool operator==(const Handle&) const = default;
};
using ModelHandle = Handle<struct ModelTag>;      // an _ANEInMemoryModel (with its descriptor)
using SurfaceHandle = Handle<struct SurfaceTag>;  // an IOSurfaceRef (+ its _ANEIOSurfaceObject)
using RequestHandle = Handle<struct RequestTag>;  // an _ANERequest

// One entry of the weights dictionary (digest §1.3):
//   @{ path : @{ @"offset" : @(offset), @"data" : [NSData dataWithBytes:data length:size] } }
struct WeightEntry {
  std::string path;               // "@model_path/weights/wq.bin"
  uint64_t offset = 0;            // the dictionary's "offset" (always 0 in every repo)
  std::span<const uint8_t> data;  // blob file bytes (copied by the shim)
};

// A locked surface: IOSurfaceGetBaseAddress / IOSurfaceGetAllocSize.
struct SurfaceMapping {
  void* base = nullptr;
  size_t size = 0;
};

// Arguments of +[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:
// perfStats:procedureIndex:] (weightsBuffer and perfStats are always nil).
struct RequestSpec {
  std::vector<SurfaceHandle> inputs;
  std::vector<int64_t> input_indices;  // NSArray<NSNumber*>
  std::vector<SurfaceHandle> outputs;
  std::vector<int64_t> output_indices;  // NSArray<NSNumber*>
  int64_t procedure_index = 0;          // NSNumber
};

// One entry of the loaded model's attributes
//   [[model model] modelAttributes][@"ANEFModelDescription"][@"ANEFModelProcedures"]
// (digest §1.9): procedure p's request uses inputIndices = inputs, outputIndices = outputs,
// procedureIndex = procedure_id.
struct ProcedureSymbols {
  int64_t procedure_id = 0;      // "ProcedureID"
  std::vector<int64_t> inputs;   // "InputSymbolIndexArray"
  std::vector<int64_t> outputs;  // "OutputSymbolIndexArray"
};

class Shim {
 public:
  virtual ~Shim() = default;
  virtual std::string describe() const = 0;  // "AppleNeuralEngine.framework (dlopen)" / "fake shim"

  // +[_ANEDeviceInfo aneSubType], e.g. "h16" on M4 and base M5, "h17" on M5 Max (maderix/ANE PR #50).
  virtual Result<std::string> ane_sub_type() = 0;
  // NSTemporaryDirectory() (the parent of the <hexStringIdentifier>/ model directories).
  virtual std::string temporary_directory() = 0;

  // +[_ANEInMemoryModelDescriptor modelWithMILText:(NSData UTF-8) weights:(NSDictionary) optionsPlist:nil]
  // then +[_ANEInMemoryModel inMemoryModelWithDescriptor:].
  virtual Result<ModelHandle> create_model(std::string_view mil_text, std::span<const WeightEntry> weights) = 0;
  // -[_ANEInMemoryModel hexStringIdentifier]
  virtual Result<std::string> hex_string_identifier(ModelHandle m) = 0;
  // -compileWithQoS:options:@{} error: / -loadWithQoS:options:@{} error: /
  // -evaluateWithQoS:options:@{} request:error: / -unloadWithQoS:error:
  virtual Status compile(ModelHandle m, uint32_t qos) = 0;
  // -[_ANEInMemoryModel compiledModelExists]: the compiler's output for this model's hexStringIdentifier
  // (net.plist + data in <NSTemporaryDirectory()>/<hexId>/, left by an earlier compile, also by an
  // earlier process) is still there, so load() works without compile(). The identifier hashes the MIL
  // text, the weights and the options, so a hit is the same program.
  virtual Result<bool> compiled_model_exists(ModelHandle m) = 0;
  virtual Status load(ModelHandle m, uint32_t qos) = 0;
  virtual Status evaluate(ModelHandle m, RequestHandle r, uint32_t qos) = 0;
  // The same evaluation through -[_ANEClient doEvaluateDirectWithModel:options:request:qos:error:] on the
  // shared client (digest §1.8: said to skip the daemon's XPC hop); only `anelab probe` calls it.
  // Default (below): "not supported by this shim".
  virtual Status evaluate_direct(ModelHandle m, RequestHandle r, uint32_t qos);
  virtual Status unload(ModelHandle m, uint32_t qos) = 0;
  virtual void release_model(ModelHandle m) = 0;
  // After load: the procedures' symbol indices from the model attributes (ProcedureSymbols), in the
  // attributes' order. Fails when the attributes or the key are missing.
  virtual Result<std::vector<ProcedureSymbols>> procedure_symbols(ModelHandle m) = 0;

  // IOSurfaceCreate with the 1-D byte-buffer properties (width = bytes-per-row = alloc size = bytes,
  // height 1, 1 byte per element, pixel format 0; digest §1.5), wrapped in an _ANEIOSurfaceObject.
  virtual Result<SurfaceHandle> create_surface(size_t bytes) = 0;
  // IOSurfaceLock(s, read_only ? kIOSurfaceLockReadOnly : 0, NULL) / IOSurfaceUnlock.
  virtual Result<SurfaceMapping> lock_surface(SurfaceHandle s, bool read_only) = 0;
  virtual Status unlock_surface(SurfaceHandle s, bool read_only) = 0;
  virtual void release_surface(SurfaceHandle s) = 0;  // CFRelease

  virtual Result<RequestHandle> create_request(const RequestSpec& spec) = 0;
  virtual void release_request(RequestHandle r) = 0;
};

// The selectors / functions each Shim method wraps, used in error texts by every implementation.
namespace sel {
inline constexpr const char* kSubType = "+[_ANEDeviceInfo aneSubType]";
inline constexpr const char* kDescriptor = "+[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:]";
inline constexpr const char* kModel = "+[_ANEInMemoryModel inMemoryModelWithDescriptor:]";
inline constexpr const char* kHexId = "-[_ANEInMemoryModel hexStringIdentifier]";
inline constexpr const char* kCompile = "-[_ANEInMemoryModel compileWithQoS:options:error:]";
inline constexpr const char* kCompiledExists = "-[_ANEInMemoryModel compiledModelExists]";
inline constexpr const char* kLoad = "-[_ANEInMemoryModel loadWithQoS:options:error:]";
inline constexpr const char* kEvaluate = "-[_ANEInMemoryModel evaluateWithQoS:options:request:error:]";
inline constexpr const char* kClient = "+[_ANEClient sharedConnection]";
inline constexpr const char* kEvaluateDirect = "-[_ANEClient doEvaluateDirectWithModel:options:request:qos:error:]";
inline constexpr const char* kUnload = "-[_ANEInMemoryModel unloadWithQoS:error:]";
inline constexpr const char* kProcedures = "-[_ANEModel modelAttributes][ANEFModelDescription][ANEFModelProcedures]";
inline constexpr const char* kSurfaceCreate = "IOSurfaceCreate";
inline constexpr const char* kSurfaceObject = "+[_ANEIOSurfaceObject objectWithIOSurface:]";
inline constexpr const char* kSurfaceLock = "IOSurfaceLock";
inline constexpr const char* kSurfaceUnlock = "IOSurfaceUnlock";
inline constexpr const char* kRequest =
    "+[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:]";
}  // namespace sel

// The one error text format: "<selector> failed: <description> (domain <domain>, code <code>)".
inline Status shim_error(const char* selector, const std::string& description, const std::string& domain, long code) {
  return Status(Code::kInternal, cat(selector, " failed: ", description, " (domain ", domain, ", code ", code, ")"));
}

inline Status Shim::evaluate_direct(ModelHandle, RequestHandle, uint32_t) {
  return shim_error(sel::kEvaluateDirect, "not supported by this shim", "none", 0);
}

// The host's real shim: AppleShim on Apple hosts (dlopen of
// /System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine and the four
// classes resolved), nullptr elsewhere or when loading fails, with the reason in *why_not.
std::unique_ptr<Shim> create_system_shim(std::string* why_not);

}  // namespace anelab::ane

// FakeShim: a Shim for hosts without an ANE. It records every call with its arguments, checks what
// the real private API needs (digest §1), and runs the kernels on the emulator from exactly what it
// was handed: it parses the MIL text with mil::parse, resolves the weights dictionary it received and
// evaluates with the bytes of the surfaces it received.
//
// Checks (each a failing Status with an NSError-like text, as the real API would report, or where
// the real ANE fails silently, a message saying what the real one would do):
//   create_model  MIL text non-empty UTF-8; weights keys start with "@model_path/", offset 0, data set
//   compile       <temporary_directory()>/<hexId>/model.mil exists and equals the MIL text byte for
//                 byte; every weight file exists and equals its dictionary bytes; the MIL parses and
//                 the emulator accepts it; after `compile_limit` compiles in this fake "process"
//                 every compile fails with "_ANECompiler : ANECCompile() FAILED" (digest §1.11)
//                 On success it writes the compiler's output, <tmp>/<hexId>/net.plist and data (fake
//                 contents naming the hexId), like the real compiler (digest §1.2).
//   compiled_model_exists  the daemon's cache (<tmp>/.aned/<hexId>, written by every successful compile of
//                 this fake or of an earlier process using the same temp dir) has this hexId; like aned's
//                 cache it outlives the model directory and the process
//   load          compiled (here), or cached (compiled_model_exists) with <tmp>/<hexId>/model.mil and the
//                 weight files present and equal, as for a compile; not loaded;    unload: loaded
//   create_surface  bytes > 0; lock/unlock: balanced, same mode
//   procedure_symbols  loaded; the table of FakeShimOptions::symbol_order
//   evaluate      loaded; request's procedure exists; indices are that procedure's entry of the
//                 procedure_symbols() table (else the real "0x2" failure, digest §1.9); surface count matches; no
//                 surface locked; every surface >= 49152 bytes and, with > 2 I/O tensors, >= the
//                 largest I/O tensor (digest §4.3: the real ANE returns zeros); I/O sizes fit; the
//                 surfaces' bytes are read and written at the fake's row stride (row_align_bytes), and
//                 with layout_error every output one row further down; with io_size_order every output
//                 zero unless the inputs are declared in ascending size and the outputs in descending.
//                 evaluate_direct: the same, recorded under its own name.
// Failure injection: fail("load", {...}) makes the next `times` calls of that name (after `skip`
// successful ones) fail with the given NSError-like text. Calls that can fail: ane_sub_type,
// create_model, hex_string_identifier, compile, compiled_model_exists, load, evaluate, evaluate_direct, unload,
// create_surface, lock_surface, unlock_surface, create_request.
// Compile failures over a whole run (FakeCompileFailures): compiles are numbered 1, 2, ... across the
// processes of a run (the count lives in a file when a run exec-restarts), and the scheduled or random
// numbers fail with "_ANECompiler : ANECCompile() FAILED", like a transient compiler failure.
//
// The "ane" backend runs over a FakeShim when ANELAB_ANE_SHIM=fake (fake_shim_from_env) in the programs
// that install it (ane::install_fake_shim: the anelab CLI and the tests that set the variable): whole
// runs (`anelab train --backend ane`, exec-restarts included) are then tested on hosts without an ANE.
// It lives with the tests' support code (target anelab_fake_shim); the anelab CLI links it for
// `anelab probe` (the emulator half of its rule experiments, and --shim fake) and ANELAB_ANE_SHIM=fake.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/ane/shim.h"
#include "framework/runtime/backend.h"

namespace anelab::ane {

// One recorded call. Fields not used by a call keep their defaults.
struct ShimCall {
  std::string call;                              // "create_model", "compile", "lock_surface", ...
  uint64_t model = 0, surface = 0, request = 0;  // handle ids involved (the one returned, for create_*)
  uint32_t qos = 0;
  size_t bytes = 0;                       // create_surface
  bool read_only = false;                 // lock/unlock_surface
  std::vector<uint64_t> inputs, outputs;  // create_request: surface ids
  std::vector<int64_t> input_indices, output_indices;
  int64_t procedure = -1;
  std::string mil_text;                  // create_model
  std::vector<std::string> weight_keys;  // create_model, dictionary order
  std::vector<uint64_t> weight_offsets;
  std::vector<size_t> weight_sizes;
  std::vector<std::string> model_dir_files;  // compile: files under <tmp>/<hexId>/ (sorted, relative)
  bool weights_dir = false;                  // compile: <tmp>/<hexId>/weights/ is a directory
  int64_t run_compile = 0;                   // compile: its number in the run (FakeCompileFailures)
  bool ok = true;
  std::string error;  // the failure text when !ok
};

// Compiles of a run that fail (numbers counted from 1 over every process sharing `count_file`).
struct FakeCompileFailures {
  std::vector<int64_t> at;  // these compile numbers fail
  double probability = 0;   // and each other one with this probability (a hash of seed and number)
  uint64_t seed = 0;
  std::string count_file;  // "" = counted in this FakeShim only
  bool fails(int64_t n) const;
};
// "12,40,97" (scheduled) or "random:P:SEED" (each compile with probability P); throws naming the spec.
FakeCompileFailures parse_compile_failures(const std::string& spec);

struct FakeShimOptions {
  std::string device = "m4";     // emulator profile the kernels run with
  int compile_limit = 119;       // compiles that succeed in this fake "process"
  std::string sub_type = "h16";  // what M4 reports (lowercase, maderix/ANE PR #50)
  std::string temp_dir;          // "" = a fresh directory under the system temp dir (removed by ~FakeShim)
  size_t min_surface_bytes = 49152;
  int threads = 1;  // emulator threads
  FakeCompileFailures compile_failures;
  // What this fake "device" does where the real one is only inferred; the defaults are the device
  // profile's assumptions, and `anelab probe --shim fake` with other values shows a discrepancy.
  size_t row_align_bytes = 0;  // rows of I/O tensors start every this many bytes (0: the profile's)
  // A planted layout error: every output is written one row further down than the host reads it (the
  // first row left zero), with no error, as a device with another layout would (the self-check's target).
  bool layout_error = false;
  // A planted size-order rule (maderix/ANE issue #47): the function's inputs must be declared in ascending
  // tensor size and its outputs in descending, else every output comes back zero, with no error.
  bool io_size_order = false;
  // Symbol numbering behind procedure_symbols(): "declaration" numbers every function's inputs
  // (outputs) program-wide in declaration order; "by_name" numbers them in sorted-name order, as a
  // compiler's symbol table might.
  std::string symbol_order = "declaration";
  bool has_procedure_attributes = true;  // false: procedure_symbols() fails like a missing key
  std::string abort_at;  // a call name ("evaluate", ...): the process aborts there, as a crash in a private call
};

struct FakeFailure {
  int skip = 0;             // let this many calls of that name succeed first
  int times = 1;            // then fail this many (-1: forever)
  std::string description;  // "" = a default text for the call
  std::string domain = "com.apple.appleneuralengine";
  long code = 1;
};

class FakeShim : public Shim {
 public:
  static constexpr const char* kDaemonCacheDir = ".aned";  // under temporary_directory()
  explicit FakeShim(FakeShimOptions o = {});
  ~FakeShim() override;

  // ---- test API -------------------------------------------------------------------------------
  const std::vector<ShimCall>& calls() const { return calls_; }
  std::vector<const ShimCall*> calls_named(const std::string& name) const;
  std::vector<std::string> call_names() const;  // the sequence of call names
  void clear_calls() { calls_.clear(); }
  void fail(const std::string& call, FakeFailure f = {});
  int compiles() const { return compiles_; }  // compile calls that reached the compiler in this fake process
  // Live objects (leak checks): models, surfaces, requests not yet released; loaded models.
  size_t live_models() const;
  size_t live_surfaces() const;
  size_t live_requests() const;
  size_t loaded_models() const;
  const FakeShimOptions& options() const { return opts_; }

  // ---- Shim -----------------------------------------------------------------------------------
  std::string describe() const override { return "fake shim (emulator " + opts_.device + ")"; }
  Result<std::string> ane_sub_type() override;
  std::string temporary_directory() override { return temp_dir_; }
  Result<ModelHandle> create_model(std::string_view mil_text, std::span<const WeightEntry> weights) override;
  Result<std::string> hex_string_identifier(ModelHandle m) override;
  Status compile(ModelHandle m, uint32_t qos) override;
  Result<bool> compiled_model_exists(ModelHandle m) override;
  Status load(ModelHandle m, uint32_t qos) override;
  Status evaluate(ModelHandle m, RequestHandle r, uint32_t qos) override;
  Status evaluate_direct(ModelHandle m, RequestHandle r, uint32_t qos) override;  // = evaluate, its own call name
  Status unload(ModelHandle m, uint32_t qos) override;
  void release_model(ModelHandle m) override;
  Result<std::vector<ProcedureSymbols>> procedure_symbols(ModelHandle m) override;
  Result<SurfaceHandle> create_surface(size_t bytes) override;
  Result<SurfaceMapping> lock_surface(SurfaceHandle s, bool read_only) override;
  Status unlock_surface(SurfaceHandle s, bool read_only) override;
  void release_surface(SurfaceHandle s) override;
  Result<RequestHandle> create_request(const RequestSpec& spec) override;
  void release_request(RequestHandle r) override;

 private:
  struct Model;
  struct Surface;
  struct Request;
  ShimCall& record(ShimCall c);
  ShimCall& record(std::string call);
  // Returns a failing Status (recorded on `c`) if an injected failure fires for c.call.
  Status injected(ShimCall& c);
  Status failed(ShimCall& c, Status s);
  Model* model(ModelHandle m);
  Status check_model_dir(const Model& m, ShimCall& c);
  Status check_request(const Model& m, const Request& r);
  Status run(Model& m, const Request& r);
  Status evaluate_as(const char* call, ModelHandle h, RequestHandle rh, uint32_t qos);
  bool sizes_ordered(const mil::Function& f) const;
  bool compiled_output_exists(const Model& m) const;
  std::filesystem::path daemon_cache_dir() const;  // <tmp>/.aned
  Status build_kernel(Model& m);                   // parse the MIL and compile it on the emulator
  int64_t next_run_compile();
  rt::SurfaceLayout layout(const mil::TensorType& t) const;  // this fake device's row layout

  FakeShimOptions opts_;
  std::string temp_dir_;
  bool own_temp_dir_ = false;
  std::unique_ptr<rt::Backend> emulator_;
  std::vector<ShimCall> calls_;
  std::map<std::string, FakeFailure> failures_;
  std::map<uint64_t, std::unique_ptr<Model>> models_;
  std::map<uint64_t, std::unique_ptr<Surface>> surfaces_;
  std::map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_id_ = 1;
  int compiles_ = 0;
  int64_t run_compiles_ = 0;  // without a count file
};

// The FakeShim the "ane" backend uses when ANELAB_ANE_SHIM=fake, configured from the environment:
//   ANELAB_FAKE_ANE_DIR            its temporary directory (kept, like NSTemporaryDirectory(); default
//                                  <system temp>/anelab-fake-ane): compiled programs survive exec-restarts
//   ANELAB_FAKE_ANE_FAIL_COMPILES  parse_compile_failures spec (unset or "": none)
//   ANELAB_FAKE_ANE_COMPILE_LIMIT  compiles that succeed per process (default 119, FakeShimOptions)
//   ANELAB_FAKE_ANE_ROW_ALIGN      FakeShimOptions::row_align_bytes (unset or 0: the profile's)
//   ANELAB_FAKE_ANE_LAYOUT_ERROR   1: FakeShimOptions::layout_error (outputs shifted by a row, silently)
// The compiles over every process using the directory are counted in <dir>/fake_compile_count.
// Throws "[ane] ..." naming the variable for a bad value.
std::unique_ptr<FakeShim> fake_shim_from_env(const std::string& device);
// The same as a Shim, the form ane::install_fake_shim takes.
std::unique_ptr<Shim> fake_shim_for_backend(const std::string& device);

}  // namespace anelab::ane

// anelab mil check|print|run: the MIL tools. Thin handlers over framework/mil and the backends.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "framework/backends/registry.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "framework/mil/parser.h"
#include "framework/mil/printer.h"
#include "framework/runtime/backend.h"
#include "framework/runtime/weights.h"

namespace anelab::cli {

namespace {

mil::Program load_program(const std::string& path) { return mil::parse(read_file_text(path), path); }

struct MilOptions {
  std::string program;
  std::string model_dir;
  std::string device = rt::kDefaultDevice;
  std::string backend = "emulator";
  std::string dialect = "ios18";
  std::string function;
  std::vector<std::string> inputs;
  std::string out_dir = "mil_out";
};

void run_check(const MilOptions& o) {
  mil::Program p = load_program(o.program);  // parse + type check
  const rt::DeviceProfile& prof = rt::device_profile(o.device);
  rt::check_program(p, prof).throw_if_error();
  size_t ops = 0;
  for (const auto& f : p.functions) ops += f.ops.size();
  auto blobs = rt::blob_paths(p);
  if (!o.model_dir.empty()) {
    rt::Weights w = rt::load_weights(p, o.model_dir);
    rt::check_weights(p, w).throw_if_error();
  }
  std::printf("%s: ok (%s, %zu function%s, %zu ops, %zu blob file%s%s; device %s)\n", o.program.c_str(),
              mil::dialect_name(p.dialect), p.functions.size(), p.functions.size() == 1 ? "" : "s", ops, blobs.size(),
              blobs.size() == 1 ? "" : "s",
              o.model_dir.empty() ? ", weights not checked (no --model-dir)" : ", weights ok", prof.name.c_str());
}

void run_print(const MilOptions& o) {
  mil::Program p = load_program(o.program);
  mil::Dialect d;
  if (o.dialect == "ios18")
    d = mil::Dialect::kIos18;
  else if (o.dialect == "ios16")
    d = mil::Dialect::kIos16;
  else
    fail("mil", "unknown --dialect '", o.dialect, "' (use ios16 or ios18)");
  std::fputs(mil::print(p, d).c_str(), stdout);
}

// NAME=FILE pairs -> map, with errors naming the bad argument.
std::map<std::string, std::string> parse_inputs(const std::vector<std::string>& args) {
  std::map<std::string, std::string> m;
  for (const auto& a : args) {
    auto eq = a.find('=');
    ANELAB_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < a.size(), "mil", "--in '", a, "' is not NAME=FILE.npy");
    ANELAB_CHECK(m.emplace(a.substr(0, eq), a.substr(eq + 1)).second, "mil", "--in given twice for '", a.substr(0, eq),
                 "'");
  }
  return m;
}

void run_run(const MilOptions& o) {
  auto files = parse_inputs(o.inputs);
  mil::Program p = load_program(o.program);
  ANELAB_CHECK(!o.model_dir.empty() || rt::blob_paths(p).empty(), "mil", o.program,
               " references BLOBFILE weights: pass --model-dir DIR (DIR/weights/... = @model_path/weights/...)");
  rt::Weights w = o.model_dir.empty() ? rt::Weights{} : rt::load_weights(p, o.model_dir);
  rt::BackendOptions bo;
  bo.device = o.device;
  auto backend = rt::create_backend(o.backend, bo);
  auto t0 = std::chrono::steady_clock::now();
  auto kernel = backend->compile(p, w);
  if (!kernel) kernel.status().throw_if_error();
  auto t1 = std::chrono::steady_clock::now();
  int fi = o.function.empty() ? 0 : (*kernel)->function_index(o.function);
  const mil::Function& fn = (*kernel)->function(fi);

  auto ins = (*kernel)->make_inputs(fi, backend->profile());
  auto outs = (*kernel)->make_outputs(fi, backend->profile());
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    const auto& [name, type] = fn.inputs[i];
    auto it = files.find(name);
    ANELAB_CHECK(it != files.end(), "mil", "function '", fn.name, "' needs input '", name, "' ", type.str(),
                 ": pass --in ", name, "=FILE.npy");
    NpyArray a = read_npy(it->second);
    ANELAB_CHECK(a.shape == type.shape, "mil", it->second, ": shape ", mil::shape_str(a.shape), " but input '", name,
                 "' is ", type.str());
    ins[i].write(a.data.data());
    files.erase(it);
  }
  ANELAB_CHECK(files.empty(), "mil", "--in '", files.empty() ? "" : files.begin()->first,
               "' is not an input of function '", fn.name, "'");
  std::vector<rt::Surface*> ip, op;
  for (auto& s : ins) ip.push_back(&s);
  for (auto& s : outs) op.push_back(&s);
  backend->evaluate(**kernel, fi, ip, op).throw_if_error();
  auto t2 = std::chrono::steady_clock::now();

  std::filesystem::create_directories(o.out_dir);
  for (size_t i = 0; i < fn.outputs.size(); ++i) {
    std::vector<float> v(static_cast<size_t>(outs[i].numel()));
    outs[i].read(v.data());
    std::string path = o.out_dir + "/" + fn.outputs[i] + ".npy";
    write_npy(path, outs[i].type().shape, v.data());
    std::printf("%s %s -> %s\n", fn.outputs[i].c_str(), outs[i].type().str().c_str(), path.c_str());
  }
  using ms = std::chrono::duration<double, std::milli>;
  std::fprintf(stderr, "[mil run] %s on %s/%s: compile %.1f ms, evaluate %.1f ms\n", fn.name.c_str(),
               backend->name().c_str(), backend->profile().name.c_str(), ms(t1 - t0).count(), ms(t2 - t1).count());
}

}  // namespace

void add_mil_commands(CLI::App& app) {
  auto* mil = app.add_subcommand("mil", "Check, print and run MIL programs");
  mil->require_subcommand(1);
  auto o = std::make_shared<MilOptions>();

  auto* check = mil->add_subcommand("check", "Parse, type-check and lint a MIL program against a device profile");
  check->add_option("program", o->program, "MIL program file")->required();
  check->add_option("--model-dir", o->model_dir, "directory holding weights/... (also verifies every BLOBFILE)");
  check->add_option("--device", o->device, "device profile (m1..m5)")->capture_default_str();
  check->callback([o] { run_check(*o); });

  auto* print = mil->add_subcommand("print", "Print a MIL program in the ios18 or ios16 dialect");
  print->add_option("program", o->program, "MIL program file")->required();
  print->add_option("--dialect", o->dialect, "ios18 (program 1.3, M4/M5) or ios16 (program 1.0, M1-M3)")
      ->capture_default_str();
  print->callback([o] { run_print(*o); });

  auto* run = mil->add_subcommand("run", "Run a MIL program on .npy inputs; writes OUT/<output>.npy (fp32)");
  run->add_option("program", o->program, "MIL program file")->required();
  run->add_option("--model-dir", o->model_dir, "directory that @model_path/ resolves to");
  run->add_option("--in", o->inputs, "NAME=FILE.npy for each function input (fp16 or fp32 .npy)");
  run->add_option("--out-dir", o->out_dir, "where outputs are written")->capture_default_str();
  run->add_option("--function", o->function, "function of a multi-procedure program (default: the first)");
  run->add_option("--device", o->device, "device profile (m1..m5)")->capture_default_str();
  run->add_option("--backend", o->backend, "backend (emulator, ane)")->capture_default_str();
  run->callback([o] { run_run(*o); });
}

}  // namespace anelab::cli

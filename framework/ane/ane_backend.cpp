// The "ane" registry entry: the portable NativeBackend over the host's system shim. The backend is
// unavailable exactly when the shim cannot be created (every non-Apple host, or a Mac whose
// AppleNeuralEngine.framework cannot be loaded), and the reason is the shim's.
// ANELAB_ANE_SHIM=fake puts the installed fake shim under it instead (install_fake_shim; the FakeShim of
// tests/support): whole runs through the native backend, exec-restarts and injected compile failures
// included, on any host.
// Every "ane" backend of a process counts its compiles in rt::CompileCounter::process(): the compiler's
// limit is per process.
#include "framework/ane/ane_backend.h"

#include <atomic>
#include <cstdlib>

#include "framework/ane/native_backend.h"
#include "framework/ane/shim.h"

namespace anelab::ane {

namespace {

// "system" (the default) or "fake"; anything else is an error naming the variable.
std::string shim_choice() {
  const char* e = std::getenv("ANELAB_ANE_SHIM");
  const std::string v = e ? e : "";
  if (v.empty() || v == "system") return "system";
  if (v == "fake") return "fake";
  fail("backend", "ane: ANELAB_ANE_SHIM='", v, "' is neither 'system' nor 'fake'");
}

std::atomic<FakeShimFactory>& fake_factory() {
  static std::atomic<FakeShimFactory> f{nullptr};
  return f;
}

}  // namespace

void install_fake_shim(FakeShimFactory factory) { fake_factory().store(factory); }

bool ane_available(std::string* why_not) {
  if (shim_choice() == "fake") return true;
  return create_system_shim(why_not) != nullptr;
}

std::unique_ptr<rt::Backend> make_ane_backend(const rt::BackendOptions& opts) {
  std::unique_ptr<Shim> shim;
  if (shim_choice() == "fake") {
    const FakeShimFactory make = fake_factory().load();
    if (!make)
      fail("backend",
           "ane: ANELAB_ANE_SHIM=fake, but this program has no fake shim installed (the anelab CLI and the "
           "tests link it from tests/support)");
    shim = make(opts.device);
  } else {
    std::string why;
    shim = create_system_shim(&why);
    if (!shim) fail("backend", "ane: ", why);
  }
  rt::BackendOptions o = opts;
  if (!o.compile_counter) o.compile_counter = rt::CompileCounter::process();
  return std::make_unique<NativeBackend>(std::move(shim), o);
}

}  // namespace anelab::ane

// anelab: one program, subcommands per area. Thin by design: parse, dispatch, report errors.
#include <cstdio>
#include <new>

#include "cli/commands.h"
#include "framework/ane/ane_backend.h"
#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "framework/core/untrusted.h"
#include "tests/support/fake_shim.h"

int main(int argc, char** argv) {
  anelab::platform::save_argv(argc, argv);      // before anything can chdir: exec-restart re-runs exactly this
  anelab::platform::ignore_file_size_signal();  // a write past `ulimit -f` fails (EFBIG) like a full disk
  anelab::ane::install_fake_shim(&anelab::ane::fake_shim_for_backend);  // ANELAB_ANE_SHIM=fake (test runs)
  CLI::App app{"anelab: train and run transformer language models on Apple's Neural Engine (or its emulator)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "anelab 0.1.0");
  anelab::cli::add_demo_command(app);
  anelab::cli::add_mil_commands(app);
  anelab::cli::add_bench_commands(app);
  anelab::cli::add_model_commands(app);
  anelab::cli::add_tokenize_command(app);
  anelab::cli::add_train_command(app);
  anelab::cli::add_infer_command(app);
  anelab::cli::add_perplexity_command(app);
  anelab::cli::add_serve_command(app);
  anelab::cli::add_dashboard_command(app);
  anelab::cli::add_probe_command(app);
  anelab::cli::add_power_command(app);
  anelab::cli::add_estimate_command(app);
  if (argc == 1) {  // bare `anelab`: what it can do, not "A subcommand is required"
    std::printf("%s", app.help().c_str());
    return 0;
  }
  if (const auto why = anelab::cli::usage_error(app, argc, argv)) {
    std::fprintf(stderr, "anelab: error: %s\n", anelab::quote_untrusted(*why, true).c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);      // prints the help / version (0) or the usage error
    return rc == 0 ? 0 : 2;          // usage errors exit 2, failures 1 (as the unknown-name check above)
  } catch (const std::bad_alloc&) {  // an allocation nobody named (the loaders and the engine name theirs)
    std::fprintf(stderr,
                 "anelab: error: out of memory (std::bad_alloc); for inference a smaller --ctx, --kv-type f16 or "
                 "--mmap on needs less\n");
    return 1;
  } catch (const std::exception& e) {  // anelab::Error and the rest; messages quote files and requests
    std::fprintf(stderr, "anelab: error: %s\n", anelab::quote_untrusted(e.what(), true).c_str());
    return 1;
  }
  return 0;
}

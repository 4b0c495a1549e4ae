// libFuzzer harness over the readers of targets.cpp: one binary, fuzz_readers, and one symlink per target,
// build-fuzz/bin/fuzz_<target> -> fuzz_readers (tests/fuzz/CMakeLists.txt, -DANELAB_FUZZ=ON). The target is
// the name the binary was started as. Run: build-fuzz/bin/fuzz_npy CORPUS_DIR (scripts/fuzz.sh builds the
// corpora and runs every harness; docs/fuzzing.md).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/targets.h"

namespace {
const anelab::fuzz::Target* g_target = nullptr;
}

// Picks the target from argv[0] ("…/fuzz_<target>"); started under any other name, it lists the targets and
// exits non-zero.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::string_view self = *argc > 0 ? (*argv)[0] : "";
  if (const size_t slash = self.rfind('/'); slash != std::string_view::npos) self.remove_prefix(slash + 1);
  constexpr std::string_view kPrefix = "fuzz_";
  if (self.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view name = self.substr(kPrefix.size());
    for (const anelab::fuzz::Target& t : anelab::fuzz::targets())
      if (name == t.name) {
        g_target = &t;
        return 0;
      }
  }
  std::fprintf(stderr, "[fuzz] started as '%.*s': run it as fuzz_<target>, one of:", static_cast<int>(self.size()),
               self.data());
  for (const anelab::fuzz::Target& t : anelab::fuzz::targets()) std::fprintf(stderr, " %s", t.name);
  std::fprintf(stderr, "\n");
  std::exit(2);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_target->run(data, size);
  return 0;
}

// libFuzzer harness over one reader: built once per target of targets.cpp with ANELAB_FUZZ_TARGET set to
// its name (tests/fuzz/CMakeLists.txt, -DANELAB_FUZZ=ON). Run: build-fuzz/bin/fuzz_npy CORPUS_DIR
// (scripts/fuzz.sh builds the corpora and runs every harness; docs/fuzzing.md).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const anelab::fuzz::Target& t = anelab::fuzz::target(ANELAB_FUZZ_TARGET);
  t.run(data, size);
  return 0;
}

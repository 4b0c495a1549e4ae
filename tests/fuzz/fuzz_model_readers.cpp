// libFuzzer harness for the model-file readers (clang only; built by tests/models/formats/CMakeLists.txt
// once per reader with ANELAB_FUZZ_READER set to fuzz_read_anelab / _llama2c / _safetensors / _gguf).
// Run: build-clang/bin/fuzz_model_reader_gguf -max_total_time=60 CORPUS_DIR
#include <cstddef>
#include <cstdint>

#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/llama2c.h"
#include "models/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return anelab::models::ANELAB_FUZZ_READER(data, size);
}

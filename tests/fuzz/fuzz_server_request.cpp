// libFuzzer harness for the `anelab serve` request parser (clang only; built by tests/serve/CMakeLists.txt).
// Run: build-clang/bin/fuzz_server_request -max_total_time=60 [CORPUS_DIR]
// Every input is parsed as a completions and as a chat body; the parser must never throw or crash, and
// whatever it accepts must satisfy the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infer/server/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace anelab::serve;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Limits lim;
  lim.max_tokens_cap = 256;
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    CompletionRequest r;
    if (auto e = parse_request(ep, body, lim, r)) {
      if (e->status < 400 || e->status > 499 || error_json(*e).empty()) std::abort();
      continue;
    }
    if (r.max_tokens < 1 || r.max_tokens > lim.max_tokens_cap) std::abort();
    if (r.stop.size() > lim.max_stop || r.temperature < 0 || r.temperature > 2 || r.top_p < 0 || r.top_p > 1)
      std::abort();
    if (ep == Endpoint::kChat && r.messages.empty()) std::abort();
  }
  return 0;
}

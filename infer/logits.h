// Teacher-forced logits: the logits [T, vocab] of every position of a token sequence, through the
// engine's prefill (the CPU path, or the MIL kernels on the emulator / ANE). What `anelab infer logits`
// writes and `anelab perplexity` scores; a reference implementation's logits are compared against it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infer/engine.h"

namespace anelab::infer {

// [T, vocab] fp32, row t = logits after tokens [0, t]. Starts at position 0 (the KV cache is
// overwritten). When the engine's prefill backend is a MIL one and it fell back to the CPU path
// (compile budget, no bucket) this throws "[infer] the <backend> prefill did not run ..." rather than
// return logits of another path.
std::vector<float> teacher_forced_logits(Engine& e, std::span<const int32_t> ids);

// Token ids from "1 2 3" (spaces and/or commas). Throws "[infer] OPTION: 'x' is not a token id ..." or
// "[infer] OPTION: token id N is outside the model's vocabulary of V tokens"; an empty list is refused.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option, int64_t vocab);

}  // namespace anelab::infer

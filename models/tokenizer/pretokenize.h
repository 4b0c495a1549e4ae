// Pre-tokenizer regexes of byte-level BPE tokenizers, implemented as hand-written scanners that follow
// the regex semantics exactly (ordered alternation, greedy quantifiers with backtracking):
//   kGpt2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kQwen2: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
// \s is Unicode White_Space; \p{L}/\p{N} are the general categories L*/N*. (?i) on the contractions
// also accepts U+017F (long s) for s, as Unicode case folding does.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anelab::tok {

enum class PreTokenizer { kGpt2, kQwen2 };

// Chooses the scanner for a pre-tokenizer name ("gpt2", "gpt-2", "qwen2", "deepseek-r1-qwen") or an exact
// regex string (regex wins when non-empty). Throws "[tokenizer] unsupported pre-tokenizer ..." otherwise.
PreTokenizer select_pretokenizer(const std::string& name, const std::string& regex);
const char* pretokenizer_regex(PreTokenizer p);
// llama.cpp's tokenizer.ggml.pre name of a scanner ("gpt-2", "qwen2"), written into GGUF files.
const char* llama_cpp_pre_name(PreTokenizer p);

// Splits valid UTF-8 text into pre-tokens, appended to `out` as byte ranges [begin, end) covering text.
void pretokenize(std::string_view text, PreTokenizer kind, std::vector<std::pair<uint32_t, uint32_t>>& out);

}  // namespace anelab::tok

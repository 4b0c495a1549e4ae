#include "infer/logits.h"

#include <cerrno>
#include <cstdlib>

#include "framework/core/error.h"

namespace anelab::infer {

std::vector<float> teacher_forced_logits(Engine& e, std::span<const int32_t> ids) {
  std::vector<float> all;
  e.prefill(ids, 0, &all);
  const std::string& want = e.options().backend;
  if (want != "cpu" && e.last_prefill().path != want)
    fail("infer", "the ", want, " prefill did not run for ", ids.size(), " tokens (it fell back to the ",
         e.last_prefill().path, " path); its logits would not be the ", want, "'s");
  return all;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option, int64_t vocab) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\t' && text[j] != '\n') ++j;
    const std::string word = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end != word.c_str() + word.size() || errno == ERANGE || word[0] == '+')
      fail("infer", option, ": '", word, "' is not a token id (expected integers separated by spaces or commas)");
    if (v < 0 || v >= vocab)
      fail("infer", option, ": token id ", v, " is outside the model's vocabulary of ", vocab, " tokens");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  ANELAB_CHECK(!ids.empty(), "infer", option, ": no token ids in '", text, "'");
  return ids;
}

}  // namespace anelab::infer

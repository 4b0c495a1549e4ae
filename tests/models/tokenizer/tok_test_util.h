// Helpers shared by the tokenizer tests: the reference data layouts.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/file.h"
#include "tests/common/test_data.h"

namespace anelab::tok::test {

// llama.cpp vectors: .inp strings joined by "\n__ggml_vocab_test__\n" (the file ends with one), .out one line
// of ids per string.
inline std::vector<std::string> read_vector_inputs(const std::string& path) {
  const std::string text = read_file_text(path), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find(sep, pos);
    if (e == std::string::npos) e = text.size();
    out.push_back(text.substr(pos, e - pos));
    pos = e + sep.size();
  }
  return out;
}

inline std::vector<std::vector<int32_t>> read_id_lines(const std::string& path) {
  const std::string text = read_file_text(path);
  std::vector<std::vector<int32_t>> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int64_t v;
    while (ls >> v) ids.push_back(static_cast<int32_t>(v));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace anelab::tok::test

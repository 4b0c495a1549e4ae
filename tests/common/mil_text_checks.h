// Scans printed MIL text for float literals the ANE compiler may not read: decimal
// exponent forms ("1e-05", "6.5504E+04") and nan / inf. Tokens are split at MIL punctuation, so names
// such as c_fp16_1e5 never match; hex floats ("0x1.8p-3") are the printer's exact form and pass.
#pragma once
#include <regex>
#include <string>
#include <vector>

namespace anelab::test {

inline std::vector<std::string> bad_float_literals(const std::string& text) {
  static const std::regex exponent(R"(^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$)");
  static const std::regex nonfinite(R"(^[-+]?(nan|inf|infinity)$)", std::regex::icase);
  std::vector<std::string> bad;
  std::string tok;
  auto flush = [&] {
    if (!tok.empty() && (std::regex_match(tok, exponent) || std::regex_match(tok, nonfinite))) bad.push_back(tok);
    tok.clear();
  };
  bool in_string = false;
  for (char c : text) {
    if (c == '"') in_string = !in_string, flush();
    if (in_string) continue;
    if (c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == ' ' || c == '\n' || c == '=' || c == ';' ||
        c == '"' || c == '{' || c == '}')
      flush();
    else
      tok += c;
  }
  flush();
  return bad;
}

}  // namespace anelab::test

// One table of the ranges of the numeric sampling / request / run parameters, asked by every place that
// takes them: the CLI's options (cli/: `infer`, `serve`) and the server's request parser
// (infer/server/api.cpp). A value outside its range is refused, never clamped.
//
//   temperature     [0, 2]        0 = greedy (OpenAI's range)
//   top_p           (0, 1]        1 = off
//   top_k           [0, 2^30]     0 = off (integer)
//   min_p           [0, 1]        0 = off
//   repeat_penalty  (0, 10]       1 = off
//   threads         [1, 1024]     CPU threads of an engine
//   ctx             [0, 2^24]     context positions, 0 = the model's max_seq_len
// max_tokens is [1, the server's cap] in a request; the CLI's --max-tokens also takes 0 (echo the prompt)
// and -1 (run.c's --steps semantics), see docs/inference.md. Seeds are any unsigned 64-bit integer.
#pragma once
#include <limits>
#include <string>

namespace anelab::infer {

struct ParamRange {
  const char* name;      // the request field; the CLI option is "--" + name with '_' -> '-'
  double lo, hi;         // hi = infinity: no upper bound
  bool lo_open = false;  // the value must be > lo (else >= lo)
};

namespace params {
inline constexpr double kNoLimit = std::numeric_limits<double>::infinity();
inline constexpr ParamRange kTemperature{"temperature", 0, 2};
inline constexpr ParamRange kTopP{"top_p", 0, 1, true};
inline constexpr ParamRange kTopK{"top_k", 0, 1 << 30};
inline constexpr ParamRange kMinP{"min_p", 0, 1};
inline constexpr ParamRange kRepeatPenalty{"repeat_penalty", 0, 10, true};
inline constexpr ParamRange kThreads{"threads", 1, 1024};
inline constexpr ParamRange kContext{"ctx", 0, 1 << 24};
}  // namespace params

// "in [0, 2]", "in (0, 1]", ">= 0", "> 0".
std::string range_text(const ParamRange& r);
// "" when v lies in the range (NaN never does), else "must be in [0, 2] (got 5)"; `shown` is the value as
// the user wrote it ("" -> v printed with %g).
std::string range_error(const ParamRange& r, double v, const std::string& shown = "");

}  // namespace anelab::infer

#include "framework/core/error.h"

namespace anelab {
const char* code_name(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kLimitExceeded:
      return "limit_exceeded";
    case Code::kBudgetExhausted:
      return "budget_exhausted";
    case Code::kCompileFailed:
      return "compile_failed";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kIoError:
      return "io_error";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}
}  // namespace anelab

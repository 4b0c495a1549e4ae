// MIL text parser for both dialects (ane_digest §2) and hand-written programs in the style of the
// ANE research repos, followed by the checker (check.h).
//
// Accepted, beyond what the printer emits:
//   - any whitespace (or none) between tokens, parameter lists split across lines, `//` comments;
//   - program(1.0) with ios16 (ios17) functions, program(1.3)/(1.x) with ios18 (ios17) functions; the
//     buildInfo line is optional; mixing program(1.0) with <ios18> (or 1.3 with <ios16>) is an error;
//   - float literals as %f / %g / exponent / hex (`0x1p-3`) / inf / nan, with sign; ints with sign;
//   - scalars in shorthand (`fp16(0.5)`) or verbose (`tensor<fp16, []>(0.5)`) form, in either dialect;
//   - nested tensor literals `[[1, 2], [3, 4]]` (flattened row-major; at most 16 levels);
//   - inline literal call arguments (`mode = string("EXACT")`): desugared into a const op named
//     `<output>_<arg>` placed right before the op (so printing gives the const form);
//   - a missing `[name = ...]`: the op name defaults to the output name.
// The source text is not retained; Operation::line holds each statement's line.
// Errors: "[mil] <source>:<line>:<col>: expected <what>, got <token>" (never a crash or a hang).
#pragma once
#include <string>
#include <string_view>

#include "framework/mil/ir.h"

namespace anelab::mil {

Program parse(std::string_view text, const std::string& source_name = "<mil>");

}  // namespace anelab::mil

// Program checker: SSA and naming rules plus a re-inference of every op's type through the op
// registry, compared with the declared type. Errors name the source line (when parsed), the op and
// the problem: "[mil] kernel.mil:12: conv 'cq': weight [768, 512, 1, 1] expects x with 512 channels, ...".
//
// Rules: function names unique; input names unique; every argument names a value defined earlier
// (input or op output); value names unique within a function; op `name`s unique within a function;
// outputs exist (at least one); declared type == inferred type.
#pragma once
#include <string>

#include "framework/mil/ir.h"

namespace anelab::mil {

// `source` (a file name) prefixes line numbers in messages when non-empty.
void check_function(const Function& fn, const std::string& source = "");
void check_program(const Program& program, const std::string& source = "");

}  // namespace anelab::mil

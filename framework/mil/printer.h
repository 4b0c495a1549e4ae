// MIL text printer (ane_digest §2.1-2.4). One canonical spacing: `k = v`, ", " separators, 4-space
// function indent, 8-space statement indent. The dialect decides the header and the scalar form:
//   ios18: program(1.3), func f<ios18>, scalars as `fp16(0x1p-1)`, `string("valid")`, `uint64(64)`;
//   ios16: program(1.0), func f<ios16>, scalars as `tensor<fp16, []>(0x1p-1)` (types and literals).
// Floats print exactly (format_double: integers in decimal, everything else as a hex float, the form
// of Apple's own model.mil and of `fp16(0x1p-3)` in the references), so parse(print(p)) == p bit for
// bit; nan / inf are rejected. Bracket attributes print in stored order with `name` placed
// before the first attribute that sorts after it (coremltools order for sorted attributes).
#pragma once
#include <string>

#include "framework/mil/ir.h"

namespace anelab::mil {

std::string print(const Program& program, Dialect dialect);
inline std::string print(const Program& program) { return print(program, program.dialect); }

// Exact float literal: integers with |v| <= 2^24 in plain decimal ("0", "-65504", "-0"), every other
// value as a C99 hex float ("0x1.8p-3", "-0x1.4f8b588e368f1p-17"); never an exponent-form decimal.
// Throws for nan / inf (MIL has no literal for them).
std::string format_double(double v);
std::string print_type(const TensorType& t, Dialect d);     // "fp16" / "tensor<fp16, []>" / "tensor<...>"
std::string print_literal(const ConstValue& v, Dialect d);  // "int32(1)", "tensor<int32, [2]>([1, 1])", BLOBFILE
std::string quote_string(const std::string& s);             // "\"...\"" with \" and \\ escaped

}  // namespace anelab::mil

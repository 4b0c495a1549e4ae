// The MIL program graph shared by the builder, printer, parser, checker and every backend.
//
//   Program   = dialect + one or more Functions (multi-procedure programs)
//   Function  = name, typed inputs, ops in SSA order, output value names
//   Operation = one statement `<type> <output> = <op>(<args>)[name = string("<name>"), <attrs>];`
//               single output; call arguments name earlier values (or a tuple of them, as in
//               concat's values=(a,b)); bracket attributes hold literal ConstValues (const's `val`,
//               constexpr_*'s parameters).
//   ConstValue = a literal: scalar, small tensor, string, or a BLOBFILE reference.
//
// The graph is dialect-neutral: the printer decides between program(1.3)/ios18 shorthand scalars and
// program(1.0)/ios16 verbose `tensor<T, []>` scalars. `dialect` only records what a program was parsed
// from or built for (the default the printer and device checks use).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/mil/types.h"

namespace anelab::mil {

enum class Dialect { kIos18, kIos16 };  // program(1.3)+ios18 (M4/M5) | program(1.0)+ios16 (M1-M3)
const char* dialect_name(Dialect d);    // "ios18" | "ios16"

// BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64)); offset points at the
// 64-byte chunk header inside the blob file (see framework/mil/blob.h).
struct BlobRef {
  std::string path;
  uint64_t offset = 0;
  bool operator==(const BlobRef&) const = default;
};

struct ConstValue {
  TensorType type;
  // Exactly one storage is used, chosen by type.dtype and `blob`:
  std::vector<double> f;        // fp16 / fp32 elements (row-major; 1 element for scalars)
  std::vector<int64_t> i;       // integer / bool / uint64 elements
  std::string s;                // string scalar
  std::optional<BlobRef> blob;  // BLOBFILE-backed tensor (f and i empty)

  bool operator==(const ConstValue&) const = default;

  static ConstValue fp16(double v) { return {scalar_type(DType::kFp16), {v}, {}, {}, {}}; }
  static ConstValue fp32(double v) { return {scalar_type(DType::kFp32), {v}, {}, {}, {}}; }
  static ConstValue int32(int64_t v) { return {scalar_type(DType::kInt32), {}, {v}, {}, {}}; }
  static ConstValue int8(int64_t v) { return {scalar_type(DType::kInt8), {}, {v}, {}, {}}; }
  static ConstValue uint64(int64_t v) { return {scalar_type(DType::kUint64), {}, {v}, {}, {}}; }
  static ConstValue boolean(bool v) { return {scalar_type(DType::kBool), {}, {v ? 1 : 0}, {}, {}}; }
  static ConstValue string(std::string v) { return {scalar_type(DType::kString), {}, {}, std::move(v), {}}; }
  static ConstValue ints(std::vector<int64_t> v, DType t = DType::kInt32) {
    Shape s{static_cast<int64_t>(v.size())};
    return {tensor_type(t, s), {}, std::move(v), {}, {}};
  }
  static ConstValue floats(TensorType t, std::vector<double> v) { return {std::move(t), std::move(v), {}, {}, {}}; }
  static ConstValue blobfile(TensorType t, std::string path, uint64_t offset) {
    return {std::move(t), {}, {}, {}, BlobRef{std::move(path), offset}};
  }
};

// A call argument: one value name, or a parenthesised tuple of names (concat's `values`).
struct Arg {
  std::vector<std::string> names;
  bool is_tuple = false;
  bool operator==(const Arg&) const = default;
  static Arg value(std::string n) { return {{std::move(n)}, false}; }
  static Arg tuple(std::vector<std::string> ns) { return {std::move(ns), true}; }
};

struct Operation {
  std::string op;                                         // "conv", "const", "constexpr_affine_dequantize"
  std::vector<std::pair<std::string, Arg>> args;          // call arguments, in print order
  std::vector<std::pair<std::string, ConstValue>> attrs;  // bracket attributes other than `name`
  std::string name;                                       // [name = string("...")], unique per function
  std::string output;                                     // SSA value name
  TensorType type;                                        // declared output type
  int line = 0;                                           // source line (parsed programs), else 0

  const Arg* arg(const std::string& key) const;
  const ConstValue* attr(const std::string& key) const;
  bool operator==(const Operation& o) const {  // structural equality (ignores source line)
    return op == o.op && args == o.args && attrs == o.attrs && name == o.name && output == o.output && type == o.type;
  }
};

struct Function {
  std::string name = "main";
  std::vector<std::pair<std::string, TensorType>> inputs;
  std::vector<Operation> ops;
  std::vector<std::string> outputs;

  // Type of a function input or op output; nullptr when unknown.
  const TensorType* type_of(const std::string& value) const;
  // The op producing `value` (nullptr for inputs / unknown).
  const Operation* producer(const std::string& value) const;
  // The literal behind `value` when it is produced by a `const` op, else nullptr.
  const ConstValue* const_value(const std::string& value) const;
  bool operator==(const Function&) const = default;
};

struct Program {
  Dialect dialect = Dialect::kIos18;
  std::vector<Function> functions;

  const Function& function(const std::string& name) const;  // throws naming the known functions
  const Function& main() const { return functions.at(0); }
  bool operator==(const Program& o) const { return functions == o.functions; }
};

}  // namespace anelab::mil

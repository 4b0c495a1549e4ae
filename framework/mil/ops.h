// The MIL op registry: every op is declared once (ops_decl.cpp) with its call-argument specs, its
// bracket-attribute specs and a type-inference rule. The builder, the checker and the parser all go
// through infer_type(); backends look ops up by name and may use the resolve_* helpers below so that
// every backend reads conv / slice parameters the same way.
//
// Adding an op: see docs/adding_an_op.md.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framework/core/error.h"
#include "framework/mil/ir.h"

namespace anelab::mil {

// How a call argument may be given.
enum class ArgKind {
  kValue,        // any value (function input or op output), any rank
  kConstScalar,  // a value produced by `const`, rank 0
  kConstTensor,  // a value produced by `const`, rank 1 (axes, perm, shape, begin, ...)
  kTuple,        // a parenthesised tuple of values: values = (a, b, c)
};
const char* arg_kind_name(ArgKind k);

struct ArgSpec {
  std::string name;
  bool required = true;
  ArgKind kind = ArgKind::kValue;
  std::vector<DType> dtypes;  // allowed element types; empty = any
};

struct AttrSpec {  // literal in the bracket: [name = ..., <attr> = <literal>]
  std::string name;
  bool required = true;
  std::vector<DType> dtypes;  // empty = any
};

// Name -> (type, producing op) for one function, filled in SSA order. Used by inference to see the
// argument types and, for const-produced arguments, their literal values. O(1) lookups.
class ValueTable {
 public:
  explicit ValueTable(const Function* fn = nullptr) : fn_(fn) {}
  void bind(const Function* fn) { fn_ = fn; }
  // Registers a function input / the output of fn->ops[op_index]. Returns false when already defined.
  bool add_input(const std::string& name, const TensorType& type);
  bool add_op_output(size_t op_index);
  bool has(const std::string& name) const { return map_.count(name) != 0; }
  const TensorType* type(const std::string& name) const;
  const ConstValue* literal(const std::string& name) const;  // val of a const producer, else nullptr

 private:
  struct Entry {
    TensorType type;
    long op_index = -1;  // -1: function input
  };
  const Function* fn_;
  std::unordered_map<std::string, Entry> map_;
};

// What an inference rule sees: the op, its argument types and const-argument literals.
class OpContext {
 public:
  OpContext(const Operation& op, const ValueTable& values) : op_(op), values_(values) {}
  const Operation& op() const { return op_; }
  bool has(const std::string& arg) const { return op_.arg(arg) != nullptr; }
  const TensorType& type(const std::string& arg) const;               // single-value argument
  std::vector<const TensorType*> tuple_types(const std::string& arg) const;
  const ConstValue* literal(const std::string& arg) const;            // const-produced arg, else nullptr
  // Literal accessors (the arg must be const-produced; checked by the registry before inference).
  std::vector<int64_t> ints(const std::string& arg) const;
  int64_t int_scalar(const std::string& arg) const;
  bool boolean(const std::string& arg, bool dflt = false) const;     // dflt when absent
  std::string str(const std::string& arg) const;
  const ConstValue& attr(const std::string& key) const;              // bracket attribute (required)
  // "[mil] <op> '<name>': <parts>"
  template <typename... A>
  [[noreturn]] void fail(A&&... parts) const {
    anelab::fail("mil", op_.op, " '", op_.name, "': ", std::forward<A>(parts)...);
  }
  // "x [1, 768, 1, 256]"
  std::string desc(const std::string& arg) const;

 private:
  const Operation& op_;
  const ValueTable& values_;
};

using InferFn = std::function<TensorType(const OpContext&)>;

struct OpSpec {
  std::string name;
  std::vector<ArgSpec> args;
  std::vector<AttrSpec> attrs;
  InferFn infer;
  std::string summary;  // one line for docs / `anelab mil ops`
  const ArgSpec* arg(std::string_view n) const;
  const AttrSpec* attr(std::string_view n) const;
};

const std::vector<OpSpec>& all_ops();          // registry, in declaration order
const OpSpec* find_op(std::string_view name);  // nullptr when unknown
const OpSpec& op_spec(std::string_view name);  // throws listing the known ops

// Validates `op` against its spec (known op, required/unknown args and attrs, arg kinds, defined
// values, dtypes) and returns the inferred output type. Throws "[mil] <op> '<name>': ...".
TensorType infer_type(const Operation& op, const ValueTable& values);

// ---- helpers shared with backends -------------------------------------------------------------

// numpy broadcasting of two shapes; nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
// Normalises a possibly negative axis for `rank`; nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);

// conv on x [N, C, H, W] with weight [Cout, C/groups, kH, kW].
struct ConvGeometry {
  int64_t stride[2] = {1, 1}, dilation[2] = {1, 1};
  int64_t pad[4] = {0, 0, 0, 0};  // top, bottom, left, right (resolved for "same" / "valid")
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;
};
ConvGeometry resolve_conv(const OpContext& c);

// slice_by_size / slice_by_index: per dimension start, step and output length (numpy semantics).
struct SliceGeometry {
  std::vector<int64_t> begin, stride, length;
  std::vector<bool> squeeze;  // slice_by_index squeeze_mask
};
SliceGeometry resolve_slice(const OpContext& c);

}  // namespace anelab::mil

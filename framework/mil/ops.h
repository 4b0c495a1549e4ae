// The MIL op registry: every op is declared once (ops_decl.cpp) with its call-argument specs (and their
// defaults), its bracket-attribute specs and a resolver that returns the output type and the op's typed
// parameters (op_params.h). The builder, the checker and the parser go through infer_type(); backends
// go through resolve_op() and lower from the typed parameters, so every consumer reads axes, padding,
// slice bounds and broadcast shapes the same way.
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
#include "framework/mil/op_params.h"

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
  std::vector<DType> dtypes;       // allowed element types; empty = any
  std::optional<ConstValue> dflt;  // value an optional argument takes when absent (none: rank-dependent or no default)
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

struct OpSpec;

// What a resolver sees: the op, its argument types and const-argument literals (an absent optional
// argument reads as its declared default).
class OpContext {
 public:
  OpContext(const Operation& op, const ValueTable& values, const OpSpec* spec = nullptr)
      : op_(op), values_(values), spec_(spec) {}
  const Operation& op() const { return op_; }
  bool has(const std::string& arg) const { return op_.arg(arg) != nullptr; }
  const TensorType& type(const std::string& arg) const;  // single-value argument
  std::vector<const TensorType*> tuple_types(const std::string& arg) const;
  const ConstValue* literal(const std::string& arg) const;  // const-produced arg or the default, else nullptr
  // Literal accessors (the arg must be const-produced; checked by the registry before inference).
  std::vector<int64_t> ints(const std::string& arg) const;
  int64_t int_scalar(const std::string& arg) const;
  bool boolean(const std::string& arg, bool dflt = false) const;  // the declared default, else dflt, when absent
  std::string str(const std::string& arg) const;
  const ConstValue& attr(const std::string& key) const;  // bracket attribute (required)
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
  const OpSpec* spec_;
};

// What a resolver returns: the output type and the op's typed parameters.
struct Resolved {
  TensorType type;
  OpParams params;
};
using ResolveFn = std::function<Resolved(const OpContext&)>;

struct OpSpec {
  std::string name;
  std::vector<ArgSpec> args;
  std::vector<AttrSpec> attrs;
  ResolveFn resolve;
  std::string summary;  // one line for docs / `anelab mil ops`
  const ArgSpec* arg(std::string_view n) const;
  const AttrSpec* attr(std::string_view n) const;
};

const std::vector<OpSpec>& all_ops();          // registry, in declaration order
const OpSpec* find_op(std::string_view name);  // nullptr when unknown
const OpSpec& op_spec(std::string_view name);  // throws listing the known ops

// Validates `op` against its spec (known op, required/unknown args and attrs, arg kinds, defined
// values, dtypes) and runs its resolver. Throws "[mil] <op> '<name>': ...".
Resolved resolve_op(const Operation& op, const ValueTable& values);
// resolve_op(op, values).type: the inferred output type.
TensorType infer_type(const Operation& op, const ValueTable& values);

// ---- helpers shared with backends -------------------------------------------------------------

// numpy broadcasting of two shapes; nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
// Normalises a possibly negative axis for `rank`; nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);

}  // namespace anelab::mil

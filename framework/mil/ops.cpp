// Registry plumbing: value table, inference context, generic argument validation, shared helpers.
// The op declarations themselves live in ops_decl.cpp.
#include "framework/mil/ops.h"

#include <algorithm>

namespace anelab::mil {

const char* arg_kind_name(ArgKind k) {
  switch (k) {
    case ArgKind::kValue:
      return "value";
    case ArgKind::kConstScalar:
      return "const scalar";
    case ArgKind::kConstTensor:
      return "const rank-1 tensor";
    case ArgKind::kTuple:
      return "tuple of values";
  }
  return "?";
}

// ---- ValueTable -------------------------------------------------------------------------------

bool ValueTable::add_input(const std::string& name, const TensorType& type) {
  return map_.emplace(name, Entry{type, -1}).second;
}

bool ValueTable::add_op_output(size_t op_index) {
  const Operation& op = fn_->ops.at(op_index);
  return map_.emplace(op.output, Entry{op.type, static_cast<long>(op_index)}).second;
}

const TensorType* ValueTable::type(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second.type;
}

const ConstValue* ValueTable::literal(const std::string& name) const {
  auto it = map_.find(name);
  if (it == map_.end() || it->second.op_index < 0 || !fn_) return nullptr;
  const Operation& op = fn_->ops[static_cast<size_t>(it->second.op_index)];
  return op.op == "const" ? op.attr("val") : nullptr;
}

// ---- OpContext --------------------------------------------------------------------------------

const TensorType& OpContext::type(const std::string& arg) const {
  const Arg* a = op_.arg(arg);
  if (!a || a->names.size() != 1) fail("missing argument '", arg, "'");
  const TensorType* t = values_.type(a->names[0]);
  if (!t) fail("argument ", arg, " = ", a->names[0], " is not defined");
  return *t;
}

std::vector<const TensorType*> OpContext::tuple_types(const std::string& arg) const {
  const Arg* a = op_.arg(arg);
  if (!a) fail("missing argument '", arg, "'");
  std::vector<const TensorType*> out;
  for (const auto& n : a->names) {
    const TensorType* t = values_.type(n);
    if (!t) fail("argument ", arg, " names undefined value '", n, "'");
    out.push_back(t);
  }
  return out;
}

const ConstValue* OpContext::literal(const std::string& arg) const {
  const Arg* a = op_.arg(arg);
  if (!a) {
    const ArgSpec* as = spec_ ? spec_->arg(arg) : nullptr;
    return as && as->dflt ? &*as->dflt : nullptr;
  }
  if (a->names.size() != 1) return nullptr;
  return values_.literal(a->names[0]);
}

std::vector<int64_t> OpContext::ints(const std::string& arg) const {
  const ConstValue* v = literal(arg);
  if (!v || v->blob || !(is_integer(v->type.dtype) || v->type.dtype == DType::kBool))
    fail("argument '", arg, "' must be an integer const");
  return v->i;
}

int64_t OpContext::int_scalar(const std::string& arg) const {
  auto v = ints(arg);
  if (v.size() != 1) fail("argument '", arg, "' must be an integer scalar const");
  return v[0];
}

bool OpContext::boolean(const std::string& arg, bool dflt) const {
  if (!has(arg) && !literal(arg)) return dflt;
  const ConstValue* v = literal(arg);
  if (!v || v->type.dtype != DType::kBool || v->i.size() != 1) fail("argument '", arg, "' must be a bool const");
  return v->i[0] != 0;
}

std::string OpContext::str(const std::string& arg) const {
  const ConstValue* v = literal(arg);
  if (!v || v->type.dtype != DType::kString) fail("argument '", arg, "' must be a string const");
  return v->s;
}

const ConstValue& OpContext::attr(const std::string& key) const {
  const ConstValue* v = op_.attr(key);
  if (!v) fail("missing bracket attribute '", key, "'");
  return *v;
}

std::string OpContext::desc(const std::string& arg) const { return arg + " " + shape_str(type(arg).shape); }

// ---- registry lookups -------------------------------------------------------------------------

const ArgSpec* OpSpec::arg(std::string_view n) const {
  for (const auto& a : args)
    if (a.name == n) return &a;
  return nullptr;
}

const AttrSpec* OpSpec::attr(std::string_view n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

const OpSpec* find_op(std::string_view name) {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string, const OpSpec*>();
    for (const auto& s : all_ops()) (*m)[s.name] = &s;
    return m;
  }();
  auto it = index->find(std::string(name));
  return it == index->end() ? nullptr : it->second;
}

const OpSpec& op_spec(std::string_view name) {
  if (const OpSpec* s = find_op(name)) return *s;
  std::string known;
  for (const auto& s : all_ops()) known += (known.empty() ? "" : ", ") + s.name;
  fail("mil", "unknown op '", name, "' (known ops: ", known, "; see docs/adding_an_op.md)");
}

namespace {

std::string dtypes_str(const std::vector<DType>& ds) {
  std::string s;
  for (DType d : ds) s += (s.empty() ? "" : "/") + std::string(dtype_name(d));
  return s;
}

bool allowed(const std::vector<DType>& ds, DType d) {
  return ds.empty() || std::find(ds.begin(), ds.end(), d) != ds.end();
}

void check_arg(const OpContext& c, const ArgSpec& spec, const Arg& a, const ValueTable& values) {
  if ((spec.kind == ArgKind::kTuple) != a.is_tuple)
    c.fail("argument '", spec.name, "' must be a ", arg_kind_name(spec.kind));
  if (!a.is_tuple && a.names.size() != 1) c.fail("argument '", spec.name, "' must name one value");
  if (a.is_tuple && a.names.empty()) c.fail("argument '", spec.name, "' is an empty tuple");
  for (const auto& n : a.names) {
    const TensorType* t = values.type(n);
    if (!t) c.fail("argument ", spec.name, " = ", n, ": value '", n, "' is not defined before this op");
    if (!allowed(spec.dtypes, t->dtype))
      c.fail("argument ", spec.name, " = ", n, " has type ", t->str(), ", expected dtype ", dtypes_str(spec.dtypes));
    if (spec.kind == ArgKind::kConstScalar || spec.kind == ArgKind::kConstTensor) {
      const ConstValue* lit = values.literal(n);
      if (!lit || lit->blob)
        c.fail("argument ", spec.name, " = ", n, " must be produced by a const op (", arg_kind_name(spec.kind), ")");
      if (spec.kind == ArgKind::kConstScalar && t->rank() != 0)
        c.fail("argument ", spec.name, " = ", n, " must be a scalar, got ", t->str());
      if (spec.kind == ArgKind::kConstTensor && t->rank() != 1)
        c.fail("argument ", spec.name, " = ", n, " must be a rank-1 tensor, got ", t->str());
    }
  }
}

}  // namespace

Resolved resolve_op(const Operation& op, const ValueTable& values) {
  const OpSpec& spec = op_spec(op.op);
  OpContext c(op, values, &spec);
  for (const auto& [k, a] : op.args) {
    const ArgSpec* as = spec.arg(k);
    if (!as) {
      if (spec.attr(k)) c.fail("'", k, "' must be a bracket attribute [", k, " = ...], not a call argument");
      c.fail("unknown argument '", k, "'");
    }
    check_arg(c, *as, a, values);
  }
  for (size_t i = 0; i < op.args.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (op.args[i].first == op.args[j].first) c.fail("argument '", op.args[i].first, "' given twice");
  for (const auto& as : spec.args)
    if (as.required && !op.arg(as.name)) c.fail("missing required argument '", as.name, "'");
  for (const auto& [k, v] : op.attrs) {
    const AttrSpec* at = spec.attr(k);
    if (!at) c.fail("unknown bracket attribute '", k, "'");
    if (!allowed(at->dtypes, v.type.dtype))
      c.fail("attribute ", k, " has type ", v.type.str(), ", expected dtype ", dtypes_str(at->dtypes));
  }
  for (const auto& at : spec.attrs)
    if (at.required && !op.attr(at.name)) c.fail("missing bracket attribute '", at.name, "'");
  return spec.resolve(c);
}

TensorType infer_type(const Operation& op, const ValueTable& values) { return resolve_op(op, values).type; }

// ---- shared helpers ---------------------------------------------------------------------------

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace anelab::mil

#include "framework/mil/ir.h"

#include "framework/core/error.h"

namespace anelab::mil {

const char* dialect_name(Dialect d) { return d == Dialect::kIos18 ? "ios18" : "ios16"; }

const Arg* Operation::arg(const std::string& key) const {
  for (const auto& [k, v] : args)
    if (k == key) return &v;
  return nullptr;
}

const ConstValue* Operation::attr(const std::string& key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

const TensorType* Function::type_of(const std::string& value) const {
  for (const auto& [n, t] : inputs)
    if (n == value) return &t;
  for (const auto& op : ops)
    if (op.output == value) return &op.type;
  return nullptr;
}

const Operation* Function::producer(const std::string& value) const {
  for (const auto& op : ops)
    if (op.output == value) return &op;
  return nullptr;
}

const ConstValue* Function::const_value(const std::string& value) const {
  const Operation* p = producer(value);
  if (!p || p->op != "const") return nullptr;
  return p->attr("val");
}

const Function& Program::function(const std::string& name) const {
  std::string known;
  for (const auto& f : functions) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  fail("mil", "no function named '", name, "' in program (functions: ", known, ")");
}

}  // namespace anelab::mil

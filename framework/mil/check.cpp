#include "framework/mil/check.h"

#include <unordered_set>

#include "framework/mil/ops.h"

namespace anelab::mil {
namespace {

std::string where(const std::string& source, const Function& fn, const Operation* op) {
  std::string loc;
  if (op && op->line > 0)
    loc = source.empty() ? cat("line ", op->line, ": ") : cat(source, ":", op->line, ": ");
  else if (!source.empty())
    loc = source + ": ";
  return loc + "function '" + fn.name + "': ";
}

// Re-throws an inference error "[mil] rest" as "[mil] <where>rest".
[[noreturn]] void rethrow_at(const Error& e, const std::string& at) {
  std::string m = e.what();
  const std::string tag = "[mil] ";
  if (m.rfind(tag, 0) == 0) m = m.substr(tag.size());
  throw Error(tag + at + m);
}

}  // namespace

void check_function(const Function& fn, const std::string& source) {
  ValueTable table(&fn);
  for (const auto& [name, type] : fn.inputs) {
    if (!table.add_input(name, type)) fail("mil", where(source, fn, nullptr), "duplicate input name '", name, "'");
    for (int64_t d : type.shape)
      ANELAB_CHECK(d > 0, "mil", where(source, fn, nullptr), "input '", name, "' has non-positive dimension in ",
                   type.str());
  }
  std::unordered_set<std::string> op_names;
  for (size_t i = 0; i < fn.ops.size(); ++i) {
    const Operation& op = fn.ops[i];
    std::string at = where(source, fn, &op);
    TensorType inferred;
    try {
      inferred = infer_type(op, table);
    } catch (const Error& e) {
      rethrow_at(e, at);
    }
    if (!op_names.insert(op.name).second) fail("mil", at, op.op, " '", op.name, "': duplicate op name '", op.name, "'");
    if (inferred != op.type)
      fail("mil", at, op.op, " '", op.name, "': declared type ", op.type.str(), " of '", op.output,
           "' but the op produces ", inferred.str());
    if (!table.add_op_output(i)) fail("mil", at, op.op, " '", op.name, "': value '", op.output, "' is already defined");
  }
  ANELAB_CHECK(!fn.outputs.empty(), "mil", where(source, fn, nullptr), "function has no outputs");
  for (const auto& o : fn.outputs)
    ANELAB_CHECK(table.has(o), "mil", where(source, fn, nullptr), "output '", o, "' is not defined");
}

void check_program(const Program& program, const std::string& source) {
  ANELAB_CHECK(!program.functions.empty(), "mil", source.empty() ? "" : source + ": ", "program has no functions");
  std::unordered_set<std::string> names;
  for (const auto& fn : program.functions) {
    ANELAB_CHECK(names.insert(fn.name).second, "mil", source.empty() ? "" : source + ": ", "duplicate function name '",
                 fn.name, "'");
    check_function(fn, source);
  }
}

}  // namespace anelab::mil

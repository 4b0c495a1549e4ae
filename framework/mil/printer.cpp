#include "framework/mil/printer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "framework/core/error.h"

namespace anelab::mil {
namespace {

constexpr const char* kBuildInfo18 =
    "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, {\"coremlc-version\", "
    "\"3505.4.1\"}, "
    "{\"coremltools-component-milinternal\", \"\"}, {\"coremltools-version\", \"9.0\"}})]";
constexpr const char* kBuildInfo16 =
    "[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", \"3505.4.1\"}})]";

std::string element(const ConstValue& v, size_t k) {
  DType t = v.type.dtype;
  if (is_float(t)) return format_double(v.f.at(k));
  if (t == DType::kBool) return v.i.at(k) ? "true" : "false";
  return std::to_string(v.i.at(k));
}

void print_op(std::string& out, const Operation& op, Dialect d) {
  out += "        " + print_type(op.type, d) + " " + op.output + " = " + op.op + "(";
  for (size_t i = 0; i < op.args.size(); ++i) {
    const auto& [k, a] = op.args[i];
    out += (i ? ", " : "") + k + " = ";
    if (a.is_tuple) out += "(";
    for (size_t j = 0; j < a.names.size(); ++j) out += (j ? ", " : "") + a.names[j];
    if (a.is_tuple) out += ")";
  }
  out += ")[";
  std::string name_attr = "name = " + print_literal(ConstValue::string(op.name), d);
  bool name_done = false, first = true;
  auto emit = [&](const std::string& s) {
    out += (first ? "" : ", ") + s;
    first = false;
  };
  for (const auto& [k, v] : op.attrs) {
    if (!name_done && k > "name") emit(name_attr), name_done = true;
    emit(k + " = " + print_literal(v, d));
  }
  if (!name_done) emit(name_attr);
  out += "];\n";
}

}  // namespace

std::string format_double(double v) {
  ANELAB_CHECK(std::isfinite(v), "mil", "float literal ", v,
               ": MIL has no nan/inf literal (the ANE compiler's reading of one is unknown); use a finite value "
               "such as -65504 for a mask");
  char buf[64];
  if (v == std::trunc(v) && std::fabs(v) <= 16777216.0) {  // integers up to 2^24: plain decimal, exact
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, r.ptr);  // "-0" for -0.0
  }
  std::snprintf(buf, sizeof buf, "%a", v);  // C99 hex float: the exact binary value, e.g. 0x1.4fcp-17
  return buf;
}

std::string quote_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string print_type(const TensorType& t, Dialect d) {
  if (t.is_scalar() && d == Dialect::kIos18) return std::string(dtype_name(t.dtype));
  return "tensor<" + std::string(dtype_name(t.dtype)) + ", " + shape_str(t.shape) + ">";
}

std::string print_literal(const ConstValue& v, Dialect d) {
  std::string head = print_type(v.type, d) + "(";
  if (v.blob) {
    return head + "BLOBFILE(path = " + print_literal(ConstValue::string(v.blob->path), d) +
           ", offset = " + print_literal(ConstValue::uint64(static_cast<int64_t>(v.blob->offset)), d) + "))";
  }
  if (v.type.dtype == DType::kString) {
    ANELAB_CHECK(v.type.is_scalar(), "mil", "cannot print string tensor literal ", v.type.str());
    return head + quote_string(v.s) + ")";
  }
  size_t n = is_float(v.type.dtype) ? v.f.size() : v.i.size();
  ANELAB_CHECK(static_cast<int64_t>(n) == v.type.numel(), "mil", "literal ", v.type.str(), " holds ", n, " elements");
  if (v.type.is_scalar()) return head + element(v, 0) + ")";
  std::string body = "[";
  for (size_t k = 0; k < n; ++k) body += (k ? ", " : "") + element(v, k);
  return head + body + "])";
}

std::string print(const Program& p, Dialect d) {
  std::string out = d == Dialect::kIos18 ? "program(1.3)\n" : "program(1.0)\n";
  out += std::string(d == Dialect::kIos18 ? kBuildInfo18 : kBuildInfo16) + "\n{\n";
  const char* opset = d == Dialect::kIos18 ? "ios18" : "ios16";
  for (const auto& f : p.functions) {
    out += "    func " + f.name + "<" + opset + ">(";
    for (size_t i = 0; i < f.inputs.size(); ++i)
      out += (i ? ", " : "") + print_type(f.inputs[i].second, d) + " " + f.inputs[i].first;
    out += ") {\n";
    for (const auto& op : f.ops) print_op(out, op, d);
    out += "    } -> (";
    for (size_t i = 0; i < f.outputs.size(); ++i) out += (i ? ", " : "") + f.outputs[i];
    out += ");\n";
  }
  return out + "}\n";
}

}  // namespace anelab::mil

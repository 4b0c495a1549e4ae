#include "framework/mil/builder.h"

#include <cctype>
#include <cmath>
#include <cstring>

#include "framework/core/fp16.h"
#include "framework/mil/check.h"

namespace anelab::mil {
namespace {

std::string sanitize(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ? ch : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v_" + out;
  return out;
}

std::string int_token(int64_t v) { return v < 0 ? "m" + std::to_string(-v) : std::to_string(v); }

// Stable identity of a literal, for deduplication.
std::string const_key(const ConstValue& v) {
  std::string k = v.type.str() + "|";
  if (v.blob) return k + "blob|" + v.blob->path + "|" + std::to_string(v.blob->offset);
  for (double d : v.f) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    k += std::to_string(bits) + ",";
  }
  for (int64_t i : v.i) k += std::to_string(i) + ",";
  return k + "s" + v.s;
}

// Readable default name of a const.
std::string const_base(const ConstValue& v) {
  if (v.blob) {
    std::string p = v.blob->path;
    size_t slash = p.find_last_of('/');
    if (slash != std::string::npos) p = p.substr(slash + 1);
    if (size_t dot = p.find('.'); dot != std::string::npos) p = p.substr(0, dot);
    return v.blob->offset == 64 ? p : p + "_" + std::to_string(v.blob->offset);
  }
  DType t = v.type.dtype;
  if (t == DType::kString) return v.s.size() <= 24 ? "c_" + v.s : "c_str";
  if (v.type.rank() == 0) {
    if (t == DType::kBool) return v.i[0] ? "c_true" : "c_false";
    if (!is_float(t))
      return (t == DType::kInt32 ? "c_int" : "c_" + std::string(dtype_name(t)) + "_") + int_token(v.i[0]);
    double d = v.f[0];
    if (std::isfinite(d) && d == std::round(d) && std::fabs(d) < 1e6)
      return "c_" + std::string(dtype_name(t)) + "_" + int_token(static_cast<int64_t>(d));
    std::string s = std::to_string(d);  // "%f"
    while (!s.empty() && s.back() == '0') s.pop_back();
    for (char& ch : s) ch = ch == '.' ? 'p' : ch == '-' ? 'm' : ch;
    return s.size() <= 10 ? "c_" + std::string(dtype_name(t)) + "_" + s : "c_" + std::string(dtype_name(t));
  }
  if (v.type.rank() == 1 && !is_float(t) && v.i.size() <= 6) {
    std::string s = t == DType::kBool ? "c_b" : "c";
    for (int64_t i : v.i) s += "_" + int_token(i);
    return s;
  }
  return "c_" + std::string(dtype_name(t));
}

}  // namespace

FunctionBuilder::FunctionBuilder(std::string name) : table_(&fn_) { fn_.name = std::move(name); }

FunctionBuilder& FunctionBuilder::named(std::string hint) {
  std::optional<std::string> pending = std::move(hint_);
  hint_.reset();
  ANELAB_CHECK(!pending, "mil", "named(\"", hint, "\") while the hint \"", *pending,
               "\" is still pending: C++ evaluates b.named(..) before the "
               "call's arguments, so build argument values into variables first (function '",
               fn_.name, "')");
  hint_ = std::move(hint);
  return *this;
}

std::string FunctionBuilder::unique(std::string base) {
  base = sanitize(base);
  std::string n = base;
  for (int k = 2; used_.count(n); ++k) n = base + "_" + std::to_string(k);
  used_.insert(n);
  return n;
}

std::string FunctionBuilder::take_name(const std::string& op) {
  if (hint_) {
    std::string h = *hint_;
    hint_.reset();
    return unique(h);
  }
  std::string n;
  do n = op + "_" + std::to_string(counters_[op]++);
  while (used_.count(n));
  used_.insert(n);
  return n;
}

const TensorType& FunctionBuilder::type_of(const Value& v) const {
  const TensorType* t = table_.type(v.name);
  ANELAB_CHECK(t, "mil", "value '", v.name, "' is not defined in function '", fn_.name,
               "' (a value from another builder?)");
  ANELAB_CHECK(*t == v.type, "mil", "value '", v.name, "' has type ", t->str(), " in function '", fn_.name,
               "', handle says ", v.type.str());
  return *t;
}

Value FunctionBuilder::add_op(Operation op) {
  for (const auto& [k, a] : op.args)
    for (const auto& n : a.names)
      ANELAB_CHECK(table_.has(n), "mil", op.op, " '", op.name, "': argument ", k, " = ", n, " is not defined");
  op.type = infer_type(op, table_);
  fn_.ops.push_back(std::move(op));
  table_.add_op_output(fn_.ops.size() - 1);
  return {fn_.ops.back().output, fn_.ops.back().type};
}

Value FunctionBuilder::input(const std::string& name, TensorType type) {
  ANELAB_CHECK(sanitize(name) == name, "mil", "input name '", name, "' is not an identifier");
  ANELAB_CHECK(!used_.count(name), "mil", "function '", fn_.name, "' already has a value named '", name, "'");
  for (int64_t d : type.shape)
    ANELAB_CHECK(d > 0, "mil", "input '", name, "' has non-positive dimension in ", type.str());
  used_.insert(name);
  fn_.inputs.emplace_back(name, type);
  table_.add_input(name, type);
  return {name, type};
}

void FunctionBuilder::output(const Value& v) {
  type_of(v);
  fn_.outputs.push_back(v.name);
}

// ---- consts -----------------------------------------------------------------------------------

Value FunctionBuilder::constant(ConstValue v) {
  if (v.type.dtype == DType::kFp16)
    for (double& d : v.f) d = static_cast<double>(round_fp16(static_cast<float>(d)));
  std::string key = const_key(v);
  bool hinted = hint_.has_value();
  if (!hinted)
    if (auto it = consts_.find(key); it != consts_.end()) return it->second;
  std::string name = hinted ? take_name("") : unique(const_base(v));
  Operation op;
  op.op = "const";
  op.name = op.output = name;
  op.attrs.emplace_back("val", std::move(v));
  Value out = add_op(std::move(op));
  consts_.emplace(key, out);
  return out;
}

Value FunctionBuilder::scalar(DType t, double v) {
  if (is_float(t)) return constant(ConstValue{scalar_type(t), {v}, {}, {}, {}});
  ANELAB_CHECK(v == std::floor(v), "mil", "scalar ", v, " is not an integer but the dtype is ", dtype_name(t));
  return constant(ConstValue{scalar_type(t), {}, {static_cast<int64_t>(v)}, {}, {}});
}
Value FunctionBuilder::const_int(int64_t v) { return constant(ConstValue::int32(v)); }
Value FunctionBuilder::const_bool(bool v) { return constant(ConstValue::boolean(v)); }
Value FunctionBuilder::const_string(std::string v) { return constant(ConstValue::string(std::move(v))); }
Value FunctionBuilder::const_ints(std::vector<int64_t> v) { return constant(ConstValue::ints(std::move(v))); }
Value FunctionBuilder::const_bools(const std::vector<bool>& v) {
  std::vector<int64_t> i(v.begin(), v.end());
  return constant(ConstValue::ints(std::move(i), DType::kBool));
}

Value FunctionBuilder::const_tensor(TensorType t, std::vector<double> v) {
  ANELAB_CHECK(static_cast<int64_t>(v.size()) == t.numel(), "mil", "const_tensor ", t.str(), " given ", v.size(),
               " elements");
  if (is_float(t.dtype)) return constant(ConstValue::floats(std::move(t), std::move(v)));
  std::vector<int64_t> iv;
  for (double d : v) {
    ANELAB_CHECK(d == std::floor(d), "mil", "const_tensor ", t.str(), ": element ", d, " is not an integer");
    iv.push_back(static_cast<int64_t>(d));
  }
  return constant(ConstValue{std::move(t), {}, std::move(iv), {}, {}});
}

Value FunctionBuilder::const_blob(TensorType t, std::string path, uint64_t offset) {
  return constant(ConstValue::blobfile(std::move(t), std::move(path), offset));
}

// ---- ops --------------------------------------------------------------------------------------

Value FunctionBuilder::op(const std::string& opname, const std::vector<std::pair<std::string, OpArg>>& args,
                          std::vector<std::pair<std::string, ConstValue>> attrs) {
  Operation op;
  op.op = opname;
  op.name = op.output = take_name(opname);
  for (const auto& [k, a] : args) {
    if (const Value* v = std::get_if<Value>(&a)) {
      type_of(*v);
      op.args.emplace_back(k, Arg::value(v->name));
    } else {
      std::vector<std::string> names;
      for (const Value& v2 : std::get<std::vector<Value>>(a)) {
        type_of(v2);
        names.push_back(v2.name);
      }
      op.args.emplace_back(k, Arg::tuple(std::move(names)));
    }
  }
  std::sort(attrs.begin(), attrs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  op.attrs = std::move(attrs);
  return add_op(std::move(op));
}

// The public methods below take the name hint first (so consts created on the way don't consume it).
#define ANELAB_TAKE_HINT()                         \
  std::optional<std::string> h = std::move(hint_); \
  hint_.reset()
#define ANELAB_OP(...) (hint_ = std::move(h), op(__VA_ARGS__))

Value FunctionBuilder::conv(const Value& x, const Value& w, const ConvOptions& o) {
  ANELAB_TAKE_HINT();
  std::vector<std::pair<std::string, OpArg>> a{{"dilations", const_ints(o.dilations)},
                                               {"groups", const_int(o.groups)},
                                               {"pad", const_ints(o.pad)},
                                               {"pad_type", const_string(o.pad_type)},
                                               {"strides", const_ints(o.strides)},
                                               {"weight", w},
                                               {"x", x}};
  if (o.bias) a.emplace_back("bias", *o.bias);
  return ANELAB_OP("conv", a);
}

Value FunctionBuilder::matmul(const Value& x, const Value& y, bool tx, bool ty) {
  ANELAB_TAKE_HINT();
  auto vx = const_bool(tx), vy = const_bool(ty);
  return ANELAB_OP("matmul", {{"transpose_x", vx}, {"transpose_y", vy}, {"x", x}, {"y", y}});
}

Value FunctionBuilder::softmax(const Value& x, int64_t axis) {
  ANELAB_TAKE_HINT();
  auto a = const_int(axis);
  return ANELAB_OP("softmax", {{"axis", a}, {"x", x}});
}

Value FunctionBuilder::reshape(const Value& x, Shape shape) {
  ANELAB_TAKE_HINT();
  auto s = const_ints(std::move(shape));
  return ANELAB_OP("reshape", {{"shape", s}, {"x", x}});
}

Value FunctionBuilder::transpose(const Value& x, std::vector<int64_t> perm) {
  ANELAB_TAKE_HINT();
  auto p = const_ints(std::move(perm));
  return ANELAB_OP("transpose", {{"perm", p}, {"x", x}});
}

Value FunctionBuilder::slice_by_size(const Value& x, std::vector<int64_t> begin, std::vector<int64_t> size) {
  ANELAB_TAKE_HINT();
  auto b = const_ints(std::move(begin)), s = const_ints(std::move(size));
  return ANELAB_OP("slice_by_size", {{"x", x}, {"begin", b}, {"size", s}});
}

Value FunctionBuilder::slice_by_index(const Value& x, std::vector<int64_t> begin, std::vector<int64_t> end,
                                      const SliceByIndexOptions& o) {
  ANELAB_TAKE_HINT();
  std::vector<std::pair<std::string, OpArg>> a{
      {"x", x}, {"begin", const_ints(std::move(begin))}, {"end", const_ints(std::move(end))}};
  if (!o.stride.empty()) a.emplace_back("stride", const_ints(o.stride));
  if (!o.begin_mask.empty()) a.emplace_back("begin_mask", const_bools(o.begin_mask));
  if (!o.end_mask.empty()) a.emplace_back("end_mask", const_bools(o.end_mask));
  if (!o.squeeze_mask.empty()) a.emplace_back("squeeze_mask", const_bools(o.squeeze_mask));
  return ANELAB_OP("slice_by_index", a);
}

Value FunctionBuilder::concat(const std::vector<Value>& values, int64_t axis, bool interleave) {
  ANELAB_TAKE_HINT();
  auto a = const_int(axis), il = const_bool(interleave);
  return ANELAB_OP("concat", {{"axis", a}, {"interleave", il}, {"values", values}});
}

Value FunctionBuilder::reduce(const char* name, const Value& x, std::vector<int64_t> axes, bool keep_dims) {
  ANELAB_TAKE_HINT();
  auto a = const_ints(std::move(axes)), k = const_bool(keep_dims);
  return ANELAB_OP(name, {{"x", x}, {"axes", a}, {"keep_dims", k}});
}
Value FunctionBuilder::reduce_sum(const Value& x, std::vector<int64_t> axes, bool k) {
  return reduce("reduce_sum", x, std::move(axes), k);
}
Value FunctionBuilder::reduce_max(const Value& x, std::vector<int64_t> axes, bool k) {
  return reduce("reduce_max", x, std::move(axes), k);
}

Value FunctionBuilder::binary(const char* name, const Value& x, const Value& y) {
  return op(name, {{"x", x}, {"y", y}});
}
Value FunctionBuilder::unary(const char* name, const Value& x) { return op(name, {{"x", x}}); }

#define ANELAB_BINARY(fn)                                                                 \
  Value FunctionBuilder::fn(const Value& x, const Value& y) { return binary(#fn, x, y); } \
  Value FunctionBuilder::fn(const Value& x, double y) {                                   \
    ANELAB_TAKE_HINT();                                                                   \
    auto c = scalar(x.dtype(), y);                                                        \
    hint_ = std::move(h);                                                                 \
    return binary(#fn, x, c);                                                             \
  }
ANELAB_BINARY(pow)
ANELAB_BINARY(mul)
ANELAB_BINARY(add)
ANELAB_BINARY(sub)
ANELAB_BINARY(real_div)
#undef ANELAB_BINARY

Value FunctionBuilder::sub(double x, const Value& y) {
  ANELAB_TAKE_HINT();
  auto c = scalar(y.dtype(), x);
  hint_ = std::move(h);
  return binary("sub", c, y);
}

Value FunctionBuilder::sigmoid(const Value& x) { return unary("sigmoid", x); }
Value FunctionBuilder::tanh(const Value& x) { return unary("tanh", x); }
Value FunctionBuilder::exp(const Value& x) { return unary("exp", x); }
Value FunctionBuilder::relu(const Value& x) { return unary("relu", x); }
Value FunctionBuilder::softplus(const Value& x) { return unary("softplus", x); }
Value FunctionBuilder::identity(const Value& x) { return unary("identity", x); }

Value FunctionBuilder::cast(const Value& x, DType to) {
  ANELAB_TAKE_HINT();
  auto d = const_string(std::string(dtype_name(to)));
  return ANELAB_OP("cast", {{"dtype", d}, {"x", x}});
}

Value FunctionBuilder::quantize(const Value& input, DType out, const Value& scale, const QuantParams& q) {
  ANELAB_TAKE_HINT();
  std::vector<std::pair<std::string, OpArg>> a{
      {"input", input}, {"output_dtype", const_string(std::string(dtype_name(out)))}, {"scale", scale}};
  if (q.zero_point) a.emplace_back("zero_point", *q.zero_point);
  if (q.axis) a.emplace_back("axis", const_int(*q.axis));
  return ANELAB_OP("quantize", a);
}
Value FunctionBuilder::quantize(const Value& input, DType out, double scale, const QuantParams& q) {
  ANELAB_TAKE_HINT();
  auto s = this->scalar(input.dtype(), scale);
  hint_ = std::move(h);
  return quantize(input, out, s, q);
}

Value FunctionBuilder::dequantize(const Value& input, const Value& scale, const QuantParams& q) {
  ANELAB_TAKE_HINT();
  std::vector<std::pair<std::string, OpArg>> a{{"input", input}, {"scale", scale}};
  if (q.zero_point) a.emplace_back("zero_point", *q.zero_point);
  if (q.axis) a.emplace_back("axis", const_int(*q.axis));
  return ANELAB_OP("dequantize", a);
}
Value FunctionBuilder::dequantize(const Value& input, double scale, const QuantParams& q) {
  ANELAB_TAKE_HINT();
  auto s = this->scalar(DType::kFp16, scale);
  hint_ = std::move(h);
  return dequantize(input, s, q);
}

Value FunctionBuilder::constexpr_affine_dequantize(ConstValue qd, ConstValue scale, ConstValue zp, int64_t axis) {
  if (scale.type.dtype == DType::kFp16)
    for (double& d : scale.f) d = static_cast<double>(round_fp16(static_cast<float>(d)));
  return op("constexpr_affine_dequantize", {},
            {{"axis", ConstValue::int32(axis)},
             {"quantized_data", std::move(qd)},
             {"scale", std::move(scale)},
             {"zero_point", std::move(zp)}});
}

namespace {
void round_fp16_literal(ConstValue& v) {
  if (v.type.dtype == DType::kFp16)
    for (double& d : v.f) d = static_cast<double>(round_fp16(static_cast<float>(d)));
}
}  // namespace

Value FunctionBuilder::constexpr_blockwise_shift_scale(ConstValue data, ConstValue scale,
                                                       std::optional<ConstValue> offset) {
  round_fp16_literal(scale);
  std::vector<std::pair<std::string, ConstValue>> attrs{{"data", std::move(data)}};
  if (offset) {
    round_fp16_literal(*offset);
    attrs.emplace_back("offset", std::move(*offset));
  }
  attrs.emplace_back("scale", std::move(scale));
  return op("constexpr_blockwise_shift_scale", {}, std::move(attrs));
}

Value FunctionBuilder::constexpr_lut_to_dense(ConstValue indices, ConstValue lut) {
  round_fp16_literal(lut);
  return op("constexpr_lut_to_dense", {}, {{"indices", std::move(indices)}, {"lut", std::move(lut)}});
}

Value FunctionBuilder::scaled_dot_product_attention(const Value& q, const Value& k, const Value& v,
                                                    const std::optional<Value>& mask) {
  std::vector<std::pair<std::string, OpArg>> a{{"query", q}, {"key", k}, {"value", v}};
  if (mask) a.emplace_back("attn_mask", *mask);
  return op("scaled_dot_product_attention", a);
}

Value FunctionBuilder::layer_norm(const Value& x, std::vector<int64_t> axes, const std::optional<Value>& gamma,
                                  const std::optional<Value>& beta, double epsilon) {
  ANELAB_TAKE_HINT();
  std::vector<std::pair<std::string, OpArg>> a{{"x", x}, {"axes", const_ints(std::move(axes))}};
  if (gamma) a.emplace_back("gamma", *gamma);
  if (beta) a.emplace_back("beta", *beta);
  a.emplace_back("epsilon", scalar(x.dtype(), epsilon));
  return ANELAB_OP("layer_norm", a);
}

Value FunctionBuilder::slice_slot(const Value& x, const IOLayout& layout, const std::string& slot) {
  ANELAB_CHECK(x.shape() == layout.type().shape, "mil", "slice_slot: ", x.name, " ", shape_str(x.shape()),
               " is not the packed surface ", shape_str(layout.type().shape), " of layout '", layout.name(), "'");
  const IOSlot& s = layout.slot(slot);
  if (!hint_) hint_ = slot;
  return slice_by_size(x, {0, s.ch_offset, 0, s.sp_offset}, {1, s.channels, 1, s.spatial});
}

Value FunctionBuilder::concat_slots(const IOLayout& layout, const std::vector<Value>& values) {
  const auto& slots = layout.slots();
  ANELAB_CHECK(values.size() == slots.size() && !slots.empty(), "mil", "concat_slots: layout '", layout.name(),
               "' has ", slots.size(), " slots, got ", values.size(), " values");
  bool by_channel = true, by_spatial = true;
  for (size_t i = 0; i < slots.size(); ++i) {
    const IOSlot& s = slots[i];
    Shape want{1, s.channels, 1, s.spatial};
    ANELAB_CHECK(values[i].shape() == want, "mil", "concat_slots: slot '", s.name, "' of layout '", layout.name(),
                 "' is ", shape_str(want), ", got ", values[i].name, " ", shape_str(values[i].shape()));
    by_channel = by_channel && s.sp_offset == 0 && s.spatial == layout.spatial();
    by_spatial = by_spatial && s.ch_offset == 0 && s.channels == layout.channels();
  }
  ANELAB_CHECK(by_channel || by_spatial, "mil", "concat_slots: layout '", layout.name(),
               "' mixes channel and spatial packing");
  if (values.size() == 1) return values[0];
  return concat(values, by_channel ? 1 : 3, false);
}

#undef ANELAB_OP
#undef ANELAB_TAKE_HINT

// ---- ProgramBuilder ---------------------------------------------------------------------------

FunctionBuilder& ProgramBuilder::function(const std::string& name) {
  for (const auto& f : fns_)
    ANELAB_CHECK(f->name() != name, "mil", "program already has a function named '", name, "'");
  fns_.push_back(std::make_unique<FunctionBuilder>(name));
  return *fns_.back();
}

Program ProgramBuilder::build(Dialect dialect) const {
  ANELAB_CHECK(!fns_.empty(), "mil", "ProgramBuilder::build: no functions were added");
  Program p;
  p.dialect = dialect;
  for (size_t k = 0; k < fns_.size(); ++k) {
    Function f = fns_[k]->function();
    ANELAB_CHECK(!f.outputs.empty(), "mil", "function '", f.name, "' has no outputs (call output(v))");
    if (fns_.size() > 1) {  // per-function suffix for every input, op and value name (ane_digest §1.9)
      std::string sfx = "_" + std::to_string(k);
      std::unordered_set<std::string> renamed;
      for (auto& [n, t] : f.inputs) {  // distinct input symbols across procedures (ane-infer: x0, x1)
        renamed.insert(n);
        n += sfx;
      }
      for (auto& op : f.ops) {
        renamed.insert(op.output);
        op.output += sfx;
        op.name += sfx;
      }
      auto fix = [&](std::string& n) {
        if (renamed.count(n)) n += sfx;
      };
      for (auto& op : f.ops)
        for (auto& [key, a] : op.args)
          for (auto& n : a.names) fix(n);
      for (auto& o : f.outputs) fix(o);
    }
    p.functions.push_back(std::move(f));
  }
  check_program(p);
  return p;
}

}  // namespace anelab::mil

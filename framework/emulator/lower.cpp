// MIL function -> FunctionPlan: registry resolution and dispatch to the family rules, const decoding,
// views, steps, arena by liveness.
#include "framework/emulator/lower.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/emulator/emulator.h"
#include "framework/mil/blob.h"

namespace anelab::emu {

using mil::DType;
using mil::Shape;

std::string Lowerer::where(const mil::Operation& op) const {
  return cat("function '", fn_.name, "', op '", op.name, "' (", op.op, ")");
}

const mil::ConstValue& Lowerer::lit(const mil::Operation& op, const std::string& key) const {
  const mil::Arg* a = op.arg(key);
  ANELAB_CHECK(a && a->names.size() == 1, "emulator", where(op), ": missing argument '", key, "'");
  const mil::ConstValue* v = fn_.const_value(a->names[0]);
  ANELAB_CHECK(v, "emulator", where(op), ": argument '", key, "' = '", a->names[0],
               "' must be a const (the emulator only takes literal parameters)");
  return *v;
}

std::vector<float> Lowerer::lit_floats(const mil::Operation& op, const std::string& key) const {
  const auto& v = lit(op, key);
  return decode_const(v, op);
}

const ValueInfo& Lowerer::view(const mil::Operation& op, const std::string& key) const {
  const mil::Arg* a = op.arg(key);
  ANELAB_CHECK(a && a->names.size() == 1, "emulator", where(op), ": missing tensor argument '", key, "'");
  return view_named(op, a->names[0]);
}

const ValueInfo& Lowerer::view_named(const mil::Operation& op, const std::string& name) const {
  auto it = values_.find(name);
  ANELAB_CHECK(it != values_.end() && it->second.ref.kind != Ref::kNone, "emulator", where(op), ": value '", name,
               "' is not a defined tensor");
  return it->second;
}

const ValueInfo& Lowerer::value(const mil::Operation& op, const std::string& key) {
  const mil::Arg* a = op.arg(key);
  ANELAB_CHECK(a && a->names.size() == 1, "emulator", where(op), ": missing tensor argument '", key, "'");
  return value_named(op, a->names[0]);
}

const ValueInfo& Lowerer::value_named(const mil::Operation& op, const std::string& name) {
  const ValueInfo& v = view_named(op, name);
  return v.strides.empty() ? v : materialize(name, op.name);
}

// Replaces the view `name` by a contiguous copy (a k_strided step); later readers share the copy.
const ValueInfo& Lowerer::materialize(const std::string& name, const std::string& why) {
  ValueInfo& v = values_.at(name);
  if (v.strides.empty()) return v;
  Step s;
  s.run = k_strided;
  s.op = "materialize";
  s.name = name + " (view read by " + why + ")";
  s.in_refs.push_back(v.ref);
  s.in_shapes.push_back(v.type.shape);
  s.out_shape = v.type.shape;
  s.out_dtype = v.type.dtype;
  s.out_n = v.type.numel();
  s.out_ref = new_vbuf(static_cast<size_t>(s.out_n));
  StridedArgs a{v.type.shape, v.strides, 0};
  if (a.shape.empty()) a.shape = {1}, a.strides = {1};
  s.args = std::move(a);
  v.ref = s.out_ref;
  v.strides.clear();
  plan_.steps.push_back(std::move(s));
  return v;
}

// ---- consts ---------------------------------------------------------------------------------------
std::vector<float> Lowerer::read_blob(const mil::ConstValue& v, const std::string& what) const {
  const auto& ref = *v.blob;
  auto it = weights_.find(ref.path);
  if (it == weights_.end() || !it->second) {
    std::string known;
    for (const auto& [k, b] : weights_) known += (known.empty() ? "" : ", ") + k;
    fail("emulator", "function '", fn_.name, "', ", what, ": BLOBFILE path '", ref.path,
         "' is not in the weights dictionary (known keys: ", known.empty() ? "none" : known, ")");
  }
  mil::BlobReader reader(*it->second, ref.path);
  return reader.read_f32(ref.offset, v.type);
}

std::vector<float> Lowerer::decode_const(const mil::ConstValue& v, const mil::Operation& op) const {
  std::vector<float> out;
  if (v.blob) {
    out = read_blob(v, cat("const '", op.name, "'"));
  } else if (!v.f.empty()) {
    out.assign(v.f.begin(), v.f.end());
  } else {
    out.assign(v.i.begin(), v.i.end());
  }
  const int64_t n = v.type.numel();
  ANELAB_CHECK(static_cast<int64_t>(out.size()) == n || (n == 1 && out.size() == 1), "emulator", where(op),
               ": literal holds ", out.size(), " elements, its type ", v.type.str(), " needs ", n);
  if (v.type.dtype == DType::kFp16) round_fp16_inplace(out.data(), out.size());
  return out;
}

Ref Lowerer::add_const(std::vector<float> data) {
  plan_.consts.push_back(std::move(data));
  return Ref{Ref::kConst, static_cast<int>(plan_.consts.size() - 1)};
}

void Lowerer::lower_const(const mil::Operation& op) {
  const mil::ConstValue* v = op.attr("val");
  ANELAB_CHECK(v, "emulator", where(op), ": const without a val attribute");
  if (v->type.dtype == DType::kString) {
    values_[op.output] = ValueInfo{v->type, Ref{}};
    return;
  }
  values_[op.output] = ValueInfo{v->type, add_const(decode_const(*v, op))};
}

void Lowerer::set_const(const mil::Operation& op, std::vector<float> data) {
  values_[op.output] = ValueInfo{op.type, add_const(std::move(data))};
}

// ---- steps and arena ------------------------------------------------------------------------------
Step& Lowerer::new_step(const mil::Operation& op, StepFn fn, std::vector<const ValueInfo*> ins, StepArgs args) {
  Step s;
  s.run = fn;
  s.args = std::move(args);
  s.op = op.op;
  s.name = op.name;
  for (const ValueInfo* v : ins) {
    s.in_refs.push_back(v->ref);
    s.in_shapes.push_back(v->type.shape);
  }
  s.out_shape = op.type.shape;
  s.out_dtype = op.type.dtype;
  s.out_n = op.type.numel();
  s.out_ref = new_vbuf(static_cast<size_t>(s.out_n));
  values_[op.output] = ValueInfo{op.type, s.out_ref};
  plan_.steps.push_back(std::move(s));
  return plan_.steps.back();
}

Ref Lowerer::new_vbuf(size_t n) {
  vbuf_size_.push_back(std::max<size_t>(n, 1));
  return Ref{Ref::kArena, static_cast<int>(vbuf_size_.size() - 1)};
}

void Lowerer::set_scratch(Step& s, size_t n) {
  s.scratch_n = n;
  if (n) s.scratch_ref = new_vbuf(n);
}

// Greedy best-fit slot reuse in step order: a slot is freed after the last step that reads it.
void Lowerer::assign_arena() {
  const int nv = static_cast<int>(vbuf_size_.size()), ns = static_cast<int>(plan_.steps.size());
  std::vector<int> def(static_cast<size_t>(nv), -1), last(static_cast<size_t>(nv), -1);
  for (int i = 0; i < ns; ++i) {
    const Step& s = plan_.steps[static_cast<size_t>(i)];
    def[static_cast<size_t>(s.out_ref.index)] = i;
    if (s.scratch_ref.kind == Ref::kArena)
      def[static_cast<size_t>(s.scratch_ref.index)] = last[static_cast<size_t>(s.scratch_ref.index)] = i;
    for (const Ref& r : s.in_refs)
      if (r.kind == Ref::kArena) last[static_cast<size_t>(r.index)] = i;
  }
  for (const ValueInfo& o : plan_.outputs)
    if (o.ref.kind == Ref::kArena) last[static_cast<size_t>(o.ref.index)] = ns;  // live to the end
  std::vector<size_t> slot_size;
  std::vector<int> slot_of(static_cast<size_t>(nv), -1), free_slots;
  auto alloc = [&](int v) {
    const size_t need = (vbuf_size_[static_cast<size_t>(v)] + 15) / 16 * 16;
    int best = -1;
    for (size_t k = 0; k < free_slots.size(); ++k) {
      const int sl = free_slots[k];
      if (slot_size[static_cast<size_t>(sl)] >= need &&
          (best < 0 ||
           slot_size[static_cast<size_t>(sl)] < slot_size[static_cast<size_t>(free_slots[static_cast<size_t>(best)])]))
        best = static_cast<int>(k);
    }
    if (best >= 0) {
      slot_of[static_cast<size_t>(v)] = free_slots[static_cast<size_t>(best)];
      free_slots.erase(free_slots.begin() + best);
    } else {
      slot_of[static_cast<size_t>(v)] = static_cast<int>(slot_size.size());
      slot_size.push_back(need);
    }
  };
  for (int v = 0; v < nv; ++v)
    if (def[static_cast<size_t>(v)] < 0) alloc(v);  // function inputs
  for (int i = 0; i < ns; ++i) {
    for (int v = 0; v < nv; ++v)
      if (def[static_cast<size_t>(v)] == i) alloc(v);
    for (int v = 0; v < nv; ++v)
      if (last[static_cast<size_t>(v)] == i) free_slots.push_back(slot_of[static_cast<size_t>(v)]);
  }
  std::vector<size_t> slot_off(slot_size.size());
  size_t total = 0;
  for (size_t k = 0; k < slot_size.size(); ++k) {
    slot_off[k] = total;
    total += slot_size[k];
  }
  plan_.arena = AlignedFloats(std::max<size_t>(total, 16));
  plan_.vbuf_offset.resize(static_cast<size_t>(nv));
  for (int v = 0; v < nv; ++v)
    plan_.vbuf_offset[static_cast<size_t>(v)] = slot_off[static_cast<size_t>(slot_of[static_cast<size_t>(v)])];
}

void Lowerer::resolve() {
  for (Step& s : plan_.steps) {
    s.in.clear();
    for (const Ref& r : s.in_refs) s.in.push_back(plan_.ptr(r));
    s.out = plan_.mut_ptr(s.out_ref);
    s.scratch = s.scratch_ref.kind == Ref::kNone ? nullptr : plan_.mut_ptr(s.scratch_ref);
  }
}

void Lowerer::run() {
  plan_.name = fn_.name;
  for (const auto& [name, type] : fn_.inputs) {
    ANELAB_CHECK(mil::is_float(type.dtype), "emulator", "function '", fn_.name, "': input '", name, "' is ", type.str(),
                 "; surfaces carry fp16 or fp32");
    ValueInfo v{type, new_vbuf(static_cast<size_t>(type.numel()))};
    values_[name] = v;
    table_.add_input(name, type);
    plan_.inputs.push_back(v);
  }
  for (size_t i = 0; i < fn_.ops.size(); ++i) {
    lower_op(fn_.ops[i]);
    table_.add_op_output(i);
  }
  for (const auto& o : fn_.outputs) {
    auto it = values_.find(o);
    ANELAB_CHECK(it != values_.end() && it->second.ref.kind != Ref::kNone, "emulator", "function '", fn_.name,
                 "': returned value '", o, "' is not a defined tensor");
    materialize(o, "the function's outputs");
    ANELAB_CHECK(mil::is_float(it->second.type.dtype), "emulator", "function '", fn_.name, "': returned value '", o,
                 "' is ", it->second.type.str(), "; surfaces carry fp16 or fp32");
    plan_.outputs.push_back(it->second);
  }
  assign_arena();
  resolve();
}

// ---- dispatch -------------------------------------------------------------------------------------
namespace {

const std::array<std::span<const LowerRule> (*)(), 5> kFamilies = {elementwise_rules, reduce_rules, linear_rules,
                                                                   shape_rules, quant_rules};

const std::map<std::string, LowerFn>& rule_table() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, LowerFn>();
    for (auto family : kFamilies)
      for (const LowerRule& r : family()) (*t)[r.op] = r.lower;
    return t;
  }();
  return *table;
}

}  // namespace

void Lowerer::lower_op(const mil::Operation& op) {
  mil::Resolved r;
  try {
    r = mil::resolve_op(op, table_);
  } catch (const Error& e) {
    fail("emulator", "function '", fn_.name, "': ", e.what());
  }
  ANELAB_CHECK(r.type == op.type, "emulator", where(op), ": declared output ", op.type.str(), " but the op produces ",
               r.type.str());
  if (op.op == "const") return lower_const(op);
  auto it = rule_table().find(op.op);
  if (it == rule_table().end()) {
    std::string why = "see framework/emulator/README.md";
    for (const UnloweredOp& u : unlowered_ops())
      if (u.op == op.op) why = u.reason;
    fail("emulator", where(op), ": op '", op.op, "' is not implemented by the emulator (", why, ")");
  }
  it->second(*this, op, r);
}

std::vector<std::string> lowered_ops() {
  std::vector<std::string> v{"const"};
  for (const auto& [name, fn] : rule_table()) v.push_back(name);
  return v;
}

const std::vector<UnloweredOp>& unlowered_ops() {
  static const std::vector<UnloweredOp> v = {
      {"layer_norm",
       "the ANE compiler's layer_norm numerics (where epsilon and the fp16 roundings go) are unmeasured; models build "
       "LayerNorm from reduce_sum/sub/mul/pow (kern::layer_norm), which the emulator runs"},
  };
  return v;
}

// ---- helpers shared by the family rules -----------------------------------------------------------
std::vector<int64_t> contiguous_strides(const mil::Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d)
    st[static_cast<size_t>(d)] = st[static_cast<size_t>(d) + 1] * s[static_cast<size_t>(d) + 1];
  return st;
}

std::vector<int64_t> strides_of(const ValueInfo& v) {
  return v.strides.empty() ? contiguous_strides(v.type.shape) : v.strides;
}

int64_t prod(const mil::Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < s.size(); ++i) p *= s[i];
  return p;
}

std::vector<int64_t> bcast_strides(const mil::Shape& s, const std::vector<int64_t>& st, const mil::Shape& out) {
  const size_t r = out.size(), off = r - s.size();
  std::vector<int64_t> res(r, 0);
  for (size_t i = off; i < r; ++i) res[i] = s[i - off] == 1 ? 0 : st[i - off];
  return res;
}

// The op's output is a view of x's buffer: element strides `strides` (empty: contiguous) at offset `off`
// (elements) past x's own offset.
void Lowerer::set_view(const mil::Operation& op, const ValueInfo& x, std::vector<int64_t> strides, int64_t off) {
  if (!strides.empty() && strides.size() == op.type.shape.size()) {
    const auto cs = contiguous_strides(op.type.shape);
    bool contiguous = true;
    for (size_t d = 0; d < cs.size(); ++d) contiguous = contiguous && (op.type.shape[d] == 1 || strides[d] == cs[d]);
    if (contiguous) strides.clear();
  }
  ValueInfo v{op.type, x.ref, std::move(strides)};
  v.ref.off += off;
  values_[op.output] = std::move(v);
}

void lower_function(const mil::Function& fn, const rt::Weights& weights, FunctionPlan& plan) {
  Lowerer(fn, weights, plan).run();
}

void gemm_workspace_needs(const FunctionPlan& plan, size_t* ws_a, size_t* ws_b) {
  for (const Step& s : plan.steps)
    for (const GemmPlan& g : s.gemms) {
      *ws_a = std::max(*ws_a, g.ws_a);
      *ws_b = std::max(*ws_b, g.ws_b);
    }
}

}  // namespace anelab::emu

// MIL function -> FunctionPlan: const decoding, per-op lowering with shape checks, arena by liveness.
#include "framework/emulator/lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/emulator/lower_ops.h"
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

int64_t Lowerer::lit_int(const mil::Operation& op, const std::string& key, int64_t def) const {
  if (!op.arg(key)) return def;
  const auto& v = lit(op, key);
  ANELAB_CHECK(v.i.size() == 1, "emulator", where(op), ": '", key, "' must be one integer");
  return v.i[0];
}

std::vector<int64_t> Lowerer::lit_ints(const mil::Operation& op, const std::string& key,
                                       std::vector<int64_t> def) const {
  if (!op.arg(key)) return def;
  const auto& v = lit(op, key);
  ANELAB_CHECK(!v.blob && v.f.empty(), "emulator", where(op), ": '", key, "' must be an integer list");
  return v.i;
}

bool Lowerer::lit_bool(const mil::Operation& op, const std::string& key, bool def) const {
  return lit_int(op, key, def ? 1 : 0) != 0;
}

std::string Lowerer::lit_str(const mil::Operation& op, const std::string& key, const std::string& def) const {
  if (!op.arg(key)) return def;
  const auto& v = lit(op, key);
  ANELAB_CHECK(v.type.dtype == DType::kString, "emulator", where(op), ": '", key, "' must be a string");
  return v.s;
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
  mil::Shape sh = v.type.shape;
  std::vector<int64_t> st = v.strides;
  if (sh.empty()) sh = {1}, st = {1};
  s.iv = {static_cast<int64_t>(sh.size())};
  s.iv.insert(s.iv.end(), sh.begin(), sh.end());
  s.iv.insert(s.iv.end(), st.begin(), st.end());
  s.iv.push_back(0);
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

// constexpr_affine_dequantize folded at compile time: y = (q - zero_point) * scale, rounded to fp16.
void Lowerer::lower_affine_dequantize(const mil::Operation& op) {
  const mil::ConstValue* q = op.attr("quantized_data");
  const mil::ConstValue* sc = op.attr("scale");
  const mil::ConstValue* zp = op.attr("zero_point");
  ANELAB_CHECK(q && sc && zp, "emulator", where(op), ": needs quantized_data, scale and zero_point attributes");
  const mil::ConstValue* ax = op.attr("axis");
  const Shape& shape = q->type.shape;
  ANELAB_CHECK(shape == op.type.shape, "emulator", where(op), ": quantized_data ", q->type.str(),
               " does not match the output ", op.type.str());
  std::vector<float> qd = decode_const(*q, op), s = decode_const(*sc, op), z = decode_const(*zp, op);
  const int rank = static_cast<int>(shape.size());
  int64_t axis = ax && !ax->i.empty() ? ax->i[0] : 0;
  if (axis < 0) axis += rank;
  const int64_t len = (rank > 0 && axis >= 0 && axis < rank) ? shape[static_cast<size_t>(axis)] : 1;
  auto per = [&](const std::vector<float>& v, const char* what) {
    ANELAB_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == len, "emulator", where(op), ": ", what, " has ",
                 v.size(), " elements; expected 1 or ", len, " (axis ", axis, ")");
  };
  per(s, "scale");
  per(z, "zero_point");
  int64_t inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < rank; ++d) inner *= shape[static_cast<size_t>(d)];
  for (size_t i = 0; i < qd.size(); ++i) {
    const size_t a = static_cast<size_t>((static_cast<int64_t>(i) / inner) % len);
    qd[i] = (qd[i] - z[z.size() == 1 ? 0 : a]) * s[s.size() == 1 ? 0 : a];
  }
  if (op.type.dtype == DType::kFp16) round_fp16_inplace(qd.data(), qd.size());
  values_[op.output] = ValueInfo{op.type, add_const(std::move(qd))};
}

// ---- steps and arena ------------------------------------------------------------------------------
Step& Lowerer::new_step(const mil::Operation& op, KernelFn fn, std::vector<const ValueInfo*> ins) {
  Step s;
  s.run = fn;
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
    if (s.scratch_ref.kind == Ref::kArena) def[static_cast<size_t>(s.scratch_ref.index)] = last[static_cast<size_t>(s.scratch_ref.index)] = i;
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
          (best < 0 || slot_size[static_cast<size_t>(sl)] < slot_size[static_cast<size_t>(free_slots[static_cast<size_t>(best)])]))
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
  for (int v = 0; v < nv; ++v) plan_.vbuf_offset[static_cast<size_t>(v)] = slot_off[static_cast<size_t>(slot_of[static_cast<size_t>(v)])];
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
    ANELAB_CHECK(mil::is_float(type.dtype), "emulator", "function '", fn_.name, "': input '", name, "' is ",
                 type.str(), "; surfaces carry fp16 or fp32");
    ValueInfo v{type, new_vbuf(static_cast<size_t>(type.numel()))};
    values_[name] = v;
    plan_.inputs.push_back(v);
  }
  for (const auto& op : fn_.ops) lower_op(op);
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

#include "framework/runtime/device_profile.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string_view>

#include "framework/runtime/surface.h"

namespace anelab::rt {

namespace {

std::vector<DeviceProfile> make_profiles() {
  std::vector<DeviceProfile> v;
  DeviceProfile m1;
  m1.name = "m1";
  m1.description = "Apple M1 family (h13): program(1.0)/ios16 verbose MIL, fp16 I/O, no cast";
  m1.dialect = mil::Dialect::kIos16;
  m1.accepts_ios18 = false;
  m1.supports_cast = false;
  m1.multi_io_slot_order = true;  // MDX issue #47, reported on M1
  m1.peak_fp16_tflops = 5.4;
  DeviceProfile m2 = m1;
  m2.name = "m2";
  m2.description = "Apple M2 family (h14): program(1.0)/ios16 verbose MIL, fp16 I/O, no cast";
  m2.multi_io_slot_order = false;
  m2.peak_fp16_tflops = 8.0;
  DeviceProfile m3 = m2;
  m3.name = "m3";
  m3.description = "Apple M3 family (h15): program(1.0)/ios16 verbose MIL";
  m3.supports_cast = true;
  m3.peak_fp16_tflops = 10.0;
  DeviceProfile m4;
  m4.name = "m4";
  m4.description = "Apple M4 family (h16): program(1.3)/ios18 shorthand MIL";
  m4.dialect = mil::Dialect::kIos18;
  m4.peak_fp16_tflops = 18.6;
  m4.auto_weights = WeightPath::kW8A8;  // 35.1 vs 18.6 TOPS at 128 convs of 512 ch (digest §4.5)
  m4.auto_ffn_4bit = true;              // the iOS18 4-bit forms (whether the ANE compiles them: `anelab probe`)
  DeviceProfile m5 = m4;
  m5.name = "m5";
  m5.description = "Apple M5 family (h17): program(1.3)/ios18 shorthand MIL";
  m5.peak_fp16_tflops = 12.4;
  v = {m1, m2, m3, m4, m5};
  return v;
}

const std::vector<DeviceProfile>& profiles() {
  static const std::vector<DeviceProfile> p = make_profiles();
  return p;
}

Status limit(std::string msg) { return Status(Code::kLimitExceeded, "[device] " + msg); }

// Every dimension of every tensor type in the function must be within max_dim.
Status check_dims(const mil::Function& fn, const DeviceProfile& p) {
  auto bad = [&](const std::string& what, const mil::TensorType& t) -> Status {
    for (auto d : t.shape)
      if (d > p.max_dim)
        return limit(cat(p.name, ": function '", fn.name, "': ", what, " has type ", t.str(), " with a dimension of ",
                         d, " > the ANE's maximum ", p.max_dim, " (the reported cap ", p.max_dim + 1,
                         " is taken as exclusive; split the tensor, e.g. chunk the LM head)"));
    return Status::ok();
  };
  for (const auto& [n, t] : fn.inputs)
    if (Status s = bad("input '" + n + "'", t); !s) return s;
  for (const auto& op : fn.ops)
    if (Status s = bad(op.op + " '" + op.name + "' result", op.type); !s) return s;
  return Status::ok();
}

Status check_io(const mil::Function& fn, const DeviceProfile& p) {
  std::vector<std::pair<std::string, const mil::TensorType*>> io;
  for (const auto& [n, t] : fn.inputs) io.emplace_back("input '" + n + "'", &t);
  for (const auto& o : fn.outputs) {
    const mil::TensorType* t = fn.type_of(o);
    if (!t)
      return Status(Code::kInvalidArgument, cat("[device] function '", fn.name, "' returns unknown value '", o, "'"));
    io.emplace_back("output '" + o + "'", t);
  }
  for (const auto& [what, t] : io) {
    if (t->dtype != mil::DType::kFp16 && t->dtype != mil::DType::kFp32)
      return Status(Code::kInvalidArgument, cat("[device] ", p.name, ": function '", fn.name, "': ", what, " is ",
                                                t->str(), "; ANE I/O tensors must be fp16 or fp32"));
    if (t->is_scalar())
      return Status(Code::kInvalidArgument, cat("[device] ", p.name, ": function '", fn.name, "': ", what,
                                                " is a scalar; I/O must be tensors"));
    int64_t s = t->shape.back();
    int64_t need = t->dtype == mil::DType::kFp16 ? p.min_spatial_fp16 : p.min_spatial_fp32;
    if (s < need)
      return limit(cat(p.name, ": function '", fn.name, "': ", what, " ", t->str(), " has spatial extent ", s, " < ",
                       need, " (minimum for ", mil::dtype_name(t->dtype),
                       " I/O; the ANE silently returns zeros below it — pad the sequence)"));
    if (const SurfaceLayout l = surface_layout(*t, p); !l.dense())
      return limit(cat(p.name, ": function '", fn.name, "': ", what, " ", t->str(), " has ", l.row_bytes,
                       "-byte rows, but the ANE starts rows every ", p.row_align_bytes, " bytes (", l.row_stride,
                       " here); pad the last dimension to a multiple of ", p.row_align_bytes / l.elem_bytes,
                       " (the row-stride rule, docs/native_backend.md)"));
    if (!p.supports_cast && t->dtype == mil::DType::kFp32)
      return Status(Code::kInvalidArgument,
                    cat("[device] ", p.name, ": function '", fn.name, "': ", what,
                        " is fp32, but this chip has no cast: use fp16 I/O and convert on the CPU"));
  }
  if (p.multi_io_slot_order) {
    auto bytes = [](const mil::TensorType* t) { return t->numel() * static_cast<int64_t>(mil::dtype_bytes(t->dtype)); };
    for (size_t i = 1; i < fn.inputs.size(); ++i)
      if (bytes(&fn.inputs[i].second) <= bytes(&fn.inputs[i - 1].second))
        return limit(cat(p.name, ": function '", fn.name, "': input '", fn.inputs[i].first,
                         "' is not larger than the input before it; this chip needs strictly ascending input sizes"));
    for (size_t i = 1; i < fn.outputs.size(); ++i)
      if (bytes(fn.type_of(fn.outputs[i])) >= bytes(fn.type_of(fn.outputs[i - 1])))
        return limit(
            cat(p.name, ": function '", fn.name, "': output '", fn.outputs[i],
                "' is not smaller than the output before it; this chip needs strictly descending output sizes"));
  }
  return Status::ok();
}

Status check_ops(const mil::Function& fn, const DeviceProfile& p) {
  for (const auto& op : fn.ops) {
    std::string where = cat(p.name, ": function '", fn.name, "': ", op.op, " '", op.name, "'",
                            op.line ? cat(" (line ", op.line, ")") : std::string());
    if (op.op == "cast" && !p.supports_cast)
      return Status(Code::kInvalidArgument,
                    cat("[device] ", where, ": cast is not supported on ", p.name, "; use fp16 I/O without cast"));
    if (op.op == "scaled_dot_product_attention" && p.sdpa_mask_ignored && op.arg("attn_mask"))
      return Status(Code::kInvalidArgument,
                    cat("[device] ", where,
                        ": the ANE ignores scaled_dot_product_attention's attn_mask (digest §2.6.4); "
                        "build masked attention from matmul + scale + additive mask + softmax + matmul"));
    if (op.op == "conv") {
      const mil::Arg* w = op.arg("weight");
      const mil::TensorType* wt = w && !w->names.empty() ? fn.type_of(w->names[0]) : nullptr;
      const mil::Arg* x = op.arg("x");
      const mil::TensorType* xt = x && !x->names.empty() ? fn.type_of(x->names[0]) : nullptr;
      if (xt && xt->rank() >= 2 && xt->shape[1] > p.max_conv_cin)
        return limit(cat(where, ": conv input has ", xt->shape[1], " channels > ", p.max_conv_cin,
                         " (the ANE rejects such convs, e.g. 32000; use matmul with a [1, D, V] const instead)"));
      (void)wt;
    }
  }
  return Status::ok();
}

// quantize / dequantize are iOS17 ops (coremltools defs/iOS17/quantization_ops.py); an ios16 program
// (program(1.0), M1-M3) cannot use them. constexpr_affine_dequantize is iOS16 (defs/iOS16/constexpr_ops.py) with
// int8 / uint8 data; uint4 data, constexpr_blockwise_shift_scale and the scalar-palette constexpr_lut_to_dense
// here are the iOS18 forms (defs/iOS18/compression.py). Whether a chip's ANE compiler accepts the iOS18 forms
// is unknown on every chip (M0's probe wrote them as call arguments and failed, digest §2.5): `anelab probe`
// (quant section) settles it, so they are not refused on ios18 profiles.
Status check_opset(const mil::Function& fn, mil::Dialect dialect, const DeviceProfile& p) {
  if (dialect != mil::Dialect::kIos16) return Status::ok();
  for (const auto& op : fn.ops) {
    const mil::ConstValue* qd = op.op == "constexpr_affine_dequantize" ? op.attr("quantized_data") : nullptr;
    if (op.op == "constexpr_blockwise_shift_scale" || op.op == "constexpr_lut_to_dense" ||
        (qd && qd->type.dtype == mil::DType::kUint4))
      return Status(Code::kInvalidArgument,
                    cat("[device] ", p.name, ": function '", fn.name, "': ", op.op, " '", op.name,
                        "' is an iOS18 compressed-weight form (4-bit), but this program is ios16 (program(1.0)); "
                        "use int8 weights (--ane-weights int8) or an ios18 profile"));
    if (op.op == "quantize" || op.op == "dequantize")
      return Status(Code::kInvalidArgument,
                    cat("[device] ", p.name, ": function '", fn.name, "': ", op.op, " '", op.name,
                        "' is an iOS17 op, but this program is ios16 (program(1.0)); int8 activations need an ios17+ "
                        "program (--ane-weights int8 keeps the int8 weights without them)"));
  }
  return Status::ok();
}

}  // namespace

const char* weight_path_name(WeightPath w) {
  switch (w) {
    case WeightPath::kFp16:
      return "fp16";
    case WeightPath::kW8:
      return "int8";
    case WeightPath::kW8A8:
      return "w8a8";
    case WeightPath::kQ4:
      return "q4";
    case WeightPath::kLut4:
      return "lut4";
    case WeightPath::kLut6:
      return "lut6";
  }
  return "?";
}

WeightPath parse_weight_path(const std::string& name, const DeviceProfile& profile) {
  if (name == "auto") return profile.auto_weights;
  for (WeightPath w :
       {WeightPath::kFp16, WeightPath::kW8, WeightPath::kW8A8, WeightPath::kQ4, WeightPath::kLut4, WeightPath::kLut6}) {
    if (name != weight_path_name(w)) continue;
    ANELAB_CHECK(w != WeightPath::kW8A8 || profile.dialect != mil::Dialect::kIos16, "device", profile.name,
                 ": w8a8 needs quantize/dequantize, iOS17 ops, and this chip's programs are ios16: use int8");
    ANELAB_CHECK(w != WeightPath::kQ4 || profile.dialect != mil::Dialect::kIos16, "device", profile.name,
                 ": q4 needs constexpr_blockwise_shift_scale, an iOS18 op, and this chip's programs are ios16: use "
                 "int8");
    ANELAB_CHECK((w != WeightPath::kLut4 && w != WeightPath::kLut6) || profile.dialect != mil::Dialect::kIos16,
                 "device", profile.name, ": ", weight_path_name(w),
                 " needs constexpr_lut_to_dense with scalar palettes, an iOS18 form, and this chip's programs are "
                 "ios16: use int8");
    return w;
  }
  fail("device", "unknown weight path '", name, "' (choices: ", kWeightPathChoices, ")");
}

const DeviceProfile& device_profile(const std::string& name) {
  if (name == "auto") return device_profile(kFallbackDevice);
  for (const auto& p : profiles())
    if (p.name == name) return p;
  std::string known = "auto";
  for (const auto& p : profiles()) known += ", " + p.name;
  fail("device", "unknown device profile '", name, "' (known: ", known, ")");
}

std::vector<std::string> device_profile_names() {
  std::vector<std::string> v;
  for (const auto& p : profiles()) v.push_back(p.name);
  return v;
}

Status check_program(const mil::Program& program, const DeviceProfile& p) {
  if (program.functions.empty()) return Status(Code::kInvalidArgument, "[device] program has no functions");
  if (program.dialect == mil::Dialect::kIos18 && !p.accepts_ios18)
    return Status(Code::kInvalidArgument, cat("[device] ", p.name,
                                              ": program(1.3)/ios18 shorthand MIL is not accepted on this chip "
                                              "(digest §2.1); print it with the ios16 dialect"));
  std::map<std::string, std::string> input_owner;  // input symbol -> function (digest §1.9)
  for (const auto& fn : program.functions)
    for (const auto& [n, t] : fn.inputs)
      if (auto [it, fresh] = input_owner.emplace(n, fn.name); !fresh)
        return Status(Code::kInvalidArgument,
                      cat("[device] ", p.name, ": function '", fn.name, "': input '", n,
                          "' has the same name as an input of "
                          "function '",
                          it->second,
                          "'; the ANE numbers input symbols program-wide, so procedures need "
                          "distinct input names (mil::ProgramBuilder suffixes them _0, _1, ...)"));
  for (const auto& fn : program.functions) {
    if (Status s = check_dims(fn, p); !s) return s;
    if (Status s = check_io(fn, p); !s) return s;
    if (Status s = check_ops(fn, p); !s) return s;
    if (Status s = check_opset(fn, program.dialect, p); !s) return s;
  }
  return Status::ok();
}

namespace {
size_t round_up(size_t v, size_t m) { return m == 0 ? v : (v + m - 1) / m * m; }
}  // namespace

SurfaceLayout surface_layout(const mil::TensorType& t, const DeviceProfile& p) {
  SurfaceLayout l;
  l.elem_bytes = mil::dtype_bytes(t.dtype);
  l.width = t.shape.empty() ? 1 : t.shape.back();
  l.rows = l.width == 0 ? 0 : t.numel() / l.width;
  l.row_bytes = static_cast<size_t>(l.width) * l.elem_bytes;
  l.row_stride = round_up(l.row_bytes, std::max<size_t>(p.row_align_bytes, 1));
  l.extent = l.rows == 0 ? 0 : static_cast<size_t>(l.rows - 1) * l.row_stride + l.row_bytes;
  int64_t alloc_rows = l.rows;
  if (t.rank() == 4 && t.shape[1] > 0 && p.channel_align > 1) {  // [N, C, H, W]: channels rounded up
    const int64_t c = t.shape[1], ca = (c + p.channel_align - 1) / p.channel_align * p.channel_align;
    alloc_rows = l.rows / c * ca;
  }
  const size_t b = std::max(static_cast<size_t>(alloc_rows) * l.row_stride, p.min_surface_bytes);
  l.alloc_bytes = round_up(std::max(b, l.extent), std::max<size_t>(p.surface_page_bytes, 1));
  return l;
}

size_t surface_alloc_bytes(const mil::TensorType& t, const DeviceProfile& p) {
  return surface_layout(t, p).alloc_bytes;
}

std::string profile_for_ane_sub_type(const std::string& sub) {
  // Real chips report lowercase families ("h13" ... "h17", maderix/ANE PR #50; Apple's _ANEDeviceInfo
  // compares with @"h13" ...); older tools print "H16G". Compare without case, any suffix allowed.
  static const std::pair<const char*, const char*> kFamilies[] = {
      {"h13", "m1"}, {"h14", "m2"}, {"h15", "m3"}, {"h16", "m4"}, {"h17", "m5"}};
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (const auto& [prefix, profile] : kFamilies) {
    const std::string_view pre(prefix);
    if (sub.size() < pre.size()) continue;
    bool same = true;
    for (size_t i = 0; same && i < pre.size(); ++i) same = lower(sub[i]) == pre[i];
    if (same) return profile;
  }
  return "";
}

int64_t dense_width_multiple(mil::DType dtype) {
  const auto elem = static_cast<int64_t>(mil::dtype_bytes(dtype));
  int64_t m = 1;
  for (const auto& p : profiles()) {
    const auto align = static_cast<int64_t>(std::max<size_t>(p.row_align_bytes, 1));
    const int64_t w = align / std::gcd(align, elem);  // smallest width w with w * elem a multiple of align
    m = std::lcm(m, w);
  }
  return m;
}

int64_t max_dim_all_profiles() {
  int64_t m = INT64_MAX;
  for (const auto& p : profiles()) m = std::min(m, p.max_dim);
  return m;
}

Status check_surfaces(const mil::Function& fn, std::span<Surface* const> inputs, std::span<Surface* const> outputs,
                      const DeviceProfile& p) {
  if (inputs.size() != fn.inputs.size() || outputs.size() != fn.outputs.size())
    return Status(Code::kInvalidArgument,
                  cat("[evaluate] function '", fn.name, "' takes ", fn.inputs.size(), " input and ", fn.outputs.size(),
                      " output surfaces, got ", inputs.size(), " and ", outputs.size()));
  size_t largest = 0;
  auto io_bytes = [](const mil::TensorType& t) { return static_cast<size_t>(t.numel()) * mil::dtype_bytes(t.dtype); };
  for (const auto& [n, t] : fn.inputs) largest = std::max(largest, io_bytes(t));
  for (const auto& o : fn.outputs) largest = std::max(largest, io_bytes(*fn.type_of(o)));
  const bool multi = fn.inputs.size() + fn.outputs.size() > 2;
  // Labels are built only on error: evaluate() must not allocate on the success path.
  auto check_one = [&](Surface* s, bool is_input, const std::string& name, const mil::TensorType& t) -> Status {
    auto what = [&] { return cat(is_input ? "input '" : "output '", name, "'"); };
    if (!s)
      return Status(Code::kInvalidArgument, cat("[evaluate] function '", fn.name, "': ", what(), " surface is null"));
    if (s->type() != t)
      return Status(Code::kInvalidArgument, cat("[evaluate] function '", fn.name, "': ", what(), " surface is ",
                                                s->type().str(), ", the function declares ", t.str()));
    if (s->alloc_bytes() < p.min_surface_bytes)
      return limit(cat(p.name, ": function '", fn.name, "': ", what(), " surface allocation ", s->alloc_bytes(),
                       " bytes < the ANE minimum ", p.min_surface_bytes, " (allocate with surface_alloc_bytes)"));
    if (const SurfaceLayout l = surface_layout(t, p); s->alloc_bytes() < l.extent)
      return limit(cat(p.name, ": function '", fn.name, "': ", what(), " surface allocation ", s->alloc_bytes(),
                       " bytes < the ", l.extent, " bytes its ", l.rows, " rows span at the device's ", l.row_stride,
                       "-byte row stride (allocate with surface_alloc_bytes)"));
    if (multi && s->alloc_bytes() < largest)
      return limit(cat(p.name, ": function '", fn.name, "': ", what(), " surface allocation ", s->alloc_bytes(),
                       " bytes < the largest I/O tensor (", largest,
                       " bytes); with several inputs/outputs every surface must be at least that large"));
    return Status::ok();
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (Status s = check_one(inputs[i], true, fn.inputs[i].first, fn.inputs[i].second); !s) return s;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (Status s = check_one(outputs[i], false, fn.outputs[i], *fn.type_of(fn.outputs[i])); !s) return s;
  return Status::ok();
}

}  // namespace anelab::rt

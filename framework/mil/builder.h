// Typed MIL builder: values are handles (name + TensorType); every op added is validated and its
// output type inferred through the op registry (ops.h), so a shape error is thrown here, naming the
// op and the shapes, and never reaches a compiler. The builder names values and consts itself:
//   - ops get `<op>_<n>` (e.g. conv_3) unless a hint is given: b.named("qf").conv(x, wq);
//   - consts are deduplicated per function and get readable names: c_valid, c_true, c_int1,
//     c_1_1 (int tensor [1, 1]), c_fp16_0p5, blob consts named after their file (wq);
//   - in a multi-function program every input, op and value name of function k gets the suffix `_k`
//     at build() (ane_digest §1.9: the ANE numbers input symbols program-wide, so names must differ).
//
//   mil::ProgramBuilder pb;
//   auto& b = pb.function("main");
//   auto x  = b.input("x", mil::tensor_type(DType::kFp16, {1, 768, 1, 256}));
//   auto wq = b.const_blob(mil::tensor_type(DType::kFp16, {768, 768, 1, 1}), "@model_path/weights/wq.bin", 64);
//   auto q  = b.named("qf").conv(x, wq);
//   b.output(b.softmax(q, 1));
//   mil::Program p = pb.build(mil::Dialect::kIos18);
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "framework/mil/io_layout.h"
#include "framework/mil/ir.h"
#include "framework/mil/ops.h"

namespace anelab::mil {

struct Value {
  std::string name;
  TensorType type;
  const Shape& shape() const { return type.shape; }
  DType dtype() const { return type.dtype; }
  int rank() const { return type.rank(); }
  int64_t dim(int i) const { return type.shape.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
};

struct ConvOptions {
  std::vector<int64_t> strides{1, 1}, dilations{1, 1};
  std::vector<int64_t> pad{0, 0, 0, 0};  // top, bottom, left, right (pad_type "custom")
  std::string pad_type = "valid";        // valid | same | same_lower | custom
  int64_t groups = 1;
  std::optional<Value> bias;  // [Cout]
};

struct SliceByIndexOptions {
  std::vector<int64_t> stride;                           // empty = all 1 (argument omitted)
  std::vector<bool> begin_mask, end_mask, squeeze_mask;  // empty = omitted
};

struct QuantParams {
  std::optional<Value> zero_point;  // int8/uint8 const (scalar or per-axis)
  std::optional<int64_t> axis;
};

// A call argument for the generic op(): one value or a tuple.
using OpArg = std::variant<Value, std::vector<Value>>;

class FunctionBuilder {
 public:
  explicit FunctionBuilder(std::string name = "main");

  // Name hint for the next op added (value and op name); sanitised and made unique. C++ evaluates
  // `b.named("h")` before the call's arguments, so arguments of a named call must already be values:
  //   auto sq = b.named("sq").mul(x, x); auto ss = b.named("ss").reduce_sum(sq, {1});   // right
  //   b.named("ss").reduce_sum(b.mul(x, x), {1});   // wrong: the inner mul takes the name "ss"
  // Two pending hints (named(a) ... named(b) before any op) throw.
  FunctionBuilder& named(std::string hint);

  Value input(const std::string& name, TensorType type);
  void output(const Value& v);

  // ---- consts (deduplicated; fp16 values are rounded to fp16 when stored) ----
  Value constant(ConstValue v);
  Value scalar(DType t, double v);
  Value const_int(int64_t v);
  Value const_bool(bool v);
  Value const_string(std::string v);
  Value const_ints(std::vector<int64_t> v);
  Value const_bools(const std::vector<bool>& v);
  Value const_tensor(TensorType t, std::vector<double> v);  // float (rounded) or integer elements
  Value const_blob(TensorType t, std::string path, uint64_t offset);

  // ---- ops ----
  Value conv(const Value& x, const Value& weight, const ConvOptions& o = {});
  Value matmul(const Value& x, const Value& y, bool transpose_x = false, bool transpose_y = false);
  Value softmax(const Value& x, int64_t axis);
  Value reshape(const Value& x, Shape shape);
  Value transpose(const Value& x, std::vector<int64_t> perm);
  Value slice_by_size(const Value& x, std::vector<int64_t> begin, std::vector<int64_t> size);
  Value slice_by_index(const Value& x, std::vector<int64_t> begin, std::vector<int64_t> end,
                       const SliceByIndexOptions& o = {});
  Value concat(const std::vector<Value>& values, int64_t axis, bool interleave = false);
  Value reduce_sum(const Value& x, std::vector<int64_t> axes, bool keep_dims = true);
  Value reduce_max(const Value& x, std::vector<int64_t> axes, bool keep_dims = true);
  Value pow(const Value& x, const Value& y);
  Value pow(const Value& x, double y);
  Value mul(const Value& x, const Value& y);
  Value mul(const Value& x, double y);
  Value add(const Value& x, const Value& y);
  Value add(const Value& x, double y);
  Value sub(const Value& x, const Value& y);
  Value sub(const Value& x, double y);
  Value sub(double x, const Value& y);
  Value real_div(const Value& x, const Value& y);
  Value real_div(const Value& x, double y);
  Value sigmoid(const Value& x);
  Value tanh(const Value& x);
  Value exp(const Value& x);
  Value relu(const Value& x);
  Value softplus(const Value& x);  // log(1 + exp(x))
  Value identity(const Value& x);
  Value cast(const Value& x, DType to);
  Value quantize(const Value& input, DType output_dtype, const Value& scale, const QuantParams& q = {});
  Value quantize(const Value& input, DType output_dtype, double scale, const QuantParams& q = {});
  Value dequantize(const Value& input, const Value& scale, const QuantParams& q = {});
  Value dequantize(const Value& input, double scale, const QuantParams& q = {});
  Value constexpr_affine_dequantize(ConstValue quantized_data, ConstValue scale, ConstValue zero_point,
                                    int64_t axis = 0);
  // ios18 compressed weights (bracket-attribute form, like constexpr_affine_dequantize); fp16 scale / lut values
  // are rounded to fp16 here so the printed program holds exactly what the op reads.
  Value constexpr_blockwise_shift_scale(ConstValue data, ConstValue scale, std::optional<ConstValue> offset = {});
  Value constexpr_lut_to_dense(ConstValue indices, ConstValue lut);
  Value scaled_dot_product_attention(const Value& q, const Value& k, const Value& v,
                                     const std::optional<Value>& mask = {});
  Value layer_norm(const Value& x, std::vector<int64_t> axes, const std::optional<Value>& gamma = {},
                   const std::optional<Value>& beta = {}, double epsilon = 1e-5);

  // IO layouts: slot `slot` of the packed surface x (type layout.type()) as [1, channels, 1, spatial];
  // concat_slots packs values (in slot order) back into one [1, C, 1, S] surface.
  Value slice_slot(const Value& x, const IOLayout& layout, const std::string& slot);
  Value concat_slots(const IOLayout& layout, const std::vector<Value>& values);

  // Generic op (for ops without a dedicated method): args are values or tuples, attrs literals.
  Value op(const std::string& op, const std::vector<std::pair<std::string, OpArg>>& args,
           std::vector<std::pair<std::string, ConstValue>> attrs = {});

  const Function& function() const { return fn_; }
  const std::string& name() const { return fn_.name; }

 private:
  std::string take_name(const std::string& base);
  std::string unique(std::string base);
  Value add_op(Operation op);
  Value binary(const char* op, const Value& x, const Value& y);
  Value unary(const char* op, const Value& x);
  Value reduce(const char* op, const Value& x, std::vector<int64_t> axes, bool keep_dims);
  const TensorType& type_of(const Value& v) const;

  Function fn_;
  ValueTable table_;
  std::optional<std::string> hint_;
  std::unordered_set<std::string> used_;           // value and op names
  std::unordered_map<std::string, int> counters_;  // per op kind
  std::unordered_map<std::string, Value> consts_;  // literal key -> const value
};

class ProgramBuilder {
 public:
  FunctionBuilder& function(const std::string& name = "main");
  // Copies the functions into a Program (suffixing names per function when there are several)
  // and runs the checker.
  Program build(Dialect dialect = Dialect::kIos18) const;

 private:
  std::vector<std::unique_ptr<FunctionBuilder>> fns_;
};

}  // namespace anelab::mil
